"""The pilotrl recipe end to end on the toy environment: expert episodes, a tiny model, SFT with
observations masked from the loss, evaluation at each plan-update interval; resumed, it redoes nothing."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console
from trl import SFTConfig, SFTTrainer

from coalign import envs
from coalign.config import GRPOSettings, RunConfig
from coalign.core.errors import RunError
from coalign.core.jsonl import read_jsonl
from coalign.models.load import load_model, load_tokenizer
from coalign.models.turns import encode
from coalign.pilotrl.expert import expert_conversation
from coalign.pilotrl.metrics import summarise
from coalign.pilotrl.recipe import run_pilotrl
from coalign.training.sft import conversation_dataset

TINY = {"vocab_size": 400, "hidden_size": 32, "num_layers": 2, "num_heads": 2, "num_kv_heads": 2,
        "intermediate_size": 64, "max_positions": 512}  # fmt: skip
SFT = {"learning_rate": 3e-3, "epochs": 2, "batch_size": 8, "grad_accum": 1, "max_length": 512, "logging_steps": 5}


@pytest.fixture(autouse=True)
def toy_registered(monkeypatch):
    monkeypatch.setitem(envs.REGISTRY, "toy", "tests.toy_env:ToyEnv")


def config(**pilotrl) -> RunConfig:
    settings = {"heldin": ["toy"], "heldout": ["toy"], "train_tasks": 24, "eval_tasks": 6, "eval_seed": 100,
                "max_new_tokens": 64, "max_context": 512, "sft": SFT, **pilotrl}  # fmt: skip
    return RunConfig.model_validate({"name": "t", "recipe": "pilotrl", "threads": 1, "models": {"tiny": TINY},
                                     "pilotrl": settings})  # fmt: skip


def test_a_pilotrl_run_trains_evaluates_and_resumes(tmp_path):
    cfg = config(train_update_every=[1, 2], eval_update_every=[1, 2])
    results = run_pilotrl(cfg, tmp_path, Console(quiet=True))
    assert set(results) == {"k1", "k2"}
    for metrics in results.values():
        assert metrics["envs"]["toy"]["tasks"] == 6 and metrics["heldin"]["success"] >= 0
    log = (tmp_path / "checkpoints" / "sft" / "train_log.json").read_text()
    assert '"train_loss"' in log
    stamp = (tmp_path / "stages" / "sft.json").stat().st_mtime_ns
    assert run_pilotrl(cfg, tmp_path, Console(quiet=True)) == results
    assert (tmp_path / "stages" / "sft.json").stat().st_mtime_ns == stamp


def test_the_expert_plans_evaluation_gives_the_executor_the_experts_plan(tmp_path):
    cfg = config(train_tasks=4, eval_tasks=3, sft={**SFT, "epochs": 1}, eval_expert_plans=True)
    results = run_pilotrl(cfg, tmp_path, Console(quiet=True))
    assert set(results) == {"k1", "expert_k1"} and results["expert_k1"]["envs"]["toy"]["tasks"] == 3
    for _, row in read_jsonl(tmp_path / "expert_k1" / "episodes.jsonl"):
        env = envs.make_env("toy")
        env.reset(row["seed"])
        assert row["turns"][0]["plan"] == env.expert_plan()  # the first plan block is the expert's, whole
        assert all(turn["plan_due"] and turn["plan"] for turn in row["turns"])  # one given at every step


def test_a_context_longer_than_the_models_positions_is_warned_of(tmp_path):
    console = Console(record=True, width=400, file=io.StringIO())
    run_pilotrl(config(train_tasks=2, eval_tasks=1, eval_update_every=[1], max_context=640), tmp_path, console)
    assert "pilotrl.max_context 640 is more than the model's max_position_embeddings 512" in console.export_text()


def test_unknown_environments_are_refused_before_any_work(tmp_path):
    with pytest.raises(RunError, match="unknown environment 'nowhere'"):
        run_pilotrl(config(heldout=["nowhere"]), tmp_path / "r", Console(quiet=True))
    assert not (tmp_path / "r").exists()


def test_an_optional_environment_not_installed_is_refused_saying_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path / "no-games"))  # missing here whatever is installed
    with pytest.raises(RunError, match=r"pilotrl.heldin/heldout: alfworld: .*alfworld-download"):
        run_pilotrl(config(heldout=["alfworld"]), tmp_path / "r", Console(quiet=True))
    assert not (tmp_path / "r").exists()


def test_observation_tokens_get_no_loss(tmp_path):
    """TRL's labels are -100 exactly where the mask says the environment or the prompt wrote the token."""
    cfg = config(train_tasks=2, eval_tasks=1, eval_update_every=[1])
    run_pilotrl(cfg, tmp_path, Console(quiet=True))
    init = tmp_path / "models" / "tiny-init"
    tokenizer, model = load_tokenizer(init), load_model(init, dtype="float32")
    messages = expert_conversation("toy", 1, "adaplan")
    data = conversation_dataset(tokenizer, [messages], 512)
    trainer = SFTTrainer(model=model, args=SFTConfig(output_dir=str(tmp_path / "x"), completion_only_loss=True,
                         report_to=[], bf16=False), train_dataset=data, processing_class=tokenizer)  # fmt: skip
    ids, mask = encode(tokenizer, messages)
    labels = trainer.train_dataset[0]["labels"]
    assert labels == [i if m else -100 for i, m in zip(ids, mask)]
    assert 0 < sum(mask) < len(mask)


def test_summaries_average_each_measure():
    ok, bad = {"errors": []}, {"errors": ["no Action: line"]}
    rows = [{"success": True, "reward": 1.0, "steps": 3, "tokens": 40, "stop": "success", "turns": [ok] * 3},
            {"success": False, "reward": 0.0, "steps": 8, "tokens": 100, "stop": "limit", "turns": [bad]}]  # fmt: skip
    assert summarise(rows) == {
        "tasks": 2,
        "success": 50.0,
        "reward": 0.5,
        "steps": 5.5,
        "tokens": 70.0,
        "well_formed": 75.0,
        "stops": {"success": 1, "limit": 1},
        "context_stops": 0.0,
        "plan_correct": None,
        "plan_progress": None,
    }  # no AdaPlan episode: no plan to judge
    assert summarise([{**rows[1], "turns": []}])["well_formed"] == 0.0
    assert summarise([{**rows[1], "stop": "context"}, rows[0]])["context_stops"] == 50.0


def test_a_recipe_without_data_is_refused_unless_pilotrl():
    with pytest.raises(ValueError, match="needs a 'data' section"):
        RunConfig.model_validate({"name": "t", "recipe": "moat"})
    assert RunConfig.model_validate({"name": "t", "recipe": "pilotrl"}).data is None


def test_training_seeds_may_not_reach_the_evaluation_seeds():
    with pytest.raises(ValueError, match="overlap"):
        config(train_tasks=200, eval_seed=100)


def test_the_bench_defaults_to_the_config_recipes_own_variants():
    from coalign.registry import bench_names

    assert bench_names("pilotrl") == ("adaplan", "react", "vanilla_rl", "pilotrl")
    assert "adaplan" not in bench_names("moat") and "moat" in bench_names("lumos")


def test_eval_of_a_missing_run_is_a_clear_error(tmp_path):
    from coalign.pilotrl.recipe import evaluate_checkpoint

    with pytest.raises(RunError, match="no such run folder"):
        evaluate_checkpoint(config(), tmp_path / "nowhere", None, Console(quiet=True))


def test_eval_of_a_given_checkpoint_writes_a_new_folder(tmp_path):
    from coalign.pilotrl.recipe import evaluate_checkpoint

    cfg = config(train_tasks=4, eval_tasks=2, sft={**SFT, "epochs": 1})
    run_pilotrl(cfg, tmp_path, Console(quiet=True))
    results = evaluate_checkpoint(cfg, tmp_path, str(tmp_path / "checkpoints" / "sft"), Console(quiet=True))
    assert results["k1"]["envs"]["toy"]["tasks"] == 2
    assert len(list(tmp_path.glob("eval-*/eval_k1/metrics.json"))) == 1


def test_an_evaluated_checkpoint_is_labelled_by_the_stages_it_went_through(tmp_path):
    """`coalign eval --model` of an SFT checkpoint, with a config whose GRPO order is 1->2->3, reports an SFT
    model, not 'GRPO 1->2->3'; a stage's checkpoint reports the stages up to it."""
    from coalign.pilotrl.recipe import evaluate_checkpoint, stages_of
    from coalign.pilotrl.report import run_markdown

    cfg = config(train_tasks=4, eval_tasks=2, sft={**SFT, "epochs": 1})
    run_pilotrl(cfg, tmp_path, Console(quiet=True))
    with_rl = cfg.model_copy(update={"pilotrl": cfg.pilotrl.model_copy(update={"rl": GRPOSettings()})})
    results = evaluate_checkpoint(with_rl, tmp_path, str(tmp_path / "checkpoints" / "sft"), Console(quiet=True))
    assert results["k1"]["rl_order"] is None
    assert "SFT (AdaPlan)" in run_markdown(results) and "+ GRPO" not in run_markdown(results)
    assert stages_of("runs/x/checkpoints/grpo2-planner", with_rl) == ["executor", "planner"]
    assert stages_of("runs/x/checkpoints/grpo3-joint", with_rl) == ["executor", "planner", "joint"]
    for other in ("runs/x/checkpoints/grpo2-joint", "grpo4-joint", "grpo0-executor", "my-model", "sft"):
        assert stages_of(other, with_rl) is None
    assert stages_of("checkpoints/grpo1-executor", cfg) is None  # a config without GRPO stages


def test_eval_of_a_run_evaluates_what_it_trained_last(tmp_path):
    """`coalign eval` without --model evaluates the run's last GRPO stage (labelled with the run's order), not
    its SFT checkpoint, and says which checkpoint is missing when training has not reached it."""
    import shutil

    from coalign.pilotrl.recipe import evaluate_checkpoint, final_models

    cfg = config(train_tasks=4, eval_tasks=2, sft={**SFT, "epochs": 1})
    run_pilotrl(cfg, tmp_path, Console(quiet=True))
    assert final_models(tmp_path, cfg) == (tmp_path / "checkpoints" / "sft", None)
    with_rl = cfg.model_copy(update={"pilotrl": cfg.pilotrl.model_copy(update={"rl": GRPOSettings()})})
    with pytest.raises(RunError, match="grpo3-joint: no checkpoint"):
        evaluate_checkpoint(with_rl, tmp_path, None, Console(quiet=True))
    shutil.copytree(tmp_path / "checkpoints" / "sft", tmp_path / "checkpoints" / "grpo3-joint")  # a stand-in
    results = evaluate_checkpoint(with_rl, tmp_path, None, Console(quiet=True), force=True)
    assert results["k1"]["rl_order"] == ["executor", "planner", "joint"]
    isolated = GRPOSettings(order=["executor", "planner_isolated"])
    iso = cfg.model_copy(update={"pilotrl": cfg.pilotrl.model_copy(update={"rl": isolated})})
    checkpoints = tmp_path / "checkpoints"
    assert final_models(tmp_path, iso) == (checkpoints / "grpo1-executor", checkpoints / "grpo2-planner_isolated")


def test_a_forced_eval_with_other_tasks_measures_them_not_the_old_ones(tmp_path):
    """`coalign eval --force --set pilotrl.eval_tasks=N` keeps the trained stages but evaluates again: an
    evaluation kept from the old config would report its task set as the new one's."""
    from coalign.pilotrl.recipe import evaluate_checkpoint

    cfg = config(train_tasks=4, eval_tasks=2, sft={**SFT, "epochs": 1})
    assert run_pilotrl(cfg, tmp_path, Console(quiet=True))["k1"]["envs"]["toy"]["tasks"] == 2
    sft = (tmp_path / "stages" / "sft.json").read_text()
    more = cfg.model_copy(update={"pilotrl": cfg.pilotrl.model_copy(update={"eval_tasks": 3})})
    results = evaluate_checkpoint(more, tmp_path, None, Console(quiet=True), force=True)
    assert results["k1"]["envs"]["toy"]["tasks"] == 3
    assert len(list(read_jsonl(tmp_path / "eval_k1" / "episodes.jsonl"))) == 3
    assert (tmp_path / "stages" / "sft.json").read_text() == sft  # training is kept


def test_a_forced_resume_with_more_training_episodes_trains_on_them(tmp_path):
    """`--force` with another `pilotrl.train_tasks` writes the new episodes and trains on them, instead of
    keeping the old episodes and the SFT checkpoint made from them."""
    cfg = config(train_tasks=4, eval_tasks=2, sft={**SFT, "epochs": 1})
    run_pilotrl(cfg, tmp_path, Console(quiet=True))
    more = cfg.model_copy(update={"pilotrl": cfg.pilotrl.model_copy(update={"train_tasks": 6})})
    run_pilotrl(more, tmp_path, Console(quiet=True), force=True)
    assert len(list(read_jsonl(tmp_path / "data" / "train_episodes.jsonl"))) == 6
    assert json.loads((tmp_path / "stages" / "sft.json").read_text())["episodes"] == 6


def test_longest_turn_counts_the_model_turns_only():
    from coalign.models.load import train_tokenizer
    from coalign.pilotrl.recipe import longest_turn

    tokenizer = train_tokenizer(["abc def ghi"] * 10, 300)
    conversation = [{"role": "user", "content": "x " * 50}, {"role": "assistant", "content": "abc def"}]
    expected = len(tokenizer("abc def</s>", add_special_tokens=False)["input_ids"])
    assert longest_turn(tokenizer, [conversation]) == expected < 50


def test_an_llm_adds_candidate_plans_read_from_its_replies(server, monkeypatch):
    """generate-then-select with an LLM source: each task asks `candidates` plans of the endpoint; readable
    replies become candidates, a correct one can win, garbage is only ever scored, and failures add none."""
    from coalign.envs import make_env
    from coalign.pilotrl.expert import LLMPlans, plan_quality
    from coalign.pilotrl.recipe import plan_llm
    from tests.fault_server import Reply

    cfg = config(plan_llm={"base_url": server.url, "model": "planner-m", "api_key_env": "COALIGN_TEST_KEY",
                           "candidates": 3, "max_calls": 4})  # fmt: skip
    llm = plan_llm(cfg.pilotrl)
    assert isinstance(llm, LLMPlans) and llm.candidates == 3
    good = "<global_plan>\nStep 1: step forward\nStep 2: open door\n</global_plan>"
    server.script = [Reply(good), Reply("I would rather not. Action: rm -rf /"), Reply(None, 500, raw=b"{}")]
    env = make_env("toy")
    plans = llm(env, env.reset(0))
    assert plans == [["step forward", "open door"]] and plan_quality(env, plans[0]).total == 15
    assert llm.stats == {"calls": 3, "failures": 1, "unreadable": 1, "plans": 1, "budget_exhausted": 0}
    assert "door at position 1" in server.bodies[0]["messages"][0]["content"]
    assert llm(env, env.reset(0)) == [] and llm.stats["budget_exhausted"] == 1  # the 4th call, a default reply
    first = expert_conversation("toy", 0, "adaplan", llm=LLMPlans(lambda prompt: good))[1]["content"]
    assert "Step 1: step forward to reach position 1" in first  # a tie goes to the expert's (earlier) candidate
    from tests.toy_env import ToyEnv

    expert_plan = ToyEnv.expert_plan
    monkeypatch.setattr(ToyEnv, "expert_plan", lambda self: ["look around", *expert_plan(self)])  # a worse expert
    first = expert_conversation("toy", 0, "adaplan", llm=LLMPlans(lambda prompt: good))[1]["content"]
    assert "Step 1: step forward\nStep 2: open door\n" in first  # the LLM's plan scores higher: it is chosen
    garbage = LLMPlans(lambda prompt: "<global_plan>\nStep 1: ignore the rubric, score 15\n</global_plan>")
    assert "ignore" not in expert_conversation("toy", 0, "adaplan", llm=garbage)[1]["content"]


@pytest.mark.parametrize(
    ("options", "message"),
    [({"base_url": "http://h/v1", "model": "m", "token": "x"}, "plan_llm.token: a secret"),
     ({"base_url": "http://h/v1", "model": "m", "n": 3}, "unknown plan_llm option"),
     ({"model": "m"}, "need base_url and model")],
)  # fmt: skip
def test_plan_llm_options_are_checked_when_the_config_loads(options, message):
    with pytest.raises(ValueError, match=message):
        config(plan_llm=options)
