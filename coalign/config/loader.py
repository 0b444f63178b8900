"""Reading a run config: a bundled name or a YAML path, command-line overrides merged over it, validated into a
`RunConfig` whose errors name the file, line and key (or the `--set` that gave the value); and a config as a run
folder saves it, and how two saved ones differ."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import yaml
from pydantic import ValidationError

from coalign.config.base import Settings
from coalign.config.moat import RETIRED_KEY
from coalign.config.run import RunConfig
from coalign.core.endpoint_options import SECRET_OPTIONS
from coalign.core.runs import UNSET, value_changes

SECRET_KEY = (
    "a secret is refused in a config, which is saved with the run; put it in an environment variable and give "
    "that variable's name (api_key_env)"
)


class ConfigError(ValueError):
    """A config file that does not validate; the message names file, line and key."""


class Overrides(dict):
    """Settings given on the command line, as the nested dict merged over a config file's (`--set lora.r=0` is
    `{"lora": {"r": 0}}`), and how each was given by its key path (`given[("lora", "r")] == "--set lora.r=0"`):
    an error in a value one of them set names it, not the line of the file the value replaced."""

    def __init__(self) -> None:
        super().__init__()
        self.given: dict[tuple[str, ...], str] = {}


BUNDLED = Path(__file__).resolve().parent.parent / "configs"  # coalign/configs
# Keys that run folders' saved configs hold and today's configs do not, each at the value that means what leaving it
# out means now: a folder that differs by one of them alone still resumes.
RETIRED = {f"moat.{RETIRED_KEY}": False}


def resolve_config_path(name_or_path: str | Path) -> Path:
    """A YAML path, or the name of a bundled config (`tiny`, `paper`)."""
    path, bundled = Path(name_or_path), BUNDLED / f"{name_or_path}.yaml"
    if path.is_file() or (path.exists() and not bundled.exists()):
        return path  # a folder named as a bundled config (`--run-dir smol-suite`, say) does not hide it
    if bundled.exists():
        return bundled
    known = sorted(p.stem for p in BUNDLED.glob("*.yaml"))
    raise ConfigError(f"{name_or_path}: no such file, and no bundled config of that name (bundled: {known})")


def _line_of(node: yaml.Node, loc: tuple) -> int | None:
    """1-based line of the deepest YAML node found along a pydantic error location."""
    line = node.start_mark.line + 1
    for key in loc:
        if isinstance(node, yaml.MappingNode):
            match = next((v for k, v in node.value if k.value == key), None)
            key_node = next((k for k, v in node.value if k.value == key), None)
            if match is None:
                return line
            line, node = key_node.start_mark.line + 1, match
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
            node = node.value[key]
            line = node.start_mark.line + 1
        else:
            return line
    return line


def load_config(
    name_or_path: str | Path,
    overrides: dict | None = None,
    recipes: Sequence[str] | None = None,
    stages: Mapping[str, str] | None = None,
) -> RunConfig:
    """Read and validate a run config; `overrides` (nested dict) are applied on top. What the layers above the
    config define, when given, is checked too: `recipes`, the recipe names it may use; `stages`, PilotRL's GRPO
    stages (`pilotrl.curriculum`), each name -> the mode of the episodes it runs."""
    context = {
        "recipes": None if recipes is None else tuple(recipes),
        "stages": None if stages is None else dict(stages),
    }
    return load_settings(resolve_config_path(name_or_path), RunConfig, overrides, context)


def load_settings(path: Path, model: type[Settings], overrides: dict | None = None, context: dict | None = None):
    """Read the YAML at `path` into `model`; an invalid field is a ConfigError naming the file, line and key."""
    text = _read_text(path)
    try:
        raw = yaml.safe_load(text)
        root = yaml.compose(text)
    except yaml.YAMLError as err:
        raise ConfigError(_yaml_problem(path, err)) from None
    raw = {} if raw is None else raw  # only an empty file is an empty mapping: `[]` or `false` is no config
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}, line 1: a config is a mapping of keys, got {type(raw).__name__}")
    overrides = overrides or {}
    try:
        return model.model_validate(_merge(raw, overrides), context=context)
    except ValidationError as err:
        lines = []
        for e in err.errors():
            loc = _loc(e)
            key = ".".join(str(p) for p in loc) or "(top level)"
            line = _line_of(root, loc) if root is not None else None
            given = _given(overrides, loc, lambda tree: model.model_validate(_merge(raw, tree), context=context), e)
            where = ", ".join(given) or (f"{path}, line {line}" if line else str(path))
            msg = e["msg"]
            if e["type"] == "extra_forbidden":
                msg = SECRET_KEY if str(loc[-1]).lower() in SECRET_OPTIONS else "unknown key (typo?)"
            lines.append(f"{where}: field '{key}': {msg}")
        raise ConfigError("; ".join(lines)) from None  # one line, however many fields: `error: ...` is one line


def _yaml_problem(path: Path, err: yaml.YAMLError) -> str:
    """PyYAML's error as one line at the file's own line and column: its text names `"<unicode string>"` (it
    parses the text, not the file) over four lines."""
    mark, context = getattr(err, "problem_mark", None), getattr(err, "context", None)
    where = f"{path}, line {mark.line + 1}, column {mark.column + 1}" if mark else str(path)
    problem = getattr(err, "problem", None) or (str(err).strip().splitlines() or [type(err).__name__])[0]
    at = getattr(err, "context_mark", None)
    if context and at:
        context += f" at line {at.line + 1}, column {at.column + 1}"
    return f"{where}: not valid YAML: {problem}" + (f" ({context})" if context else "")


def _loc(error) -> tuple:
    """A pydantic error's location as config keys (without the validators' own entries)."""
    return tuple(p for p in error["loc"] if not (isinstance(p, str) and p.startswith("function-after")))


def _given(overrides: dict, loc: tuple, validate: Callable[[dict], object], error) -> list[str]:
    """How the overrides that caused `error` at `loc` were given (`--set lora.r=0`); none when the file did.

    A value an override set is that override's. An error of a whole block (two settings that do not fit, at the
    block or at the top level) is that of each override under it without which the error goes away (`validate`
    the file with the others), so a conflict between two `--set`s names both."""
    named = overrides.given if isinstance(overrides, Overrides) else {}
    node: object = overrides
    for depth, key in enumerate(loc):
        if not isinstance(node, dict):  # an override's value holds the location
            loc = loc[:depth]
            break
        if key not in node:
            return []  # the file's value
        node = node[key]
    if not isinstance(node, dict):
        owner = next((loc[:end] for end in range(len(loc), 0, -1) if loc[:end] in named), None)
        return [named[owner]] if owner else []
    blamed = []
    for path, text in named.items():
        if path[: len(loc)] != loc and loc[: len(path)] != path:
            continue
        try:
            validate(_without(overrides, path))
        except ValidationError as err:
            if any(_loc(e) == loc and e["msg"] == error["msg"] for e in err.errors()):
                continue
        blamed.append(text)
    return blamed


def _without(tree: dict, path: tuple[str, ...]) -> dict:
    """`tree` without the value at `path`."""
    out = dict(tree)
    if len(path) == 1:
        out.pop(path[0], None)
    elif isinstance(out.get(path[0]), dict):
        out[path[0]] = _without(out[path[0]], path[1:])
    return out


def _read_text(path: Path) -> str:
    """The file as UTF-8 text; undecodable bytes or an unreadable path are a ConfigError naming the file (and line)."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        line = path.read_bytes()[: err.start].count(b"\n") + 1
        raise ConfigError(f"{path}, line {line}: not UTF-8 text (byte {err.start}: {err.reason})") from None
    except OSError as err:
        raise ConfigError(f"{path}: cannot read: {err.strerror or err}") from None


def _merge(base: dict, top: dict) -> dict:
    out = dict(base)
    for key, value in top.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def config_to_yaml(config: RunConfig) -> str:
    """The config as saved in a run folder. Without LoRA there is no `lora` key and without a generation block no
    `generation` key, so saved configs that lack those sections still match, and their runs resume."""
    unset = {name for name in ("lora", "generation") if getattr(config, name) is None}
    return yaml.safe_dump(config.model_dump(mode="json", exclude=unset or None), sort_keys=False)


def config_changes(old_yaml: str, new_yaml: str) -> list[str]:
    """How two saved configs differ, one `dotted.key: old -> new` line per changed value (list items by
    index, `<unset>` for a key only one side has); none when they differ only in layout, or by a retired key
    at the value that today's default stands for (`RETIRED`)."""
    changes = value_changes(yaml.safe_load(old_yaml), yaml.safe_load(new_yaml))
    return [f"{k}: {a} -> {b}" for k, a, b in changes if not (b == UNSET and k in RETIRED and RETIRED[k] == a)]
