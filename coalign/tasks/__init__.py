"""Task records: what every loader returns and every stage reads."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class Task:
    """One task with its ground truth.

    `subgoals` and `actions` are Lumos texts, one string per subgoal / per action
    (`"R1 = Calculator(48 / 2)"`); `answer` is the gold final answer as a string.
    `subgoal_styles` (bundled suite only) says how specific each gold subgoal is.
    """

    id: str
    family: str
    dataset: str
    question: str
    subgoals: tuple[str, ...]
    actions: tuple[str, ...]
    answer: str
    subgoal_styles: tuple[str, ...] = ()
    meta: dict = field(default_factory=dict, compare=False, hash=False)

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, row: dict) -> "Task":
        row = dict(row)
        for key in ("subgoals", "actions", "subgoal_styles"):
            row[key] = tuple(row.get(key, ()))
        return cls(**row)
