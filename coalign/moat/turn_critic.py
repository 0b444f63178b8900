"""Stage 2's critic for one turn of an iterative (web) task: is the grounder's turn right? If not, the gold turn.

MOAT per turn (`moat.units`) grounds each (gold prefix, candidate subgoal) and judges that one turn. The
episode is put in its state at turn t by running the gold actions of turns 1..t-1 (what the gold prefix the
grounder read says was done), then the turn's actions run in it:

- a site (Mind2Web-like, `SiteEpisode.judge_turn`): right when the turn takes exactly as many steps as the gold turn,
  every one right by Mind2Web's rule (`envs.web.step_correct`: a positive element, the operation, and
  for TYPE/SELECT the value), the rule the step success rate counts, and no action fails (e.g. one past
  the last step);
- the shop (WebShop-like, `ShopEpisode.judge_turn`): right when no action fails and the turn ends where the gold turn
  does: the same last result (the search's items, the picked item, the page clicked to), the same done state
  and the same reward. A different route to the same result counts as right; an equally good item other
  than the gold one does not (a stricter rule than the episode's reward, stated).

A wrong turn is corrected to the gold actions of that turn (its R-numbers already continue the gold prefix's),
with the turn's gold subgoal as its corrected subgoal: stage 2 trains on it in place of the candidate's when
`moat.critic_subgoals` is `corrected`, as for the onetime execution critic.
The "none" critic keeps every turn as generated. The paper's LLM critic has no per-turn prompt here (its
prompt judges whole action sequences against a final answer, which a web turn has not): `judge_turns`
refuses it, and `moat_rounds` refuses it before any work for a round with web tasks.
"""

from __future__ import annotations

from collections.abc import Sequence

from coalign.core.errors import RunError
from coalign.formats.lumos import format_actions
from coalign.moat.critic import Verdict
from coalign.tasks import Task
from coalign.tasks.episodes import episode_for


def _at_turn(task: Task, turn: int):
    """A fresh episode of `task` after the gold actions of turns 1..turn-1, and the gold groups."""
    groups = task.action_groups()
    episode = episode_for(task)
    for group in groups[: turn - 1]:
        episode.act(list(group))
    return episode, groups


def judge_turn(task: Task, turn: int, actions: str) -> Verdict:
    """The execution critic's verdict on the grounder's `actions` for turn `turn` (from 1) of a web task, by
    the episode's own rule (`Episode.judge_turn`); a wrong turn is corrected to the gold turn."""
    episode, groups = _at_turn(task, turn)
    gold = groups[turn - 1]
    right, note = episode.judge_turn(list(gold), actions)
    if right:
        return Verdict(True, actions, note=note)
    return Verdict(False, format_actions(list(gold)), (task.subgoals[turn - 1].strip(),), note)


def judge_turns(critic: str, items: Sequence[tuple[Task, int, str]]) -> list[Verdict]:
    """Verdicts on (task, turn, actions) items by the critic named in `moat.critic`: execution or none."""
    if critic == "execution":
        return [judge_turn(task, turn, actions) for task, turn, actions in items]
    if critic == "none":
        return [Verdict(True, actions, note="not judged") for _, _, actions in items]
    raise RunError(
        f"the {critic} critic cannot judge web turns (its prompt judges whole action sequences against a final "
        "answer); use moat.critic: execution or none for runs with web tasks"
    )
