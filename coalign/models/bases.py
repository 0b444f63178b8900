"""Pretrained bases shipped inside the package, loadable by name (`models.planner: coalign-base`)."""

from __future__ import annotations

import difflib
import os
import re
import shutil
from pathlib import Path

from coalign.core.errors import RunError
from coalign.core.runs import atomic_dir, file_sha256, read_json
from coalign.models.gguf import NAMED, converted, is_gguf_name

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


SCRATCH = ("scratch", "tiny")  # a model made from `models.tiny`, by either name
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")  # a name that may be a hub id when no folder has it
RUNS = "runs"  # where every command puts its run folders unless given --run-dir
_FOUND_ON_HUB: set[str] = set()  # hub ids this process has looked up, so each costs one request at most


def looks_like_path(name: str) -> bool:
    """A name that only a local folder has: it starts with `/`, `.` or `~`, holds a backslash or more than one `/`,
    ends with `/`, or is `folder/name` where `folder` exists here or is `runs` (the home of run folders). A hub
    id is `owner/name` (or a bare name) whose owner is no local folder."""
    if name.startswith(("/", ".", "~")) or "\\" in name or name.count("/") > 1 or name.endswith("/"):
        return True
    head, slash, _ = name.partition("/")
    return bool(slash) and (head == RUNS or Path(head).is_dir())


HUB_ANY = "a hub id (owner/name)"
HUB_CACHED = "a hub id (owner/name) in the local hub cache"  # what loads while the hub cannot be reached


def accepted_models(scratch: bool = True, hub: str = HUB_ANY) -> str:
    """What a model may be named, for an error message; `hub` says which hub ids would load now."""
    scratch_too = ", scratch" if scratch else ""
    bases = ", ".join(shipped_bases()) or "none"
    return (
        f"give a local model folder, a shipped base ({bases}), a named model ({', '.join(NAMED)}), a .gguf file"
        f"{scratch_too} or {hub}"
    )


def _closest(name: str) -> str:
    """` (did you mean smollm2-135m?)`: the shipped base or named model `name` is a likely typo of, if any."""
    close = difflib.get_close_matches(name, [*shipped_bases(), *NAMED], n=1)
    return f" (did you mean {close[0]}?)" if close else ""


def starting_point(name: str, scratch: bool = True, look_up: bool = False, key: str = "") -> str | None:
    """`_starting_point`, its errors led by `key`, the config key or option that named the model
    (`models.planner`, `--grounder`), so a name that loads nothing says where it was given."""
    try:
        return _starting_point(name, scratch, look_up)
    except RunError as err:
        if not key:
            raise
        raise RunError(f"{key}: {err}") from None


def _starting_point(name: str, scratch: bool, look_up: bool) -> str | None:
    """Where a model named in a config or on the command line starts, the one rule every command follows:

    - `scratch` (or `tiny`): None, a from-scratch model that the run makes (a RunError unless `scratch`);
    - a shipped base's name: its folder, checked against its recipe's hashes;
    - a named GGUF model (`gguf.NAMED`, e.g. smollm2-135m) or a `.gguf` file: its converted cache folder;
    - an existing local folder: the path (`~` expanded);
    - anything else that looks like a path (`looks_like_path`), or is no hub id: RunError "no such model folder";
    - else a hub id, as given. Nothing here touches the network; the hub is asked when the model loads
      (`hub_lookup`), or now with `look_up`, which fails before any run folder is made.
    """
    if name in SCRATCH:
        if not scratch:
            raise RunError(f"{name}: a from-scratch model exists only inside a run; give a checkpoint or a base")
        return None
    folder = base_path(name)
    if folder is not None:
        verify_base(folder)
        return str(folder)
    if is_gguf_name(name):
        return str(converted(name))
    path = Path(name).expanduser()
    if path.is_dir():
        return str(path) if name.startswith("~") else name
    if path.exists():
        raise RunError(f"not a model folder: {name} is a file; {accepted_models(scratch)}")
    if looks_like_path(name) or not HUB_ID.fullmatch(name):
        raise RunError(f"no such model folder: {name}; {accepted_models(scratch)}")
    if look_up:
        hub_lookup(name, scratch)
    return name


def hub_offline() -> bool:
    """HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) set, now or when huggingface_hub was imported."""
    from huggingface_hub import constants

    return constants.HF_HUB_OFFLINE or any(
        os.environ.get(var, "").upper() in {"1", "ON", "YES", "TRUE"}
        for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )


def hub_lookup(name: str, scratch: bool = True) -> None:
    """RunError, in one line, unless hub id `name` can load: it is in the local hub cache, or (HF_HUB_OFFLINE not
    set) one request to the hub, without retries, finds its config.json. Otherwise transformers would retry
    every file five times and end in a traceback. A name the hub does not have, or that it cannot be asked for,
    may be a typo of another kind of name: the error lists what would load (`accepted_models`; `scratch`: with
    a from-scratch model)."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_url, try_to_load_from_cache
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        HfHubHTTPError,
        HFValidationError,
        HTTPError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    if name in _FOUND_ON_HUB:
        return
    missing = f"{name}: no such model folder, shipped base or named model{_closest(name)}, and"
    try:
        if isinstance(try_to_load_from_cache(name, "config.json"), str):
            return
    except HFValidationError:
        raise RunError(f"no such model folder: {name}; {accepted_models(scratch)}") from None
    if hub_offline():
        raise RunError(
            f"{missing} not in the local hub cache while HF_HUB_OFFLINE is set: download it first "
            f"(hf download {name}), or {accepted_models(scratch, HUB_CACHED)}"
        )
    accepted = ""  # where the name may be a typo: what would load
    try:
        get_hf_file_metadata(hf_hub_url(name, "config.json"), retry_on_errors=False)
    except GatedRepoError:
        reason = "it is gated on the hub: accept its licence on huggingface.co, then log in (hf auth login)"
    except RepositoryNotFoundError:
        reason = "the hub has no such model (a private one needs hf auth login)"
        accepted = f"; {accepted_models(scratch)}"
    except (EntryNotFoundError, RevisionNotFoundError):
        reason = "its hub repository has no config.json on main: not a transformers model"
    except HfHubHTTPError as err:
        reason = f"the hub answered {err.response.status_code if err.response is not None else 'with an error'}"
    except (HTTPError, OSError) as err:  # no network, no DNS, a timeout
        reason = f"the hub could not be reached ({type(err).__name__}: {' '.join(str(err).split())})"
        accepted = f"; {accepted_models(scratch, HUB_CACHED)}"
    else:
        _FOUND_ON_HUB.add(name)
        return
    raise RunError(f"{missing} {reason}{accepted}")
