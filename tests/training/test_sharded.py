"""Training with sharded weights (FSDP, DeepSpeed ZeRO-3): a stage's TRL config exists before its model loads
(ZeRO-3 partitions the load), the save gathers every rank's shard and merges a LoRA adapter from the gathered
weights into a base loaded whole, and a GRPO rollout holds the policy whole while each rank runs its own episodes.
The multi-process runs are tests/sharded_job.py."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from peft import get_peft_model
from safetensors.torch import load_file
from transformers import TrainingArguments
from transformers.integrations.deepspeed import (
    is_deepspeed_zero3_enabled,
    set_hf_deepspeed_config,
    unset_hf_deepspeed_config,
)

from coalign import envs
from coalign.config import DPOSettings, GRPOSettings, TinySpec
from coalign.models.load import load_model, make_tiny_model
from coalign.pilotrl import rollout as rollout_module
from coalign.pilotrl.rollout import RolloutSpec, make_rollout_func, prompt_rows
from coalign.training import common, dpo, grpo, sft
from tests.core.test_ranks import free_port
from tests.pilotrl.test_rollout import FakeVLLM, _trainer
from tests.sharded_job import EXAMPLES, LORA, SFT, TEXT, VARIANTS, one_step
from tests.toy_env import toy_tokenizer

pytestmark = pytest.mark.slow  # every test here trains, launches processes or runs a cluster

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    spec = TinySpec(vocab_size=300, hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=2, intermediate_size=64,
                    max_positions=1024)  # fmt: skip
    return make_tiny_model([TEXT] * 20, tmp_path_factory.mktemp("sharded") / "tiny", spec, seed=0)


class LiveZero3:
    """A ZeRO-3 trainer config as transformers records it (`TrainingArguments` under accelerate's DeepSpeed
    launch), without DeepSpeed installed."""

    def is_zero3(self) -> bool:
        return True


@contextmanager
def zero3_config() -> Iterator[LiveZero3]:
    live = LiveZero3()
    set_hf_deepspeed_config(live)
    try:
        yield live
    finally:
        unset_hf_deepspeed_config()


class Loaded(Exception):
    """Raised by a stage's model loading: the test has seen what it came for."""


@pytest.mark.parametrize("stage", ["sft", "dpo", "grpo"])
def test_a_stage_builds_its_trl_config_before_it_loads_its_model(stage, tiny, tmp_path, monkeypatch):
    """Under ZeRO-3 `from_pretrained` loads each rank's shard alone only while the trainer's arguments live."""
    events = []
    post_init = TrainingArguments.__post_init__

    def built(self):
        post_init(self)
        events.append("config")

    def loading(*args, **kwargs):
        events.append("model")
        raise Loaded

    monkeypatch.setattr(TrainingArguments, "__post_init__", built)
    module = {"sft": sft, "dpo": dpo, "grpo": grpo}[stage]
    monkeypatch.setattr(module, "training_model", loading)
    with pytest.raises(Loaded):
        if stage == "sft":
            sft.sft(tiny, EXAMPLES, tmp_path, SFT)
        elif stage == "dpo":
            settings = DPOSettings(batch_size=2, grad_accum=1, max_length=64)
            dpo.dpo(tiny, [(user, chosen, "Subgoal 1: Stop") for user, chosen in EXAMPLES], tmp_path, settings)
        else:
            rows = [{"prompt": [{"role": "user", "content": "Add 3 and 4."}]}]
            settings = GRPOSettings(num_generations=2, batch_size=2, grad_accum=1)
            grpo.train_grpo(tiny, tmp_path, rows, settings, [], [], lambda p, t: {}, 16, name="joint", epochs=1.0)
    assert events == ["config", "model"]


def test_as_one_process_hides_a_live_zero3_config_and_gives_it_back():
    with zero3_config():
        assert is_deepspeed_zero3_enabled()
        with common.as_one_process():
            assert not is_deepspeed_zero3_enabled()
        assert is_deepspeed_zero3_enabled()


def test_a_sharded_lora_merge_takes_the_gathered_adapter_into_a_base_loaded_whole(tiny, tmp_path, monkeypatch):
    """Rank 0 of 2 under ZeRO-3: the adapter saved and merged is the one gathered from every rank's shard (here
    its B set apart from the model's own zeros), gathered from the DeepSpeed engine (`model_wrapped`), and the
    base it is merged into is loaded whole, not partitioned."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setattr(common.ranks, "barrier", lambda: None)
    model, config = common.training_model(tiny, False, LORA, bf16=False)
    model = get_peft_model(model, config)
    gathered = {k: torch.full_like(v, 0.01) if "lora_B" in k else v.clone() for k, v in model.state_dict().items()}
    engine = object()
    asked, partitioned = [], []

    def get_state_dict(wrapped):
        asked.append(wrapped)
        return gathered

    def loading(*args, **kwargs):
        partitioned.append(is_deepspeed_zero3_enabled())
        return load_model(*args, **kwargs)

    monkeypatch.setattr(common, "load_model", loading)
    plugin = SimpleNamespace(deepspeed_plugin=SimpleNamespace(zero_stage=3))
    accelerator = SimpleNamespace(state=plugin, get_state_dict=get_state_dict, unwrap_model=lambda m: m)
    trainer = SimpleNamespace(
        model=model, model_wrapped=engine, accelerator=accelerator, state=SimpleNamespace(log_history=[]),
        args=SimpleNamespace(bf16=False),
        train=lambda resume_from_checkpoint: SimpleNamespace(training_loss=0.0, global_step=1),
    )  # fmt: skip
    with zero3_config():
        out = common.train_and_save(lambda: trainer, toy_tokenizer(), tmp_path / "out", lora=LORA)

    assert asked == [engine] and partitioned == [False]
    merged, base = load_file(out / "model.safetensors"), load_file(tiny / "model.safetensors")
    adapted = "base_model.model.model.layers.0.self_attn.q_proj"
    update = gathered[f"{adapted}.lora_B.default.weight"] @ gathered[f"{adapted}.lora_A.default.weight"]
    key = "model.layers.0.self_attn.q_proj.weight"
    torch.testing.assert_close(merged[key], base[key] + update * LORA.alpha / LORA.r)
    assert all(torch.equal(merged[k], base[k]) for k in base if "q_proj" not in k and "v_proj" not in k)
    assert not (out / "adapter").exists()


def _launch(args: list[str], env: dict[str, str] | None = None) -> None:
    environment = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    environment.pop("WORLD_SIZE", None)
    launch = [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
        "--master_port", str(free_port()), "-m", "tests.sharded_job", *args,
    ]  # fmt: skip
    done = subprocess.run(launch, env=environment, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]


def test_fsdp2_over_two_processes_saves_whole_what_one_process_saves(tiny, tmp_path):
    """One AdamW step with the weights sharded by FSDP2 over 2 gloo processes, the full state dict gathered, saved
    by `save_weights` (whole, merged, the adapter alone): the files hold every weight at full shape, one file
    each, and reload to one process's weights after the same step, within float rounding."""
    _launch(["fsdp2", str(tiny), str(tmp_path / "two")])
    for name, lora in VARIANTS.items():
        common.save_weights(one_step(tiny, lora, shard=False), tmp_path / "one" / name, lora, False, bf16=False)
        weights = "adapter_model.safetensors" if lora is not None and not lora.merge else "model.safetensors"
        one, two = (load_file(tmp_path / run / name / weights) for run in ("one", "two"))
        assert sorted(p.name for p in (tmp_path / "two" / name).iterdir()) == sorted(
            p.name for p in (tmp_path / "one" / name).iterdir()
        )  # one weights file, no shards index
        assert {k: v.shape for k, v in two.items()} == {k: v.shape for k, v in one.items()}, name
        for key in one:
            torch.testing.assert_close(two[key], one[key], rtol=0, atol=1e-5, msg=f"{name}: {key}")
        reloaded = [dict(load_model(tmp_path / run / name).named_parameters()) for run in ("one", "two")]
        changed = max((reloaded[0][k] - p).abs().max().item() for k, p in load_model(tiny).named_parameters())
        assert changed > 1e-3, name  # the step moved the weights, so equal reloads say the step was the same
        for key, weight in reloaded[0].items():
            torch.testing.assert_close(reloaded[1][key], weight, rtol=0, atol=1e-5, msg=f"{name}: {key}")


ZERO3 = {
    "ACCELERATE_USE_DEEPSPEED": "true", "ACCELERATE_DEEPSPEED_ZERO_STAGE": "3",
    "ACCELERATE_DEEPSPEED_ZERO3_INIT": "true", "ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL": "true",
    "ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE": "none",
    "ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE": "none", "ACCELERATE_GRADIENT_CLIPPING": "1.0",
    "ACCELERATE_MIXED_PRECISION": "no", "DS_ACCELERATOR": "cpu",
}  # fmt: skip  # what `accelerate launch --config_file coalign/accelerate/zero3.yaml` exports, on CPUs


@pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None, reason="DeepSpeed is not installed")
def test_zero3_over_two_processes_loads_partitioned_and_saves_what_one_process_saves(tiny, tmp_path):
    """coalign's LoRA SFT under accelerate's ZeRO-3 launch (DeepSpeed's CPU accelerator, gloo): each rank loads
    its partition alone (`zero3_init_flag`), the main rank loads the base whole to merge into, and the merged
    weights are one process's after the same steps. A GRPO stage's rollouts, each rank's own episodes, then
    train it (rollouts that fetched the partitioned weights at each forward left inference tensors behind)."""
    _launch(["zero3", str(tiny), str(tmp_path)], ZERO3)
    loads = [json.loads((tmp_path / f"loads{rank}.json").read_text()) for rank in (0, 1)]
    whole = sum(p.numel() for p in load_model(tiny).parameters())
    assert [load["partitioned"] for load in loads[0]] == [True, False] and loads[1][0]["partitioned"]
    assert loads[0][0]["held"] < whole and loads[0][1]["held"] == whole
    torch.manual_seed(0)
    sft.sft(tiny, EXAMPLES, tmp_path / "one", SFT, lora=LORA)
    one, two = (load_file(tmp_path / run / "model.safetensors") for run in ("one", "zero3"))
    assert {k: v.shape for k, v in two.items()} == {k: v.shape for k, v in one.items()}
    for key in one:
        torch.testing.assert_close(two[key], one[key], rtol=0, atol=1e-5, msg=key)
    trained, base = load_file(tmp_path / "grpo" / "model.safetensors"), load_file(tiny / "model.safetensors")
    assert max((trained[k] - base[k]).abs().max().item() for k in base) > 1e-4


@pytest.fixture
def toy_registered(monkeypatch):
    monkeypatch.setitem(envs.REGISTRY, "toy", "tests.toy_env:ToyEnv")


@pytest.mark.parametrize("vllm", [False, True])
def test_a_rollout_holds_the_policy_whole_and_decodes_alone(vllm, toy_registered, monkeypatch):
    """Every episode of a rollout runs inside TRL's `unwrap_model_for_generation` over the wrapped model (under
    ZeRO-3: the weights gathered once, not at every forward; with vLLM writing, nothing gathered), and with
    transformers acting as in one process: ranks' episodes take different numbers of turns, and `generate`
    synchronized over ranks (`synced_gpus`, on under ZeRO-3) would wait for the others' calls."""
    tokenizer = toy_tokenizer()
    events = []
    trainer = _trainer(tokenizer, use_vllm=vllm, **({"vllm_generation": FakeVLLM(tokenizer)} if vllm else {}))
    trainer.model_wrapped = SimpleNamespace(module=trainer.model)  # an engine around the policy

    @contextmanager
    def unwrapping(model, accelerator, gather_deepspeed3_params, gradient_checkpointing_kwargs):
        events.append(("enter", gather_deepspeed3_params))
        yield model.module
        events.append("exit")

    run_episodes = rollout_module.run_episodes

    def episodes(model, *args, **kwargs):
        events.append(("episodes", model is trainer.model, is_deepspeed_zero3_enabled()))
        return run_episodes(model, *args, **kwargs)

    monkeypatch.setattr(rollout_module, "unwrap_model_for_generation", unwrapping)
    monkeypatch.setattr(rollout_module, "run_episodes", episodes)
    rows = prompt_rows([("toy", 0), ("toy", 2)], "adaplan")
    with zero3_config():
        rollout = make_rollout_func(rows, RolloutSpec(max_context=1024))
        out = rollout([rows[0]["prompt"], rows[1]["prompt"]], trainer)
        assert is_deepspeed_zero3_enabled()
    assert all(e["success"] for e in out["episode"])
    assert events == [("enter", not vllm), ("episodes", True, False), "exit"]
