"""Task records: what every loader returns and every stage reads."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

# Families trained and evaluated in Lumos's iterative formulation (one subgoal per planner turn, the
# environment answering between turns); every other family is onetime (the whole plan in one turn).
ITERATIVE_FAMILIES = frozenset({"web"})


@dataclass(frozen=True)
class Task:
    """One task with its ground truth.

    `subgoals` and `actions` are Lumos texts, one string per subgoal / per action
    (`"R1 = Calculator(48 / 2)"`); `answer` is the gold final answer as a string.
    `subgoal_styles` (bundled suite only) says how specific each gold subgoal is.

    Two optional `meta` keys serve tasks that need them (the web family): `meta["tools"]` names the
    tool list when it is not the family's own (WebShop's, in the web family), and
    `meta["subgoal_actions"]` counts the actions that ground each subgoal, in order, when that is
    not one each (the iterative formulation grounds one subgoal per turn).
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

    @property
    def iterative(self) -> bool:
        """Whether the task runs in Lumos's iterative formulation (the web family) rather than the onetime one."""
        return self.family in ITERATIVE_FAMILIES

    @property
    def tools(self) -> str:
        """The tool list the grounder sees (a key of `formats.lumos.TOOL_PREAMBLES`)."""
        return self.meta.get("tools", self.family)

    def action_groups(self) -> list[tuple[str, ...]]:
        """The gold actions split per subgoal: by `meta["subgoal_actions"]`, else one action per subgoal."""
        counts = self.meta.get("subgoal_actions", [1] * len(self.subgoals))
        if len(counts) != len(self.subgoals) or sum(counts) != len(self.actions) or min(counts, default=1) < 1:
            raise ValueError(
                f"task {self.id!r}: cannot split {len(self.actions)} actions over {len(self.subgoals)} subgoals "
                f"(subgoal_actions {counts})"
            )
        starts = [sum(counts[:i]) for i in range(len(counts))]
        return [self.actions[start : start + count] for start, count in zip(starts, counts)]

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, row: dict) -> "Task":
        row = dict(row)
        for key in ("subgoals", "actions", "subgoal_styles"):
            row[key] = tuple(row.get(key, ()))
        return cls(**row)
