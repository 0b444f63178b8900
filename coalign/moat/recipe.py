"""MOAT: joint alignment tuning of a planning agent and a grounding agent (Algorithm 1).

    cold start: SFT planner and grounder on ground truth (the Agent Lumos recipe)
    for each round:
        stage 1  sample K subgoal sequences per task from the planner
                 score each by the grounder's NLL of the gold actions given it
                 pair lowest (chosen) with highest (rejected); drop small gaps
                 DPO the planner on the pairs (reference = planner before the stage), but those
                 of the tasks held aside (`moat.dpo_held_aside`), on which DPO is measured
        stage 2  the grounder writes actions for every (task, candidate)
                 a critic keeps successes and corrects failures (subgoals stay the candidate's,
                 or become the critic's corrected ones: `moat.critic_subgoals`)
                 SFT the grounder on that data mixed 1:1 with its initial data
        evaluate

Every stage works on units (`moat.units`): a onetime task (maths, QA) is one unit, its plan and
action sequence whole, as Algorithm 1 states it; a web task (Lumos's iterative formulation) gives
one unit per planner turn of its gold conversation: K next turns sampled against the gold prefix, each
scored by the grounder's NLL of that turn's gold actions in the grounder's gold prefix, paired per turn,
grounded per turn and judged per turn (`moat.turn_critic`; the LLM critic has no per-turn prompt and is
refused for rounds with web tasks). DPO and the grounder's SFT take every unit's data together.

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
from collections import defaultdict
from pathlib import Path

import torch
from rich.console import Console

from coalign.config import RunConfig
from coalign.config.moat import RETIRED_KEY
from coalign.core import ranks
from coalign.core.errors import RunError
from coalign.core.jsonl import read_jsonl
from coalign.core.runs import Run, read_json, value_digest, write_json, write_jsonl
from coalign.formats.answers import answer_correct
from coalign.formats.lumos import FormatError, format_subgoals, grounder_prompt, parse_subgoals
from coalign.moat.cold_start import check_models, cold_starts, train_agent
from coalign.moat.critic import CriticInput, Verdict, make_critic, verdict_counts
from coalign.moat.data import round_tasks, start_run
from coalign.moat.evaluate import evaluate_run
from coalign.moat.output_room import check_room
from coalign.moat.pairs import auc, held_aside, no_pair_advice, point_biserial, select_pairs, unpaired_counts
from coalign.moat.sample import sample_completions
from coalign.moat.scoring import score_completions
from coalign.moat.sft_data import grounder_data
from coalign.moat.turn_critic import judge_turn, judge_turns
from coalign.moat.units import Unit, round_units, turn_subgoal
from coalign.models.agents import Agent, generate
from coalign.models.load import load_tokenizer
from coalign.tasks import Task
from coalign.tasks.sources import refuse_in_rounds
from coalign.tools.executor import execute
from coalign.training.dpo import dpo
from coalign.training.setup import (
    generation_settings,
    inference_bf16,
    inference_dependencies,
    training_dependencies,
)


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


def _units(items) -> list[Unit]:
    """Units as given, a onetime Task taken as its unit (the stages' callers may pass onetime tasks)."""
    out = []
    for item in items:
        if isinstance(item, Task):
            if item.iterative:
                raise ValueError(f"task {item.id!r} is iterative: pass its units (moat.units.task_units)")
            item = Unit(item)
        out.append(item)
    return out


def _tasks(units: list[Unit]) -> list[Task]:
    """The distinct tasks of some units, in order."""
    return list({id(u.task): u.task for u in units}.values())


def _dependencies(config: RunConfig, fields: tuple[str, ...], **values) -> dict:
    """What a stage's output depends on besides its input files (recorded with it, `Run.stage`): the `moat`
    settings named in `fields`, and `values` (a seed, a digest of the prompts it was given)."""
    m = config.moat.model_dump(mode="json")
    return {**{f: m[f] for f in fields}, **values}


def _digest(units: list[Unit]) -> str:
    """A digest of what defines the units a stage works on: which they are, their prompts and gold actions."""
    return value_digest([[u.key, u.planner_prompt(), u.gold_actions()] for u in units])


def _generation(config: RunConfig) -> dict | None:
    """The generation settings a stage's output depends on: the backend's block, and bf16 where the run uses it
    (absent otherwise, so a run folder made before bf16 existed resumes)."""
    block = config.generation.model_dump(mode="json") if config.generation else None
    return {**(block or {}), **inference_dependencies(config)} or block


def _turn_info(units: list[Unit], info: dict, count) -> dict:
    """A stage record with, when the round has web turns, the same counts over its turns alone (`turns`)."""
    turns = [i for i, u in enumerate(units) if u.turn is not None]
    return {**info, "turns": count(turns)} if turns else info


def sample_stage(run: Run, r: int, config: RunConfig, planner: str, units: list[Unit]) -> list[list[str]]:
    """Stage 1a: K candidate planner outputs per unit (a onetime task's plan, or a web task's next turn)."""
    units = _units(units)
    path, m = _file(run, r, "candidates.jsonl"), config.moat

    def sample() -> dict:
        torch.manual_seed(config.seed * 1000 + r)
        agent = Agent.load(
            planner, config.models.trust_remote_code, generation_settings(config), "planner", inference_bf16(config)
        )
        prompts = [u.planner_prompt() for u in units]
        candidates = sample_completions(
            agent, prompts, m.k, m.temperature, m.top_p, m.max_new_tokens_plan, m.batch_size
        )
        write_jsonl(path, [{**u.key, "candidates": c} for u, c in zip(units, candidates)])
        return _turn_info(units, {"tasks": len(_tasks(units)), "k": m.k}, len)

    depends_on = _dependencies(
        config, ("k", "temperature", "top_p", "max_new_tokens_plan"), seed=config.seed,
        generation=_generation(config), units=_digest(units),
    )  # fmt: skip
    run.stage(f"round{r}_sample", sample, [path], inputs=[planner], depends_on=depends_on)
    return [row["candidates"] for row in _rows(path)]


def score_stage(run: Run, r: int, config: RunConfig, grounder: str, units, candidates) -> list[list[dict]]:
    """Stage 1b: the grounder's NLL of each unit's gold actions given each candidate (for a web turn: given
    the grounder's gold conversation before the turn and the candidate's subgoal)."""
    units = _units(units)
    path = _file(run, r, "scores.jsonl")

    def score() -> dict:
        users, completions = [], []
        for unit, cands in zip(units, candidates):
            gold = unit.gold_actions()
            for cand in cands:
                users.append(unit.grounder_prompt(cand))
                completions.append(gold)
        agent = Agent.load(grounder, config.models.trust_remote_code, bf16=inference_bf16(config))
        scores = score_completions(
            agent, users, completions, config.moat.batch_size, share_prefix=config.moat.share_prefix
        )
        k = config.moat.k
        rows = [
            {
                **u.key,
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
            for i, u in enumerate(units)
        ]
        write_jsonl(path, rows)
        return {"scored": len(scores)}

    inputs = [grounder, _file(run, r, "candidates.jsonl")]
    depends_on = _dependencies(config, ("k",), units=_digest(units), **inference_dependencies(config))
    run.stage(f"round{r}_score", score, [path], inputs=inputs, depends_on=depends_on)
    return [row["scores"] for row in _rows(path)]


def pair_stage(run: Run, r: int, config: RunConfig, units, candidates, scores) -> list[dict]:
    """Stage 1c: chosen = lowest NLL, rejected = highest (`moat.pairs_per_task` > 1: then the best and worst of
    the rest, ...); pairs under the gap threshold dropped. A web turn's pair has the planner's gold conversation
    so far as its prompt."""
    units = _units(units)
    path, m = _file(run, r, "pairs.jsonl"), config.moat
    n = m.pairs_per_task

    def pair() -> dict:
        rows, values = [], [[s[m.score_reduction] for s in unit_scores] for unit_scores in scores]
        paired = []
        for unit, cands, unit_values in zip(units, candidates, values):
            pairs = [] if None in unit_values else select_pairs(unit_values, n, m.pair_threshold, m.pair_gap_on)
            paired.append(len(pairs))
            prompt = unit.planner_prompt()
            rows += [
                {
                    **unit.key,
                    "prompt": prompt if isinstance(prompt, str) else list(prompt),
                    "chosen": cands[pair.chosen],
                    "rejected": cands[pair.rejected],
                    "gap": pair.gap,
                }
                for pair in pairs
            ]
        write_jsonl(path, rows)

        def counts(of: list[int]) -> dict:
            kept = sum(bool(paired[i]) for i in of)  # units with a pair
            return {
                "pairs": sum(paired[i] for i in of),
                "kept_fraction": kept / max(1, len(of)),
                **unpaired_counts([values[i] for i in of], kept),
            }

        return _turn_info(units, counts(list(range(len(units)))), counts)

    inputs = [_file(run, r, "candidates.jsonl"), _file(run, r, "scores.jsonl")]
    more = {"pairs_per_task": n} if n > 1 else {}  # absent at the paper's one, as in run folders made before it
    depends_on = _dependencies(
        config, ("score_reduction", "pair_threshold", "pair_gap_on"), units=_digest(units), **more
    )
    run.stage(f"round{r}_pairs", pair, [path], inputs=inputs, depends_on=depends_on)
    return _rows(path)


def _triple(pair: dict) -> tuple:
    """A pair row as DPO takes it: (prompt, chosen, rejected), a web turn's conversation as a tuple."""
    prompt = pair["prompt"]
    return prompt if isinstance(prompt, str) else tuple(prompt), pair["chosen"], pair["rejected"]


def dpo_stage(
    run: Run,
    r: int,
    config: RunConfig,
    planner: str,
    pairs: list[dict],
    console: Console,
    aside: frozenset[str] = frozenset(),
) -> str:
    """Stage 1d: DPO the planner on every pair (onetime plans and web turns together) but those of the tasks
    held `aside` (`pairs.held_aside`), which measure it: the record's `eval` holds the trained planner's DPO loss,
    reward margin and accuracy on them (`training.dpo.HELD_ASIDE`). With no pair left, the planner is kept."""
    stage, out = f"round{r}_dpo", run.path("checkpoints", f"round{r}_planner")
    trained = [p for p in pairs if p["id"] not in aside]
    held = [p for p in pairs if p["id"] in aside]
    measured = {"held_aside_tasks": len(aside), "held_aside_pairs": len(held)} if aside else {}

    def train() -> dict:
        if not trained:
            m = config.moat
            advice = (
                f"every pair's task is held aside (moat.dpo_held_aside={m.dpo_held_aside:g})"
                if pairs
                else no_pair_advice(run.stage_info(f"round{r}_pairs"), m.pair_threshold, m.pair_gap_on)
            )
            console.print(f"[yellow]round {r} stage 1: {advice}; DPO skipped, planner unchanged[/yellow]")
            return {"pairs": 0, "path": planner, "skipped": advice, **measured}
        aside_note = f", {len(held)} held aside" if aside else ""
        console.print(f"[bold]round {r} stage 1[/bold]: DPO on {len(trained)} pairs{aside_note}")
        dpo(
            planner,
            [_triple(p) for p in trained],
            out,
            config.planner_dpo,
            config.seed,
            trust_remote_code=config.models.trust_remote_code,
            lora=config.lora,
            key="planner_dpo",
            held_aside=[_triple(p) for p in held],
        )
        return {"pairs": len(trained), "path": str(out), **read_json(out / "train_log.json"), **measured}

    inputs = [planner, _file(run, r, "pairs.jsonl")]
    depends_on = training_dependencies(config.planner_dpo, config.seed, config.lora, trained)
    if aside:  # absent without, as in run folders made before held-aside pairs
        depends_on["held_aside"] = value_digest(held)
    run.stage(stage, train, [out] if trained else [], inputs=inputs, depends_on=depends_on)
    return str(out) if run.stage_info(stage)["pairs"] else planner


def grounding_stage(run: Run, r: int, config: RunConfig, grounder: str, units, candidates) -> list[list[str]]:
    """Stage 2a: the grounder's actions for every (unit, candidate); a web turn's in its gold conversation."""
    units = _units(units)
    path, m = _file(run, r, "groundings.jsonl"), config.moat

    def ground() -> dict:
        torch.manual_seed(config.seed * 1000 + 500 + r)
        users = [u.grounder_prompt(c) for u, cands in zip(units, candidates) for c in cands]
        outs = generate(
            Agent.load(
                grounder,
                config.models.trust_remote_code,
                generation_settings(config),
                "grounder",
                inference_bf16(config),
            ),
            users,
            m.max_new_tokens_ground,
            m.batch_size,
            temperature=m.ground_temperature,
            top_p=m.ground_top_p,
            desc="grounding every candidate",
        )
        flat = [o[0] for o in outs]
        write_jsonl(path, [{**u.key, "actions": flat[i * m.k : (i + 1) * m.k]} for i, u in enumerate(units)])
        return {"groundings": len(flat)}

    depends_on = _dependencies(
        config, ("max_new_tokens_ground", "ground_temperature", "ground_top_p"), seed=config.seed,
        generation=_generation(config), units=_digest(units),
    )  # fmt: skip
    inputs = [grounder, _file(run, r, "candidates.jsonl")]
    run.stage(f"round{r}_ground", ground, [path], inputs=inputs, depends_on=depends_on)
    return [row["actions"] for row in _rows(path)]


def critic_stage(run: Run, r: int, config: RunConfig, units, candidates, groundings) -> list[dict]:
    """Stage 2b: the critic's verdict on each grounding (kept, corrected or dropped). Onetime groundings go
    to the configured critic (`moat.critic`), web turns to the per-turn one (`moat.turn_critic`). A row's
    subgoals are the candidate's, or under `moat.critic_subgoals: corrected` a correction's own (the record's
    `corrected_subgoals` counts the rows stage 2 trains with those)."""
    units = _units(units)
    path, m = _file(run, r, "verdicts.jsonl"), config.moat
    corrected = m.critic_subgoals == "corrected"

    def takes(verdict: Verdict) -> bool:
        """Whether the row's subgoals are the critic's."""
        return corrected and bool(verdict.corrected_subgoals)

    def subgoals(candidate: list[str], verdict: Verdict) -> list[str]:
        return list(verdict.corrected_subgoals) if takes(verdict) else candidate

    def counts(verdicts: list[Verdict]) -> dict:
        return {**verdict_counts(verdicts), "corrected_subgoals": sum(bool(v.actions) and takes(v) for v in verdicts)}

    def judge() -> dict:
        critic = make_critic(m.critic, **m.critic_options)
        onetime = [
            (unit, c, a)
            for unit, cands, acts in zip(units, candidates, groundings)
            for c, a in zip(cands, acts)
            if unit.turn is None
        ]
        turns = [
            (unit, c, a)
            for unit, cands, acts in zip(units, candidates, groundings)
            for c, a in zip(cands, acts)
            if unit.turn is not None
        ]
        items = [CriticInput(task=unit.task, subgoals=_subgoals(c), actions=a) for unit, c, a in onetime]
        verdicts = ranks.share_all(critic.judge, items)  # each rank judges a share
        rows = [
            {
                "id": item.task.id,
                "subgoals": subgoals(list(item.subgoals), v),
                "generated": item.actions,
                "success": v.success,
                "actions": v.actions,
                "note": v.note,
            }
            for item, v in zip(items, verdicts)
        ]
        turn_verdicts = judge_turns(m.critic, [(unit.task, unit.turn, a) for unit, _, a in turns]) if turns else []
        turn_rows = [
            {
                **unit.key,
                "subgoals": subgoals([turn_subgoal(c)], v),
                "generated": a,
                "success": v.success,
                "actions": v.actions,
                "note": v.note,
            }
            for (unit, c, a), v in zip(turns, turn_verdicts)
        ]
        ordered, sources = [], {True: iter(rows), False: iter(turn_rows)}  # unit order, K verdicts each
        for unit, cands in zip(units, candidates):
            ordered += [next(sources[unit.turn is None]) for _ in cands]
        write_jsonl(path, ordered)
        stats = ranks.summed(getattr(critic, "stats", {}))  # calls, retries, failures: every rank's
        info = {**counts(verdicts + turn_verdicts), "critic": critic.name, **stats}
        if turn_verdicts:
            info["turns"] = counts(turn_verdicts)
        if ordered and not info["usable"]:  # not marked done: a rerun asks the critic again
            raise RunError(
                f"round {r} stage 2: the {critic.name} critic gave no verdict to train on ({info}). "
                f"Check the critic (its server at critic_options.base_url, the key named by api_key_env) "
                f"or raise its budget (max_calls, max_seconds); each item's note is in {path}"
            )
        return info

    inputs = [_file(run, r, "candidates.jsonl"), _file(run, r, "groundings.jsonl")]
    # `original` is recorded as run folders made before `critic_subgoals` record it (same rows): they resume
    mode = {"critic_subgoals": m.critic_subgoals} if corrected else {RETIRED_KEY: False}
    depends_on = _dependencies(config, ("critic", "critic_options"), units=_digest(units), **mode)
    run.stage(f"round{r}_critic", judge, [path], inputs=inputs, depends_on=depends_on)
    return _rows(path)


def _critic_example(verdict: dict, units: dict, tasks: dict):
    """The SFT example a verdict row gives: (grounder prompt with the row's subgoals, kept or corrected
    actions); for a web turn the prompt is the grounder's gold conversation before the turn and the subgoal."""
    if "turn" in verdict:
        return units[verdict["id"], verdict["turn"]].grounder_prompt_for(verdict["subgoals"][0]), verdict["actions"]
    task = tasks[verdict["id"]]
    return grounder_prompt(task.question, format_subgoals(verdict["subgoals"]), task.family), verdict["actions"]


def grounder_sft_stage(
    run: Run, r: int, config: RunConfig, grounder: str, units, verdicts, initial: list, console: Console
) -> str:
    """Stage 2c: SFT the grounder on critic-built data mixed with its initial data (`initial` examples)."""
    units = _units(units)
    tasks = {u.task.id: u.task for u in units}
    by_turn = {(u.task.id, u.turn): u for u in units if u.turn is not None}
    built = [_critic_example(v, by_turn, tasks) for v in verdicts if v["actions"]]
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
        trust_remote_code=config.models.trust_remote_code, lora=config.lora, key="grounder_round_sft",
    )  # fmt: skip


def _premise(nll: list[float], success: list[bool]) -> dict:
    return {
        "candidates": len(nll),
        "grounding_success_rate": sum(success) / max(1, len(success)),
        "nll_success_point_biserial": point_biserial(nll, success),
        "nll_success_auc": auc(nll, success),
    }


def round_premise(units, scores, groundings, reduction: str) -> dict:
    """Does a candidate's grounder NLL predict whether its grounding succeeds? (never measured in the paper)

    Success is the execution critic's judgement: a onetime grounding reaches the right answer, a web turn's
    grounding is right by `turn_critic.judge_turn` (a site's step, the shop's turn result).
    With several task families, also per family (`by_family`): NLL levels and success rates differ
    between families, so the pooled figures can show a link that none of the families has.
    """
    units = _units(units)
    nll: dict[str, list[float]] = defaultdict(list)
    success: dict[str, list[bool]] = defaultdict(list)
    for unit, unit_scores, acts in zip(units, scores, groundings):
        task = unit.task
        for s, a in zip(unit_scores, acts):
            if s[reduction] is None:  # the content reduction of a task without tool arguments
                continue
            nll[task.family].append(s[reduction])
            if unit.turn is None:
                ok = answer_correct(execute(a, task.family).answer, task.answer, task.family, task.dataset)
            else:
                ok = judge_turn(task, unit.turn, a).success
            success[task.family].append(ok)
    pooled = _premise([x for v in nll.values() for x in v], [x for v in success.values() for x in v])
    if len(nll) > 1:
        pooled["by_family"] = {f: _premise(nll[f], success[f]) for f in sorted(nll)}
    return pooled


def run_moat(config: RunConfig, run_dir: str | Path, console: Console, force: bool = False) -> dict:
    """Cold start, then `config.moat.rounds` rounds of stage 1 and stage 2, evaluating after each
    (`force`: resume even if the run folder's config differs)."""
    check_models(config)

    def refuse(train: list[Task]) -> None:  # before the run folder is made (`start_run`)
        refuse_in_rounds(train, "MOAT rounds")
        refuse_llm_critic_on_turns(config, train)

    run, train = start_run(config, run_dir, console, force, refuse)
    planner, grounder, round0 = cold_starts({"": (config, run.root)}, train, 1, console)[""]
    return moat_rounds(run, config, train, planner, grounder, round0, console)


def refuse_llm_critic_on_turns(config: RunConfig, train: list[Task]) -> None:
    """RunError before any work when an LLM critic would have to judge web turns (`turn_critic`)."""
    m = config.moat
    if m.stage2 and m.critic == "llm" and any(t.iterative for t in round_tasks(config, train)):
        raise RunError(
            "moat.critic llm cannot judge web turns (its prompt judges whole action sequences against a final "
            "answer); use moat.critic: execution or none for runs with web tasks"
        )


def moat_rounds(
    run: Run, config: RunConfig, train: list[Task], planner: str, grounder: str, round0: dict, console: Console
) -> dict:
    """Algorithm 1's loop from cold-start checkpoints; returns the evaluation after every round.
    A onetime task is one unit of every stage, a web task one unit per planner turn (`moat.units`)."""
    refuse_llm_critic_on_turns(config, train)
    history = {"round0": round0}
    m = config.moat
    units = round_units(round_tasks(config, train), m.web_turns_per_task, config.seed)
    aside = held_aside((u.task.id for u in units), m.dpo_held_aside, config.seed)
    initial = grounder_data(config, train)
    tokenizers = tuple(load_tokenizer(path, config.models.trust_remote_code) for path in (planner, grounder))
    check_room(console, "MOAT rounds", _tasks(units), tokenizers, m, "moat")
    for r in range(1, m.rounds + 1):
        candidates = sample_stage(run, r, config, planner, units)
        scores = score_stage(run, r, config, grounder, units, candidates)
        premise: dict = {}
        if m.stage1:
            pairs = pair_stage(run, r, config, units, candidates, scores)
            new_planner = dpo_stage(run, r, config, planner, pairs, console, aside)
        else:
            new_planner = planner
        if m.stage2:
            groundings = grounding_stage(run, r, config, grounder, units, candidates)
            premise = round_premise(units, scores, groundings, m.score_reduction)
            verdicts = critic_stage(run, r, config, units, candidates, groundings)
            grounder = grounder_sft_stage(run, r, config, grounder, units, verdicts, initial, console)
        planner = new_planner
        history[f"round{r}"] = evaluate_run(run, config, planner, grounder, console, name=f"round{r}_eval")
        write_json(run.path(f"round{r}", "premise.json"), premise)
    write_json(run.path("rounds.json"), history)
    return history
