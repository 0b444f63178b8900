"""What the planner is worth to its team: plan value and subgoal agreement with gold.

Plan value is the team's accuracy minus the same grounder's given blanked subgoals (as many content-free
subgoals as the gold plan has): above 0, the planner's subgoals help the grounder; at or below 0, the grounder
would do as well without them. Subgoal agreement says how close the planner writes to the gold subgoals.
Light on purpose (no model code), so reports of old results derive plan value without loading torch.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from coalign.formats.answers import squad_normalize

ACCURACY, BLANK = "accuracy", "grounder_acc_blank_subgoals"


def with_plan_value(metrics: dict) -> dict:
    """`metrics` with `plan_value` (accuracy - grounder_acc_blank_subgoals) where both are given and it is
    not yet: results written before plan value was recorded get it from the numbers they hold."""
    if "plan_value" in metrics or ACCURACY not in metrics or BLANK not in metrics:
        return metrics
    return {**metrics, "plan_value": metrics[ACCURACY] - metrics[BLANK]}


def subgoal_agreement(planned: Sequence[str], gold: Sequence[str]) -> float:
    """SQuAD's token F1 between the planner's subgoals and the gold ones, each list read as one bag of words
    after `squad_normalize` (lowercase, no punctuation or articles).

    Why token F1 and not exact match per subgoal: gold subgoals come in three styles with wordings drawn at
    random ("Multiply 9 by 4 to find ...", "Find how many ...", "Compute the result"), so exact match would mostly
    score wording luck. Shared words credit the operands, quantities and earlier results (R1) a subgoal names;
    a missing or extra subgoal costs its words in recall or precision. A vague gold plan shares few words with
    any useful plan, so agreement stays well below 1 even for a planner that plans right."""
    words = Counter(squad_normalize(" ".join(planned)).split())
    gold_words = Counter(squad_normalize(" ".join(gold)).split())
    common = sum((words & gold_words).values())
    if not common:
        return 0.0
    precision, recall = common / sum(words.values()), common / sum(gold_words.values())
    return 2 * precision * recall / (precision + recall)
