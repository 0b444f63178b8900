"""Pretrained bases shipped inside the package, loadable by name (`models.planner: coalign-base`)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from coalign.core.errors import RunError
from coalign.core.runs import file_sha256
from coalign.core.runs import atomic_dir, read_json

BASES = Path(__file__).resolve().parent.parent / "bases"
MAX_BYTES = 50 * 2**20  # a pip wheel, not a model hub
SHIPPED_FILES = (
    "model.safetensors",
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "pretrain.yaml",
    "recipe.json",
)


def shipped_bases() -> list[str]:
    return sorted(p.name for p in BASES.iterdir() if (p / "recipe.json").is_file()) if BASES.is_dir() else []


def base_path(name: str) -> Path | None:
    """The folder of the shipped base `name`, or None when no base has that name."""
    folder = BASES / name
    return folder if (folder / "recipe.json").is_file() else None


def finished_base(name_or_path: str | Path) -> Path:
    """A shipped base's folder, or a finished pretraining run's `base/` (or a run folder holding one), verified
    against its recipe: what a continued pretraining starts from."""
    shipped = base_path(name_or_path) if isinstance(name_or_path, str) else None
    for folder in [*([shipped] if shipped else []), Path(name_or_path), Path(name_or_path) / "base"]:
        if (folder / "recipe.json").is_file():
            verify_base(folder)
            return folder
    raise RunError(
        f"{name_or_path}: neither a shipped base ({', '.join(shipped_bases()) or 'none'}) "
        "nor a folder with a recipe.json"
    )


def verify_base(folder: str | Path) -> None:
    """RunError unless every file the recipe hashes has that hash (a corrupted or hand-edited base)."""
    folder = Path(folder)
    for name, digest in read_json(folder / "recipe.json")["files_sha256"].items():
        if not (folder / name).is_file() or file_sha256(folder / name) != digest:
            raise RunError(f"{folder / name} does not match the sha256 its recipe.json records")


def ship_base(source: str | Path, name: str) -> Path:
    """Copy a finished pretraining run's `base/` into the package as `name`, refusing one over MAX_BYTES."""
    source = Path(source)
    if not (source / "recipe.json").is_file():
        raise RunError(f"{source} is not a finished base (no recipe.json): finish `coalign pretrain` first")
    verify_base(source)
    files = [source / f for f in SHIPPED_FILES if (source / f).is_file()]
    size = sum(f.stat().st_size for f in files)
    if size > MAX_BYTES:
        raise RunError(f"{source} is {size / 2**20:.1f} MiB; a shipped base is at most {MAX_BYTES / 2**20:.0f} MiB")
    with atomic_dir(BASES / name) as tmp:
        for f in files:
            shutil.copy(f, tmp / f.name)
    return BASES / name


SCRATCH = ("scratch", "tiny")  # `tiny` is the older name of `scratch`
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")  # a name that may be a hub id when no folder has it


def starting_point(name: str) -> str | None:
    """Where a model named in a config starts: None for a from-scratch model (`scratch`, or `tiny`), which the
    run makes; a shipped base's folder (checked against its recipe's hashes); else the name as given, a path
    or a hub id."""
    if name in SCRATCH:
        return None
    folder = base_path(name)
    if folder is None:
        if not Path(name).expanduser().exists() and not HUB_ID.fullmatch(name):
            raise RunError(
                f"{name}: no such model folder, and not a shipped base ({', '.join(shipped_bases()) or 'none'}) "
                "or a hub id (owner/name)"
            )
        return name
    verify_base(folder)
    return str(folder)
