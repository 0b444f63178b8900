"""The Agent Lumos cold start (independent SFT of both agents) that MOAT and the baseline's matched rounds
continue from, and its steps: load a split, make the initial models, SFT an agent, evaluate.

Each step leaves its output in the run folder and is skipped when already finished (`Run.stage`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console

from coalign.config import LoraSettings, RunConfig
from coalign.core.console import make_console
from coalign.core.parallel import Job, run_jobs
from coalign.core.runs import Run, atomic_dir, read_json, value_digest, write_json, write_jsonl
from coalign.moat.evaluate import evaluate_tasks, family_summaries, set_family, split_summary
from coalign.moat.output_room import room
from coalign.moat.sft_data import grounder_data, planner_data, tokenizer_texts
from coalign.models.agents import Agent
from coalign.models.bases import starting_point
from coalign.models.load import make_tiny_model
from coalign.tasks import Task
from coalign.tasks.sources import load_data, report_skipped, source_name
from coalign.training.setup import inference_bf16, inference_settings, job_memory, training_settings
from coalign.training.sft import sft


def check_models(config: RunConfig) -> None:
    """RunError before any run folder is made when the planner or the grounder names no model: not a shipped
    base, a local folder, `scratch` or a hub id the hub (or its local cache) has (`bases.starting_point`), rather
    than when the stage that loads it starts."""
    for name in (config.models.planner, config.models.grounder):
        starting_point(name, look_up=True)


def initial_models(run: Run, config: RunConfig, train: list[Task], console: Console) -> tuple[str, str]:
    """Paths of the planner's and grounder's starting checkpoints: from-scratch ones (`scratch`) are made here,
    a shipped base is found by name (`coalign-base`), anything else is a path or hub id."""
    models = config.models
    tiny_dir = run.path("models", "tiny-init")
    texts = [text for t in train for text in tokenizer_texts(t)]

    def make() -> dict:
        console.print("making a tiny model: BPE tokenizer on the training text, small Llama config")
        with atomic_dir(tiny_dir) as tmp:
            make_tiny_model(texts, tmp, models.tiny, seed=config.seed)
        return {"path": str(tiny_dir)}

    starts = [starting_point(name) for name in (models.planner, models.grounder)]
    if None in starts:
        shape = {"tiny": models.tiny.model_dump(mode="json"), "seed": config.seed, "texts": value_digest(texts)}
        run.stage("init", make, [tiny_dir], settings=shape)
    return tuple(str(tiny_dir) if start is None else start for start in starts)


def load_split(run: Run, config: RunConfig, sources: list, label: str, console: Console) -> list[Task]:
    """Tasks of `sources`; rows skipped under `data.skip_bad_rows` are reported and recorded in data.json."""
    tasks, record = load_data(sources, config.data.skip_bad_rows)
    report_skipped(label, record, console)
    record_split(run, label, record)
    return tasks


def record_split(run: Run, label: str, record: dict) -> None:
    """A split's load record (sources, rows skipped) in the run's data.json."""
    path = run.path("data.json")
    saved = read_json(path) if path.exists() else {}
    if saved.get(label) != record:  # a resumed run rewrites nothing it already holds
        write_json(path, {**saved, label: record})


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
    lora: LoraSettings | None = None,
    key: str = "",
) -> str:
    """One SFT stage (LoRA adapters under `lora`), skipped when its checkpoint is already complete and was
    trained under the same settings and examples; `inputs`: the files its examples came from, so the stage
    is redone when they change; `key`: the config block of `settings` (`grounder_round_sft`), named in errors."""
    out = run.path("checkpoints", stage)

    def train() -> dict:
        console.print(f"[bold]{stage}[/bold]: SFT on {len(examples)} examples from {init}")
        sft(init, examples, out, settings, seed=seed, trust_remote_code=trust_remote_code, lora=lora, key=key)
        return {"examples": len(examples), "init": init, **read_json(out / "train_log.json")}

    run.stage(stage, train, [out], inputs=[init, *inputs], settings=training_settings(settings, seed, lora, examples))
    return str(out)


def check_room(console: Console, name: str, tasks: list[Task], tokenizers: tuple, limits, block: str) -> dict[str, int]:
    """`output_room.room` for the planner and the grounder (`tokenizers`, in that order) under the limits of
    `limits` (the `eval` or `moat` settings, named `block`), said on the console when a gold turn does not fit;
    the number of tasks over each agent's limit."""
    over = {}
    for (role, setting), tokenizer in zip((("planner", "plan"), ("grounder", "ground")), tokenizers):
        field = f"max_new_tokens_{setting}"
        fit = room(tasks, role, tokenizer, getattr(limits, field))
        if line := fit.warning(name, f"{block}.{field}"):
            console.print(f"[yellow]{line}[/yellow]")
        over[role] = fit.tasks_over
    return over


def evaluate_run(
    run: Run, config: RunConfig, planner_path: str, grounder_path: str, console: Console, name: str = "eval"
) -> dict:
    """Evaluate on every held-in and held-out set; write predictions and metrics under `name`/.

    Per split: each set's metrics, its task family, the mean over all sets, and the mean per family
    (the only place grounding PPL is averaged when a split mixes families)."""

    def evaluate() -> dict:
        trust = config.models.trust_remote_code
        generation = config.generation
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

    run.stage(name, evaluate, [run.path(name)], inputs=[planner_path, grounder_path], settings=eval_settings(config))
    return read_json(run.path(name, "metrics.json"))


def eval_settings(config: RunConfig) -> dict:
    """What an evaluation's numbers depend on besides its two checkpoints: the sets, how bad rows are
    handled, the evaluation budgets and the generation backend."""
    data = config.data.model_dump(mode="json")
    return {
        "heldin": data["heldin"],
        "heldout": data["heldout"],
        "skip_bad_rows": data["skip_bad_rows"],
        "eval": config.eval.model_dump(mode="json"),
        "generation": config.generation.model_dump(mode="json") if config.generation else None,
        **inference_settings(config),
    }


def cold_start_agent(run: Run, config: RunConfig, train: list[Task], agent: str, console: Console) -> str:
    """Independent SFT of one agent ("planner" or "grounder") on ground truth; returns its checkpoint."""
    planner_init, grounder_init = initial_models(run, config, train, console)
    trust = config.models.trust_remote_code
    if agent == "planner":
        examples = planner_data(config, train)
        return train_agent(
            run,
            "planner_sft",
            planner_init,
            examples,
            config.planner_sft,
            config.seed,
            console,
            trust_remote_code=trust,
            lora=config.lora,
            key="planner_sft",
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
            lora=config.lora,
            key="grounder_sft",
        )
    raise ValueError(f"agent must be planner or grounder, got {agent!r}")


def _agent_job(config: RunConfig, folder: Path, train: list[Task], agent: str) -> str:
    return cold_start_agent(Run(folder), config, train, agent, make_console())


def _evaluation_job(config: RunConfig, folder: Path, planner: str, grounder: str, name: str) -> dict:
    return evaluate_run(Run(folder), config, planner, grounder, make_console(), name=name)


def cold_starts(
    runs: dict[str, tuple[RunConfig, Path]],
    train: list[Task],
    workers: int,
    console: Console,
    evaluation: str = "round0_eval",
) -> dict[str, tuple[str, str, dict]]:
    """The Agent Lumos cold start of each labelled (config, run folder): the initial models, SFT of each agent
    on ground truth, then the evaluation of the two (named `evaluation` in the folder); per label, the
    planner's and grounder's checkpoints and that evaluation. `coalign train` runs one in its own process;
    a bench runs one per seed, `workers` jobs side by side, each with its log in the run folder. The folders'
    configs are recorded by the caller (`prepare_run`)."""
    for config, folder in runs.values():
        initial_models(Run(folder), config, train, console)
    agents = ("grounder", "planner")  # longest first
    jobs = [
        Job(
            f"{label} {agent} SFT".strip(),
            _agent_job,
            (config, folder, train, agent),
            folder / f"{agent}.log",
            memory_bytes=job_memory(config),
        )  # fmt: skip
        for agent in agents
        for label, (config, folder) in runs.items()
    ]
    done = run_jobs(jobs, workers, "cold start", console)  # every grounder's checkpoint, then every planner's
    grounders, planners = dict(zip(runs, done[: len(runs)])), dict(zip(runs, done[len(runs) :]))
    jobs = [
        Job(
            f"{label} {evaluation}".strip(),
            _evaluation_job,
            (config, folder, planners[label], grounders[label], evaluation),
            folder / "eval.log",
            memory_bytes=job_memory(config),
        )
        for label, (config, folder) in runs.items()
    ]
    evaluations = run_jobs(jobs, workers, "cold start evaluation", console)
    return {label: (planners[label], grounders[label], results) for label, results in zip(runs, evaluations)}


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
