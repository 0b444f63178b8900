"""Episodes of the web family: an environment built from one task (a site's gold steps, a shopping goal),
stepped one action at a time like every environment here (`reset`, `step`), with Lumos's grounder turn on top.

A grounder turn may hold several actions (`R1 = ...; R2 = ...`); `play_turn` steps them in order and keeps
what each did, which is what the iterative loop and the per-turn critic read. What differs between the
site and the shop (how a set is scored, what the planner hears after a turn, when a turn counts as the
gold one) each episode answers itself (`Episode`), so no caller asks which kind it holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Protocol

from coalign.envs.base import Step


@dataclass
class ActionRecord:
    """What one action did in an episode: its value as text, or why it failed."""

    action: str
    value: str | None
    error: str | None


@dataclass
class Turn:
    """One grounder turn's actions run in an episode; `result` (the last value) is what the planner may hear."""

    records: list[ActionRecord]
    done: bool

    @property
    def result(self) -> str:
        values = [r.value for r in self.records if r.value is not None]
        return values[-1] if values else ""


class Episode(Protocol):
    """A web task's environment. `step` never raises on model text: a failing action is answered by its
    error (`info["error"]`, also the observation) and the episode goes on."""

    metric: ClassVar[str]  # the name of what `set_score` reports (Lumos's metric of the environment)

    @property
    def done(self) -> bool: ...

    def reset(self, seed: int | None = None) -> str: ...

    def step(self, action: str) -> Step: ...

    def act(self, actions: str | Sequence[str]) -> Turn: ...

    def score(self) -> float: ...

    def feedback(self, index: int, subgoal: str, turn: Turn) -> str: ...

    def judge_turn(self, gold: Sequence[str], actions: str) -> tuple[bool, str]: ...

    @staticmethod
    def set_score(episodes: Sequence[Episode]) -> float: ...


def play_turn(episode: Episode, texts: Sequence[str]) -> Turn:
    """Step each action of a grounder turn in order; an empty turn fails as one record."""
    if not texts:
        return Turn([ActionRecord("", None, "empty action sequence")], episode.done)
    records = []
    for text in texts:
        info = episode.step(text).info
        records.append(ActionRecord(text, info["value"], info["error"]))
    return Turn(records, episode.done)
