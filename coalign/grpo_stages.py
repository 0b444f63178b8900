"""PilotRL's GRPO stages: what each one runs, trains and rewards (the paper's progressive curriculum).

1. executor: the expert writes the plan blocks; the model learns to act by them (its thought and action
   tokens train; the given plan is context). Rewards: format + adherence + end-to-end.
2. planner: the model writes its plans; among a task's rollouts the group-relative advantage prefers
   the plans that worked (its plan tokens train; its actions, already learnt in stage 1, are context).
   Rewards: format + end-to-end + plan quality.
3. joint: plans and actions train together. Rewards: format + end-to-end.
The ablations: "all" (one stage, every reward, plan and action tokens) and "vanilla" (Vanilla RL: ReAct,
no plan, format + end-to-end). Isolated planner and executor (the paper's unified-vs-isolated comparison):
"executor", then "planner_isolated", which trains a second model from the cold start to write the plan
blocks while the first stage's executor, fixed, writes the rest of each turn; evaluation runs the two
together. Orders are lists of these names (`GRPOSettings.order`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Stage:
    name: str
    label: str  # the paper's name for it
    mode: str  # adaplan or react
    guided: bool  # the expert writes the plan blocks
    train: str  # the generated tokens that train: all, plan or action (`rollout.TRAINS`)
    rewards: tuple[str, ...]
    epochs: float  # the paper's: 1 / 2 / 1; the one-stage ablations get the three stages' 4
    separate: bool = False  # a second model (from the cold start) beside the previous stage's, fixed


STAGES = {
    "executor": Stage("executor", "1", "adaplan", True, "action", ("format", "adherence", "end_to_end"), 1.0),
    "planner": Stage("planner", "2", "adaplan", False, "plan", ("format", "end_to_end", "plan_quality"), 2.0),
    "joint": Stage("joint", "3", "adaplan", False, "all", ("format", "end_to_end"), 1.0),
    "all": Stage("all", "1&2&3", "adaplan", False, "all", ("format", "adherence", "end_to_end", "plan_quality"), 4.0),
    "vanilla": Stage("vanilla", "Vanilla RL", "react", False, "all", ("format", "end_to_end"), 4.0),
    "planner_isolated": Stage(
        "planner_isolated",
        "2 (isolated)",
        "adaplan",
        False,
        "plan",
        ("format", "end_to_end", "plan_quality"),
        2.0,
        separate=True,
    ),
}


def order_label(order: list[str]) -> str:
    """An order as the paper writes it: 1->2->3, 1&2&3, Vanilla RL."""
    return "->".join(STAGES[name].label for name in order)
