"""The `coalign` command line."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from typer.core import TyperGroup

from coalign.config import ConfigError, Overrides
from coalign.core.console import ERROR_CODE, make_console, quiet_engines, quiet_other_ranks, report_error
from coalign.core.errors import DataError, RunError

# click's exceptions where typer raises them: its own copy of click (typer 0.29 has one), else click itself
_CLICK = sys.modules[typer.BadParameter.__module__]
_HELP = getattr(_CLICK, "NoArgsIsHelpError", ())  # `coalign` alone: the help, raised as a usage error (click 8.2 on)


def _usage(err: Exception) -> str:
    """A click error as one line: the command, what was wrong (a BadParameter a command raises says so itself, without
    click's "Invalid value:") and where its options are listed."""
    plain = isinstance(err, typer.BadParameter) and err.param is None and err.param_hint is None
    text, ctx = err.message if plain else err.format_message(), getattr(err, "ctx", None)
    return f"{ctx.command_path}: {text} (see {ctx.command_path} --help)" if ctx else text


@contextmanager
def _one_line_errors() -> Iterator[None]:
    """An error in how a command was typed, or a refusal raised as SystemExit("why"), ends the command with one
    `error:` line and exit status 2, as every input error does (`_fail`): click printed a 5-6 line usage box, and
    Python a SystemExit's message with exit status 1. `coalign` alone still prints the help."""
    try:
        yield
    except _HELP:
        raise
    except _CLICK.ClickException as err:
        report_error(f"error: {_usage(err)}")
        raise typer.Exit(ERROR_CODE) from None
    except SystemExit as stop:
        if not isinstance(stop.code, str):
            raise
        report_error(f"error: {stop.code}")
        raise typer.Exit(ERROR_CODE) from None


class _Commands(TyperGroup):
    """The app's commands, each parsed and run under `_one_line_errors` (the data group's too: they run inside
    this group's `invoke`)."""

    def make_context(
        self, info_name: str | None, args: list[str], parent: typer.Context | None = None, **extra: Any
    ) -> typer.Context:
        with _one_line_errors():
            return super().make_context(info_name, args, parent, **extra)

    def invoke(self, ctx: typer.Context) -> Any:
        with _one_line_errors():
            return super().invoke(ctx)


app = typer.Typer(
    help="Train teams of LLM agents to work together (MOAT, PilotRL).", no_args_is_help=True, cls=_Commands
)
data_app = typer.Typer(help="Make and check task data.", no_args_is_help=True)
app.add_typer(data_app, name="data")
console = make_console()
quiet_other_ranks()  # here, before the commands import the libraries it quiets
quiet_engines()

ConfigArg = Annotated[str, typer.Argument(help="a config file (YAML), or a bundled config's name, e.g. tiny, paper")]
RunDirOpt = Annotated[Optional[Path], typer.Option("--run-dir", help="run folder (default: runs/<config name>)")]
SetOpt = Annotated[list[str], typer.Option("--set", help="change a config setting, e.g. --set planner_sft.epochs=3")]
ForceOpt = Annotated[
    bool, typer.Option("--force", help="resume a run whose config changed (finished stages kept, old config saved)")
]
SkipOpt = Annotated[
    bool,
    typer.Option(
        "--skip-bad-rows", help="skip data rows that fail validation (counted and reported) instead of stopping"
    ),
]
PRETRAIN_CONFIGS = ", ".join(sorted(p.stem for p in (Path(__file__).parent / "pretraining" / "configs").glob("*.yaml")))
MODEL_HELP = "checkpoint folder, shipped base or hub id (default: the run's)"


def _overrides(pairs: list[str]) -> Overrides:
    """`a.b=1` pairs -> nested dict, values parsed as YAML, each pair recorded as given so that a config error in
    its value names it (`config.Overrides`)."""
    import yaml

    out = Overrides()
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise typer.BadParameter(f"--set needs key=value, got {pair!r}")
        parts = key.split(".")
        if not all(parts):
            raise typer.BadParameter(f"--set needs a dotted key such as planner_sft.epochs, got {key!r}")
        try:
            parsed = yaml.safe_load(value)
        except yaml.YAMLError as err:
            problem = getattr(err, "problem", None) or "not valid YAML"
            raise typer.BadParameter(f"--set {key}: the value {value!r} is not valid YAML ({problem})") from None
        if tuple(parts) in out.given:
            raise typer.BadParameter(f"--set {key} is given twice: {out.given[tuple(parts)]} and --set {pair}")
        node = out
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise typer.BadParameter(f"--set {key}: {part} is given a value by another --set")
        earlier = node.get(parts[-1])
        if isinstance(earlier, dict):  # `a.b=1 --set a=2` is an error as `a=2 --set a.b=1` is; mappings merge
            if not isinstance(parsed, dict):
                raise typer.BadParameter(f"--set {key}: its fields are given values by another --set")
            parsed = earlier | parsed
        node[parts[-1]] = parsed
        out.given[tuple(parts)] = f"--set {pair}"
    return out


def _fail(err: Exception) -> typer.Exit:
    """Print an input error unwrapped on stderr (paths and line numbers stay on one line), once under a launcher
    (`report_error`)."""
    report_error(f"error: {err}")
    return typer.Exit(ERROR_CODE)


def _config(name: str, sets: list[str], skip_bad_rows: bool = False):
    overrides = _overrides(sets)
    if skip_bad_rows:
        overrides.setdefault("data", {})["skip_bad_rows"] = True
        overrides.given["data", "skip_bad_rows"] = "--skip-bad-rows"
    from coalign.registry import load_config

    try:
        return load_config(name, overrides)
    except (ConfigError, DataError) as err:
        raise _fail(err) from None


def _show(results: dict) -> None:
    from coalign.reports.tables import eval_table, style_table

    console.print(eval_table(results))
    styles = style_table(results)
    if styles.row_count:  # none without eval.diagnostics, or off the bundled suite
        console.print(styles)


@app.command()
def train(
    config: ConfigArg,
    run_dir: RunDirOpt = None,
    set_: SetOpt = [],  # noqa: B006
    force: ForceOpt = False,
    skip_bad_rows: SkipOpt = False,
) -> None:
    """Train the agents with the config's recipe, then evaluate them.

    Recipes: lumos (the baseline: planner and grounder fine-tuned apart),
    moat (the same start, then MOAT rounds), pilotrl (SFT, then GRPO stages).
    Run again to resume where it stopped."""
    from coalign.registry import recipe

    cfg = _config(config, set_, skip_bad_rows)
    started, entry = time.time(), recipe(cfg.recipe)
    try:
        results = entry.run(cfg, run_dir or Path("runs") / cfg.name, console, force)
    except (DataError, RunError) as err:
        raise _fail(err) from None
    if entry.show:
        from rich.markdown import Markdown

        console.print(Markdown(entry.show(results)))
    elif entry.history:
        from coalign.reports.tables import eval_table

        for name, round_results in results.items():
            console.print(eval_table(round_results, title=f"{cfg.recipe.upper()} {name}: evaluation (%)"))
    else:
        _show(results)
    console.print(f"wall time {time.time() - started:.0f} s")


@app.command()
def pretrain(
    config: Annotated[
        str, typer.Argument(help=f"a pretraining config file (YAML), or a bundled one: {PRETRAIN_CONFIGS}")
    ],
    run_dir: Annotated[
        Optional[Path], typer.Option("--run-dir", help="run folder (default: runs/pretrain-<config name>)")
    ] = None,
    steps: Annotated[Optional[int], typer.Option(help="training steps to run now (default: all that are left)")] = None,
    set_: Annotated[
        list[str], typer.Option("--set", help="change a config setting, e.g. --set train.max_steps=100")
    ] = [],  # noqa: B006
    ship: Annotated[bool, typer.Option(help="when finished, make the base loadable by its config's name")] = False,
) -> None:
    """Pretrain a small base model on the generated corpus.

    Runs in sittings that resume where the last one stopped (--steps).
    The finished model is RUN_DIR/base: give that folder as a model,
    or --ship it to name it in configs like the shipped bases."""
    from coalign.models.bases import ship_base
    from coalign.pretraining.pretrain import pretrain as run_pretrain
    from coalign.pretraining.settings import load_pretrain_config

    try:
        cfg = load_pretrain_config(config, _overrides(set_))
        folder = run_dir or Path("runs") / f"pretrain-{cfg.name}"
        progress = run_pretrain(cfg, folder, console, steps)
        if ship:
            console.print(f"shipped as {ship_base(folder / 'base', cfg.name)}")
    except (ConfigError, DataError, RunError) as err:
        raise _fail(err) from None
    losses = ", ".join(f"{k} {v['value']}" for k, v in progress["losses"].items())
    console.print(
        f"step {progress['steps']} of {cfg.train.max_steps}; {progress['tokens_seen']:,} tokens; "
        f"{progress['wall_s']:.0f} s in {len(progress['sittings'])} sittings; {losses}"
    )


def _checkpoint(given: str | None, option: str = "") -> str | None:
    """A model to evaluate, resolved as `train` resolves one (`bases.starting_point`) but never from scratch, and a
    hub id looked up now: a missing folder or an unreachable hub stops before any eval folder is made, its error
    led by the `option` that gave it (`--planner`)."""
    from coalign.models.bases import starting_point

    return None if given is None else starting_point(given, scratch=False, look_up=True, key=option)


@app.command("eval")
def eval_(
    config: ConfigArg,
    run_dir: RunDirOpt = None,
    planner: Annotated[Optional[str], typer.Option(help=f"planner: {MODEL_HELP}")] = None,
    grounder: Annotated[Optional[str], typer.Option(help=f"grounder: {MODEL_HELP}")] = None,
    model: Annotated[Optional[str], typer.Option(help=f"pilotrl's agent: {MODEL_HELP}")] = None,
    set_: SetOpt = [],  # noqa: B006
    force: ForceOpt = False,
    skip_bad_rows: SkipOpt = False,
) -> None:
    """Evaluate a run's models, or the given ones, on the config's test sets.

    Each task goes planner -> grounder -> tools, on the held-in and
    held-out sets; for a pilotrl config, the agent on every environment
    at each plan-update interval."""
    try:  # before the imports and the config, which take seconds: a wrong path fails at once
        planner, grounder, model = (
            _checkpoint(given, f"--{option}")
            for given, option in ((planner, "planner"), (grounder, "grounder"), (model, "model"))
        )
    except RunError as err:
        raise _fail(err) from None
    from coalign.registry import recipe

    cfg = _config(config, set_, skip_bad_rows)
    entry = recipe(cfg.recipe)
    given = {"planner": planner, "grounder": grounder, "model": model, "config_name": config}
    options = {option: given[option] for option in entry.eval_options}
    try:
        results = entry.evaluate(cfg, run_dir or Path("runs") / cfg.name, console=console, force=force, **options)
    except (DataError, RunError, OSError) as err:  # OSError: a checkpoint that cannot be loaded
        raise _fail(err) from None
    if entry.show:
        from rich.markdown import Markdown

        console.print(Markdown(entry.show(results)))
    else:
        _show(results)


def _ints(text: str, option: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise typer.BadParameter(f"{option} takes comma-separated integers, got {text!r}") from None


def _default_workers(procs_per_job: int = 1, executor: str = "local") -> int:
    """Jobs side by side: on a GPU machine one per `procs_per_job` GPUs (each worker sees its own,
    `core.parallel.gpu_slots`), else one per `procs_per_job` CPU cores; with Ray, the same count over the
    cluster's GPUs or cores (`core.ray_jobs.cluster_workers`)."""
    import os

    from coalign.core.parallel import visible_gpus

    if executor == "ray":
        from coalign.core.ray_jobs import cluster_workers

        return cluster_workers(procs_per_job)
    return max(1, (len(visible_gpus()) or os.cpu_count() or 1) // procs_per_job)


def _bench(
    config: str,
    run_dir: Path,
    seeds: list[int],
    variants: list[str],
    workers: int | None,
    sets: list[str],
    name: str = "",
    force: bool = False,
    skip_bad_rows: bool = False,
    procs_per_job: int = 1,
    executor: str | None = None,
):
    from rich.markdown import Markdown

    from coalign.core import ranks
    from coalign.core.parallel import launches
    from coalign.core.ray_jobs import default_executor, executing
    from coalign.registry import recipe

    if ranks.world_size() > 1:
        raise _fail(
            RunError(
                "coalign bench runs its own jobs side by side: launch it as one process, with --procs-per-job N "
                "to run each job as N processes"
            )
        )
    cfg = _config(config, sets, skip_bad_rows)
    entry, started = recipe(cfg.recipe), time.time()
    variants = variants or list(entry.bench_variants)
    executor = executor or default_executor()
    try:
        with launches(procs_per_job), executing(executor):
            workers = workers or _default_workers(procs_per_job, executor)
            results = entry.bench(cfg, run_dir, seeds, variants, workers, console, name, force)
    except (DataError, RunError, ValueError) as err:
        raise _fail(err) from None
    console.print(Markdown(entry.report(results)))
    console.print(f"wall time {time.time() - started:.0f} s")


@app.command()
def bench(
    config: Annotated[str, typer.Argument(help="a config file (YAML), or a bundled config's name")] = "tiny",
    run_dir: Annotated[Path, typer.Option("--run-dir", help="bench folder")] = Path("runs/bench"),
    seeds: Annotated[str, typer.Option(help="comma-separated seeds")] = "0,1,2",
    variants: Annotated[
        str,
        typer.Option(
            help="comma-separated variants of the config's recipe, e.g. lumos,moat or adaplan,react (default: the "
            "recipe's own comparison)"
        ),
    ] = "",
    recipes: Annotated[str, typer.Option(hidden=True)] = "",  # --variants as the commands in docs/ give it
    k_sweep: Annotated[str, typer.Option("--k-sweep", help="also MOAT with these K (subgoal samples per task)")] = "",
    workers: Annotated[
        Optional[int],
        typer.Option(
            help="jobs side by side (default: one per GPU, else per CPU core, of this machine or the Ray cluster; "
            "/ procs per job)"
        ),
    ] = None,
    procs_per_job: Annotated[
        int,
        typer.Option(
            "--procs-per-job",
            min=1,
            help="run each job as this many processes, as torchrun runs coalign train (as many GPUs each on a GPU "
            "machine)",
        ),
    ] = 1,
    executor: Annotated[
        Optional[str],
        typer.Option(
            help="local: jobs in processes of this machine; ray: each job a Ray task, on the cluster at RAY_ADDRESS "
            "or a Ray instance started here (default: ray when RAY_ADDRESS is set, else local)",
        ),
    ] = None,
    name: Annotated[str, typer.Option(help="prefix of the result files, for several benches in one folder")] = "",
    set_: SetOpt = [],  # noqa: B006
    force: ForceOpt = False,
    skip_bad_rows: SkipOpt = False,
) -> None:
    """Compare variants of a recipe over several seeds: results, a report and plots.

    Lumos vs MOAT and its ablations from shared cold starts; for a pilotrl
    config, SFT AdaPlan vs ReAct (the paper's Tables 1, 9 and 10)."""
    names = [v.strip() for v in f"{variants},{recipes}".split(",") if v.strip()]
    names += [f"moat_k{k}" for k in _ints(k_sweep, "--k-sweep")]
    seed_list = _ints(seeds, "--seeds")
    if len(set(seed_list)) != len(seed_list):  # a seed twice would run twice and count twice in the paired t
        raise typer.BadParameter(f"--seeds lists a seed more than once: {seeds!r}")
    _bench(config, run_dir, seed_list, names, workers, set_, name, force, skip_bad_rows, procs_per_job, executor)


def _merged_from(path: Path) -> list | None:
    """The parts a results file was merged from (None for a bench's own results, or an unreadable file)."""
    try:
        return json.loads(path.read_text(encoding="utf-8")).get("merged_from")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError):
        return None


@app.command()
def report(
    results: Annotated[list[Path], typer.Argument(help="the results.json files of one bench's parts")],
    out: Annotated[Path, typer.Option("--out", help="folder for the merged results.json, report.md and plots")],
    name: Annotated[str, typer.Option(help="prefix of the written files")] = "",
) -> None:
    """Merge a bench run in parts into one report.

    For seeds run in separate sittings or on separate machines, each with
    its own --name: every table is over all their seeds."""
    from rich.markdown import Markdown

    from coalign.core.runs import write_json
    from coalign.registry import recipe
    from coalign.reports.merge import merge_results

    parts = []
    for path in results:
        try:
            parts.append((str(path), json.loads(path.read_text(encoding="utf-8"))))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            line = getattr(err, "lineno", None)
            problem = f"not a readable results.json ({type(err).__name__}: {err})"
            raise _fail(DataError(path, line, None, problem)) from None
    try:  # everything is read and rendered before anything is written
        merged = merge_results(parts)
        entry = recipe(merged["config"]["recipe"])
        text = entry.report(merged)
    except (AttributeError, KeyError, TypeError, ValueError) as err:
        raise _fail(RunError(f"coalign report: {type(err).__name__}: {err}")) from None
    prefix = f"{name}-" if name else ""
    target = out / f"{prefix}results.json"
    if target.exists() and _merged_from(target) != merged["merged_from"]:
        raise _fail(RunError(f"{target} exists and is not a merge of these files: give another --name or --out"))
    write_json(target, merged)
    entry.write_report(merged, out, prefix)
    console.print(Markdown(text))
    console.print(f"[bold]report[/bold] of seeds {', '.join(map(str, merged['seeds']))} in {out}")


@app.command()
def demo(
    name: Annotated[str, typer.Argument(metavar="DEMO", help="which demo: moat, smol or pilotrl")] = "moat",
    run_dir: Annotated[
        Optional[Path], typer.Option("--run-dir", help="demo folder (default: runs/demo-DEMO, runs/demo for moat)")
    ] = None,
    set_: SetOpt = [],  # noqa: B006
    force: ForceOpt = False,
    skip_bad_rows: SkipOpt = False,
) -> None:
    """Run a small demo.

    moat: from the shipped tiny bases, planner and grounder SFT (Agent Lumos),
    then one small MOAT round, against the Lumos baseline. smol: the same on
    SmolLM2-135M-Instruct with GSM8K and SVAMP (a quarter of bench smol's training).
    pilotrl: SFT on expert episodes as AdaPlan and as ReAct, on the six
    environments."""
    from coalign.registry import DEMOS

    if name not in DEMOS:
        *others, last = DEMOS
        raise typer.BadParameter(f"the demos are {', '.join(others)} and {last}, got {name!r}")
    chosen = DEMOS[name]
    _bench(chosen.config, run_dir or chosen.run_dir, [0], list(chosen.variants), None, [*chosen.settings, *set_],
           force=force, skip_bad_rows=skip_bad_rows)  # fmt: skip


@app.command("exec")
def exec_(domain: Annotated[str, typer.Option(help="tools to use: maths or qa")] = "maths") -> None:
    """Run actions read from stdin with the tools; print the trace as JSON.

    e.g. echo 'R1 = Calculator(2 + 3)' | coalign exec"""
    from coalign.tools.executor import DOMAINS, execute

    if domain not in DOMAINS:
        raise typer.BadParameter(f"--domain must be one of {', '.join(DOMAINS)}, got {domain!r}")
    # Model text is untrusted: a byte that is not UTF-8 becomes U+FFFD, which the step then reports,
    # instead of a UnicodeDecodeError from a strict stdin that loses the whole trace.
    text = sys.stdin.buffer.read().decode("utf-8", errors="replace")
    print(json.dumps(execute(text, domain).to_json(), indent=2))


FamilyOpt = Annotated[
    str, typer.Option("--family", help="bundled suite: maths (GSM8K/SVAMP-like) or qa (StrategyQA/HotpotQA-like)")
]


def _suite(family: str):
    """The bundled generator of a task family."""
    from coalign.tasks.maths_suite import generate_suite
    from coalign.tasks.qa_suite import generate_qa_suite

    generators = {"maths": generate_suite, "qa": generate_qa_suite}
    if family not in generators:
        raise typer.BadParameter(f"--family must be one of {sorted(generators)}, got {family!r}")
    return generators[family]


def _suite_splits(family: str) -> tuple[str, ...]:
    """The splits of a bundled generator: every one's, and the maths suite's composed stories and near set."""
    from coalign.tasks.maths_suite import MATHS_SPLITS, SPLITS

    return MATHS_SPLITS if family == "maths" else SPLITS


@data_app.command("suite")
def data_suite(
    out: Annotated[Path, typer.Option(help="folder to write")],
    n: Annotated[int, typer.Option(help="tasks per split")] = 1000,
    seed: Annotated[int, typer.Option(help="generator seed")] = 0,
    family: FamilyOpt = "maths",
) -> None:
    """Write a bundled task suite to files.

    Each split as tasks (SPLIT.tasks.jsonl) and as planner and grounder
    training rows in Agent Lumos's format."""
    from coalign.core.runs import write_jsonl
    from coalign.tasks.lumos import save_lumos_rows, task_to_rows

    generate = _suite(family)
    for split in _suite_splits(family):
        tasks = generate(split, n, seed)
        write_jsonl(out / f"{split}.tasks.jsonl", [t.to_json() for t in tasks])
        rows = [task_to_rows(t) for t in tasks]
        save_lumos_rows(out / f"{split}.plan_onetime.jsonl", [p for p, _ in rows])
        save_lumos_rows(out / f"{split}.ground_onetime.jsonl", [g for _, g in rows])
        console.print(f"{split}: {len(tasks)} tasks -> {out}")


@data_app.command("fetch")
def data_fetch(
    source: Annotated[
        str,
        typer.Argument(help="lumos (the training sets of the paper configs) or eval (their test sets)"),
    ],
    out: Annotated[
        Optional[Path],
        typer.Option(help="folder to write (default: data for lumos, data/eval for eval)"),
    ] = None,
    families: Annotated[
        str,
        typer.Option(
            help="comma-separated; lumos: maths, qa, web; eval: gsm8k, svamp, strategyqa, hotpotqa (default: all)"
        ),
    ] = "",
    revision: Annotated[str, typer.Option(help="lumos: the sets' hub revision (branch, tag or commit)")] = "main",
    skip_bad_rows: Annotated[
        bool,
        typer.Option(
            "--skip-bad-rows",
            help="lumos: count rows that fail validation instead of stopping; runs then need it too",
        ),
    ] = False,
) -> None:
    """Download the data sets the paper configs read, and check them.

    lumos: Agent Lumos's training sets, checked to load; eval: GSM8K test,
    SVAMP, StrategyQA and HotpotQA dev, checked byte for byte against the
    public originals. Where each file came from, and its sha256, is
    recorded in OUT/fetch.json."""
    from coalign.tasks.eval_sets import EVAL_SETS, fetch_eval_sets
    from coalign.tasks.fetch import LUMOS_SETS, FetchError, fetch_lumos

    known = {"lumos": LUMOS_SETS, "eval": EVAL_SETS}
    if source not in known:
        raise typer.BadParameter(f"the sources are: {', '.join(known)}; got {source!r}")
    names = [name.strip() for name in families.split(",") if name.strip()] or list(known[source])
    if set(names) - set(known[source]):
        choices = ", ".join(known[source])
        raise typer.BadParameter(f"--families of {source} takes comma-separated {choices}, got {families!r}")
    try:
        if source == "eval":
            fetch_eval_sets(out or Path("data/eval"), names, console=console)
        else:
            fetch_lumos(out or Path("data"), names, revision=revision, skip_bad_rows=skip_bad_rows, console=console)
    except FetchError as err:
        raise _fail(err) from None
    except DataError as err:
        kept = "the file is kept as fetched; --skip-bad-rows (here and for the run) leaves such rows out"
        raise _fail(DataError(err.path, err.line, err.field, f"{err.problem}; {kept}", err.kind)) from None


@data_app.command("check-gold")
def data_check_gold(
    kind: Annotated[str, typer.Argument(help="gsm8k or svamp (a data file), or suite (a bundled one, --family)")],
    path: Annotated[
        Optional[Path],
        typer.Argument(help="the data file, for gsm8k and svamp; shipped:gsm8k/test.jsonl names a shipped one"),
    ] = None,
    skip_bad_rows: SkipOpt = False,
    family: FamilyOpt = "maths",
    n: Annotated[int, typer.Option(help="suite: tasks per split")] = 1000,
    seed: Annotated[int, typer.Option(help="suite: generator seed")] = 0,
) -> None:
    """Check that the gold actions reproduce the gold answers.

    Runs each task's gold actions with the tools and reports how often the
    result is the gold answer (by its benchmark's rule)."""
    from coalign.core.errors import SkippedRows
    from coalign.tasks.gold import gold_execution_report
    from coalign.tasks.gsm8k import load_gsm8k
    from coalign.tasks.shipped import PREFIX, shipped_file
    from coalign.tasks.sources import report_skipped
    from coalign.tasks.svamp import load_svamp

    if kind == "suite":
        generate = _suite(family)
        for split in _suite_splits(family):
            console.print(f"{family} suite, {split}: {gold_execution_report(generate(split, n, seed)).summary()}")
        return
    loaders = {"gsm8k": load_gsm8k, "svamp": load_svamp}
    if kind not in loaders:
        raise typer.BadParameter(f"kind must be one of {sorted([*loaders, 'suite'])}")
    if path is None:
        raise typer.BadParameter(f"{kind} needs the dataset file's path")
    shipped = path.as_posix().removeprefix(PREFIX) if path.as_posix().startswith(PREFIX) else None
    if shipped and shipped.split("/")[0] != kind:  # a config refuses it too (`DataSource`)
        raise typer.BadParameter(f"{PREFIX}{shipped} is a {shipped.split('/')[0]} file, not a {kind} one")
    skipped = SkippedRows()
    try:
        path = shipped_file(shipped) if shipped else path  # a shipped file, named as a config names it
        tasks = loaders[kind](path, skipped if skip_bad_rows else None)
    except DataError as err:
        raise _fail(err) from None
    report_skipped(str(path), skipped.summary(), console)
    console.print(gold_execution_report(tasks).summary())


LAUNCHED_COMMANDS = ("train", "eval")  # the commands whose work is shared by the processes of a launch


@app.command(context_settings={"allow_interspersed_args": False, "ignore_unknown_options": True})
def launch(
    ctx: typer.Context,
    command: Annotated[
        list[str], typer.Argument(help="train or eval and its arguments, as given to coalign", show_default=False)
    ],
    nproc_per_node: Annotated[
        Optional[int],
        typer.Option("--nproc-per-node", min=1, help="processes here (default: GPUs, or 1)"),
    ] = None,
    nnodes: Annotated[int, typer.Option(min=1, help="nodes, each running this launch")] = 1,
    node_rank: Annotated[int, typer.Option("--node-rank", min=0, help="this node's number; 0 at --master-addr")] = 0,
    master_addr: Annotated[
        str, typer.Option("--master-addr", help="node 0's address, as every node reaches it")
    ] = "127.0.0.1",
    master_port: Annotated[
        Optional[int],
        typer.Option("--master-port", help="a free port on node 0 (default: any; 29500 on nodes)"),
    ] = None,
    config: Annotated[
        Optional[str],
        typer.Option(help="launch with accelerate and this config: a shipped one's name or a file"),
    ] = None,
) -> None:
    """Run train or eval on several processes: one per GPU, on one node or more.

    torchrun starts them, or accelerate with --config (coalign accelerate-config
    lists the shipped ones). On several nodes, run it on each with --nnodes,
    --node-rank and --master-addr. A failed run's error is printed once, last.
    e.g. coalign launch --nproc-per-node 8 --config zero2 -- train CONFIG"""
    from coalign.core.launch import accelerate_config, launcher_args, run_launcher

    if command[0].startswith("-"):  # an option launch does not know is taken for the command
        raise typer.BadParameter(f"no such option: {command[0]}")
    if command[0] not in LAUNCHED_COMMANDS:
        raise typer.BadParameter(f"coalign launch runs {' or '.join(LAUNCHED_COMMANDS)}, got {command[0]!r}")
    if node_rank >= nnodes:
        raise typer.BadParameter(f"--node-rank {node_rank} is not below --nnodes {nnodes}")
    root = ctx.find_root()
    root.command.get_command(root, command[0]).make_context(command[0], command[1:], parent=root)  # usage errors: once
    try:
        path = accelerate_config(config) if config else None
    except RunError as err:
        raise _fail(err) from None
    if nproc_per_node is None:
        import torch

        nproc_per_node = max(1, torch.cuda.device_count())
    args = launcher_args(command, nproc_per_node, nnodes, node_rank, master_addr, master_port, path)
    try:
        code = run_launcher(args, path)
    except RunError as err:
        raise _fail(err) from None
    raise typer.Exit(code)


@app.command("accelerate-config")
def accelerate_config_(
    name: Annotated[Optional[str], typer.Argument(help="a shipped config's name (default: list them)")] = None,
) -> None:
    """Print the path of a shipped accelerate config, or list them.

    For accelerate launch wherever coalign is installed, e.g.
    accelerate launch --config_file "$(coalign accelerate-config ddp)" \\
        -m coalign.cli train CONFIG"""
    from coalign.core.launch import accelerate_configs

    shipped = accelerate_configs()
    if name is None:
        for known, path in shipped.items():
            typer.echo(f"{known:<10} {path}")
    elif name in shipped:
        typer.echo(shipped[name])
    else:
        raise _fail(RunError(f"no shipped accelerate config named {name!r}; they are: {', '.join(shipped)}"))


if __name__ == "__main__":
    app()
