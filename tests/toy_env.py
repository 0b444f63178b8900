"""A toy environment for tests of the AdaPlan runtime and the expert: walk to a numbered door and open it.

The agent starts at position 0 and must reach `target` with `step forward` and then `open door`; any other
text is answered "Nothing happened.". Small enough that a tiny model learns it in seconds. A scripted
model that writes the expert's turns (or fixed text) drives the runtime without training anything.
"""

from __future__ import annotations

import re

import torch

from coalign import envs
from coalign.envs.base import TextEnv
from coalign.formats.adaplan import format_turn
from coalign.formats.lumos import lumos_chat
from coalign.models.load import train_tokenizer
from coalign.pilotrl.expert import expert_conversation


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


def toy_tokenizer():
    """A BPE tokenizer trained on the toy expert's episodes."""
    texts = [lumos_chat(expert_conversation_unregistered(seed)) for seed in range(6)]
    return train_tokenizer(texts * 4, 400)


def expert_conversation_unregistered(seed: int):
    """The toy expert's episode, for module-scoped fixtures (which run outside a test's registration)."""
    registered = "toy" in envs.REGISTRY
    envs.REGISTRY["toy"] = "tests.toy_env:ToyEnv"
    try:
        return expert_conversation("toy", seed, "adaplan")
    finally:
        if not registered:
            del envs.REGISTRY["toy"]


class ScriptedModel:
    """Writes the expert's turn for the toy task from what the prompt shows (without its plan block when not
    `plans`), or fixed `text`."""

    device = torch.device("cpu")
    is_gradient_checkpointing = False  # what TRL's `unwrap_model_for_generation` asks a policy

    def __init__(self, tokenizer, text: str | None = None, bogus_plan: bool = False, plans: bool = True):
        self.tokenizer, self.text, self.bogus_plan, self.plans = tokenizer, text, bogus_plan, plans

    def turn(self, prompt: str) -> str:
        if self.text is not None:
            return self.text
        target = int(re.search(r"door at position (\d+)", prompt)[1])
        position = int(re.findall(r"You are at position (\d+)", prompt)[-1])
        steps = [f"step forward to reach position {p}" for p in range(position + 1, target + 1)] + ["open door"]
        done = re.search(r"Your plan \(steps? (?:1-)?(\d+) done\)", prompt)  # a bounded context says so
        turn = int(done[1]) if done else prompt.count("Observation:")
        plan = [f"rewritten at turn {turn}"] * 5 if self.bogus_plan else steps
        due = "Rewrite" in prompt.rsplit("<|user|>", 1)[-1] or "<|assistant|>" not in prompt.rstrip()[:-15]
        action = "step forward" if position < target else "open door"
        return format_turn(steps[0], action, plan if due and self.plans else None, first=turn + 1)

    def generate(self, input_ids, attention_mask, max_new_tokens, **kwargs):
        rows = []
        for ids, keep in zip(input_ids.tolist(), attention_mask.tolist()):
            prompt = self.tokenizer.decode([i for i, k in zip(ids, keep) if k])
            new = self.tokenizer(self.turn(prompt) + "</s>", add_special_tokens=False)["input_ids"][:max_new_tokens]
            rows.append(ids + new)
        width = max(map(len, rows))
        return torch.tensor([r + [self.tokenizer.pad_token_id] * (width - len(r)) for r in rows])


def killed_after(trainer_class, steps: int = 1):
    """A trainer class that dies (as if killed) when it would start its optimizer step `steps` + 1."""

    class Killed(trainer_class):
        def training_step(self, *args, **kwargs):
            if self.state.global_step == steps:
                raise KeyboardInterrupt("killed")
            return super().training_step(*args, **kwargs)

    return Killed
