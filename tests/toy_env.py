"""A toy environment for tests of the AdaPlan runtime and the expert: walk to a numbered door and open it.

The agent starts at position 0 and must reach `target` with `step forward` and then `open door`; any other
text is answered "Nothing happened.". Small enough that a tiny model learns it in seconds.
"""

from __future__ import annotations

from coalign.envs.base import TextEnv


class ToyEnv(TextEnv):
    name = "toy"
    max_steps = 8
    instructions = "Actions: step forward, open door."

    def reset(self, seed: int | None = None) -> str:
        self.__init__()
        self.target = 1 + (seed or 0) % 3
        self.position = 0
        self.goal = f"open the door at position {self.target}"
        self.optimal_steps = self.target + 1
        return f"You are at position 0. Your task is to: {self.goal}."

    def _act(self, action: str) -> str:
        if action == "step forward" and self.position < self.target:
            self.position += 1
            return f"You are at position {self.position}."
        if action == "open door" and self.position == self.target:
            self.success = self.done = True
            return "The door opens."
        return "Nothing happened."

    def expert_action(self) -> str:
        return "step forward" if self.position < self.target else "open door"

    def expert_plan(self) -> list[str]:
        steps = [f"step forward to reach position {p}" for p in range(self.position + 1, self.target + 1)]
        return [*steps, "open door to finish"]

    def plan_action(self, step: str) -> str | None:
        for action in ("step forward", "open door"):
            if step.strip().lower().startswith(action):
                return action
        return None
