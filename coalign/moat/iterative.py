"""Lumos's iterative inference loop: planner and grounder take turns in a live episode (the web family).

Per task, an episode (`tasks.episodes.episode_for`: a Mind2Web-like site or the WebShop-like shop) and
two conversations. Each turn, batched over the tasks still running:

1. the planner (greedy) writes its next turn given its conversation so far; `parse_planner_turn` reads
   it as "stop planning" or as subgoal k;
2. the grounder (greedy) grounds that subgoal given its own conversation so far (the first turn shows
   the tool list and the task, later ones only the next subgoal, as Lumos's grounder rows do);
3. the episode runs the actions (`act`), and the planner hears the feedback Lumos gives, as the episode
   words it (`Episode.feedback`): the subgoal restated as done on a site, the turn's last result in the
   shop, as `episodes.gold_feedback` does for the gold plan.

A task stops (`Rollout.stop`) when the planner stops planning ("planner stopped"), when the episode is
done ("episode done": a site's gold steps are all taken, or the shop's item is bought; the planner is not
asked again then, so no stop turn is needed), on a malformed turn ("malformed planner turn": not
`Subgoal k: ...` nor the stop phrase; "malformed grounder turn": no `R# = Tool(...)` action in it), or after
`max_turns` planner turns ("turn limit"). A malformed turn is recorded in `Rollout.error`; actions that
parse but fail in the environment (no element matches, a click the page does not offer) are errors of
their step, recorded in `Rollout.action_errors`, and the loop goes on. Model output is only parsed, never
run as code. The planner's own subgoal numbers are not checked (Lumos's evaluation keeps what follows
"Subgoal k:" too): the loop numbers subgoals by turn.

`subgoals` chooses who writes the subgoals: "planner" (end to end), or for the diagnostics "gold" (the
task's gold subgoals fed turn by turn, stopping after the last) and "blank" (as many of the family's
content-free subgoal). The score is the episode's: step success rate on a site, WebShop reward in the shop.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from coalign.core.console import progress_bar
from coalign.envs.episode import Episode
from coalign.formats.lumos import FormatError, parse_action, planner_prompt, split_actions
from coalign.formats.lumos_iterative import Message, grounder_first_prompt, grounder_next_prompt, parse_planner_turn
from coalign.models.agents import Agent, generate
from coalign.models.vllm_engine import awake
from coalign.tasks import Task
from coalign.tasks.episodes import episode_for

SUBGOAL_SOURCES = ("planner", "gold", "blank")


@dataclass
class Rollout:
    """One task's run of the loop: both conversations, what was done, why it stopped, and the score."""

    task: Task
    episode: Episode
    planner: list[Message] = field(default_factory=list)
    grounder: list[Message] = field(default_factory=list)
    subgoals: list[str] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)  # the grounder's text per turn
    action_errors: list[str] = field(default_factory=list)
    stop: str | None = None  # None while running
    error: str | None = None  # a malformed turn

    @property
    def score(self) -> float:
        return self.episode.score()

    def finish(self, stop: str, error: str | None = None) -> None:
        self.stop, self.error = stop, error

    def to_json(self) -> dict:
        """The prediction row's fields (the conversations, subgoals, actions, errors, stop reason, score)."""
        return {
            "subgoals": list(self.subgoals),
            "actions": list(self.actions),
            "planner_conversation": list(self.planner),
            "grounder_conversation": list(self.grounder),
            "action_errors": list(self.action_errors),
            "stop": self.stop,
            "error": self.error,
            "score": self.score,
        }


def malformed_grounding(text: str) -> str | None:
    """Why a grounder turn holds no action at all (then the episode ends), or None when one parses."""
    parts = split_actions(text)
    if not parts:
        return "malformed grounder turn: no action"
    problems = []
    for part in parts:
        try:
            parse_action(part)
            return None
        except FormatError as exc:
            problems.append(str(exc))
    return f"malformed grounder turn: {problems[0]}"


def _planner_turns(
    planner: Agent | None, running: list[Rollout], subgoals: str, blank: str, turn: int, settings
) -> list[str | None]:
    """The next subgoal of every running task (None: it stopped); a stop or a malformed turn finishes it."""
    if subgoals == "planner":
        texts = [
            o[0]
            for o in generate(
                planner, [r.planner for r in running], settings.max_new_tokens_plan, settings.batch_size, progress=False
            )
        ]
    out: list[str | None] = []
    for i, rollout in enumerate(running):
        if subgoals != "planner":  # gold or blank subgoals, one per gold subgoal, then stop
            gold = rollout.task.subgoals
            if turn > len(gold):
                rollout.finish("planner stopped")
                out.append(None)
            else:
                out.append(gold[turn - 1] if subgoals == "gold" else blank)
            continue
        rollout.planner.append({"role": "assistant", "content": texts[i]})
        try:
            parsed = parse_planner_turn(texts[i])
        except FormatError as exc:
            rollout.finish("malformed planner turn", str(exc))
            out.append(None)
            continue
        if parsed is None:
            rollout.finish("planner stopped")
            out.append(None)
        else:
            out.append(parsed[1])
    return out


def run_episodes(
    planner: Agent | None,
    grounder: Agent,
    tasks: Sequence[Task],
    settings,
    subgoals: str = "planner",
    blank: str = "",
    desc: str = "iterative loop",
) -> list[Rollout]:
    """Run every task's episode to its end (see the module docstring); one rollout per task, in order.

    `settings` carries `batch_size`, `max_new_tokens_plan`, `max_new_tokens_ground` and `max_turns`
    (`config.EvalSettings`). `planner` may be None unless `subgoals` is "planner".
    """
    if subgoals not in SUBGOAL_SOURCES:
        raise ValueError(f"subgoals must be one of {SUBGOAL_SOURCES}, got {subgoals!r}")
    rollouts = [Rollout(task, episode_for(task)) for task in tasks]
    for rollout in rollouts:
        rollout.planner.append({"role": "user", "content": planner_prompt(rollout.task.question)})
    with progress_bar() as bar, awake():  # vLLM's engine woken once for the loop, the agents' weights swapped in it
        progress = bar.add_task(f"{desc} (turns)", total=settings.max_turns)
        for turn in range(1, settings.max_turns + 1):
            running = [r for r in rollouts if r.stop is None]
            if not running:
                bar.update(progress, total=turn - 1)
                break
            planned = _planner_turns(planner, running, subgoals, blank, turn, settings)
            grounding = [(r, s) for r, s in zip(running, planned) if s is not None]
            for rollout, subgoal in grounding:
                task = rollout.task
                user = (
                    grounder_first_prompt(task.question, subgoal, task.tools)
                    if turn == 1
                    else grounder_next_prompt(turn, subgoal)
                )
                rollout.grounder.append({"role": "user", "content": user})
                rollout.subgoals.append(subgoal)
            texts = (
                generate(
                    grounder,
                    [r.grounder for r, _ in grounding],
                    settings.max_new_tokens_ground,
                    settings.batch_size,
                    progress=False,
                )
                if grounding
                else []
            )
            for (rollout, subgoal), (text,) in zip(grounding, texts):
                rollout.grounder.append({"role": "assistant", "content": text})
                rollout.actions.append(text)
                done = rollout.episode.act(text)
                rollout.action_errors += [f"turn {turn}: {r.error}" for r in done.records if r.error]
                problem = malformed_grounding(text)
                if problem:
                    rollout.finish("malformed grounder turn", problem)
                elif rollout.episode.done:
                    rollout.finish("episode done")
                else:
                    heard = rollout.episode.feedback(turn, subgoal, done)
                    rollout.planner.append({"role": "user", "content": heard})
            bar.advance(progress)
    for rollout in rollouts:
        if rollout.stop is None:
            rollout.finish("turn limit")
    return rollouts
