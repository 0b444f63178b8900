"""PilotRL: one model, SFT on expert episodes in AdaPlan (or ReAct) format, GRPO stages, then evaluation.

Read top to bottom: the expert's episodes on the held-in environments (plans chosen by
generate-then-select, `expert.py`), a tiny model when asked for one, SFT with observations masked from
the loss (the cold start), the GRPO stages of `pilotrl.rl.order` in turn (`curriculum.py`: 1 executor,
2 planner, 3 joint, each continuing from the one before), and the AdaPlan runtime (`runtime.py`) on
every held-in and held-out environment at each plan-update interval. `coalign eval` evaluates a run's
models again (`evaluate_checkpoint`); the helpers follow.
"""

from __future__ import annotations

import contextlib
import random
import re
import time
from pathlib import Path

from rich.console import Console
from transformers import AutoConfig

from coalign.config import GenerationSettings, PilotRLSettings, RunConfig
from coalign.core.endpoint_options import PLANNER_OPTIONS, split_endpoint_options
from coalign.core.errors import RunError
from coalign.core.jsonl import read_jsonl
from coalign.core.runs import Run, atomic_dir, read_json, write_json, write_jsonl
from coalign.envs import env_class
from coalign.formats.lumos import lumos_chat
from coalign.models.agents import Agent
from coalign.models.backends import VLLMBackend
from coalign.models.bases import starting_point
from coalign.models.endpoint import OpenAIChat
from coalign.models.load import adapter_base, is_adapter, load_tokenizer, longest_in_tokens, make_tiny_model
from coalign.pilotrl.curriculum import STAGES, grpo_stages, stage_folder
from coalign.pilotrl.expert import LLMPlans, expert_conversations
from coalign.pilotrl.metrics import eval_metrics
from coalign.pilotrl.runtime import expert_guide, model_planner, run_episodes
from coalign.training.setup import (
    generation_settings,
    inference_bf16,
    prepare_run,
    removed_if_failed,
    saved_recipe,
    training_dependencies,
)
from coalign.training.sft import sft_conversations


def run_pilotrl(
    config: RunConfig, run_dir: str | Path, console: Console, force: bool = False, start: str | None = None
) -> dict:
    """Expert episodes -> (tiny model) -> SFT with observations masked -> GRPO stages -> evaluation at each
    update interval. `start`: a cold-start checkpoint to run the GRPO stages from instead (a bench's
    variants share their seed's SFT run)."""
    settings = config.pilotrl
    for name in [*settings.heldin, *settings.heldout]:
        try:
            missing = env_class(name).missing()  # an optional environment (alfworld) whose extra is not installed
        except ValueError as err:
            raise RunError(f"pilotrl.heldin/heldout: {err}") from None
        if missing:
            raise RunError(f"pilotrl.heldin/heldout: {name}: {missing}")
    if start is not None and not settings.rl:
        raise RunError("a start checkpoint is for the GRPO stages, and pilotrl.rl is not set")
    init = starting_point(settings.model, look_up=True, key="pilotrl.model")  # stops the run before any stage
    run = prepare_run(config, run_dir, console, force)
    model, planner = start or cold_start(run, config, console, init), None
    if settings.rl:
        model, planner = grpo_stages(run, config, model, console)
    return evaluate_all(run, config, model, console, settings.rl.order if settings.rl else None, planner)


def cold_start(run: Run, config: RunConfig, console: Console, init: str | None) -> str:
    """The expert's episodes, a tiny model when `init` is None (`bases.starting_point`), SFT on the episodes;
    the checkpoint's path."""
    settings, trust = config.pilotrl, config.models.trust_remote_code
    episodes = run.path("data", "train_episodes.jsonl")

    def expert_episodes() -> dict:
        console.print(f"expert episodes: {settings.train_tasks} per environment on {', '.join(settings.heldin)}")
        llm = plan_llm(settings)
        write_jsonl(episodes, training_episodes(settings, config.seed, llm))
        return {"plan_llm": llm.stats} if llm else {}

    keys = ("heldin", "mode", "train_tasks", "train_update_every", "plan_llm")
    wanted = {key: getattr(settings, key) for key in keys}
    if settings.history is not None:  # run folders from before bounded contexts recorded no history
        wanted["history"] = settings.history
    run.stage("expert_episodes", expert_episodes, [episodes], depends_on={**wanted, "seed": config.seed})
    conversations = [row["messages"] for _, row in read_jsonl(episodes)]
    if init is None:
        init = str(run.path("models", "tiny-init"))

        def tiny() -> None:
            console.print("making a tiny model: BPE tokenizer on the expert episodes, small Llama config")
            with atomic_dir(init) as tmp:
                make_tiny_model([lumos_chat(m) for m in conversations], tmp, config.models.tiny, seed=config.seed)

        shape = {"tiny": config.models.tiny.model_dump(mode="json"), "seed": config.seed}
        run.stage("init", tiny, [init], inputs=[episodes], depends_on=shape)
    out = run.path("checkpoints", "sft")

    def train() -> dict:
        console.print(f"[bold]sft[/bold]: {len(conversations)} episodes ({settings.mode}) from {init}")
        sft_conversations(
            init,
            conversations,
            out,
            settings.sft,
            seed=config.seed,
            trust_remote_code=trust,
            lora=config.lora,
            key="pilotrl.sft",
        )
        return {"episodes": len(conversations), **read_json(out / "train_log.json")}

    trained = training_dependencies(settings.sft, config.seed, config.lora, conversations)
    run.stage("sft", train, [out], inputs=[init, episodes], depends_on=trained)
    longest = longest_turn(load_tokenizer(out, trust), conversations)
    if longest > settings.max_new_tokens:
        console.print(
            f"[yellow]warning[/yellow]: the longest expert turn has {longest} tokens, more than "
            f"pilotrl.max_new_tokens {settings.max_new_tokens}: such turns are cut off at evaluation"
        )
    model_folder = adapter_base(out) if is_adapter(out) else out
    positions = getattr(
        AutoConfig.from_pretrained(model_folder, trust_remote_code=trust), "max_position_embeddings", None
    )
    if isinstance(positions, int) and settings.max_context > positions:
        console.print(
            f"[yellow]warning[/yellow]: pilotrl.max_context {settings.max_context} is more than the model's "
            f"max_position_embeddings {positions}: later positions are extrapolated, as the model was not made for them"
        )
    return str(out)


def evaluate_all(
    run: Run, config: RunConfig, model_path: str, console: Console, rl_order: list[str] | None,
    planner: str | None = None,
) -> dict:  # fmt: skip
    """AdaPlan at each plan-update interval of `eval_update_every` (ReAct once); metrics.json holds them all."""
    settings, trust = config.pilotrl, config.models.trust_remote_code
    everies = settings.eval_update_every if settings.mode == "adaplan" else [1]
    bf16, gen = inference_bf16(config), generation_settings(config)
    results = {
        f"k{k}": evaluate(run, settings, model_path, k, console, trust, rl_order, planner, bf16=bf16, generation=gen)
        for k in everies
    }
    if settings.eval_expert_plans and settings.mode == "adaplan":
        for k in everies:
            results[f"expert_k{k}"] = evaluate(
                run, settings, model_path, k, console, trust, rl_order, expert_plans=True, bf16=bf16, generation=gen
            )
    write_json(run.path("metrics.json"), results)
    return results


def evaluate(
    run: Run, settings: PilotRLSettings, model_path: str, every: int, console: Console, trust: bool,
    rl_order: list[str] | None, planner: str | None = None, expert_plans: bool = False, bf16: bool = False,
    generation: GenerationSettings | None = None,
) -> dict:  # fmt: skip
    """Run the agent on `eval_tasks` seeds of every environment; episodes and metrics under eval_k{every}/.
    With `planner`, a separate model writes the plan blocks and the model at `model_path` the rest; with
    `expert_plans`, the expert's remaining plan is given as each due plan block (under expert_k{every}/).
    `bf16`: the models in bf16 (the run's `inference_bf16`). `generation`: the config's block; with vLLM its
    engine writes the model's turns, every running episode's in one call a turn (an isolated planner and
    the expert's plans stay on the model's own generate)."""
    name = f"{'expert' if expert_plans else 'eval'}_k{every}"
    vllm = generation is not None and generation.backend == "vllm"

    def work() -> None:
        agent = Agent.load(model_path, trust, generation, bf16=bf16)
        engine = agent.backend if isinstance(agent.backend, VLLMBackend) else None
        writer = engine.turns if engine else None
        if expert_plans:
            guide = expert_guide
        else:
            guide = (
                model_planner(Agent.load(planner, trust, bf16=bf16).model, settings.max_new_tokens) if planner else None
            )
        names = list(dict.fromkeys([*settings.heldin, *settings.heldout]))
        tasks = [(env, settings.eval_seed + i) for env in names for i in range(settings.eval_tasks)]
        given = ", the expert's plans given" if expert_plans else ""
        console.print(f"[bold]{name}[/bold]: {settings.eval_tasks} tasks on each of {', '.join(names)} "
                      f"({settings.mode}, plan update every {every}{given})")  # fmt: skip
        with engine.phase() if engine else contextlib.nullcontext():  # on every rank: its start is collective
            episodes = run_episodes(
                None if engine else agent.model, agent.tokenizer, tasks, settings.mode, every,
                settings.max_new_tokens, settings.max_context, len(tasks) if writer else settings.batch_size,
                desc=name, guide=guide, writer=writer, history=settings.history,
            )  # fmt: skip
        rows = [e.to_json() for e in episodes]
        write_jsonl(run.path(name, "episodes.jsonl"), rows)
        write_json(run.path(name, "metrics.json"), eval_metrics(rows, settings, every, rl_order))

    run.stage(name, work, [run.path(name)], inputs=[model_path, *([planner] if planner else [])],
              depends_on={**eval_dependencies(settings), **({"bf16": True} if bf16 else {}),
                        **({"generation": "vllm"} if vllm else {})})  # fmt: skip
    # from the episodes, not metrics.json: a finished evaluation reports every measure `eval_metrics` takes
    return eval_metrics([row for _, row in read_jsonl(run.path(name, "episodes.jsonl"))], settings, every, rl_order)


def evaluate_checkpoint(
    config: RunConfig, run_dir: str | Path, model: str | None, console: Console, force: bool = False
) -> dict:
    """`coalign eval` of a pilotrl config: what the run trained (its last GRPO stage's checkpoint, with an
    isolated planner's; its SFT one without GRPO stages), evaluated again into the run folder as training
    did; or `model`, into a new eval-<time>/ folder inside the run folder, so the run's own evaluation is
    kept; one that fails before any of its evaluations finished is removed again. A run folder of another recipe
    is refused in one line (`saved_recipe`)."""
    trained = Path(run_dir)
    saved_recipe(trained, config, ("pilotrl",))
    if model is not None:
        root = trained / f"eval-{time.strftime('%Y%m%d-%H%M%S')}"
        with removed_if_failed(root):
            run = prepare_run(config, root, console, force, trains=False)
            return evaluate_all(run, config, model, console, stages_of(model, config))
    final, planner = final_models(trained, config)
    for path in (final, planner):
        if path is not None and not path.is_dir():
            where = f"{trained}: no such run folder" if not trained.is_dir() else f"{path}: no checkpoint"
            raise RunError(f"{where}; train first (coalign train CONFIG --run-dir {trained}) or give --model")
    order = config.pilotrl.rl.order if config.pilotrl.rl else None
    run = prepare_run(config, trained, console, force, trains=False)
    return evaluate_all(run, config, str(final), console, order, str(planner) if planner else None)


def final_models(run_dir: Path, config: RunConfig) -> tuple[Path, Path | None]:
    """Where a run's training leaves its model (the last stage's checkpoint that is not an isolated planner,
    the SFT one without GRPO stages) and its isolated planner (None without a separate stage)."""
    model, planner = run_dir / "checkpoints" / "sft", None
    for i, name in enumerate(config.pilotrl.rl.order if config.pilotrl.rl else [], 1):
        out = run_dir / "checkpoints" / stage_folder(i, name)
        if STAGES[name].separate:
            planner = out
        else:
            model = out
    return model, planner


def stages_of(checkpoint: str, config: RunConfig) -> list[str] | None:
    """The GRPO stages a checkpoint went through, read from its folder name: `grpo{i}-{stage}` (as
    `curriculum.STAGES` names them) is the first i stages of `pilotrl.rl.order`; anything else is taken for an SFT
    model (the label of an evaluation, which must not follow the config's order for an SFT checkpoint)."""
    found = re.fullmatch(r"grpo(\d+)-(\w+)", Path(checkpoint).name)
    order = config.pilotrl.rl.order if config.pilotrl.rl else []
    if found is None or not 0 < int(found[1]) <= len(order) or order[int(found[1]) - 1] != found[2]:
        return None
    return order[: int(found[1])]


def training_episodes(settings: PilotRLSettings, seed: int, llm: LLMPlans | None = None) -> list[dict]:
    """The expert's episodes on seeds 0..train_tasks-1 of each held-in environment, in the run's format: one
    conversation an episode, or with a bounded context (`history`) one a turn (`turn` counts them); each
    episode's plan-update interval drawn from `train_update_every` (by run seed, env and task); first plans
    chosen among the expert's candidates and, with `llm`, an LLM's."""
    rows = []
    for name in settings.heldin:
        for task in range(settings.train_tasks):
            every = random.Random(f"{seed}/{name}/{task}").choice(settings.train_update_every)
            conversations = expert_conversations(name, task, settings.mode, every, llm, settings.history)
            for turn, messages in enumerate(conversations):
                row = {"env": name, "seed": task, "every": every, "messages": messages}
                rows.append(row if settings.history is None else {**row, "turn": turn})
    return rows


def plan_llm(settings: PilotRLSettings) -> LLMPlans | None:
    """The LLM source of candidate plans `pilotrl.plan_llm` describes (None when it is empty)."""
    if not settings.plan_llm:
        return None
    endpoint, own = split_endpoint_options(settings.plan_llm, "plan_llm", PLANNER_OPTIONS)
    return LLMPlans(OpenAIChat(endpoint), **own)


def longest_turn(tokenizer, conversations: list[list[dict]]) -> int:
    """Tokens of the longest model turn (its end-of-turn token included) in the training episodes."""
    eos = tokenizer.eos_token or ""
    turns = (m["content"] + eos for messages in conversations for m in messages if m["role"] == "assistant")
    return longest_in_tokens(tokenizer, turns)


def eval_dependencies(settings: PilotRLSettings) -> dict:
    """What an evaluation's episodes depend on besides the checkpoints and the plan-update interval (in the
    stage's name): the environments, the tasks and the budgets."""
    return settings.model_dump(
        mode="json",
        include={"heldin", "heldout", "mode", "eval_tasks", "eval_seed", "max_new_tokens", "max_context", "history"},
    )  # `history` only where set: a run folder from before it still matches
