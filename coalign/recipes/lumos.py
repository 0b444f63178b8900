"""The Agent Lumos recipe: planner and grounder fine-tuned independently on ground truth.

This is MOAT's cold start and its baseline. Read top to bottom: make or load the initial
models, SFT the planner on gold subgoals, SFT the grounder on gold actions, evaluate.
Each stage leaves its output in the run folder and is skipped when already finished.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import torch
from rich.console import Console

from coalign.agents import Agent, grounder_example, planner_example
from coalign.config import RunConfig, config_changes, config_to_yaml
from coalign.evaluate import evaluate_tasks, family_summaries, set_family, split_summary
from coalign.formats import lumos_chat, lumos_generation_prompt
from coalign.formats_iterative import turn_examples
from coalign.models import make_tiny_model
from coalign.recipes.units import round_units
from coalign.runs import Run, atomic_dir, atomic_write_text, read_json, write_json, write_jsonl
from coalign.stages.sft import sft
from coalign.tasks import Task
from coalign.tasks.episodes import grounder_conversation, planner_conversation
from coalign.tasks.plan_following import plan_following
from coalign.tasks.sources import load_data, report_skipped, source_name


def record_config(run: Run, config: RunConfig, force: bool = False) -> None:
    """Save the run's config. A run folder holding a different one is refused, naming the keys that differ,
    unless `force`: then the old config is kept in `config.history/` and finished stages stay finished."""
    text, saved = config_to_yaml(config), run.path("config.yaml")
    old = saved.read_text() if saved.exists() else None
    if old == text:
        return
    changes = config_changes(old, text) if old is not None else []
    if changes and not force:
        listed = "".join(f"\n  {line}" for line in changes)
        raise SystemExit(
            f"{saved} holds a different config:{listed}\n"
            "resume with the same config, use a new --run-dir, or pass --force to go on with the new config"
            " (finished stages are kept)"
        )
    if changes:
        history = run.path("config.history")
        n = len(list(history.glob("*.yaml"))) + 1 if history.exists() else 1
        header = f"# replaced by a forced resume on {time.strftime('%Y-%m-%dT%H:%M:%S')}; changed:\n"
        atomic_write_text(history / f"{n:03d}.yaml", header + "".join(f"#   {c}\n" for c in changes) + old)
    atomic_write_text(saved, text)


def prepare_run(config: RunConfig, run_dir: str | Path, console: Console, force: bool = False) -> Run:
    """Open the run folder and record its config (see `record_config` for a changed one)."""
    run = Run(run_dir)
    record_config(run, config, force)
    if config.threads:
        torch.set_num_threads(config.threads)
    console.print(f"[bold]run folder[/bold] {run.root}")
    return run


def initial_models(run: Run, config: RunConfig, train: list[Task], console: Console) -> tuple[str, str]:
    """Paths of the planner's and grounder's starting checkpoints; `tiny` ones are made here."""
    models = config.models
    tiny_dir = run.path("models", "tiny-init")

    def make() -> dict:
        console.print("making a tiny model: BPE tokenizer on the training text, small Llama config")
        texts = [text for t in train for text in tokenizer_texts(t)]
        with atomic_dir(tiny_dir) as tmp:
            make_tiny_model(texts, tmp, models.tiny, seed=config.seed)
        return {"path": str(tiny_dir)}

    if "tiny" in (models.planner, models.grounder):
        run.stage("init", make, [tiny_dir])
    return tuple(str(tiny_dir) if name == "tiny" else name for name in (models.planner, models.grounder))


def planner_pair(task: Task) -> tuple[str, str]:
    """A onetime task's planner example: (user turn, the whole plan)."""
    return planner_example(task.question, task.subgoals)


def grounder_pair(task: Task) -> tuple[str, str]:
    """A onetime task's grounder example: (user turn with the whole plan, all actions)."""
    return grounder_example(task.question, task.subgoals, task.actions, task.family)


# An SFT example: (prompt, completion); the prompt is one user turn (onetime) or the conversation so far
# (iterative), rendered by `models.render_prompt` alike at training and generation time.
Example = tuple[str | tuple[dict[str, str], ...], str]


def planner_examples(task: Task) -> list[Example]:
    """The planner's SFT examples of a task, by its formulation: one (onetime) or one per planner turn
    (iterative: `formats_iterative.turn_examples`, Lumos's whole-conversation loss as per-turn rows)."""
    return turn_examples(planner_conversation(task)) if task.iterative else [planner_pair(task)]


def grounder_examples(task: Task) -> list[Example]:
    """The grounder's SFT examples of a task, by its formulation: one, or one per grounder turn."""
    return turn_examples(grounder_conversation(task)) if task.iterative else [grounder_pair(task)]


def tokenizer_texts(task: Task) -> list[str]:
    """The text a tiny tokenizer learns from for a task: each agent's example (onetime), or each agent's
    whole gold conversation once (iterative), serialised Lumos's way."""
    if task.iterative:
        return [lumos_chat(planner_conversation(task)), lumos_chat(grounder_conversation(task))]
    return [lumos_generation_prompt(u) + c for u, c in (planner_pair(task), grounder_pair(task))]


def planner_data(train: list[Task]) -> list[Example]:
    """The planner's ground-truth SFT data: every training task's examples."""
    return [example for t in train for example in planner_examples(t)]


def grounder_data(config: RunConfig, train: list[Task]) -> list[Example]:
    """The grounder's ground-truth SFT data: every training task, plus its plan-following copies if set
    (onetime families only: `plan_following` has no rule for the web family)."""
    tasks = train + plan_following(train, config.data.plan_following, config.seed)
    return [example for t in tasks for example in grounder_examples(t)]


def load_split(run: Run, config: RunConfig, sources: list, label: str, console: Console) -> list[Task]:
    """Tasks of `sources`; rows skipped under `data.skip_bad_rows` are reported and recorded in data.json."""
    tasks, record = load_data(sources, config.data.skip_bad_rows)
    report_skipped(label, record, console)
    path = run.path("data.json")
    saved = read_json(path) if path.exists() else {}
    if saved.get(label) != record:  # a resumed run rewrites nothing it already holds
        write_json(path, {**saved, label: record})
    return tasks


def train_agent(
    run: Run,
    stage: str,
    init: str,
    examples,
    settings,
    seed: int,
    console: Console,
    inputs: Sequence[Path] = (),
    trust_remote_code: bool = False,
) -> str:
    """One SFT stage, skipped when its checkpoint is already complete; `inputs`: the files its examples
    came from besides the config, so the stage is redone when they change."""
    out = run.path("checkpoints", stage)

    def train() -> dict:
        console.print(f"[bold]{stage}[/bold]: SFT on {len(examples)} examples from {init}")
        sft(init, examples, out, settings, seed=seed, trust_remote_code=trust_remote_code)
        return {"examples": len(examples), "init": init, **read_json(out / "train_log.json")}

    run.stage(stage, train, [out], inputs=[init, *inputs])
    return str(out)


def evaluate_run(
    run: Run, config: RunConfig, planner_path: str, grounder_path: str, console: Console, name: str = "eval"
) -> dict:
    """Evaluate on every held-in and held-out set; write predictions and metrics under `name`/.

    Per split: each set's metrics, its task family, the mean over all sets, and the mean per family
    (the only place grounding PPL is averaged when a split mixes families)."""

    def evaluate() -> dict:
        trust = config.models.trust_remote_code
        planner, grounder = Agent.load(planner_path, trust), Agent.load(grounder_path, trust)
        results: dict = {}
        for split in ("heldin", "heldout"):
            per_set, families = {}, {}
            for source in getattr(config.data, split):
                label = source_name(source)
                tasks = load_split(run, config, [source], f"{split}/{label}", console)
                console.print(f"[bold]{name}[/bold] {split}/{label}: {len(tasks)} tasks")
                metrics, rows = evaluate_tasks(planner, grounder, tasks, config.eval, f"{split}/{label}")
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

    run.stage(name, evaluate, [run.path(name)], inputs=[planner_path, grounder_path])
    return read_json(run.path(name, "metrics.json"))


def cold_start_agent(run: Run, config: RunConfig, train: list[Task], agent: str, console: Console) -> str:
    """Independent SFT of one agent ("planner" or "grounder") on ground truth; returns its checkpoint."""
    planner_init, grounder_init = initial_models(run, config, train, console)
    trust = config.models.trust_remote_code
    if agent == "planner":
        examples = planner_data(train)
        return train_agent(
            run,
            "planner_sft",
            planner_init,
            examples,
            config.planner_sft,
            config.seed,
            console,
            trust_remote_code=trust,
        )
    if agent == "grounder":
        examples = grounder_data(config, train)
        return train_agent(
            run,
            "grounder_sft",
            grounder_init,
            examples,
            config.grounder_sft,
            config.seed,
            console,
            trust_remote_code=trust,
        )
    raise ValueError(f"agent must be planner or grounder, got {agent!r}")


def cold_start(run: Run, config: RunConfig, train: list[Task], console: Console) -> tuple[str, str]:
    """Independent SFT of both agents on ground truth; returns the two checkpoints."""
    planner = cold_start_agent(run, config, train, "planner", console)
    return planner, cold_start_agent(run, config, train, "grounder", console)


def round_tasks(config: RunConfig, train: list[Task]) -> list[Task]:
    """The training tasks a round works on: the first `moat.tasks` (all when unset), in train order.

    With several task families, each family's first tasks in proportion to its share of train (the
    remainder to the families first seen), so a mixed run's rounds are not all of the family listed first.
    """
    n = config.moat.tasks
    if not n or n >= len(train):
        return train
    counts = Counter(t.family for t in train)  # in order of first appearance
    quota = {family: n * c // len(train) for family, c in counts.items()}
    for family in list(counts)[: n - sum(quota.values())]:
        quota[family] += 1
    taken: Counter[str] = Counter()
    out = []
    for task in train:
        if taken[task.family] < quota[task.family]:
            taken[task.family] += 1
            out.append(task)
    return out


def matched_rounds(
    run: Run, config: RunConfig, train: list[Task], planner: str, grounder: str, round0: dict, console: Console
) -> dict:
    """The Agent Lumos baseline at MOAT's training budget: as many rounds, each continuing SFT on gold data.

    Per round, the planner trains on the gold output of each of MOAT's units (`recipes.units`: a onetime
    task's gold subgoals, a web task's gold planner turn at each turn MOAT samples; `planner_round_sft`, where
    MOAT runs DPO on at most one pair per unit) and the grounder on as many gold examples as MOAT's
    stage 2 builds with the execution critic (K per unit, plus the mixed-in initial data), with
    MOAT's `grounder_round_sft` settings. So the gain of MOAT over this is what its data adds, not
    more steps.
    """
    history = {"round0": round0}
    m, gold = config.moat, grounder_data(config, train)
    units = round_units(round_tasks(config, train), m.web_turns_per_task, config.seed)
    planner_gold = [(u.planner_prompt(), u.gold_planner_output()) for u in units]
    built = len(units) * m.k
    n_grounder = built + min(len(gold), round(built * m.mix_ratio))
    for r in range(1, m.rounds + 1):
        planner = train_agent(
            run, f"round{r}_planner_sft", planner, planner_gold, config.planner_round_sft,
            config.seed, console, trust_remote_code=config.models.trust_remote_code,
        )  # fmt: skip
        pool = list(gold)
        random.Random(config.seed * 1000 + r).shuffle(pool)  # per round, so a resumed run draws the same
        examples = [pool[i % len(pool)] for i in range(n_grounder)]
        grounder = train_agent(
            run, f"round{r}_grounder_sft", grounder, examples, config.grounder_round_sft, config.seed, console,
            trust_remote_code=config.models.trust_remote_code,
        )  # fmt: skip
        history[f"round{r}"] = evaluate_run(run, config, planner, grounder, console, name=f"round{r}_eval")
    write_json(run.path("rounds.json"), history)
    return history


def run_lumos(config: RunConfig, run_dir: str | Path, console: Console, force: bool = False) -> dict:
    """Agent Lumos: independent SFT of both agents on ground truth, then evaluation
    (`force`: resume even if the run folder's config differs)."""
    run = prepare_run(config, run_dir, console, force)
    planner, grounder = cold_start(run, config, load_split(run, config, config.data.train, "train", console), console)
    return evaluate_run(run, config, planner, grounder, console)
