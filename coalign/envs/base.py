"""One interface for every text environment: `reset` and `step`, as gymnasium and OpenRLHF's agent API.

An environment is a task instance an agent acts in one text action at a time. Model text is the
input, so `step` never raises on an action: a malformed, invalid or hostile action is answered by
an observation (each environment's own words, e.g. ALFWorld's "Nothing happened.") and counts as a
step. PilotRL's environments also carry an expert: `expert_action` (the next action of a solver
that always succeeds from the current state) and `expert_plan` (the remaining steps in words).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

from coalign.formats.env_actions import clean_action


@dataclass(frozen=True)
class Step:
    """What the environment answers to one action."""

    observation: str
    reward: float  # the task's score so far (success: 1.0; partial-credit environments: their score)
    done: bool  # the episode ended: success, a terminal failure, or the step limit
    info: dict = field(default_factory=dict)


class TextEnv(ABC):
    """A text environment. `reset(seed)` starts a task and returns its first observation (the goal and
    what the agent sees); `step(action)` acts. `max_steps` ends an episode; `optimal_steps` is the
    expert's step count from the start (PilotRL's end-to-end score tells an efficient success from a
    redundant one by it). An expert that knows only what the agent has seen (`expert_revises`) plans on a
    hypothesis, so its plan from the start is not always what it does."""

    name: str = ""
    max_steps: int = 30
    expert_revises: bool = False  # the expert's plan is a hypothesis that observations may revise
    invalid_reply: str = ""  # a regex of its answer to an action it does not read or cannot do (its first words)
    instructions: str = ""  # the action syntax, told to the agent once (AgentGym's system prompt)
    optional: bool = False  # needs a package or data that coalign does not install (an extra); never a default

    @classmethod
    def missing(cls) -> str:
        """What this environment needs that is not installed here, as what to do about it; empty when it can
        run. The bundled environments need nothing; an `optional` one its package and data."""
        return ""

    def __init__(self) -> None:
        self.goal = ""
        self.steps_taken = 0
        self.success = False
        self.done = False
        self.optimal_steps = 0

    @abstractmethod
    def reset(self, seed: int | None = None) -> str:
        """Start the task drawn by `seed` (same seed, same task) and return the first observation."""

    @abstractmethod
    def _act(self, action: str) -> str:
        """Apply one cleaned action to the state; return the observation. Sets `self.success` on success
        and `self.done` on a terminal state. Never raises on model text."""

    def step(self, action: str) -> Step:
        """One action. After the episode is over, every action is answered and changes nothing."""
        if self.done:
            return Step("The episode is over.", self.reward(), True, {"success": self.success})
        self.steps_taken += 1
        observation = self._act(clean_action(action))
        if self.steps_taken >= self.max_steps and not self.done:
            self.done = True
        return Step(observation, self.reward(), self.done, {"success": self.success, "steps": self.steps_taken})

    def reward(self) -> float:
        return 1.0 if self.success else 0.0

    def expert_action(self) -> str:
        """The next action of the expert solver from the current state (it succeeds from any state it
        can still succeed from; from the start it always does). PilotRL's environments have one."""
        raise NotImplementedError(f"{type(self).__name__} has no expert solver")

    def expert_plan(self) -> list[str]:
        """The expert's remaining plan from the current state: one step in words per action to come,
        each naming its action so that `plan_action` reads it back."""
        raise NotImplementedError(f"{type(self).__name__} has no expert solver")

    def to_go(self) -> float:
        """How far the task is from done, by this environment's own measure (0 once it succeeded): the plan
        judge credits a plan with the share of it that following the plan removes (`pilotrl.expert`). By
        default the expert's remaining steps; an environment whose expert plans on a hypothesis, or whose
        expert's step count says little (Wordle), measures it from the state itself, as a judge may."""
        return 0.0 if self.success else float(len(self.expert_plan()))

    def plan_action(self, step: str) -> str | None:
        """The action a plan step (text) names, or None for a step that names none (an abstract step such
        as "guess a word that fits the feedback"). Used to check a plan's executability and adherence."""
        raise NotImplementedError(f"{type(self).__name__} does not read plan steps")

    def delegates(self, step: str) -> bool:
        """Whether a step that names no action leaves the choice to the one acting in the way this
        environment's own expert plans do (Wordle's "guess a word that fits the feedback"): a plan judge
        following the plan lets the expert choose there. No step does by default: any other step naming
        no action is sent as written, so a plan of filler lines never succeeds."""
        return False

    def fits(self, action: str) -> bool:
        """Whether `action`, taken now, carries out a step this environment `delegates`: the expert's own next
        action does (case, spacing and a final full stop aside); an environment whose delegated steps admit
        other actions says which. False where the expert has no next action."""
        try:
            return not self.done and plain_action(action) == plain_action(self.expert_action())
        except RuntimeError:  # a state the expert cannot succeed from
            return False


class PlannedEnv(TextEnv):
    """An environment whose expert plans (action, plan step in words) pairs from the current state: the
    next action and the plan are read off one list, so they never disagree."""

    @abstractmethod
    def _plan(self) -> list[tuple[str, str]]:
        """(action, plan step) pairs from the current state to success; empty once the episode is over."""

    def expert_action(self) -> str:
        plan = self._plan()
        if not plan:
            raise RuntimeError("the episode is over: the expert has no next action")
        return plan[0][0]

    def expert_plan(self) -> list[str]:
        return [words for _, words in self._plan()]


def plain_action(action: str) -> str:
    """An action as compared: cleaned, lower case, no final full stop."""
    return clean_action(action).lower().rstrip(" .")


def plain_step(step: str) -> str:
    """A plan step as compared with a step text: lower case, whitespace squeezed, no final full stop."""
    return " ".join(str(step).lower().split()).rstrip(".")
