"""MOAT: joint alignment tuning of a planning agent and a grounding agent (Algorithm 1).

    cold start: SFT planner and grounder on ground truth (the Agent Lumos recipe)
    for each round:
        stage 1  sample K subgoal sequences per task from the planner
                 score each by the grounder's NLL of the gold actions given it
                 pair lowest (chosen) with highest (rejected); drop small gaps
                 DPO the planner on the pairs (reference = planner before the stage)
        stage 2  the grounder writes actions for every (task, candidate)
                 a critic keeps successes and corrects failures (subgoals stay the candidate's)
                 SFT the grounder on that data mixed 1:1 with its initial data
        evaluate

Every step writes its artifact into the run folder before it is marked done, so a killed run
resumes at the first unfinished step. `moat.stage1` / `moat.stage2` / `moat.critic: none` give
the paper's ablations from the same config.

Degenerate rounds are defined, not crashes: a round whose stage 1 keeps no pair (all K scores equal,
or every gap under the threshold) skips DPO with a warning and the reasons in its `pairs` record; a
critic stage with no verdict to train on (e.g. every LLM critic call failed) stops the run with the
failure counts, since an unchanged grounder would pass for a trained one.
"""

from __future__ import annotations

import random
import time
from collections import defaultdict
from pathlib import Path

import torch
from rich.console import Console

from coalign.agents import Agent, generate
from coalign.config import RunConfig
from coalign.errors import RunError
from coalign.formats import FormatError, format_subgoals, grounder_prompt, parse_subgoals, planner_prompt
from coalign.metrics import answer_correct
from coalign.recipes.lumos import (
    cold_start,
    evaluate_run,
    grounder_data,
    grounder_pair,
    load_split,
    prepare_run,
    round_tasks,
    train_agent,
)
from coalign.runs import Run, read_json, write_json, write_jsonl
from coalign.stages.critic import CriticInput, make_critic, verdict_counts
from coalign.stages.dpo import dpo
from coalign.stages.pairs import auc, no_pair_advice, point_biserial, select_pair, unpaired_counts
from coalign.stages.sample import sample_candidates
from coalign.stages.score import score_completions
from coalign.tasks import Task
from coalign.tasks.jsonl import read_jsonl
from coalign.tasks.sources import refuse_in_rounds
from coalign.tools.executor import execute


def _rows(path: Path) -> list[dict]:
    return [row for _, row in read_jsonl(path)]


def _file(run: Run, r: int, name: str) -> Path:
    """A round's artifact: round{r}/name."""
    return run.path(f"round{r}", name)


def _subgoals(text: str) -> tuple[str, ...]:
    """A candidate's subgoals; a malformed candidate is kept whole as one subgoal."""
    try:
        return tuple(parse_subgoals(text))
    except FormatError:
        return (text,)


def sample_stage(run: Run, r: int, config: RunConfig, planner: str, tasks: list[Task]) -> list[list[str]]:
    """Stage 1a: K candidate subgoal texts per task."""
    stage, path = f"round{r}_sample", _file(run, r, "candidates.jsonl")
    if not run.is_done(stage):
        started, m = time.time(), config.moat
        torch.manual_seed(config.seed * 1000 + r)
        agent = Agent.load(planner, config.models.trust_remote_code)
        candidates = sample_candidates(agent, tasks, m.k, m.temperature, m.top_p, m.max_new_tokens_plan, m.batch_size)
        write_jsonl(path, [{"id": t.id, "candidates": c} for t, c in zip(tasks, candidates)])
        run.mark_done(stage, [path], {"tasks": len(tasks), "k": m.k}, started, inputs=[planner])
    return [row["candidates"] for row in _rows(path)]


def score_stage(run: Run, r: int, config: RunConfig, grounder: str, tasks, candidates) -> list[list[dict]]:
    """Stage 1b: the grounder's NLL of each task's gold actions given each candidate."""
    stage, path = f"round{r}_score", _file(run, r, "scores.jsonl")
    if not run.is_done(stage):
        started = time.time()
        users, completions = [], []
        for task, cands in zip(tasks, candidates):
            gold = grounder_pair(task)[1]
            for cand in cands:
                users.append(grounder_prompt(task.question, cand, task.family))
                completions.append(gold)
        agent = Agent.load(grounder, config.models.trust_remote_code)
        scores = score_completions(
            agent, users, completions, config.moat.batch_size, share_prefix=config.moat.share_prefix
        )
        k = config.moat.k
        rows = [
            {
                "id": t.id,
                "scores": [
                    {
                        "mean": s.value("mean"),
                        "content": s.value("content") if s.n_content else None,  # no tool argument
                        "sum": s.value("sum"),
                        "tokens": s.n_tokens,
                    }
                    for s in scores[i * k : (i + 1) * k]
                ],
            }
            for i, t in enumerate(tasks)
        ]
        write_jsonl(path, rows)
        run.mark_done(
            stage, [path], {"scored": len(scores)}, started, inputs=[grounder, _file(run, r, "candidates.jsonl")]
        )
    return [row["scores"] for row in _rows(path)]


def pair_stage(run: Run, r: int, config: RunConfig, tasks, candidates, scores) -> list[dict]:
    """Stage 1c: chosen = lowest NLL, rejected = highest; pairs under the gap threshold dropped."""
    stage, path = f"round{r}_pairs", _file(run, r, "pairs.jsonl")
    if not run.is_done(stage):
        started, m = time.time(), config.moat
        rows, values = [], [[s[m.score_reduction] for s in task_scores] for task_scores in scores]
        for task, cands, task_values in zip(tasks, candidates, values):
            pair = None if None in task_values else select_pair(task_values, m.pair_threshold, m.pair_gap_on)
            if pair is not None:
                rows.append(
                    {
                        "id": task.id,
                        "prompt": planner_prompt(task.question),
                        "chosen": cands[pair.chosen],
                        "rejected": cands[pair.rejected],
                        "gap": pair.gap,
                    }
                )
        write_jsonl(path, rows)
        info = {
            "pairs": len(rows),
            "kept_fraction": len(rows) / max(1, len(tasks)),
            **unpaired_counts(values, len(rows)),
        }
        inputs = [_file(run, r, "candidates.jsonl"), _file(run, r, "scores.jsonl")]
        run.mark_done(stage, [path], info, started, inputs=inputs)
    return _rows(path)


def dpo_stage(run: Run, r: int, config: RunConfig, planner: str, pairs: list[dict], console: Console) -> str:
    """Stage 1d: DPO the planner; with no pair left, the planner is kept as it is."""
    stage, out = f"round{r}_dpo", run.path("checkpoints", f"round{r}_planner")
    inputs = [planner, _file(run, r, "pairs.jsonl")]
    if not run.is_done(stage):
        started = time.time()
        if not pairs:
            m = config.moat
            advice = no_pair_advice(run.stage_info(f"round{r}_pairs"), m.pair_threshold, m.pair_gap_on)
            console.print(f"[yellow]round {r} stage 1: {advice}; DPO skipped, planner unchanged[/yellow]")
            run.mark_done(stage, [], {"pairs": 0, "path": planner, "skipped": advice}, started, inputs=inputs)
        else:
            console.print(f"[bold]round {r} stage 1[/bold]: DPO on {len(pairs)} pairs")
            dpo(
                planner,
                [(p["prompt"], p["chosen"], p["rejected"]) for p in pairs],
                out,
                config.planner_dpo,
                config.seed,
                trust_remote_code=config.models.trust_remote_code,
            )
            info = {"pairs": len(pairs), "path": str(out), **read_json(out / "train_log.json")}
            run.mark_done(stage, [out], info, started, inputs=inputs)
    return str(out) if run.stage_info(stage)["pairs"] else planner


def ground_stage(run: Run, r: int, config: RunConfig, grounder: str, tasks, candidates) -> list[list[str]]:
    """Stage 2a: the grounder's actions for every (task, candidate)."""
    stage, path = f"round{r}_ground", _file(run, r, "groundings.jsonl")
    if not run.is_done(stage):
        started, m = time.time(), config.moat
        torch.manual_seed(config.seed * 1000 + 500 + r)
        users = [grounder_prompt(t.question, c, t.family) for t, cands in zip(tasks, candidates) for c in cands]
        outs = generate(
            Agent.load(grounder, config.models.trust_remote_code),
            users,
            m.max_new_tokens_ground,
            m.batch_size,
            temperature=m.ground_temperature,
            top_p=m.ground_top_p,
            desc="grounding every candidate",
        )
        flat = [o[0] for o in outs]
        write_jsonl(path, [{"id": t.id, "actions": flat[i * m.k : (i + 1) * m.k]} for i, t in enumerate(tasks)])
        inputs = [grounder, _file(run, r, "candidates.jsonl")]
        run.mark_done(stage, [path], {"groundings": len(flat)}, started, inputs=inputs)
    return [row["actions"] for row in _rows(path)]


def critic_stage(run: Run, r: int, config: RunConfig, tasks, candidates, groundings) -> list[dict]:
    """Stage 2b: the critic's verdict on each grounding (kept, corrected or dropped)."""
    stage, path = f"round{r}_critic", _file(run, r, "verdicts.jsonl")
    if not run.is_done(stage):
        started = time.time()
        critic = make_critic(config.moat.critic, **config.moat.critic_options)
        items = [
            CriticInput(task=t, subgoals=_subgoals(c), actions=a)
            for t, cands, acts in zip(tasks, candidates, groundings)
            for c, a in zip(cands, acts)
        ]
        verdicts = critic.judge(items)
        rows = [
            {
                "id": item.task.id,
                "subgoals": list(v.corrected_subgoals or item.subgoals)
                if config.moat.use_corrected_subgoals
                else list(item.subgoals),
                "generated": item.actions,
                "success": v.success,
                "actions": v.actions,
                "note": v.note,
            }
            for item, v in zip(items, verdicts)
        ]
        write_jsonl(path, rows)
        info = {**verdict_counts(verdicts), "critic": critic.name, **getattr(critic, "stats", {})}
        if verdicts and not info["usable"]:  # not marked done: a rerun asks the critic again
            raise RunError(
                f"round {r} stage 2: the {critic.name} critic gave no verdict to train on ({info}). "
                f"Check the critic (its server at critic_options.base_url, the key named by api_key_env) "
                f"or raise its budget (max_calls, max_seconds); each item's note is in {path}"
            )
        inputs = [_file(run, r, "candidates.jsonl"), _file(run, r, "groundings.jsonl")]
        run.mark_done(stage, [path], info, started, inputs=inputs)
    return _rows(path)


def grounder_stage(
    run: Run, r: int, config: RunConfig, grounder: str, tasks, verdicts, initial: list, console: Console
) -> str:
    """Stage 2c: SFT the grounder on critic-built data mixed with its initial data (`initial` examples)."""
    by_id = {t.id: t for t in tasks}
    built = [
        (grounder_prompt(by_id[v["id"]].question, format_subgoals(v["subgoals"]), by_id[v["id"]].family), v["actions"])
        for v in verdicts
        if v["actions"]
    ]
    rng = random.Random(config.seed * 1000 + r)
    n_initial = min(len(initial), round(len(built) * config.moat.mix_ratio))
    examples = built + rng.sample(initial, n_initial)
    rng.shuffle(examples)
    if not any(v["success"] for v in verdicts):
        console.print(
            f"[yellow]round {r} stage 2: the critic accepted no grounding; training on corrections only[/yellow]"
        )
    console.print(f"[bold]round {r} stage 2[/bold]: {len(built)} critic-built + {n_initial} initial examples")
    settings, verdicts_path = config.grounder_round_sft, _file(run, r, "verdicts.jsonl")
    return train_agent(
        run, f"round{r}_grounder_sft", grounder, examples, settings, config.seed, console, inputs=[verdicts_path],
        trust_remote_code=config.models.trust_remote_code,
    )  # fmt: skip


def _premise(nll: list[float], success: list[bool]) -> dict:
    return {
        "candidates": len(nll),
        "grounding_success_rate": sum(success) / max(1, len(success)),
        "nll_success_point_biserial": point_biserial(nll, success),
        "nll_success_auc": auc(nll, success),
    }


def round_premise(tasks, scores, groundings, reduction: str) -> dict:
    """Does a candidate's grounder NLL predict whether its grounding succeeds? (never measured in the paper)

    With several task families, also per family (`by_family`): NLL levels and success rates differ
    between families, so the pooled figures can show a link that none of the families has.
    """
    nll: dict[str, list[float]] = defaultdict(list)
    success: dict[str, list[bool]] = defaultdict(list)
    for task, task_scores, acts in zip(tasks, scores, groundings):
        for s, a in zip(task_scores, acts):
            if s[reduction] is None:  # the content reduction of a task without tool arguments
                continue
            nll[task.family].append(s[reduction])
            ok = answer_correct(execute(a, task.family).answer, task.answer, task.family, task.dataset)
            success[task.family].append(ok)
    pooled = _premise([x for v in nll.values() for x in v], [x for v in success.values() for x in v])
    if len(nll) > 1:
        pooled["by_family"] = {f: _premise(nll[f], success[f]) for f in sorted(nll)}
    return pooled


def run_moat(config: RunConfig, run_dir: str | Path, console: Console, force: bool = False) -> dict:
    """Cold start, then `config.moat.rounds` rounds of stage 1 and stage 2, evaluating after each
    (`force`: resume even if the run folder's config differs)."""
    run = prepare_run(config, run_dir, console, force)
    train = load_split(run, config, config.data.train, "train", console)
    refuse_in_rounds(train, "MOAT rounds")
    planner, grounder = cold_start(run, config, train, console)
    round0 = evaluate_run(run, config, planner, grounder, console, name="round0_eval")
    return moat_rounds(run, config, train, planner, grounder, round0, console)


def moat_rounds(
    run: Run, config: RunConfig, train: list[Task], planner: str, grounder: str, round0: dict, console: Console
) -> dict:
    """Algorithm 1's loop from cold-start checkpoints; returns the evaluation after every round."""
    history = {"round0": round0}
    tasks = round_tasks(config, train)
    initial = grounder_data(config, train)
    m = config.moat
    for r in range(1, m.rounds + 1):
        candidates = sample_stage(run, r, config, planner, tasks)
        scores = score_stage(run, r, config, grounder, tasks, candidates)
        premise: dict = {}
        if m.stage1:
            pairs = pair_stage(run, r, config, tasks, candidates, scores)
            new_planner = dpo_stage(run, r, config, planner, pairs, console)
        else:
            new_planner = planner
        if m.stage2:
            groundings = ground_stage(run, r, config, grounder, tasks, candidates)
            premise = round_premise(tasks, scores, groundings, m.score_reduction)
            verdicts = critic_stage(run, r, config, tasks, candidates, groundings)
            grounder = grounder_stage(run, r, config, grounder, tasks, verdicts, initial, console)
        planner = new_planner
        history[f"round{r}"] = evaluate_run(run, config, planner, grounder, console, name=f"round{r}_eval")
        write_json(run.path(f"round{r}", "premise.json"), premise)
    write_json(run.path("rounds.json"), history)
    return history
