"""The paper configs: one per paper model, each holding its paper's numbers, reading the files `coalign data fetch`
writes, and with a LoRA line that is a valid block when uncommented."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from coalign.config import BUNDLED, LoraSettings, load_config
from coalign.pilotrl.curriculum import stage_epochs
from coalign.tasks.fetch import LUMOS_SETS

MOAT = {
    "paper-moat-llama2-7b": "meta-llama/Llama-2-7b-hf",
    "paper-moat-mistral-7b": "mistral-community/Mistral-7B-v0.2",
    "paper-moat-qwen2.5-14b": "Qwen/Qwen2.5-14B",
}
PILOTRL = {
    "paper-pilotrl-llama3.1-8b": "meta-llama/Llama-3.1-8B-Instruct",
    "paper-pilotrl-qwen2.5-7b": "Qwen/Qwen2.5-7B-Instruct",
    "paper-pilotrl-qwen3-8b": "Qwen/Qwen3-8B",
}


def test_there_is_one_config_per_paper_model():
    assert {path.stem for path in BUNDLED.glob("paper-*.yaml")} == {*MOAT, *PILOTRL}


@pytest.mark.parametrize("name", MOAT)
def test_moat_config_holds_the_papers_training_settings(name):
    config = load_config(name)
    assert (config.name, config.recipe) == (name, "moat")
    assert config.models.planner == config.models.grounder == MOAT[name]
    for sft in (config.planner_sft, config.grounder_sft, config.grounder_round_sft, config.planner_round_sft):
        assert (sft.learning_rate, sft.epochs, sft.max_length, sft.warmup_ratio, sft.lr_scheduler) == (
            2e-5, 2, 1024, 0.03, "linear"
        )  # fmt: skip
        assert sft.batch_size * sft.grad_accum == 128 and sft.bf16
    dpo = config.planner_dpo
    assert (dpo.learning_rate, dpo.batch_size, dpo.grad_accum, dpo.lr_scheduler, dpo.max_length) == (
        4e-7, 4, 8, "cosine", 1024
    )  # fmt: skip
    assert (dpo.beta, dpo.loss_type, dpo.warmup_ratio, dpo.weight_decay, dpo.epochs) == (0.2, "sigmoid", 0.05, 1e-4, 1)
    assert dpo.bf16
    moat = config.moat
    assert (moat.rounds, moat.tasks, moat.k, moat.temperature, moat.top_p) == (2, 1800, 15, 1.0, 0.95)
    assert (moat.pair_threshold, moat.pair_gap_on, moat.ground_temperature, moat.mix_ratio) == (0.1, "nll", 0.1, 1.0)
    assert moat.stage1 and moat.stage2 and moat.critic_subgoals == "original"
    assert config.generation.backend == "vllm"  # HF generate: ~450 sequential calls a round


@pytest.mark.parametrize("name", MOAT)
def test_moat_config_trains_on_the_fetched_files_and_evaluates_the_papers_six_sets(name):
    data = load_config(name).data
    fetched = [(Path("data", s.file("plan")), Path("data", s.file("ground"))) for s in LUMOS_SETS.values()]
    assert [(s.kind, s.path, s.grounder_path) for s in data.train] == [("lumos", p, g) for p, g in fetched]
    assert [s.kind for s in data.heldin] == ["gsm8k", "strategyqa", "mind2web"]
    assert [s.kind for s in data.heldout] == ["svamp", "hotpotqa", "webshop"]
    paper = load_config("paper").data  # the maths sets where paper.yaml has always pointed
    assert (data.heldin[0], data.heldout[0]) == (paper.heldin[0], paper.heldout[0])
    assert data.heldout[2].n == 500  # WebShop's test goals are its first 500


@pytest.mark.parametrize("name", PILOTRL)
def test_pilotrl_config_holds_the_papers_grpo_settings(name):
    config = load_config(name)
    settings, rl = config.pilotrl, config.pilotrl.rl
    assert (config.name, config.recipe, config.data) == (name, "pilotrl", None)
    assert (settings.model, settings.mode, settings.train_update_every) == (PILOTRL[name], "adaplan", [1])
    assert (settings.heldin, settings.heldout) == (["household", "crafting", "wordle", "iqa"], ["babyai", "maze"])
    assert rl.order == ["executor", "planner", "joint"]
    assert {stage: stage_epochs(rl, stage) for stage in rl.order} == {
        "executor": 1, "planner": 2, "joint": 1
    }  # fmt: skip
    assert (rl.num_generations, rl.learning_rate, rl.beta, rl.epsilon, rl.temperature) == (16, 1e-6, 0.0, 0.2, 1.0)
    assert rl.batch_size * rl.grad_accum == 256 and rl.batch_size % rl.num_generations == 0
    assert rl.bf16 and settings.sft.bf16
    assert settings.sft.max_length >= settings.max_context  # an SFT episode is never cut shorter than a run's


@pytest.mark.parametrize("name", [*MOAT, *PILOTRL])
def test_commented_lora_line_is_a_valid_block_and_the_same_as_setting_one_key(name):
    lines = [line for line in (BUNDLED / f"{name}.yaml").read_text().splitlines() if line.startswith("# lora:")]
    assert len(lines) == 1
    block = yaml.safe_load(lines[0].removeprefix("# "))["lora"]
    assert load_config(name).lora is None  # full fine-tuning, as the papers
    lora = load_config(name, {"lora": block}).lora
    assert lora == LoraSettings(r=16, alpha=32, dropout=0.05, target_modules="all-linear", qlora=False, merge=True)
    assert load_config(name, {"lora": {"r": 16}}).lora == lora  # the comment's `--set lora.r=16`
