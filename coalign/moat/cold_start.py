"""The Agent Lumos cold start (independent SFT of both agents) that MOAT and the baseline's matched rounds
continue from, and its steps: make the initial models, SFT an agent, then evaluate the two (`evaluate_run`).

Each step leaves its output in the run folder and is skipped when already finished (`Run.stage`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rich.console import Console

from coalign.config import LoraSettings, RunConfig
from coalign.core.console import make_console
from coalign.core.parallel import Job, run_jobs
from coalign.core.runs import Run, atomic_dir, read_json, value_digest
from coalign.moat.evaluate import evaluate_run
from coalign.moat.sft_data import grounder_data, planner_data, tokenizer_texts
from coalign.models.bases import starting_point
from coalign.models.load import make_tiny_model
from coalign.tasks import Task
from coalign.training.setup import job_memory, training_dependencies
from coalign.training.sft import sft


def check_models(config: RunConfig) -> None:
    """RunError before any run folder is made when the planner or the grounder names no model: not a shipped
    base, a local folder, `scratch` or a hub id the hub (or its local cache) has (`bases.starting_point`), rather
    than when the stage that loads it starts."""
    for agent in ("planner", "grounder"):
        starting_point(getattr(config.models, agent), look_up=True, key=f"models.{agent}")


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
        run.stage("init", make, [tiny_dir], depends_on=shape)
    return tuple(str(tiny_dir) if start is None else start for start in starts)


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

    depends_on = training_dependencies(settings, seed, lora, examples)
    run.stage(stage, train, [out], inputs=[init, *inputs], depends_on=depends_on)
    return str(out)


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
