"""AgentGym / PilotRL trajectory files: ShareGPT conversations with a per-turn `loss` flag.

An item is `{"item_id": "alfworld_12", "conversations": [{"from": "human", "value": ..., "loss": false},
{"from": "gpt", "value": ..., "loss": true}, ...]}` (AgentGym's AgentTraj format); `role`/`content`
keys and `user`/`assistant` names are read too. A file holds one JSON list of items or one item per
line (JSONL, by the `.jsonl` suffix). `trainable` is the `loss` flag, or, where a turn has none, true
for the model's turns only (observations are never trained on). The environment is an `env` field, or
the item id up to its last "_" ("alfworld_12" -> "alfworld").
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from coalign.core.errors import DataError, SkippedRows
from coalign.core.jsonl import convert_json_list, convert_rows, read_jsonl, require, type_name

ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "system": "system"}


@dataclass(frozen=True)
class Trajectory:
    """One episode as chat turns; `trainable[i]` says whether turn i is in the loss."""

    id: str
    env: str
    messages: tuple[dict[str, str], ...]
    trainable: tuple[bool, ...]


def load_agentgym(path: str | Path, skipped: SkippedRows | None = None) -> list[Trajectory]:
    """Trajectories of a JSON (a list of items) or JSONL file; a bad item raises DataError naming the file,
    the line (JSONL) or the 1-based item (JSON), and the field (`conversations[2].from`), or, when
    `skipped` is given, is recorded there and left out."""
    path = Path(path)
    if path.suffix == ".jsonl":
        return convert_rows(read_jsonl(path, skipped), lambda line, row: _trajectory(path, line, row), skipped)
    return convert_json_list(path, "trajectories", _trajectory, skipped)


def _trajectory(path: Path, line: int, item: object) -> Trajectory:
    if not isinstance(item, dict):
        raise DataError(path, line, None, f"expected a JSON object, got {type_name(item)}", "not an object")
    id_field = "item_id" if "item_id" in item or "id" not in item else "id"
    item_id = require(item, id_field, str, path, line)
    if not item_id.strip():
        raise DataError(path, line, id_field, "empty text", "empty")
    env = _env(item, item_id, id_field, path, line)
    turns = require(item, "conversations", list, path, line)
    if not turns:
        raise DataError(path, line, "conversations", "no turns", "empty")
    messages, trainable = [], []
    for index, turn in enumerate(turns):
        label = f"conversations[{index}]"
        if not isinstance(turn, dict):
            raise DataError(path, line, label, f"expected a JSON object, got {type_name(turn)}", "wrong type")
        role_key = "from" if "from" in turn or "role" not in turn else "role"
        text_key = "value" if "value" in turn or "content" not in turn else "content"
        name = require(turn, role_key, str, path, line, label=f"{label}.{role_key}")
        if name not in ROLES:
            problem = f"unknown speaker {name!r}; expected one of {', '.join(ROLES)}"
            raise DataError(path, line, f"{label}.{role_key}", problem, "invalid value")
        text = require(turn, text_key, str, path, line, label=f"{label}.{text_key}")
        role = ROLES[name]
        loss = require(turn, "loss", bool, path, line, label=f"{label}.loss") if "loss" in turn else None
        if loss and role != "assistant":
            problem = f"a {name} turn is marked for the loss; only the model's turns are trained on"
            raise DataError(path, line, f"{label}.loss", problem, "invalid value")
        messages.append({"role": role, "content": text})
        trainable.append(role == "assistant" if loss is None else loss)
    if not any(m["role"] == "assistant" for m in messages):
        raise DataError(path, line, "conversations", "no model turn (gpt/assistant): nothing to learn", "no model turn")
    return Trajectory(item_id, env, tuple(messages), tuple(trainable))


def _env(item: dict, item_id: str, id_field: str, path: Path, line: int) -> str:
    if "env" in item:
        env = require(item, "env", str, path, line)
        if not env.strip():
            raise DataError(path, line, "env", "empty text", "empty")
        return env
    prefix, sep, _ = item_id.rpartition("_")
    if not sep or not prefix:
        problem = f"cannot tell the environment from {item_id!r} (expected <env>_<n>, or give an 'env' field)"
        raise DataError(path, line, id_field, problem, "invalid value")
    return prefix
