"""The commands README.md and docs/guide/*.md give are commands coalign takes, so a renamed option, config or
variant in the code is caught with the doc that still names it.

The rule a doc writer follows:
- A fenced ```bash block is run by bash in a scratch folder, with `.venv/bin/coalign` and the other programs the
  docs call (`accelerate`, `torchrun`, `pip`, `python`, `make`, `sbatch`) replaced by recorders, so that each
  command is read as a user's shell reads it (continued lines, `{a,b}`, arrays, `$(...)`); any other program is
  an error. Each coalign command recorded is then run for real in the scratch folder, unless its words start
  with one of `LONG`'s prefixes.
- A command that takes more than a couple of seconds, or needs what a test machine lacks (a GPU, the network, the
  output of a long command), gets a prefix in `LONG`, with the reason. Such a command is run dry: the command
  itself, with its options, config, `--set`s, bench variants or demo, down to the point where it would start
  its work (`train`, `eval`, `bench`, `demo`, `launch`, `pretrain`, `data fetch`), or only its options parsed
  (any other).
- The programs beside coalign are checked where they point: a make target or a pip extra exists, a script
  exists, and the coalign command given to torchrun, accelerate or sbatch is checked as above.
- An inline `coalign ...` span is a synopsis when it only names a command or holds a placeholder (an upper-case
  word, `[`, `|` or `...`): its command and every option in it must exist. Any other is checked as a fenced one.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
import shutil
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.core import TyperGroup
from typer.main import get_command
from typer.testing import CliRunner

from coalign.cli import app

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs" / "guide").glob("*.md"))]
LONG = {  # prefix of a command's words -> why it is run dry, not for real
    "coalign train": "trains: minutes, hours on the paper configs",
    "coalign eval": "evaluates a trained run's checkpoints",
    "coalign bench": "trains several runs",
    "coalign demo": "a bench: minutes",
    "coalign launch": "trains under torchrun or accelerate",
    "coalign pretrain": "pretrains: mini takes half a minute",
    "coalign data fetch": "downloads",
    "coalign data check-gold suite": "3,000 tasks a family: seconds each",
    "coalign report runs/": "merges the results of a bench run before it",
}
DRY = ("train", "eval", "bench", "demo", "launch", "pretrain", "fetch")  # what a dry run stops short of
RECORDED = {".venv/bin": ("coalign", "accelerate", "torchrun", "pip", "python"), "bin": ("coalign", "make", "sbatch")}
# One call: the doc line (set before each command by the DEBUG trap), the program and its arguments, then stdin.
RECORDER = """#!/bin/bash
f="$DOC_CALLS/${EPOCHREALTIME/[.,]/}-$BASHPID"
printf '%s\\0' "$DOC_LINE" "${0##*/}" "$@" > "$f.args"
[ -t 0 ] || { IFS= read -r -d '' input; printf '%s' "$input" > "$f.stdin"; }
exit 0
"""
PLACEHOLDER = re.compile(r"\b[A-Z][A-Z_]*\b|\[|\||\.\.\.")
ROOT_COMMAND = get_command(app)
runner = CliRunner()


class DryRun(Exception):
    """Raised where a command would start its work: everything before it (the parsing, the config, the checks the
    command makes) ran as for a user."""


@dataclasses.dataclass
class Call:
    """One command a doc gives: where, the program, its arguments and what its stdin held."""

    where: str
    program: str
    args: list[str]
    stdin: str = ""

    @property
    def text(self) -> str:
        return shlex.join([self.program, *self.args])


def _bash_blocks(doc: Path) -> Iterator[tuple[int, str]]:
    """Each fenced bash block of `doc`: the line of its first command, and its text."""
    text = doc.read_text(encoding="utf-8")
    for match in re.finditer(r"^```bash\n(.*?)^```", text, re.S | re.M):
        yield text[: match.start(1)].count("\n") + 1, match.group(1)


def _inline(doc: Path) -> Iterator[tuple[int, str]]:
    """Each inline `coalign ...` span outside the fenced blocks: its line, and its text (a table's `\\|` as `|`)."""
    text = doc.read_text(encoding="utf-8")
    text = re.sub(r"^```.*?^```", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S | re.M)
    for match in re.finditer(r"`((?:\.venv/bin/)?coalign [^`]+)`", text):
        yield text[: match.start()].count("\n") + 1, match.group(1).replace("\\|", "|").removeprefix(".venv/bin/")


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder where the docs' relative paths resolve (coalign/configs, examples, benchmarks) and writes stay:
    docs/results is a copy, since `coalign report` writes into it, and the recorders stand in for the programs."""
    folder = tmp_path_factory.mktemp("docs")
    for name in ("coalign", "examples", "benchmarks"):
        (folder / name).symlink_to(ROOT / name)
    shutil.copytree(ROOT / "docs" / "results", folder / "docs" / "results")
    for sub, programs in RECORDED.items():
        (folder / sub).mkdir(parents=True)
        for program in programs:
            (folder / sub / program).write_text(RECORDER)
            (folder / sub / program).chmod(0o755)
    return folder


def _recorded(scratch: Path, doc: Path) -> tuple[list[Call], list[str]]:
    """The calls `doc`'s bash blocks make, each block run by bash with only the recorders to call; and the
    blocks' problems (bash's errors, a block that names coalign and records no call of it)."""
    calls, problems = [], []
    for first, block in _bash_blocks(doc):
        record = scratch / "calls" / f"{doc.stem}-{first}"
        record.mkdir(parents=True)
        script = scratch / "block.sh"  # each command at its line in the doc: bash's $LINENO is the doc's line
        script.write_text("set -T; trap 'export DOC_LINE=$LINENO' DEBUG" + "\n" * (first - 1) + block + "wait\n")
        env = {"PATH": str(scratch / "bin"), "DOC_CALLS": str(record), "HOME": str(scratch)}
        done = subprocess.run(
            ["/bin/bash", str(script)], cwd=scratch, env=env, stdin=subprocess.DEVNULL, capture_output=True,
            text=True, timeout=60,
        )  # fmt: skip
        if done.returncode or done.stderr:
            problems.append(f"{doc.name}:{first}: bash: {done.stderr.strip() or done.returncode}")
        block_calls = []
        for args_file in sorted(record.glob("*.args")):
            line, program, *args = args_file.read_text().split("\0")[:-1]
            stdin = args_file.with_suffix(".stdin")
            block_calls.append(Call(f"{doc.name}:{line}", program, args, stdin.read_text() if stdin.exists() else ""))
        if "coalign" in block and not any("coalign" in call.text for call in block_calls):
            problems.append(f"{doc.name}:{first}: a block naming coalign made no coalign call")
        calls += block_calls
    return calls, problems


def _leaf(words: list[str]) -> tuple[object, list[str], list[str]]:
    """The command `words` name (walking the groups), the command words, and the words after them."""
    command, path, rest = ROOT_COMMAND, ["coalign"], list(words)
    while isinstance(command, TyperGroup) and rest and not rest[0].startswith("-"):
        context = command.context_class(command, info_name=path[-1])
        sub = command.get_command(context, rest[0])
        if sub is None:
            if PLACEHOLDER.fullmatch(rest[0]):
                break
            raise AssertionError(f"no command {' '.join([*path, rest[0]])}")
        command, path = sub, [*path, rest.pop(0)]
    return command, path, rest


def _options(command: object) -> set[str]:
    return {"--help"} | {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}


def _check_synopsis(words: list[str]) -> None:
    """The command a synopsis names exists, and so does every option it shows (up to a `--`)."""
    command, path, rest = _leaf(words)
    for word in rest:
        if word == "--":
            break
        option = word.strip("[]").split("=")[0]
        if option.startswith("--") and option not in _options(command):
            raise AssertionError(f"{' '.join(path)} has no option {option}")


def _is_long(words: list[str]) -> bool:
    return shlex.join(["coalign", *words]).startswith(tuple(LONG))


@pytest.fixture
def dry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every command's work replaced by DryRun, and what a config may refuse on this machine alone (a 4-bit base
    without CUDA) allowed, as on the machine the docs name: what is left are the checks a user meets first."""
    from coalign import registry
    from coalign.config import training
    from coalign.core import launch, ray_jobs
    from coalign.moat import bench as moat_bench
    from coalign.pilotrl import bench as pilotrl_bench
    from coalign.pretraining import pretrain
    from coalign.tasks import eval_sets, fetch

    def stop(*args, **kwargs) -> None:
        raise DryRun

    def bench(config, root, seeds, variants, *args) -> None:  # each variant's config made, as the bench makes it
        for variant in variants:
            if config.recipe == "pilotrl":
                pilotrl_bench.variant_config(config, variant, seeds[0])
            else:
                moat_bench.recipe_config(config, variant, seeds[0])
        raise DryRun

    for name, entry in registry.REGISTRY.items():
        monkeypatch.setitem(registry.REGISTRY, name, dataclasses.replace(entry, run=stop, evaluate=stop, bench=bench))
    monkeypatch.setattr("coalign.cli._checkpoint", lambda given, *args: given)  # a placeholder path, in eval's
    monkeypatch.setattr(training, "qlora_missing", lambda: None)
    monkeypatch.setattr(ray_jobs, "cluster_workers", lambda procs: 1)
    for module, name in [(launch, "run_launcher"), (pretrain, "pretrain"), (fetch, "fetch_lumos"),
                         (eval_sets, "fetch_eval_sets")]:  # fmt: skip
        monkeypatch.setattr(module, name, stop)


def _check_command(words: list[str], stdin: str = "") -> None:
    """A whole command, as the module's docstring says: for real, or dry when long."""
    command, path, rest = _leaf(words)
    command.make_context(path[-1], list(rest), parent=command.context_class(ROOT_COMMAND, info_name="coalign"))
    if path[-1] == "launch":  # what it launches, checked as a command of its own
        _check_command(words[words.index("--") + 1 :])
    if _is_long(words) and path[-1] not in DRY:
        return
    result = runner.invoke(app, words, input=stdin, prog_name="coalign")
    if _is_long(words):
        assert isinstance(result.exception, DryRun), result.output or repr(result.exception)
    else:
        assert result.exit_code == 0, result.output or repr(result.exception)


def _check_call(call: Call) -> None:
    """A recorded call, by its program."""
    if call.program == "coalign":
        _check_command(call.args, call.stdin)
    elif call.program in ("torchrun", "accelerate"):
        assert "-m" in call.args and call.args[call.args.index("-m") + 1] == "coalign.cli", "runs no coalign.cli"
        _check_command(call.args[call.args.index("-m") + 2 :])
    elif call.program == "sbatch":
        script = next(arg for arg in call.args if arg.endswith(".sbatch"))
        assert (ROOT / script).is_file(), f"no {script}"
        _check_command(call.args[call.args.index(script) + 1 :])
    elif call.program == "make":
        targets = set(re.findall(r"^([\w.-]+):", (ROOT / "Makefile").read_text(), re.M))
        assert {arg for arg in call.args if "=" not in arg} <= targets, f"the Makefile's targets are {targets}"
    elif call.program == "pip":
        extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
        for named in re.findall(r"\.\[([\w,-]+)\]", " ".join(call.args)):
            assert set(named.split(",")) <= set(extras), f"the extras are {sorted(extras)}"
    elif call.program == "python":
        assert (ROOT / call.args[0]).is_file(), f"no {call.args[0]}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda doc: doc.name)
def test_every_command_the_docs_give_runs_or_is_long_and_parses(doc, scratch, dry, monkeypatch):
    monkeypatch.chdir(scratch)
    calls, problems = _recorded(scratch, doc)
    for call in calls:
        try:
            _check_call(call)
        except Exception as err:  # every command's problem, each with its line, not the first alone
            problems.append(f"{call.where}: {call.text}: {err}")
    spans = list(_inline(doc))
    for line, span in spans:
        words = shlex.split(span)[1:]
        try:
            if PLACEHOLDER.search(span) or not _leaf(words)[2]:
                _check_synopsis(words)
            else:
                _check_command(words)
        except Exception as err:
            problems.append(f"{doc.name}:{line}: `{span}`: {err}")
    assert calls or spans, "no command found"
    assert not problems, "\n".join(problems)
