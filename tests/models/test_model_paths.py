"""How every command resolves a model: a shipped base, scratch, a local folder, a missing path (a clear error, no
network) or a hub id (from the local cache, or one request to the hub whose failure is one line)."""

from __future__ import annotations

import socket
from pathlib import Path

import httpx2
import huggingface_hub
import pytest
from huggingface_hub import constants as hub_constants
from huggingface_hub.errors import RepositoryNotFoundError
from typer.testing import CliRunner

from coalign.cli import app
from coalign.core.errors import RunError
from coalign.models import bases
from coalign.models.bases import (
    HUB_CACHED,
    accepted_models,
    base_path,
    hub_lookup,
    looks_like_path,
    shipped_bases,
    starting_point,
)

runner = CliRunner()
ACCEPTED = "give a local model folder, a shipped base"


@pytest.fixture
def no_network(monkeypatch, tmp_path):
    """Any connection or name lookup, by anyone, is recorded and refused; the hub's cache is an empty folder."""
    attempts: list = []

    def refuse(*args, **kwargs):
        attempts.append(args)
        raise OSError("the network was used")

    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(tmp_path / "hub-cache"))
    monkeypatch.setattr(bases, "_FOUND_ON_HUB", set())
    yield attempts
    assert attempts == [], "a model name was looked up on the network"


@pytest.fixture
def hub(monkeypatch):
    """The hub's one request: `hub.reply` is the exception it raises (None: found); `hub.calls` its URLs."""

    class Hub:
        calls: list[str] = []
        reply: Exception | None = None

    def metadata(url, **kwargs):
        assert kwargs.get("retry_on_errors") is False
        Hub.calls.append(url)
        if Hub.reply is not None:
            raise Hub.reply

    monkeypatch.setattr(huggingface_hub, "get_hf_file_metadata", metadata)
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", False)
    return Hub


def _one_error_line(result) -> str:
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1 and "Traceback" not in result.output, result.output
    assert lines[0].startswith("error: ")
    return lines[0]


def test_eval_of_a_missing_model_path_fails_at_once_without_the_network(no_network, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no runs/ folder here: `runs/none` is still a path, never a hub id
    result = runner.invoke(app, ["eval", "tiny", "--planner", "runs/none", "--grounder", "runs/none"])
    line = _one_error_line(result)
    assert line.startswith("error: --planner: no such model folder: runs/none; give a local model folder, a shipped ")
    assert "scratch" not in line  # eval takes no from-scratch model
    assert not (tmp_path / "runs").exists()  # no eval folder made


def test_train_resolves_a_missing_model_folder_by_the_same_rule(no_network):
    with pytest.raises(RunError, match=r"^no such model folder: runs/none; .*, scratch or a hub id \(owner/name\)$"):
        starting_point("runs/none")


@pytest.mark.parametrize("command", ["train", "bench"])
def test_train_and_bench_refuse_a_missing_model_folder_before_making_any_run_folder(no_network, tmp_path, command):
    run_dir = tmp_path / "run"
    result = runner.invoke(app, [command, "tiny", "--run-dir", str(run_dir), "--set", "models.grounder=runs/none"])
    assert result.exit_code == 2, result.output
    assert "error: models.grounder: no such model folder: runs/none; " in result.output
    assert not run_dir.exists()


@pytest.mark.parametrize(
    "name", ["runs/none", "./model", "../model", "~/no-such-model-here", "a/b/c", "org/", "/no/such/folder", "a\\b"]
)
def test_a_name_shaped_like_a_path_is_a_path(no_network, name):
    assert looks_like_path(name)
    with pytest.raises(RunError, match="no such model folder: "):
        starting_point(name, look_up=True)


def test_owner_slash_name_is_a_path_when_the_owner_is_a_local_folder(no_network, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert not looks_like_path("checkpoints/planner") and starting_point("checkpoints/planner") == "checkpoints/planner"
    (tmp_path / "checkpoints").mkdir()
    assert looks_like_path("checkpoints/planner")
    with pytest.raises(RunError, match="no such model folder: checkpoints/planner; "):
        starting_point("checkpoints/planner")
    (tmp_path / "checkpoints" / "planner").mkdir()
    assert starting_point("checkpoints/planner") == "checkpoints/planner"


def test_bases_scratch_folders_and_files(no_network, tmp_path, monkeypatch):
    name = shipped_bases()[0]
    assert starting_point(name) == str(base_path(name)) == starting_point(name, scratch=False, look_up=True)
    assert starting_point("scratch") is None and starting_point("tiny") is None
    with pytest.raises(RunError, match="scratch: a from-scratch model exists only inside a run"):
        starting_point("scratch", scratch=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "model").mkdir()
    assert starting_point("~/model") == str(tmp_path / "model")
    assert starting_point(str(tmp_path / "model"), look_up=True) == str(tmp_path / "model")
    (tmp_path / "weights.bin").write_bytes(b"")
    with pytest.raises(RunError, match=r"not a model folder: .*weights.bin is a file; give a local model folder"):
        starting_point(str(tmp_path / "weights.bin"))


def test_a_hub_id_passes_as_given_and_is_looked_up_only_when_asked(no_network):
    assert starting_point("Qwen/Qwen2.5-0.5B") == "Qwen/Qwen2.5-0.5B" and starting_point("gpt2") == "gpt2"
    with pytest.raises(RunError, match="no such model folder: not a hub id!"):
        starting_point("not a hub id!")


def test_offline_a_hub_id_loads_from_the_cache_or_is_one_clear_error(no_network, hub, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(RunError) as err:
        hub_lookup("org/model")
    assert str(err.value) == (
        "org/model: no such model folder, shipped base or named model, and not in the local hub cache while "
        f"HF_HUB_OFFLINE is set: download it first (hf download org/model), or {accepted_models(hub=HUB_CACHED)}"
    )
    snapshot = Path(hub_constants.HF_HUB_CACHE) / "models--org--model"
    (snapshot / "refs").mkdir(parents=True)
    (snapshot / "refs" / "main").write_text("abc123")
    (snapshot / "snapshots" / "abc123").mkdir(parents=True)
    (snapshot / "snapshots" / "abc123" / "config.json").write_text("{}")
    assert starting_point("org/model", look_up=True) == "org/model"
    assert hub.calls == []


def test_online_a_hub_id_costs_one_request_and_a_failure_is_one_line(no_network, hub):
    hub.reply = httpx2.ConnectError("[Errno -2] Name or service not known")
    with pytest.raises(RunError) as err:
        starting_point("meta-llama/Llama-2-7b-hf", look_up=True)
    assert str(err.value) == (
        "meta-llama/Llama-2-7b-hf: no such model folder, shipped base or named model, and the hub could not be "
        f"reached (ConnectError: [Errno -2] Name or service not known); {accepted_models(hub=HUB_CACHED)}"
    )
    assert len(hub.calls) == 1 and hub.calls[0].endswith("/meta-llama/Llama-2-7b-hf/resolve/main/config.json")
    response = httpx2.Response(404, request=httpx2.Request("HEAD", hub.calls[0]))
    hub.reply = RepositoryNotFoundError("404 Client Error", response=response)
    with pytest.raises(RunError, match="org/typo: .*the hub has no such model"):
        hub_lookup("org/typo")
    hub.reply = None
    hub_lookup("org/model")
    hub_lookup("org/model")  # found once: not asked again
    assert len(hub.calls) == 3


@pytest.mark.parametrize(("config", "key"), [("tiny", "models.grounder"), ("tiny-pilotrl", "pilotrl.model")])
def test_train_asks_the_hub_for_its_models_before_making_any_run_folder(no_network, hub, tmp_path, config, key):
    hub.reply = RepositoryNotFoundError(
        "404 Client Error", response=httpx2.Response(404, request=httpx2.Request("HEAD", "u"))
    )
    args = ["train", config, "--run-dir", str(tmp_path / "run"), "--set", f"{key}=org/typo"]
    line = _one_error_line(runner.invoke(app, args))
    assert line.startswith(f"error: {key}: org/typo: ") and "the hub has no such model" in line
    assert len(hub.calls) == 1 and not (tmp_path / "run").exists()


def test_eval_reports_an_unreachable_hub_in_one_line_before_making_anything(no_network, hub, tmp_path):
    hub.reply = httpx2.ConnectError("[Errno -2] Name or service not known")
    args = ["eval", "tiny", "--run-dir", str(tmp_path / "run"), "--planner", "org/model", "--grounder", "org/model"]
    line = _one_error_line(runner.invoke(app, args))
    assert line == (
        "error: --planner: org/model: no such model folder, shipped base or named model, and the hub could not be "
        f"reached (ConnectError: [Errno -2] Name or service not known); {accepted_models(False, HUB_CACHED)}"
    )
    assert len(hub.calls) == 1 and not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("command", "option", "key"),
    [
        ("train", "--set models=", "models.planner"),  # `models: NAME` sets both agents: the planner's is named first
        ("train", "--set pilotrl.model=", "pilotrl.model"),
        ("eval", "--grounder ", "--grounder"),
    ],
)
def test_an_unknown_model_name_names_its_key_and_what_would_load(no_network, hub, tmp_path, command, option, key):
    """A typo of a named model (`smollm2-999m`) is taken for a hub id; offline, its error said only that the hub
    could not be reached. It names the key that gave it, the model it is close to, and what would load."""
    hub.reply = httpx2.ConnectError("[Errno -2] Name or service not known")
    config = "tiny-pilotrl" if "pilotrl" in key else "tiny"
    args = [command, config, "--run-dir", str(tmp_path / "run"), *f"{option}smollm2-999m".split()]
    line = _one_error_line(runner.invoke(app, args))
    assert line.startswith(
        f"error: {key}: smollm2-999m: no such model folder, shipped base or named model (did you mean smollm2-135m?), "
        "and the hub could not be reached (ConnectError: "
    )
    assert line.endswith(accepted_models(command == "train", HUB_CACHED))
    for accepted in ("a local model folder", *shipped_bases(), "smollm2-135m", "a .gguf file"):
        assert accepted in line.split("; ")[-1]
    assert not (tmp_path / "run").exists()


def test_loading_resolves_names_by_the_same_rule(no_network, hub, monkeypatch):
    from coalign.models import load

    loaded = []
    monkeypatch.setattr(load.AutoModelForCausalLM, "from_pretrained", lambda *a, **k: loaded.append(a))
    monkeypatch.setattr(load.AutoTokenizer, "from_pretrained", lambda *a, **k: loaded.append(a))
    for loader in (load.load_model, load.load_tokenizer):
        with pytest.raises(RunError, match="no such model folder: runs/none; "):
            loader("runs/none")
    hub.reply = httpx2.ConnectError("[Errno -2] Name or service not known")
    with pytest.raises(RunError, match="org/model: .*the hub could not be reached"):
        load.load_model("org/model")
    assert loaded == []  # transformers never asked, so never retried
    assert load.model_source(shipped_bases()[0]) == str(base_path(shipped_bases()[0]))


COMMANDS = [[], *[[c] for c in ("train", "pretrain", "eval", "bench", "report", "demo", "exec", "data")]]
COMMANDS += [["data", c] for c in ("suite", "fetch", "check-gold")]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "coalign")
def test_help_is_plain_words_that_fit_80_columns(command):
    result = runner.invoke(app, [*command, "--help"], env={"COLUMNS": "80", "TERMINAL_WIDTH": "80"})
    assert result.exit_code == 0, result.output
    assert max(len(line) for line in result.output.splitlines()) <= 80
    for internal in ("`", "coalign/", "coalign.", "registry", ".py", "data.json", "config.history"):
        assert internal not in result.output, internal
