"""PilotRL's GRPO stages with TRL's GRPOTrainer on the toy environment: the trainer's loss mask is the
rollout's (observations and given plans get zero gradient), a killed stage resumes from its checkpoint,
and the recipe runs its stages in order and resumes between them."""

from __future__ import annotations

import dataclasses
import os

import pytest
import torch
from datasets import Dataset
from rich.console import Console
from trl import GRPOTrainer

from coalign import envs
from coalign.config import GRPOSettings, RunConfig, TinySpec
from coalign.core.runs import read_json
from coalign.formats.lumos import lumos_chat
from coalign.models.load import load_model, load_tokenizer, make_tiny_model
from coalign.pilotrl import curriculum
from coalign.pilotrl.curriculum import STAGE_MODES, STAGES, grpo_stage, order_label
from coalign.pilotrl.expert import expert_conversation
from coalign.pilotrl.recipe import run_pilotrl
from coalign.pilotrl.rewards import RewardFunctions
from coalign.pilotrl.rollout import RolloutSpec, make_rollout_func, prompt_rows
from coalign.training import grpo as grpo_module
from coalign.training.grpo import EpochSampler, StageTrainer, grpo_config, own_rendezvous_port
from tests.toy_env import killed_after

TINY = {"vocab_size": 300, "hidden_size": 32, "num_layers": 1, "num_heads": 2, "num_kv_heads": 2,
        "intermediate_size": 64, "max_positions": 1024}  # fmt: skip
RL = {"tasks": 2, "num_generations": 2, "batch_size": 4, "grad_accum": 1, "learning_rate": 1e-3, "save_steps": 1,
      "epochs": {"executor": 1, "planner": 1, "joint": 1, "all": 1, "vanilla": 1}}  # fmt: skip


@pytest.fixture(autouse=True)
def toy_registered(monkeypatch):
    monkeypatch.setitem(envs.REGISTRY, "toy", "tests.toy_env:ToyEnv")


@pytest.fixture(scope="module")
def init(tmp_path_factory):
    path = tmp_path_factory.mktemp("grpo") / "init"
    envs.REGISTRY["toy"] = "tests.toy_env:ToyEnv"
    try:
        texts = [lumos_chat(expert_conversation("toy", s, "adaplan")) for s in range(6)]
    finally:
        del envs.REGISTRY["toy"]
    make_tiny_model(texts, path, TinySpec(**TINY), seed=0)
    return path


def _spec(stage):
    return RolloutSpec(stage.mode, 1, stage.guided, stage.train, max_new_tokens=12, max_context=400, batch_size=8)


def test_the_trainers_loss_mask_is_the_rollouts_and_masked_tokens_get_no_gradient(init, tmp_path):
    """Stage 1 (executor): the expert's plan blocks and the observations are context; the gradient of the
    loss with respect to the hidden states that predict them is exactly zero, and nonzero on the model's
    tokens. (TRL's fused head makes no logits; the final norm's output at a position feeds only the
    prediction of the next token.)"""
    stage = STAGES["executor"]
    rows = prompt_rows([("toy", 0), ("toy", 1)], "adaplan")
    tokenizer = load_tokenizer(init)
    model = load_model(init, dtype="float32")
    settings = GRPOSettings(**RL)
    rollout = make_rollout_func(rows, _spec(stage))
    seen = {}

    def recording(prompts, trainer):
        seen.update(rollout(prompts, trainer))
        return seen

    def varied(episode, **_):  # rewards that differ within a group, so every advantage is nonzero
        return [float(i % 2) for i in range(len(episode))]

    trainer = GRPOTrainer(model=model, reward_funcs=[varied], args=grpo_config(settings, 1.0, tmp_path, 0, [1.0], 64),
                          train_dataset=Dataset.from_list(rows), processing_class=tokenizer,
                          rollout_func=recording)  # fmt: skip
    inputs = [rows[0], rows[0], rows[1], rows[1]]
    batch = trainer._generate_and_score_completions([dict(r) for r in inputs])
    width = batch["completion_ids"].shape[1]
    ours = torch.tensor([m + [0] * (width - len(m)) for m in seen["env_mask"]])
    assert torch.equal(batch["tool_mask"] * batch["completion_mask"], ours)
    assert 0 < ours.sum() < batch["completion_mask"].sum()  # some completion tokens are context

    hidden = {}

    def keep(module, args, out):
        out.retain_grad()
        hidden["x"] = out

    hook = model.model.norm.register_forward_hook(keep)
    try:
        trainer.model.train()
        trainer.current_gradient_accumulation_steps = 1  # set by the training loop, which this test skips
        loss = trainer.compute_loss(trainer.model, batch)
        loss.backward()
    finally:
        hook.remove()
    grad = hidden["x"].grad.abs().sum(-1)[:, -width - 1 : -1]  # column k predicts completion token k
    assert torch.all(grad[ours == 0] == 0)
    assert torch.all(grad[ours == 1] > 0)


def test_a_bounded_context_trains_each_turn_in_the_context_it_was_given(init, tmp_path):
    """With `history`, the generation batch holds one row per turn: its context as the runtime gave it (the task,
    the plan, the last observation: never the whole episode), the turn as sampled, the stage's trained tokens,
    and its episode's advantage; the token count that normalises the loss is theirs."""
    stage = STAGES["joint"]
    rows = prompt_rows([("toy", 0), ("toy", 1)], "adaplan")
    tokenizer = load_tokenizer(init)
    spec = RolloutSpec(stage.mode, 1, stage.guided, stage.train, max_new_tokens=12, max_context=400, history=0)
    rollout = make_rollout_func(rows, spec)
    seen = {}

    def recording(prompts, trainer):
        seen.update(rollout(prompts, trainer))
        return seen

    def varied(episode, **_):
        return [float(i % 2) for i in range(len(episode))]

    trainer = StageTrainer(model=load_model(init, dtype="float32"), reward_funcs=[varied],
                           args=grpo_config(GRPOSettings(**RL), 1.0, tmp_path, 0, [1.0], 64),
                           train_dataset=Dataset.from_list(rows), processing_class=tokenizer,
                           rollout_func=recording)  # fmt: skip
    batch = trainer._generate_and_score_completions([dict(r) for r in [rows[0], rows[0], rows[1], rows[1]]])
    turns = [turn for episode in seen["turns"] for turn in episode]
    assert len(turns) == batch["prompt_ids"].shape[0] > 4 and len(seen["turns"]) == 4
    signs = [-1.0, 1.0, -1.0, 1.0]  # rewards 0, 1 in each group
    assert batch["advantages"].sign().tolist() == [s for s, e in zip(signs, seen["turns"]) for _ in e]
    for k, (context, turn, trained) in enumerate(turns):
        assert batch["prompt_ids"][k, -len(context) :].tolist() == context
        assert batch["completion_ids"][k, : len(turn)].tolist() == turn
        assert (batch["tool_mask"] * batch["completion_mask"])[k, : len(turn)].tolist() == trained
        assert tokenizer.decode(context).count("Observation:") <= 1  # the last one only
    assert batch["num_items_in_batch"] == sum(sum(m) for *_, m in turns) > 0
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1
    assert torch.isfinite(trainer.compute_loss(trainer.model, batch))


def test_a_bounded_context_stage_trains_through_the_training_loop(init, tmp_path, monkeypatch):
    """A stage with `history` run by the trainer's own loop, a generation batch split over 4 accumulation steps
    (its turn rows padded to whole steps): the weights move and the gradient is not zero."""
    monkeypatch.setattr(curriculum, "reward_functions", _sampled_rewards)
    stage = STAGES["joint"]
    settings = GRPOSettings(**{**RL, "batch_size": 1, "grad_accum": 4, "epochs": {"joint": 1}})
    spec = dataclasses.replace(_spec(stage), history=0)
    out = grpo_stage(init, tmp_path / "bounded", prompt_rows(KILL_ROWS[:2], "adaplan"), stage, settings, spec)
    log = read_json(out / "train_log.json")
    assert log["steps"] == 1 and log["history"][0]["grad_norm"] > 0
    start = _weights(init)
    assert any(not torch.equal(start[k], w) for k, w in _weights(out).items())


def test_turn_rows_pad_to_whole_steps_with_untrained_rows():
    turns = [[([5, 6], [7, 2], [1, 0])], [([5], [8], [1]), ([5, 9, 9], [2], [1])]]
    rows = grpo_module.turn_rows(turns, torch.tensor([0.5, -1.0]), pad_id=0, eos_id=2, multiple=2)
    assert rows["prompt_ids"].tolist() == [[0, 5, 6], [0, 0, 5], [5, 9, 9], [0, 0, 2]]
    assert rows["completion_ids"].tolist() == [[7, 2], [8, 0], [2, 0], [2, 0]]
    assert rows["tool_mask"].tolist() == [[1, 0], [1, 0], [1, 0], [0, 0]]
    assert rows["completion_mask"].tolist() == [[1, 1], [1, 0], [1, 0], [1, 0]]
    assert rows["advantages"].tolist() == [0.5, -1.0, -1.0, 0.0]
    assert grpo_module.turn_rows([[]], torch.tensor([1.0]), 0, 2, multiple=3)["prompt_ids"].shape[0] == 3


def _weights(path):
    from safetensors.torch import load_file

    return load_file(str(path / "model.safetensors"))


KILL_ROWS = [("toy", s) for s in range(4)]  # 2 tasks a step: 2 steps an epoch, 2 epochs
KILL_SETTINGS = {**RL, "epochs": {"joint": 2}}


def _sampled_rewards(*_, **__):
    """A reward that differs between the sampled completions of a task (the toy policy never succeeds, so
    the real rewards are all 0, every advantage is 0 and no weight would move): a kill test whose weights
    never change could not tell a wrong resume from a right one."""

    def sampled(completion_ids, **_):
        return [float(sum(ids) % 5) for ids in completion_ids]

    return RewardFunctions([sampled], [1.0])


@pytest.fixture(scope="module")
def whole(init, tmp_path_factory):
    """The joint stage of the kill tests, run without a kill, with rewards that move the weights."""
    stage = STAGES["joint"]
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(envs.REGISTRY, "toy", "tests.toy_env:ToyEnv")
        patch.setattr(curriculum, "reward_functions", _sampled_rewards)
        out = tmp_path_factory.mktemp("whole") / "whole"
        return grpo_stage(init, out, prompt_rows(KILL_ROWS, "adaplan"), stage, GRPOSettings(**KILL_SETTINGS),
                          _spec(stage), seed=0)  # fmt: skip


@pytest.mark.parametrize("kill_at", [1, 2, 3])  # mid first epoch, at the epoch boundary, mid second epoch
def test_a_killed_stage_resumes_from_its_last_checkpoint(init, whole, tmp_path, monkeypatch, kill_at):
    """The resumed run is the uninterrupted one, byte for byte, wherever it was killed: TRL's sampler draws
    each epoch's order from one generator run on, so resuming into a later epoch would replay the first
    epoch's order; ours draws it from (seed, epoch)."""
    stage = STAGES["joint"]
    rows = prompt_rows(KILL_ROWS, "adaplan")
    settings = GRPOSettings(**KILL_SETTINGS)
    log = read_json(whole / "train_log.json")
    steps = log["steps"]
    assert steps == 4 and all(row["grad_norm"] > 0 for row in log["history"])
    start = _weights(init)
    assert any(not torch.equal(start[k], w) for k, w in _weights(whole).items())  # the weights moved

    monkeypatch.setattr(curriculum, "reward_functions", _sampled_rewards)
    monkeypatch.setattr(grpo_module, "StageTrainer", killed_after(StageTrainer, kill_at))
    with pytest.raises(KeyboardInterrupt):
        grpo_stage(init, tmp_path / "resumed", rows, stage, settings, _spec(stage), seed=0)
    assert (tmp_path / "resumed" / "trainer" / f"checkpoint-{kill_at}").is_dir()
    monkeypatch.setattr(grpo_module, "StageTrainer", StageTrainer)
    resumed = grpo_stage(init, tmp_path / "resumed", rows, stage, settings, _spec(stage), seed=0)
    log = read_json(resumed / "train_log.json")
    assert log["steps"] == steps and [row["step"] for row in log["history"]] == list(range(1, steps + 1))
    a, b = _weights(whole), _weights(resumed)
    assert all(torch.equal(a[k], b[k]) for k in a)  # the same run as the uninterrupted one


def test_a_batch_of_one_accumulated_still_hands_the_rollout_whole_groups(init, tmp_path, monkeypatch):
    """batch_size 1 x grad_accum 4 (one episode a forward pass, as a long-context CPU run needs): TRL's
    generation batch is the 4, two tasks' whole groups, one optimizer step each; a batch alone need not hold a
    group, and the settings accept it."""
    calls = []

    def recording(rows, spec, executor=None):
        rollout = make_rollout_func(rows, spec, executor)

        def wrapped(prompts, trainer):
            calls.append(sorted(p[-1]["task"] for p in prompts))
            return rollout(prompts, trainer)

        return wrapped

    monkeypatch.setattr(curriculum, "make_rollout_func", recording)
    monkeypatch.setattr(curriculum, "reward_functions", _sampled_rewards)
    stage = STAGES["joint"]
    settings = GRPOSettings(**{**RL, "batch_size": 1, "grad_accum": 4, "epochs": {"joint": 1}})
    out = grpo_stage(init, tmp_path / "one", prompt_rows(KILL_ROWS, "adaplan"), stage, settings, _spec(stage))
    log = read_json(out / "train_log.json")
    assert log["steps"] == 2 and all(row["grad_norm"] > 0 for row in log["history"])
    assert len(calls) == 2 and all(len(c) == 4 and c[0] == c[1] and c[2] == c[3] for c in calls)
    assert len({task for c in calls for task in c}) == 4  # every task once an epoch, each as a whole group
    with pytest.raises(ValueError, match="multiple of num_generations"):
        GRPOSettings(num_generations=4, batch_size=1, grad_accum=2)


def test_each_epochs_task_order_is_drawn_from_the_seed_and_epoch_alone():
    def order(sampler, epoch):
        sampler.set_epoch(epoch)
        return list(sampler)

    def sampler():
        return EpochSampler(list(range(8)), mini_repeat_count=2, batch_size=2, seed=3)

    ran_on = sampler()
    first, second = order(ran_on, 0), order(ran_on, 1)
    assert first != second and sorted(first) == sorted(second)  # a new order each epoch, the same tasks
    assert order(sampler(), 1) == second  # a sampler built anew (a resumed run) draws the same second epoch


def _config(order, mode="adaplan"):
    settings = {"heldin": ["toy"], "heldout": ["toy"], "train_tasks": 6, "eval_tasks": 2, "eval_seed": 100,
                "mode": mode, "max_new_tokens": 12, "max_context": 400, "eval_update_every": [1],
                "sft": {"learning_rate": 3e-3, "epochs": 1, "batch_size": 8, "grad_accum": 1, "max_length": 1024},
                "rl": {**RL, "order": order}}  # fmt: skip
    return RunConfig.model_validate({"name": "t", "recipe": "pilotrl", "threads": 1, "models": {"tiny": TINY},
                                     "pilotrl": settings}, context={"stages": STAGE_MODES})  # fmt: skip


@pytest.mark.slow
def test_the_recipe_runs_its_stages_in_order_and_resumes_between_them(tmp_path):
    cfg = _config(["executor", "planner", "joint"])
    results = run_pilotrl(cfg, tmp_path, Console(quiet=True))
    assert results["k1"]["envs"]["toy"]["tasks"] == 2
    for i, name in enumerate(["executor", "planner", "joint"], 1):
        assert read_json(tmp_path / "stages" / f"grpo{i}_{name}.json")["grpo_stage"] == name
        assert (tmp_path / "checkpoints" / f"grpo{i}-{name}" / "model.safetensors").is_file()
    assert "grpo3-joint" in str(read_json(tmp_path / "stages" / "eval_k1.json")["inputs"])
    (tmp_path / "stages" / "grpo3_joint.json").unlink()  # as if killed during stage 3
    stamps = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "stages").glob("grpo[12]_*.json")}
    run_pilotrl(cfg, tmp_path, Console(quiet=True))
    assert {p.name: p.stat().st_mtime_ns for p in (tmp_path / "stages").glob("grpo[12]_*.json")} == stamps
    assert (tmp_path / "stages" / "grpo3_joint.json").is_file()


def test_stage_orders_must_name_known_stages_and_match_the_format():
    with pytest.raises(ValueError, match="unknown GRPO stage 'four'"):
        _config(["executor", "four"])
    with pytest.raises(ValueError, match="runs react episodes"):
        _config(["vanilla"])
    assert _config(["vanilla"], mode="react").pilotrl.rl.order == ["vanilla"]
    with pytest.raises(ValueError, match="multiple of num_generations"):
        GRPOSettings(num_generations=3, batch_size=4)
    assert order_label(["executor", "planner", "joint"]) == "1->2->3"


def test_the_registry_leaves_the_grpo_trainer_unimported():
    """TRL's GRPO trainer imports vLLM, seconds that every process importing the registry (each rank of a
    launched SFT, each Ray job) would pay; only a GRPO stage imports it."""
    import subprocess
    import sys

    check = "import sys, coalign.registry; sys.exit('coalign.training.grpo' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", check], check=False).returncode == 0


@pytest.mark.slow
def test_the_bench_runs_grpo_variants_from_their_seeds_sft_run(tmp_path):
    from coalign.pilotrl.bench import run_pilotrl_bench

    cfg = _config(["executor"])  # the variant keeps these GRPO settings and sets its own order
    results = run_pilotrl_bench(cfg, tmp_path, [0], ["pilotrl"], 1, Console(quiet=True))
    assert list(results["runs"]) == ["adaplan", "pilotrl"]  # the SFT run it starts from, then the variant
    stage = read_json(tmp_path / "seed0" / "pilotrl" / "stages" / "grpo1_executor.json")
    assert str(tmp_path / "seed0" / "adaplan" / "checkpoints" / "sft") in str(stage["inputs"])
    assert not (tmp_path / "seed0" / "pilotrl" / "checkpoints" / "sft").exists()
    assert [read_json(p)["grpo_stage"] for p in sorted((tmp_path / "seed0" / "pilotrl" / "stages").glob("grpo*"))] == [
        "executor",
        "planner",
        "joint",
    ]
    grpo = results["runs"]["pilotrl"]["0"]["grpo"]  # each stage's record, from its TRL log, in results.json
    assert [(st["stage"], st["steps"]) for st in grpo] == [("executor", 1), ("planner", 1), ("joint", 1)]
    assert all(0 <= st["frac_reward_zero_std"] <= 1 for st in grpo) and "grpo" not in results["runs"]["adaplan"]["0"]
    # what each run cost: its own stages, the GRPO run's without its seed's SFT
    assert {"expert_episodes", "sft", "eval_k1"} <= set(results["runs"]["adaplan"]["0"]["seconds"])
    assert [s for s in results["runs"]["pilotrl"]["0"]["seconds"] if s != "eval_k1"] == [
        "grpo1_executor",
        "grpo2_planner",
        "grpo3_joint",
    ]
    report = (tmp_path / "report.md").read_text()
    assert "PilotRL 1->2->3 − SFT (AdaPlan)" in report and "| PilotRL 1->2->3: 1 (executor) | 1 |" in report
    assert "`curves.png` beside this report" in report and (tmp_path / "curves.png").stat().st_size > 0
    assert "| minutes | training | evaluation | in all |" in report


@pytest.mark.slow
def test_isolated_planner_and_executor_train_two_models_and_run_together(tmp_path):
    """The executor trains first (stage 1); the planner, a second model from the cold start, then trains on
    its plan tokens beside that executor, fixed; evaluation runs the planner's blocks then the executor."""
    cfg = _config(["executor", "planner_isolated"])
    results = run_pilotrl(cfg, tmp_path, Console(quiet=True))
    planner = read_json(tmp_path / "stages" / "grpo2_planner_isolated.json")
    inputs = str(planner["inputs"])  # run-relative paths
    assert "checkpoints/sft/" in inputs and "checkpoints/grpo1-executor/" in inputs
    evaluation = str(read_json(tmp_path / "stages" / "eval_k1.json")["inputs"])
    assert "grpo1-executor" in evaluation and "grpo2-planner_isolated" in evaluation
    assert results["k1"]["rl_order"] == ["executor", "planner_isolated"]


def test_with_an_executor_the_policy_writes_only_the_plan_blocks():
    from coalign.pilotrl.runtime import run_episodes
    from tests.toy_env import ScriptedModel, toy_tokenizer

    tokenizer = toy_tokenizer()
    policy = ScriptedModel(
        tokenizer, text="<global_plan>\nStep 1: step forward\n</global_plan>\nThought: x\nAction: dance"
    )
    executor = ScriptedModel(tokenizer, plans=False)
    (episode,) = run_episodes(policy, tokenizer, [("toy", 0)], "adaplan", progress=False, executor=executor)
    assert episode.env.success  # the executor's actions, not the policy's "dance"
    trained = tokenizer.decode([i for i, m in zip(episode.ids, episode.mask) if m])
    assert "dance" not in trained and "Action:" not in trained and trained.count("</global_plan>") == 2
    assert episode.plan_mask == episode.mask  # all the policy wrote is plan


def test_the_llm_adherence_judge_is_built_from_the_config_and_calls_the_endpoint(server):
    from coalign.pilotrl.rewards import llm_judge
    from tests.fault_server import KEY, Reply

    options = {"base_url": server.url, "model": "judge-m", "api_key_env": "COALIGN_TEST_KEY", "max_calls": 1}
    rl = GRPOSettings(**{**RL, "judge": "llm", "judge_options": options})
    judge = llm_judge(rl.judge_options)
    server.script = [Reply("Score: 1")]
    assert judge.score("go to fridge 1", "go to cabinet 2", "You arrive at cabinet 2.", fallback=0) == 1
    assert server.bodies[0]["model"] == "judge-m" and server.auth == [f"Bearer {KEY}"]
    assert judge.score("go to fridge 1", "open fridge 1", "You open it.", fallback=2) == 2  # budget spent: rule
    assert len(server.bodies) == 1 and KEY not in repr(judge)


@pytest.mark.parametrize(
    ("judge", "options", "message"),
    [
        ("rule", {"model": "m"}, "apply to judge 'llm' only"),
        ("llm", {"base_url": "http://h/v1", "model": "m", "api_key": "sk-x"}, "judge_options.api_key: a secret"),
        ("llm", {"base_url": "http://h/v1", "model": "m", "max_concurrency": 4}, "unknown judge_options option"),
        ("llm", {"model": "m"}, "need base_url and model"),
        ("llm", {"base_url": "http://u:p@h/v1", "model": "m"}, "must not hold credentials"),
    ],
)
def test_judge_options_are_checked_when_the_config_loads(judge, options, message):
    with pytest.raises(ValueError, match=message):
        GRPOSettings(**{**RL, "judge": judge, "judge_options": options})


def test_vllm_generation_is_configured_for_trl_and_refused_without_vllm(tmp_path, monkeypatch):
    import importlib.util

    from coalign.core.errors import RunError

    hf = grpo_config(GRPOSettings(batch_size=2, num_generations=2), 1.0, tmp_path, 0, [1.0], 48)
    assert not hf.use_vllm and hf.max_completion_length == 48
    server = GRPOSettings(
        batch_size=2, num_generations=2, generation="vllm_server", vllm_server_url="http://127.0.0.1:8000"
    )
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None if name == "vllm" else real_find_spec(name))
    with pytest.raises(RunError, match="needs vLLM"):
        grpo_config(server, 1.0, tmp_path, 0, [1.0], 48)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object() if name == "vllm" else real_find_spec(name))
    args = grpo_config(server, 1.0, tmp_path, 0, [1.0], 48)
    assert args.use_vllm and args.vllm_mode == "server" and args.vllm_server_base_url == "http://127.0.0.1:8000"
    assert args.max_completion_length == 48  # vLLM's per-call budget: one turn
    assert not args.vllm_importance_sampling_correction  # the rollout returns no sampling log-probs to correct by


def test_a_vllm_engine_is_sized_to_the_episodes_context_budget(init, tmp_path, monkeypatch):
    """A stage's vLLM engine holds sequences of the rollouts' `max_context` (a turn is written only where its context
    and its tokens fit in it), not the model's own limit (131,072 for Llama-3.1, which a colocated engine's share of
    the GPU cannot hold)."""
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object() if name == "vllm" else real_find_spec(name))
    made = []

    class Built(Exception):
        """Stops the stage once its arguments are built: a trainer with use_vllm needs vLLM itself."""

    def record(*args, **kwargs):
        made.append(grpo_config(*args, **kwargs))
        raise Built

    monkeypatch.setattr(grpo_module, "grpo_config", record)
    stage = STAGES["executor"]
    for generation in ("vllm_colocate", "vllm_server"):
        settings = GRPOSettings(**RL, generation=generation, vllm_server_url="http://127.0.0.1:8000")
        with pytest.raises(Built):
            grpo_stage(init, tmp_path / generation, prompt_rows([("toy", 0)], "adaplan"), stage, settings, _spec(stage))
    assert [(c.vllm_mode, c.vllm_max_model_length, c.max_completion_length) for c in made] == [
        ("colocate", 400, 12), ("server", 400, 12)
    ]  # fmt: skip


def test_a_colocated_engine_rendezvouses_on_a_port_of_its_own(monkeypatch):
    """TRL alone hands two runs started together the same port (the first of its candidates free at the time:
    a bench's second GRPO job failed to listen on 29500); each run here gets the system's pick of a free port,
    which TRL then keeps. A launched run's port (set, or several processes) is the launcher's."""
    from trl.trainer.utils import ensure_master_addr_port

    monkeypatch.delenv("WORLD_SIZE", raising=False)
    trl_ports, own_ports = [], []
    for _ in range(2):
        monkeypatch.delenv("MASTER_PORT", raising=False)
        ensure_master_addr_port()
        trl_ports.append(os.environ.pop("MASTER_PORT"))
        own_rendezvous_port()
        ensure_master_addr_port()
        own_ports.append(os.environ["MASTER_PORT"])
    assert trl_ports[0] == trl_ports[1] and own_ports[0] != own_ports[1]
    monkeypatch.setenv("MASTER_PORT", "29501")
    own_rendezvous_port()
    assert os.environ["MASTER_PORT"] == "29501"
    monkeypatch.delenv("MASTER_PORT")
    monkeypatch.setenv("WORLD_SIZE", "2")
    own_rendezvous_port()
    assert "MASTER_PORT" not in os.environ


def test_a_step_of_many_episodes_runs_micro_batch_size_of_them_a_forward(tmp_path, monkeypatch):
    """The paper's 16 x 16 episodes a step held 16 episodes of up to 4,096 tokens in one forward; now a process runs
    `micro_batch_size` a forward and accumulates the rest, its step and TRL's generation batch unchanged."""
    from coalign.registry import load_config
    from coalign.training.common import stage_batch
    from coalign.training.setup import micro_batch_tokens

    paper = GRPOSettings(batch_size=16, grad_accum=16, num_generations=16)
    args = grpo_config(paper, 1.0, tmp_path, 0, [1.0], 48)
    assert (args.per_device_train_batch_size, args.gradient_accumulation_steps) == (4, 64)
    assert args.generation_batch_size == 256
    assert stage_batch(paper.model_copy(update={"micro_batch_size": 3})) == (2, 128)  # the largest that divides 16
    assert stage_batch(paper.model_copy(update={"micro_batch_size": 32})) == (16, 16)  # never above the batch
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert stage_batch(paper) == (4, 32)  # each process's 128, four at a time
    config = load_config("paper-pilotrl-llama3.1-8b")
    assert micro_batch_tokens(config.pilotrl.rl, config) == 4 * config.pilotrl.max_context
