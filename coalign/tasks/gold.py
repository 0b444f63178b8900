"""Do the converted gold actions, run by the real executor, give the gold answer? And if not, why?

The loaders turn source calculations (GSM8K `<<expr=value>>` annotations, written-out `a + b = c`
and equations worked by hand, SVAMP equations) into actions. Training a grounder on actions that miss
the answer teaches it wrong plans, so this check measures the conversion on the real files and
sorts each miss into a cause someone can act on. The bundled suites' gold plans (maths and QA) go
through the same check, each task judged by its benchmark's answer rule.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import NamedTuple

from coalign.formats.answers import answer_correct, lumos_exact_match, numeric_match
from coalign.tasks import Task
from coalign.tools.executor import Trace, execute

# Why the gold actions of a task miss its answer ("annotation" = any source calculation).
NO_ANNOTATIONS = "no annotations"
UNPARSEABLE = "unparseable annotation"
WRONG_ARITHMETIC = "annotation arithmetic wrong in source"
NOT_LAST = "answer not produced by last annotation"
ALGEBRA = "algebra not converted"
ROUNDED = "answer rounded in words"
SCALED = "answer in hundredths of the working"
NEVER_COMPUTED = "answer not computed by any annotation"
CAUSES = {
    NO_ANNOTATIONS: "the solution has no calculation or equation to turn into an action (prose only)",
    UNPARSEABLE: "an action failed to execute",
    WRONG_ARITHMETIC: "a calculation's written result is not what its expression gives",
    NOT_LAST: "an earlier action gives the gold answer, the last one does not",
    ALGEBRA: "the solution writes the answer as an unknown's value (`x = 18`) that no equation it states gives",
    ROUNDED: "the gold is the last action's value rounded to a whole number (the solution rounds in words)",
    SCALED: "the gold is the last action's value times or divided by 100 "
    "(cents for a dollar working, a percent for a fraction)",
    NEVER_COMPUTED: "no action gives the gold answer "
    "(a unit change, a step in words, a slip in the source, or a wrong gold)",
}


RULES = {"maths": "numeric match", "qa": "QA answer match (Lumos yes/no, SQuAD exact match)"}


class GoldFailure(NamedTuple):
    task_id: str
    cause: str  # one of CAUSES
    detail: str


@dataclass(frozen=True)
class GoldReport:
    total: int
    numeric_ok: int  # executed answer right by the task's rule (metrics.answer_correct: numeric match for maths)
    exact_ok: int  # executed answer string equals the gold (Agent Lumos's rule)
    failures: list[GoldFailure] = field(default_factory=list)
    rule: str = RULES["maths"]  # the answer rule(s) numeric_ok counts by, as the summary names them

    @property
    def numeric_rate(self) -> float:
        return self.numeric_ok / self.total if self.total else 0.0

    @property
    def exact_rate(self) -> float:
        return self.exact_ok / self.total if self.total else 0.0

    def causes(self) -> Counter[str]:
        return Counter(failure.cause for failure in self.failures)

    def summary(self, examples: int = 3) -> str:
        """Plain-text report: the rates, then each cause with its count and a few task ids."""
        exact = f"; {100 * self.exact_rate:.2f}% Lumos exact match" if self.rule == RULES["maths"] else ""
        lines = [
            f"gold actions reproduce the answer on {self.numeric_ok}/{self.total} tasks "
            f"({100 * self.numeric_rate:.2f}% {self.rule}{exact})"
        ]
        for cause, count in self.causes().most_common():
            ids = [f.task_id for f in self.failures if f.cause == cause][:examples]
            lines.append(f"  {count:5d}  {cause}: {CAUSES[cause]} (e.g. {', '.join(ids)})")
        return "\n".join(lines)


def gold_execution_report(tasks: Iterable[Task]) -> GoldReport:
    """Execute every task's gold actions in its family's domain and judge the answer by its benchmark's rule."""
    total = numeric_ok = exact_ok = 0
    failures, families = [], set()
    for task in tasks:
        total += 1
        families.add(task.family)
        trace = execute(list(task.actions), task.family) if task.actions else None
        answer = trace.answer if trace is not None else None
        exact_ok += lumos_exact_match(answer, task.answer)
        if answer_correct(answer, task.answer, task.family, task.dataset):
            numeric_ok += 1
        else:
            failures.append(diagnose(task, trace))
    rule = "; ".join(RULES[f] for f in sorted(families)) if families else RULES["maths"]
    return GoldReport(total=total, numeric_ok=numeric_ok, exact_ok=exact_ok, failures=failures, rule=rule)


def diagnose(task: Task, trace: Trace | None) -> GoldFailure:
    """The cause of a miss, checked in the order a fix would need: run, source arithmetic, answer."""
    unsolved = [
        f"{name} = {value}" for name, value in task.meta.get("unsolved", []) if numeric_match(value, task.answer)
    ]
    if trace is None:
        if unsolved:
            return GoldFailure(task.id, ALGEBRA, f"no actions; the source writes {unsolved[-1]}")
        return GoldFailure(task.id, NO_ANNOTATIONS, "no actions")
    if trace.error is not None:
        return GoldFailure(task.id, UNPARSEABLE, trace.error)
    values = [next(iter(step.outputs.values())) for step in trace.steps]
    for step, value, claimed in zip(trace.steps, values, _claimed_results(task)):
        if claimed is not None and not numeric_match(value, claimed):
            return GoldFailure(task.id, WRONG_ARITHMETIC, f"{step.action} gives {value}, the source writes {claimed}")
    earlier = [
        i
        for i, value in enumerate(values[:-1], start=1)
        if answer_correct(value, task.answer, task.family, task.dataset)
    ]
    if earlier:
        return GoldFailure(task.id, NOT_LAST, f"R{earlier[-1]} = {task.answer}, last action gives {values[-1]}")
    detail = f"last action gives {values[-1]}, gold is {task.answer}"
    if unsolved:
        return GoldFailure(task.id, ALGEBRA, f"{detail}; the source writes {unsolved[-1]}")
    last, gold = _number(values[-1]), _number(task.answer)
    if last is not None and gold is not None:
        if last.denominator != 1 and gold in (math.floor(last), math.ceil(last)):
            return GoldFailure(task.id, ROUNDED, detail)
        if gold != 0 and gold in (last * 100, last / 100):
            return GoldFailure(task.id, SCALED, detail)
    return GoldFailure(task.id, NEVER_COMPUTED, detail)


def _number(text: str) -> Fraction | None:
    try:
        return Fraction(text.replace(",", ""))
    except (ValueError, ZeroDivisionError):
        return None


def _claimed_results(task: Task) -> list[str | None]:
    """Each action's result as the source writes it (GSM8K), or None where the source gives none."""
    return [claimed for _, claimed, _ in task.meta.get("calculations", [])] or [None] * len(task.actions)
