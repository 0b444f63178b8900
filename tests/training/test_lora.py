"""LoRA (the config's `lora` block): SFT, DPO and GRPO train adapters only, through TRL's `peft_config`; a merged
checkpoint is a plain model differing from its base by a low-rank update in the adapted layers, an unmerged one
an adapter folder that loads (merged) wherever a model is named and trains on in the next stage; under bf16 the
frozen base is bf16, the adapter fp32 and a merge is saved in bf16; DPO keeps no second model; QLoRA is refused
where it cannot run; bad fields name file, line and key."""

from __future__ import annotations

import json
import math
import shutil

import pytest
import torch
from peft import PeftModel, get_peft_model, get_peft_model_state_dict
from rich.console import Console
from safetensors.torch import load_file
from trl import DPOTrainer
from trl.trainer import dpo_trainer

from coalign import envs
from coalign.config import (
    ConfigError,
    DPOSettings,
    GRPOSettings,
    LoraSettings,
    SFTSettings,
    TinySpec,
    config_to_yaml,
    load_config,
)
from coalign.core import machine
from coalign.core.errors import RunError
from coalign.core.runs import Run, read_json
from coalign.formats.lumos import lumos_chat, lumos_generation_prompt, planner_prompt
from coalign.moat.recipe import run_moat
from coalign.models.agents import Agent, generate
from coalign.models.load import adapter_base, is_adapter, load_model, make_tiny_model
from coalign.pilotrl import curriculum
from coalign.pilotrl.curriculum import STAGES, grpo_stage
from coalign.pilotrl.expert import expert_conversation
from coalign.pilotrl.recipe import run_pilotrl
from coalign.pilotrl.rollout import prompt_rows
from coalign.training import dpo as dpo_module
from coalign.training import grpo as grpo_module
from coalign.training import sft as sft_module
from coalign.training.common import save_weights, training_model
from coalign.training.dpo import dpo
from coalign.training.grpo import StageTrainer
from coalign.training.sft import LogitsLossSFTTrainer, sft
from tests.moat.test_moat import MOAT
from tests.toy_env import killed_after
from tests.training.test_grpo import RL, TINY, _config, _spec

SPEC = TinySpec(vocab_size=400, hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=128)
PAIRS = [(3, 4), (15, 27), (8, 61), (5, 9)]
EXAMPLES = [(planner_prompt(f"Add {a} and {b}."), f"Subgoal 1: Add {a} and {b}") for a, b in PAIRS]
TRIPLES = [(user, chosen, "Subgoal 1: Find the total") for user, chosen in EXAMPLES]
SFT = SFTSettings(learning_rate=1e-2, epochs=2, batch_size=4, grad_accum=1, warmup_ratio=0, max_length=256)
DPO = DPOSettings(learning_rate=1e-2, epochs=2, batch_size=4, grad_accum=1, warmup_ratio=0, max_length=256)
ADAPTED = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    texts = [lumos_generation_prompt(u) + c + r for u, c, r in TRIPLES]
    return make_tiny_model(texts, tmp_path_factory.mktemp("lora") / "tiny", SPEC, seed=0)


def _weights(folder) -> dict[str, torch.Tensor]:
    return load_file(str(folder / "model.safetensors"))


def _logits(model) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([[1, 5, 9, 40, 7]])).logits


def test_a_merged_lora_sft_changes_only_the_adapted_layers_by_a_low_rank_update(tiny, tmp_path):
    out = sft(tiny, EXAMPLES, tmp_path / "sft", SFT, lora=LoraSettings(r=4))
    assert not is_adapter(out) and (out / "tokenizer.json").is_file()
    base, merged = _weights(tiny), _weights(out)
    assert base.keys() == merged.keys()
    for name, weight in base.items():
        delta = merged[name] - weight
        if any(layer in name for layer in ADAPTED):
            assert 0 < torch.linalg.matrix_rank(delta) <= 4, name
        else:  # embeddings, norms: not adapted, not trained
            assert torch.equal(delta, torch.zeros_like(delta)), name
    assert not torch.allclose(_logits(load_model(out)), _logits(load_model(tiny)))


def test_an_unmerged_lora_sft_saves_the_adapter_alone_and_loads_merged_anywhere(tiny, tmp_path):
    run = tmp_path / "run"  # a run folder's layout: its base model and the checkpoint trained on it
    base = shutil.copytree(tiny, run / "models" / "tiny")
    out = sft(base, EXAMPLES, run / "checkpoints" / "sft", SFT, lora=LoraSettings(r=4, merge=False))
    assert sorted(p.name for p in out.iterdir()) == [
        "adapter_config.json",
        "adapter_model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "train_log.json",
    ]
    tensors = load_file(str(out / "adapter_model.safetensors"))
    assert tensors and all("lora_A" in name or "lora_B" in name for name in tensors)
    assert any(t.abs().sum() > 0 for name, t in tensors.items() if "lora_B" in name)  # B starts at zero
    assert _weights(base).keys() == _weights(tiny).keys()
    assert all(torch.equal(w, _weights(tiny)[k]) for k, w in _weights(base).items())  # the base is only read
    adapter = PeftModel.from_pretrained(load_model(base, dtype="float32"), str(out))
    merged = load_model(out, dtype="float32")
    assert not isinstance(merged, PeftModel)
    assert torch.allclose(_logits(merged), _logits(adapter), atol=1e-5)
    assert not torch.allclose(_logits(merged), _logits(load_model(base)))

    # the base is recorded relative to the adapter, so the moved run folder still loads
    assert json.loads((out / "adapter_config.json").read_text())["base_model_name_or_path"] == "../../models/tiny"
    moved = run.rename(tmp_path / "moved")
    assert adapter_base(moved / "checkpoints" / "sft") == str((moved / "models" / "tiny").resolve())
    assert torch.allclose(_logits(load_model(moved / "checkpoints" / "sft")), _logits(merged))
    ((completion,),) = generate(Agent.load(str(moved / "checkpoints" / "sft")), [EXAMPLES[0][0]], 8)
    assert isinstance(completion, str)
    alone = shutil.copytree(moved / "checkpoints" / "sft", tmp_path / "alone")  # without its base
    with pytest.raises(RunError, match=r"LoRA adapter whose base model ../../models/tiny \(relative to it\) is"):
        load_model(alone)


@pytest.fixture
def native_bf16(monkeypatch):
    """A CPU with native bf16 as `decide_bf16` reads it, on any machine (bf16 autocast runs emulated elsewhere)."""
    monkeypatch.setattr(machine, "cpu_bf16_flags", lambda cpuinfo=None: ["avx512_bf16"])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


class Snapshot(LogitsLossSFTTrainer):
    """The SFT stage's trainer, recording the dtypes of its model's frozen and trained weights once TRL has
    wrapped the model in its adapter."""

    dtypes: dict[str, set[torch.dtype]] = {}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        params = list(self.model.parameters())
        Snapshot.dtypes = {
            "frozen": {p.dtype for p in params if not p.requires_grad},
            "trained": {p.dtype for p in params if p.requires_grad},
        }


BF16_SFT = SFT.model_copy(update={"bf16": True})


def test_under_bf16_lora_holds_its_base_in_bf16_its_adapter_in_fp32_and_saves_in_bf16(
    tiny, tmp_path, native_bf16, monkeypatch
):
    """Issue 70: the frozen base was loaded in fp32 (an 8B base took 32 GB, not 16) and the adapter merged into
    an fp32 load (a 14B run's checkpoints 59 GB each)."""
    monkeypatch.setattr(sft_module, "LogitsLossSFTTrainer", Snapshot)
    out = sft(tiny, EXAMPLES, tmp_path / "sft", BF16_SFT, lora=LoraSettings(r=4))
    assert Snapshot.dtypes == {"frozen": {torch.bfloat16}, "trained": {torch.float32}}
    assert math.isfinite(read_json(out / "train_log.json")["train_loss"])
    assert json.loads((out / "config.json").read_text())["dtype"] == "bfloat16"
    merged, base = _weights(out), _weights(tiny)
    assert {t.dtype for t in merged.values()} == {torch.bfloat16}
    for name, weight in base.items():  # the adapted layers moved off the base's bf16 rounding, no other did
        moved = not torch.equal(merged[name], weight.to(torch.bfloat16))
        assert moved == any(layer in name for layer in ADAPTED), name


@pytest.mark.parametrize(
    ("lora", "bf16"),
    [(None, True), (LoraSettings(r=4, bias="all"), True), (LoraSettings(r=4), False)],
    ids=["full-fine-tuning", "trained-biases", "bf16-off"],
)
def test_weights_that_train_and_stages_without_bf16_stay_fp32(tiny, lora, bf16):
    """bf16 would round a trained weight's small updates away: every weight without LoRA, the base's biases
    under `lora.bias` all or lora_only."""
    model, _ = training_model(tiny, False, lora, bf16)
    assert {p.dtype for p in model.parameters()} == {torch.float32}


def test_a_bf16_merge_of_gathered_weights_saves_what_the_merge_in_place_saves(tiny, tmp_path):
    """A sharded run merges the gathered adapter into its base loaded again: at the dtype the stage held it in."""
    lora = LoraSettings(r=4)
    model, config = training_model(tiny, False, lora, bf16=True)
    model = get_peft_model(model, config)  # as TRL wraps it: the adapter in fp32
    with torch.no_grad():
        for name, weight in model.named_parameters():
            if "lora_B" in name:
                weight.fill_(0.01)
    gathered = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    save_weights(model, tmp_path / "gathered", lora, False, gathered, bf16=True)
    save_weights(model, tmp_path / "in_place", lora, False, bf16=True)
    one, other = _weights(tmp_path / "gathered"), _weights(tmp_path / "in_place")
    assert one.keys() == other.keys() and all(torch.equal(one[k], other[k]) for k in one)
    assert {t.dtype for t in one.values()} == {torch.bfloat16}
    assert json.loads((tmp_path / "gathered" / "config.json").read_text())["dtype"] == "bfloat16"
    assert not (tmp_path / "gathered" / "adapter").exists()


def test_an_unmerged_bf16_lora_saves_its_fp32_adapter_alone_which_later_stages_load(tiny, tmp_path, native_bf16):
    lora = LoraSettings(r=4, merge=False)
    out = sft(tiny, EXAMPLES, tmp_path / "sft", BF16_SFT, lora=lora)
    assert sorted(p.name for p in out.iterdir()) == [
        "adapter_config.json",
        "adapter_model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "train_log.json",
    ]
    saved = load_file(str(out / "adapter_model.safetensors"))
    assert {t.dtype for t in saved.values()} == {torch.float32}
    model, config = training_model(out, False, lora, bf16=True)  # the next stage trains the adapter on
    assert config is None and isinstance(model, PeftModel)
    assert {p.dtype for p in model.parameters() if not p.requires_grad} == {torch.bfloat16}
    adapter = get_peft_model_state_dict(model)
    assert adapter.keys() == saved.keys() and all(torch.equal(adapter[k], saved[k]) for k in saved)
    trained = [(name, p.dtype) for name, p in model.named_parameters() if p.requires_grad]
    assert trained and all("lora_" in name and dtype == torch.float32 for name, dtype in trained)
    merged = load_model(out, dtype="bfloat16")  # generation and scoring load it merged
    assert not isinstance(merged, PeftModel)
    assert not torch.allclose(_logits(merged).float(), _logits(load_model(tiny, dtype="bfloat16")).float())


class Recorded(DPOTrainer):
    """DPOTrainer that keeps itself where the test can look at it."""

    made: list[DPOTrainer] = []

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        Recorded.made.append(self)


@pytest.fixture
def recorded(monkeypatch):
    """DPO stages whose trainers are recorded and may not create a reference model."""

    def no_second_model(*args, **kwargs):
        raise AssertionError("DPOTrainer created a reference model")

    monkeypatch.setattr(dpo_trainer, "create_model_from_path", no_second_model)
    monkeypatch.setattr(dpo_module, "DPOTrainer", Recorded)
    Recorded.made = []
    return Recorded.made


def test_lora_dpo_keeps_no_reference_model_and_trains_the_adapter_only(tiny, tmp_path, recorded):
    """A fresh adapter's reference is the model with the adapter disabled; an adapter trained on (merge: false,
    from an adapter folder) gets a frozen copy of itself as reference, which is not saved."""
    out = dpo(tiny, TRIPLES, tmp_path / "dpo", DPO, lora=LoraSettings(r=4, merge=False))
    (trainer,) = recorded
    assert trainer.ref_model is None and isinstance(trainer.model, PeftModel)
    trained = [name for name, p in trainer.model.named_parameters() if p.requires_grad]
    assert trained and all("lora_" in name for name in trained)
    assert is_adapter(out) and read_json(out / "train_log.json")["steps"] == 2

    again = dpo(out, TRIPLES, tmp_path / "dpo2", DPO, lora=LoraSettings(r=4, merge=False))
    trainer = recorded[1]
    assert trainer.ref_model is None and set(trainer.model.peft_config) == {"default", "ref"}
    assert is_adapter(again) and not (again / "ref").exists()
    before, after = (load_file(str(p / "adapter_model.safetensors")) for p in (out, again))
    assert before.keys() == after.keys() and any(not torch.equal(before[k], after[k]) for k in before)
    assert adapter_base(again) == str(tiny.resolve())  # one base under the chain of adapters


def test_full_dpo_precomputes_the_reference_instead_of_keeping_a_second_model(tiny, tmp_path, recorded):
    dpo(tiny, TRIPLES, tmp_path / "dpo", DPO)
    (trainer,) = recorded
    assert trainer.args.precompute_ref_log_probs and trainer.ref_model is None
    assert {"ref_chosen_logps", "ref_rejected_logps"} <= set(trainer.train_dataset.column_names)


@pytest.mark.slow
def test_a_lora_pilotrl_run_chains_adapters_over_one_base_and_resumes(toy, tmp_path):
    """SFT then two GRPO stages, each training on the adapter before it; evaluation loads the last merged; the
    tiny base is never rewritten; run again, every stage is found finished."""
    cfg = _config(["executor", "planner"]).model_copy(update={"lora": LoraSettings(r=4, merge=False)})
    run_pilotrl(cfg, tmp_path, Console(quiet=True))
    base = tmp_path / "models" / "tiny-init"
    stages = ["sft", "grpo1-executor", "grpo2-planner"]
    for name in stages:
        folder = tmp_path / "checkpoints" / name
        assert is_adapter(folder) and adapter_base(folder) == str(base.resolve())
    assert not Run(tmp_path).problems(read_json(tmp_path / "stages" / "init.json")["artifacts"])
    assert "grpo2-planner" in str(read_json(tmp_path / "stages" / "eval_k1.json")["inputs"])
    assert "lora:" in (tmp_path / "config.yaml").read_text()
    stamps = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "stages").glob("*.json")}
    run_pilotrl(cfg, tmp_path, Console(quiet=True))
    assert {p.name: p.stat().st_mtime_ns for p in (tmp_path / "stages").glob("*.json")} == stamps


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setitem(envs.REGISTRY, "toy", "tests.toy_env:ToyEnv")


def test_a_lora_grpo_stage_trains_the_adapter_and_resumes_from_its_checkpoint(toy, tmp_path, monkeypatch):
    """Rewards that differ within each group, so every step has a gradient: the stage changes the adapter
    only; killed after its first step, it resumes from the adapter checkpoint to the same adapter."""
    texts = [lumos_chat(expert_conversation("toy", s, "adaplan")) for s in range(6)]
    base = make_tiny_model(texts, tmp_path / "init", TinySpec(**TINY), seed=0)
    monkeypatch.setattr(curriculum, "reward_functions", lambda *a, **k: ([_varied], [1.0]))
    stage, rows = STAGES["joint"], prompt_rows([("toy", s) for s in range(4)], "adaplan")  # two steps an epoch
    settings, lora = GRPOSettings(**{**RL, "epochs": {"joint": 1}}), LoraSettings(r=4, merge=False)
    whole = grpo_stage(base, tmp_path / "whole", rows, stage, settings, _spec(stage), lora=lora)
    adapter = load_file(str(whole / "adapter_model.safetensors"))
    assert read_json(whole / "train_log.json")["steps"] == 2
    assert all("lora_" in name for name in adapter)
    assert any(t.abs().sum() > 0 for name, t in adapter.items() if "lora_B" in name)  # B starts at zero
    assert not torch.allclose(_logits(load_model(whole)), _logits(load_model(base)))

    monkeypatch.setattr(grpo_module, "StageTrainer", killed_after(StageTrainer))
    with pytest.raises(KeyboardInterrupt):
        grpo_stage(base, tmp_path / "resumed", rows, stage, settings, _spec(stage), lora=lora)
    assert (tmp_path / "resumed" / "trainer" / "checkpoint-1" / "adapter_model.safetensors").is_file()
    monkeypatch.setattr(grpo_module, "StageTrainer", StageTrainer)
    resumed = grpo_stage(base, tmp_path / "resumed", rows, stage, settings, _spec(stage), lora=lora)
    again = load_file(str(resumed / "adapter_model.safetensors"))
    assert adapter.keys() == again.keys() and all(torch.equal(adapter[k], again[k]) for k in adapter)


def _varied(episode, **_) -> list[float]:
    return [float(i % 2) for i in range(len(episode))]


@pytest.mark.slow
def test_a_lora_moat_run_trains_adapters_in_its_sft_dpo_and_round_stages(tmp_path):
    """Cold-start SFT, planner DPO and grounder SFT of a round: every checkpoint an adapter over the tiny base."""
    config = load_config("tiny", {**MOAT, "lora": {"r": 4, "merge": False}})
    history = run_moat(config, tmp_path, Console(quiet=True))
    assert set(history) == {"round0", "round1"} and read_json(tmp_path / "stages" / "round1_dpo.json")["pairs"]
    base = str((tmp_path / "models" / "tiny-init").resolve())
    for name in ("planner_sft", "grounder_sft", "round1_planner", "round1_grounder_sft"):
        assert is_adapter(tmp_path / "checkpoints" / name) and adapter_base(tmp_path / "checkpoints" / name) == base


def _load(tmp_path, body: str):
    path = tmp_path / "c.yaml"
    path.write_text("name: x\nrecipe: pilotrl\n" + body + "\n")
    return load_config(path), path


def test_qlora_is_refused_where_bitsandbytes_cannot_run(tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match=r"line 5: field 'lora.qlora': .*needs a CUDA GPU") as err:
        _load(tmp_path, "lora:\n  r: 8\n  qlora: true")
    assert str(tmp_path / "c.yaml") in str(err.value)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    with pytest.raises(ValueError, match="lora.qlora needs bitsandbytes"):
        LoraSettings(qlora=True)


@pytest.mark.parametrize(
    ("body", "line", "key", "problem"),
    [
        ("lora:\n  rank: 8", 4, "lora.rank", "unknown key"),
        ("lora:\n  r: 0", 4, "lora.r", "greater than or equal to 1"),
        ("lora:\n  dropout: 1.5", 4, "lora.dropout", "less than 1"),
        ("lora:\n  bias: some", 4, "lora.bias", "'none', 'all' or 'lora_only'"),
        ("lora:\n  merge: 1\n  target_modules: all", 5, "lora.target_modules", "'all-linear' or a non-empty list"),
        ("lora:\n  target_modules: [q_proj, 3]", 4, "lora.target_modules", "got \\['q_proj', 3\\]"),
        ("lora: 16", 3, "lora", "valid dictionary"),
    ],
)
def test_bad_lora_fields_name_file_line_and_key(tmp_path, body, line, key, problem):
    with pytest.raises(ConfigError, match=rf"c.yaml, line {line}: field '{key}': .*{problem}"):
        _load(tmp_path, body)


def test_a_config_without_lora_is_saved_as_before_and_one_with_it_round_trips(tmp_path):
    assert "lora" not in config_to_yaml(load_config("tiny"))
    config, _ = _load(tmp_path, "lora: {r: 8, target_modules: [q_proj, v_proj], merge: false}")
    assert config.lora == LoraSettings(r=8, target_modules=["q_proj", "v_proj"], merge=False)
    saved = tmp_path / "saved.yaml"
    saved.write_text(config_to_yaml(config))
    assert load_config(saved) == config
