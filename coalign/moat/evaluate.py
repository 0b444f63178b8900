"""Planner -> grounder -> executor over evaluation sets, with the diagnostics MOAT rests on.

Besides end-to-end accuracy, the grounder is also run on the gold subgoals and on blanked
subgoals: gold minus blanked says how much the subgoals matter at all; gold minus end-to-end
is the capability gap between what the planner writes and what the grounder needs; end-to-end
minus blanked is the plan value, what the planner's subgoals add (`moat.plan_value`), beside
the planner's subgoal agreement with gold.

Task families (maths, QA, web) mix in one run: every prompt, blank and answer rule is the task's own
family's, and grounding PPL is averaged only within a family (its value depends on the family's
action text, so a mean across families compares nothing; the paper warns of this too). Web sets run
in Lumos's iterative formulation (`evaluate_iterative`), scored by step success rate or reward.

A run's evaluation (`evaluate_run`) is one stage of its run folder: every held-in and held-out set, its
predictions and metrics written under the stage's name; `evaluate_checkpoints` is `coalign eval` of a lumos
or moat config.
"""

from __future__ import annotations

import math
import re
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from statistics import mean

from rich.console import Console
from rich.markup import escape

from coalign.config import EvalSettings, RunConfig
from coalign.core.errors import RunError
from coalign.core.runs import Run, read_json, write_json, write_jsonl
from coalign.formats.answers import accuracy, answer_correct, lumos_exact_match
from coalign.formats.lumos import FormatError, format_actions, format_subgoals, grounder_prompt, parse_subgoals
from coalign.formats.lumos_iterative import turn_examples
from coalign.moat.data import load_split
from coalign.moat.iterative import Rollout, run_episodes
from coalign.moat.output_room import check_room
from coalign.moat.plan_value import subgoal_agreement, with_plan_value
from coalign.moat.scoring import score_completions
from coalign.models.agents import Agent, ground, plan
from coalign.tasks import Task, maths_suite, qa_suite, web_suite
from coalign.tasks.episodes import grounder_conversation
from coalign.tasks.sources import source_name
from coalign.tools.executor import execute
from coalign.training.setup import (
    generation_settings,
    inference_bf16,
    inference_dependencies,
    prepare_run,
    removed_if_failed,
    saved_recipe,
)

# Per family, the content-free subgoal that blanks a plan: one of the family's own vague subgoals,
# so a blanked plan is text the grounder has seen in training, just without information.
BLANK_SUBGOALS: dict[str, str] = {
    "maths": maths_suite.BLANK_SUBGOAL,
    "qa": qa_suite.BLANK_SUBGOAL,
    "web": web_suite.BLANK_SUBGOAL,
}
EXACT_FAMILIES = frozenset({"maths"})  # where Lumos's exact string match is a reported metric


def _parsed(text: str) -> list[str] | None:
    """The plan's subgoals; None for text that is no subgoal sequence."""
    try:
        return parse_subgoals(text)
    except FormatError:
        return None


def agreements(tasks: Sequence[Task], planned: Sequence[list[str] | None]) -> list[float | None]:
    """Per task, the planner's subgoal agreement with the gold subgoals (`plan_value.subgoal_agreement`): 0 for
    a plan that does not parse (it gives no subgoals), None for a task without gold subgoals."""
    return [subgoal_agreement(p or [], t.subgoals) if t.subgoals else None for t, p in zip(tasks, planned, strict=True)]


def _with_agreement(metrics: dict, per_task: Sequence[float | None]) -> None:
    """`subgoal_agreement`: the mean over the tasks that have gold subgoals (absent where none has)."""
    known = [a for a in per_task if a is not None]
    if known:
        metrics["subgoal_agreement"] = mean(known)


def blank_plan(task: Task) -> str:
    """The task's plan with every subgoal replaced by its family's blank (same count)."""
    if task.family not in BLANK_SUBGOALS:
        raise KeyError(f"no blank subgoal for family {task.family!r}; add one to evaluate.BLANK_SUBGOALS")
    return format_subgoals([BLANK_SUBGOALS[task.family]] * len(task.subgoals))


def set_family(tasks: Sequence[Task]) -> str:
    """The task family of an evaluation set; a set mixing families is named by all of them (`maths+qa`)."""
    return "+".join(sorted({t.family for t in tasks}))


def _score(tasks: Sequence[Task], action_texts: Sequence[str]) -> tuple[list, list[bool], list[bool | None]]:
    """Traces, correctness by each task's answer rule, and Lumos exact match where it is defined (else None)."""
    traces = [execute(a, t.family) for t, a in zip(tasks, action_texts, strict=True)]
    ok = [answer_correct(tr.answer, t.answer, t.family, t.dataset) for tr, t in zip(traces, tasks)]
    exact = [
        tr.answer is not None and lumos_exact_match(tr.answer, t.answer) if t.family in EXACT_FAMILIES else None
        for tr, t in zip(traces, tasks)
    ]
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
    """Metrics and per-task prediction rows for one evaluation set.

    `accuracy` is by each task's benchmark rule (`formats.answers.answer_correct`); `lumos_exact` (string
    equality, Lumos's maths metric) is given only for a set whose tasks are all of EXACT_FAMILIES.
    A set of iterative tasks (the web family) is run by Lumos's iterative loop: `evaluate_iterative`.
    """
    if any(t.iterative for t in tasks):
        if not all(t.iterative for t in tasks):
            raise ValueError(f"{name}: a set mixes iterative (web) and onetime tasks; give them as separate sets")
        return evaluate_iterative(planner, grounder, tasks, settings, name)
    b, plan_len, ground_len = settings.batch_size, settings.max_new_tokens_plan, settings.max_new_tokens_ground
    plans = plan(planner, [t.question for t in tasks], plan_len, b)
    actions = ground(grounder, tasks, plans, ground_len, b, desc=f"{name}: grounder on planner subgoals")
    traces, ok, exact = _score(tasks, actions)
    ppl = grounding_ppl(grounder, tasks, plans, b)
    metrics: dict = {"n": len(tasks), "accuracy": accuracy(ok)}
    if all(e is not None for e in exact):
        metrics["lumos_exact"] = accuracy(exact)
    parsed = [_parsed(p) for p in plans]
    agreement = agreements(tasks, parsed)
    metrics |= {"plan_well_formed": accuracy(p is not None for p in parsed), "grounding_ppl": mean(ppl)}
    _with_agreement(metrics, agreement)
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
            "subgoal_agreement": g,
        }
        for t, p, a, tr, c, e, x, g in zip(tasks, plans, actions, traces, ok, exact, ppl, agreement)
    ]
    if settings.diagnostics:
        gold = [format_subgoals(t.subgoals) for t in tasks]
        blank = [blank_plan(t) for t in tasks]
        gold_actions = ground(grounder, tasks, gold, ground_len, b, desc=f"{name}: grounder on gold subgoals")
        blank_actions = ground(grounder, tasks, blank, ground_len, b, desc=f"{name}: grounder on blanked subgoals")
        _, gold_ok, _ = _score(tasks, gold_actions)
        _, blank_ok, _ = _score(tasks, blank_actions)
        metrics["grounder_acc_gold_subgoals"] = accuracy(gold_ok)
        metrics["grounder_acc_blank_subgoals"] = accuracy(blank_ok)
        metrics["capability_gap"] = metrics["grounder_acc_gold_subgoals"] - metrics["accuracy"]
        metrics = with_plan_value(metrics)
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


# --------------------------------------------------------------------------- iterative (web) sets


def web_set_score(rollouts: Sequence[Rollout]) -> tuple[str, float]:
    """(metric name, value) of a web set, as Lumos reports it: Mind2Web's step success rate micro-averaged
    over all gold steps (right steps / steps) for site tasks, the mean WebShop reward for shopping goals."""
    kinds = {type(r.episode) for r in rollouts}
    if len(kinds) != 1:
        raise ValueError(
            "a web set mixes site tasks and shopping goals; give them as separate sets"
            if kinds
            else "no rollouts to score"
        )
    kind = kinds.pop()
    return kind.metric, kind.set_score([r.episode for r in rollouts])


def gold_grounding_ppl(grounder: Agent, tasks: Sequence[Task], batch_size: int) -> list[float | None]:
    """Per task, the grounder's perplexity of the gold actions given the *gold* subgoals, teacher-forced over
    the gold grounder conversation (every turn in the context of the gold turns before it): exp(total NLL /
    total tokens) over all its assistant turns; None for a task without a gold plan.

    The onetime quantity (gold actions given the planner's subgoals) is not defined here: the planner's
    subgoals need not match the gold ones in number, nor align with the gold action groups turn by turn. So
    web sets report this one, under its own key (`grounding_ppl_gold_subgoals`), never as `grounding_ppl`:
    it measures the grounder alone and does not move with the planner.
    """
    owners, users, completions = [], [], []
    for i, task in enumerate(tasks):
        if task.subgoals and task.actions:
            for prompt, completion in turn_examples(grounder_conversation(task)):
                owners.append(i)
                users.append(prompt)
                completions.append(completion)
    scores = score_completions(grounder, users, completions, batch_size, desc="grounding PPL | gold subgoals")
    nll, count = defaultdict(float), defaultdict(int)
    for i, score in zip(owners, scores):
        nll[i] += score.nll_sum
        count[i] += score.n_tokens
    return [math.exp(nll[i] / count[i]) if count[i] else None for i in range(len(tasks))]


def _by_style(tasks: Sequence[Task], rollouts: Sequence[Rollout]) -> dict[str, list[Rollout]]:
    groups: dict[str, list[Rollout]] = defaultdict(list)
    for task, rollout in zip(tasks, rollouts):
        if task.subgoal_styles:
            groups[task.subgoal_styles[0]].append(rollout)
    return groups


def evaluate_iterative(planner: Agent, grounder: Agent, tasks: Sequence[Task], settings: EvalSettings, name: str):
    """Metrics and prediction rows for a set of web tasks, run by Lumos's iterative loop (`moat.iterative`).

    `accuracy` is the set's benchmark metric (`web_set_score`: step success rate for Mind2Web-like sites,
    mean reward for WebShop-like shopping), so split averages mix it with the other families' accuracy as
    the paper's Table 2 does; `metric` names it and it is also given under that name. `task_success`: share of
    tasks scoring 1. `plan_well_formed`: share whose planner turns all parsed. `subgoal_agreement`: the planner's
    subgoals, all its turns together, against the gold ones (`agreements`). The diagnostics feed the
    grounder the gold subgoals, or as many blanked ones, turn by turn in place of the planner's, each scored
    by the same metric. Grounding PPL: see `gold_grounding_ppl`.
    """
    b = settings.batch_size
    rollouts = run_episodes(planner, grounder, tasks, settings, "planner", desc=f"{name}: planner -> grounder")
    metric, value = web_set_score(rollouts)
    metrics: dict = {"n": len(tasks), "accuracy": value, "metric": metric, metric: value}
    metrics["task_success"] = accuracy(r.score == 1.0 for r in rollouts)
    metrics["plan_well_formed"] = accuracy(r.stop != "malformed planner turn" for r in rollouts)
    metrics["stops"] = dict(sorted(Counter(r.stop for r in rollouts).items()))
    agreement = agreements(tasks, [r.subgoals for r in rollouts])
    _with_agreement(metrics, agreement)
    ppl = gold_grounding_ppl(grounder, tasks, b)
    known = [x for x in ppl if x is not None]
    if known:
        metrics["grounding_ppl_gold_subgoals"] = mean(known)
    rows = [
        {
            "id": t.id,
            "dataset": t.dataset,
            "question": t.question,
            "plan": format_subgoals(r.subgoals) if r.subgoals else "",
            **r.to_json(),
            "correct": r.score == 1.0,
            "grounding_ppl_gold_subgoals": x,
            "subgoal_agreement": g,
        }
        for t, r, x, g in zip(tasks, rollouts, ppl, agreement)
    ]
    planned = [i for i, t in enumerate(tasks) if t.subgoals]
    if settings.diagnostics and planned:
        chosen = [tasks[i] for i in planned]
        blank = BLANK_SUBGOALS["web"]
        gold = run_episodes(None, grounder, chosen, settings, "gold", desc=f"{name}: grounder on gold subgoals")
        blanked = run_episodes(
            None, grounder, chosen, settings, "blank", blank, desc=f"{name}: grounder on blanked subgoals"
        )
        metrics["grounder_acc_gold_subgoals"] = web_set_score(gold)[1]
        metrics["grounder_acc_blank_subgoals"] = web_set_score(blanked)[1]
        metrics["capability_gap"] = metrics["grounder_acc_gold_subgoals"] - metrics["accuracy"]
        metrics = with_plan_value(metrics)
        by_style = _by_style(chosen, gold)
        if by_style:
            metrics["grounder_acc_gold_by_style"] = {s: web_set_score(v)[1] for s, v in sorted(by_style.items())}
            metrics["style_counts"] = {s: len(v) for s, v in sorted(by_style.items())}
        for i, g, k in zip(planned, gold, blanked):
            rows[i].update(
                gold_subgoal_actions=g.actions,
                gold_subgoal_score=g.score,
                gold_subgoal_correct=g.score == 1.0,
                blank_subgoal_actions=k.actions,
                blank_subgoal_score=k.score,
                blank_subgoal_correct=k.score == 1.0,
            )
    return metrics, rows


# --------------------------------------------------------------------------- summaries


PPL_KEYS = ("grounding_ppl", "grounding_ppl_gold_subgoals")  # averaged within one task family only


def split_summary(per_set: dict[str, dict], families: dict[str, str] | None = None) -> dict:
    """Plain mean over the evaluation sets of a split, as the paper averages its task metrics (Table 2
    averages GSM8K, StrategyQA and Mind2Web alike). Grounding PPL only when the sets (`families`: set
    name -> family) are of one family; `family_summaries` gives it per family."""
    if families is not None and len(set(families.values())) > 1:
        per_set = {k: {m: v for m, v in metrics.items() if m not in PPL_KEYS} for k, metrics in per_set.items()}
    keys = [
        "accuracy",
        "lumos_exact",
        "task_success",
        "grounder_acc_gold_subgoals",
        "grounder_acc_blank_subgoals",
        "capability_gap",
        "plan_value",
        "subgoal_agreement",
        "plan_well_formed",
        *PPL_KEYS,
    ]
    return {k: mean(m[k] for m in per_set.values()) for k in keys if per_set and all(k in m for m in per_set.values())}


def family_summaries(per_set: dict[str, dict], families: dict[str, str]) -> dict[str, dict]:
    """`split_summary` of each family's sets: where grounding PPL can be compared."""
    return {
        family: split_summary({k: m for k, m in per_set.items() if families[k] == family})
        for family in sorted(set(families.values()))
    }


# --------------------------------------------------------------------------- a run's evaluation


def evaluate_run(
    run: Run, config: RunConfig, planner_path: str, grounder_path: str, console: Console, name: str = "eval"
) -> dict:
    """Evaluate on every held-in and held-out set; write predictions and metrics under `name`/.

    Per split: each set's metrics, its task family, the mean over all sets, and the mean per family
    (the only place grounding PPL is averaged when a split mixes families)."""

    def evaluate() -> dict:
        trust = config.models.trust_remote_code
        generation = generation_settings(config)
        planner = Agent.load(planner_path, trust, generation, "planner", inference_bf16(config))
        grounder = Agent.load(grounder_path, trust, generation, "grounder", inference_bf16(config))
        results: dict = {}
        for split in ("heldin", "heldout"):
            per_set, families = {}, {}
            for source in getattr(config.data, split):
                label = source_name(source)
                tasks = load_split(run, config, [source], f"{split}/{label}", console)
                console.print(f"[bold]{name}[/bold] {split}/{label}: {len(tasks)} tasks")
                tokenizers = (planner.tokenizer, grounder.tokenizer)
                too_long = check_room(console, f"{split}/{label}", tasks, tokenizers, config.eval, "eval")
                metrics, rows = evaluate_tasks(planner, grounder, tasks, config.eval, f"{split}/{label}")
                metrics["gold_turns_too_long"] = too_long
                write_jsonl(run.path(name, f"{split}-{label}.predictions.jsonl"), rows)
                per_set[label], families[label] = metrics, set_family(tasks)
            results[split] = {
                "sets": per_set,
                "average": split_summary(per_set, families),
                "families": families,
                "family_average": family_summaries(per_set, families),
            }
        write_json(run.path(name, "metrics.json"), results)
        return {}

    inputs, depends_on = [planner_path, grounder_path], eval_dependencies(config)
    run.stage(name, evaluate, [run.path(name)], inputs=inputs, depends_on=depends_on)
    return read_json(run.path(name, "metrics.json"))


def eval_dependencies(config: RunConfig) -> dict:
    """What an evaluation's numbers depend on besides its two checkpoints: the sets, how bad rows are
    handled, the evaluation budgets and the generation backend."""
    data = config.data.model_dump(mode="json")
    return {
        "heldin": data["heldin"],
        "heldout": data["heldout"],
        "skip_bad_rows": data["skip_bad_rows"],
        "eval": config.eval.model_dump(mode="json"),
        "generation": config.generation.model_dump(mode="json") if config.generation else None,
        **inference_dependencies(config),
    }


def evaluate_checkpoints(
    config: RunConfig,
    run_dir: str | Path,
    planner: str | None,
    grounder: str | None,
    console: Console,
    force: bool = False,
    config_name: str = "CONFIG",
) -> dict:
    """`coalign eval` of a lumos or moat config: what the run trained last (`trained_checkpoints`: a moat run's last
    finished round, a lumos run's cold start), evaluated again as that stage of the run folder (kept as it is where
    nothing it depends on changed); or the given `planner` and `grounder` (the run's for the one not given), into a
    new eval-<time>/ folder inside it, so the run's own evaluation is kept; one that fails before its evaluation
    finished is removed again. One line says which checkpoints are evaluated. A lumos config evaluates a moat run
    and the other way round (`saved_recipe`). `config_name`: the config as the command line named it, for the
    command an error suggests."""
    if not config.data.heldin and not config.data.heldout:
        raise RunError(f"{config_name}: nothing to evaluate; add sets under data.heldin or data.heldout")
    trained = Path(run_dir)
    recipe = saved_recipe(trained, config, ("lumos", "moat")) or config.recipe
    stage, what, defaults = trained_checkpoints(trained, recipe)
    for agent, given in (("planner", planner), ("grounder", grounder)):
        if given is None and not Path(defaults[agent]).is_dir():
            where = f"{trained}: no such run folder" if not trained.is_dir() else f"{defaults[agent]}: no checkpoint"
            raise RunError(f"{where}; train first (coalign train {config_name} --run-dir {trained}) or give --{agent}")
    if planner and grounder:
        root, stage, what = trained / f"eval-{time.strftime('%Y%m%d-%H%M%S')}", "eval", "the given checkpoints"
    elif planner or grounder:
        given, other = ("planner", "grounder") if planner else ("grounder", "planner")
        root, stage = trained / f"eval-{time.strftime('%Y%m%d-%H%M%S')}", "eval"
        what = f"the given {given}, with {what}'s {other}"
    else:
        root, what = trained, f"{what} of a {recipe} run"
    planner, grounder = planner or defaults["planner"], grounder or defaults["grounder"]
    shown = [escape(_relative(path, trained)) for path in (planner, grounder)]
    with removed_if_failed(root):
        run = prepare_run(config, root, console, force, trains=False)
        console.print(f"[bold]evaluating[/bold] {what}: planner {shown[0]}, grounder {shown[1]}", highlight=False)
        return evaluate_run(run, config, planner, grounder, console, name=stage)


ROUND_EVALUATION = re.compile(r"round(\d+)_eval")


def trained_checkpoints(trained: Path, recipe: str) -> tuple[str, str, dict[str, str]]:
    """(stage, what it is, {agent: checkpoint}) of what a lumos or moat run folder trained last: the planner and
    grounder its last finished evaluation took, as its record names them (`Run.stage`'s `input_paths`), so a moat
    run is evaluated at its last finished round (`round{r}_eval`), whichever of its stages trained each agent (a
    round whose DPO kept no pair keeps the planner before it; a bench's rounds start from its seed's cold start in
    another folder). A lumos run's is its `eval`. Without a finished evaluation, the cold start's checkpoints."""
    found = ((ROUND_EVALUATION.fullmatch(p.stem), p) for p in trained.glob("stages/round*_eval.json"))
    rounds = {int(m[1]): p for m, p in found if m}
    marker = rounds[max(rounds)] if rounds else trained / "stages" / "eval.json"
    if not marker.is_file():
        cold = {agent: str(trained / "checkpoints" / f"{agent}_sft") for agent in ("planner", "grounder")}
        return ("round0_eval" if recipe == "moat" else "eval"), "the cold start", cold
    try:
        paths = read_json(marker)["input_paths"]
        planner, grounder = (str(trained / p) for p in paths)  # a record names a path outside the folder whole
    except (OSError, ValueError, KeyError, TypeError):
        raise RunError(
            f"{marker}: records no checkpoints it evaluated (a run from before they were recorded); give --planner "
            "and --grounder"
        ) from None
    what = f"round {max(rounds)}" if rounds and max(rounds) else "the cold start"
    return marker.stem, what, {"planner": planner, "grounder": grounder}


def _relative(path: str, folder: Path) -> str:
    """`path` as it is shown: relative to the run `folder` where inside it."""
    try:
        return str(Path(path).relative_to(folder))
    except ValueError:
        return path
