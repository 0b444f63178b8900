"""Planner -> grounder -> executor over evaluation sets, with the diagnostics MOAT rests on.

Besides end-to-end accuracy, the grounder is also run on the gold subgoals and on blanked
subgoals: gold minus blanked says how much the subgoals matter at all; gold minus end-to-end
is the capability gap between what the planner writes and what the grounder needs.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from statistics import mean

from coalign.agents import Agent, ground, plan
from coalign.config import EvalSettings
from coalign.formats import FormatError, format_actions, format_subgoals, grounder_prompt, parse_subgoals
from coalign.metrics import accuracy, answer_correct, lumos_exact_match
from coalign.stages.score import score_completions
from coalign.tasks import Task
from coalign.tasks.suite import BLANK_SUBGOAL
from coalign.tools.executor import execute


def _is_plan(text: str) -> bool:
    try:
        parse_subgoals(text)
    except FormatError:
        return False
    return True


def _score(tasks: Sequence[Task], action_texts: Sequence[str]) -> tuple[list, list[bool], list[bool]]:
    traces = [execute(a, t.family) for t, a in zip(tasks, action_texts, strict=True)]
    ok = [answer_correct(tr.answer, t.answer, t.family, t.dataset) for tr, t in zip(traces, tasks)]
    exact = [tr.answer is not None and lumos_exact_match(tr.answer, t.answer) for tr, t in zip(traces, tasks)]
    return traces, ok, exact


def grounding_ppl(grounder: Agent, tasks: Sequence[Task], plans: Sequence[str], batch_size: int) -> list[float]:
    """Per task, the grounder's perplexity of the gold actions given the planner's subgoals (Table 4).

    Lower means the plan is one the grounder can ground into the right actions; MOAT's stage 1
    reward is this quantity, so its fall over rounds is the paper's evidence of alignment.
    """
    users = [grounder_prompt(t.question, p, t.family) for t, p in zip(tasks, plans, strict=True)]
    gold = [format_actions(list(t.actions)) for t in tasks]
    return [s.ppl for s in score_completions(grounder, users, gold, batch_size, desc="grounding PPL")]


def evaluate_tasks(planner: Agent, grounder: Agent, tasks: Sequence[Task], settings: EvalSettings, name: str):
    """Metrics and per-task prediction rows for one evaluation set."""
    questions = [t.question for t in tasks]
    b, plan_len, ground_len = settings.batch_size, settings.max_new_tokens_plan, settings.max_new_tokens_ground
    plans = plan(planner, questions, plan_len, b)
    actions = ground(grounder, questions, plans, ground_len, b, desc=f"{name}: grounder on planner subgoals")
    traces, ok, exact = _score(tasks, actions)
    ppl = grounding_ppl(grounder, tasks, plans, b)
    metrics: dict = {
        "n": len(tasks),
        "accuracy": accuracy(ok),
        "lumos_exact": accuracy(exact),
        "plan_well_formed": accuracy(_is_plan(p) for p in plans),
        "grounding_ppl": mean(ppl),
    }
    rows = [
        {
            "id": t.id,
            "dataset": t.dataset,
            "question": t.question,
            "gold_answer": t.answer,
            "plan": p,
            "actions": a,
            "pred": tr.answer,
            "error": tr.error,
            "correct": c,
            "lumos_exact": e,
            "grounding_ppl": x,
        }
        for t, p, a, tr, c, e, x in zip(tasks, plans, actions, traces, ok, exact, ppl)
    ]
    if settings.diagnostics:
        gold = [format_subgoals(t.subgoals) for t in tasks]
        blank = [format_subgoals([BLANK_SUBGOAL] * len(t.subgoals)) for t in tasks]
        gold_actions = ground(grounder, questions, gold, ground_len, b, desc=f"{name}: grounder on gold subgoals")
        blank_actions = ground(grounder, questions, blank, ground_len, b, desc=f"{name}: grounder on blanked subgoals")
        _, gold_ok, _ = _score(tasks, gold_actions)
        _, blank_ok, _ = _score(tasks, blank_actions)
        metrics["grounder_acc_gold_subgoals"] = accuracy(gold_ok)
        metrics["grounder_acc_blank_subgoals"] = accuracy(blank_ok)
        metrics["capability_gap"] = metrics["grounder_acc_gold_subgoals"] - metrics["accuracy"]
        by_style: dict[str, list[bool]] = defaultdict(list)
        for t, g in zip(tasks, gold_ok):
            if t.subgoal_styles:
                by_style[t.subgoal_styles[0]].append(g)
        if by_style:
            metrics["grounder_acc_gold_by_style"] = {s: accuracy(v) for s, v in sorted(by_style.items())}
            metrics["style_counts"] = {s: len(v) for s, v in sorted(by_style.items())}
        for row, ga, go, ba, bo in zip(rows, gold_actions, gold_ok, blank_actions, blank_ok):
            row.update(
                gold_subgoal_actions=ga, gold_subgoal_correct=go, blank_subgoal_actions=ba, blank_subgoal_correct=bo
            )
    return metrics, rows


def split_summary(per_set: dict[str, dict]) -> dict:
    """Plain mean over the evaluation sets of a split, as the paper averages its task metrics."""
    keys = [
        "accuracy",
        "lumos_exact",
        "grounder_acc_gold_subgoals",
        "grounder_acc_blank_subgoals",
        "capability_gap",
        "plan_well_formed",
        "grounding_ppl",
    ]
    return {k: mean(m[k] for m in per_set.values()) for k in keys if per_set and all(k in m for m in per_set.values())}
