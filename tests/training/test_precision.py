"""bf16 where it pays: "auto" is bf16 on a GPU that has it or a CPU with native bf16 (avx512_bf16, AMX), else
fp32; true where it cannot run is one RunError naming the setting, before any run folder exists. The CPU is
always simulated here, so these tests pass on any machine, with or without those flags."""

from __future__ import annotations

import json
import os

import pytest
import torch
from rich.console import Console

from coalign.config import (
    BUNDLED,
    TRAINING_STAGES,
    ConfigError,
    DPOSettings,
    GRPOSettings,
    RunConfig,
    SFTSettings,
    config_to_yaml,
    load_config,
)
from coalign.core import machine
from coalign.core.errors import RunError
from coalign.core.machine import LAUNCHER_PRECISION, cpu_bf16_flags, decide_bf16, precision_record
from coalign.models.bases import base_path
from coalign.training.common import common_args, trainer_args, trl_config
from coalign.training.grpo import grpo_config
from coalign.training.setup import decide_precision, inference_bf16, prepare_run
from coalign.training.sft import LogitsLossSFTTrainer, sft

DATA = {"train": [{"kind": "suite", "split": "train", "n": 10}]}
ALL_STAGES = (*TRAINING_STAGES, "pilotrl.sft")


def cpuinfo(flags: str) -> str:
    return (
        "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Test CPU\n"
        f"flags\t\t: fpu vme sse sse2 avx avx2 avx512f {flags}\nbugs\t\t: spectre_v1\n\n"
        "processor\t: 1\nvendor_id\t: GenuineIntel\n"
        f"flags\t\t: fpu vme sse sse2 avx avx2 avx512f {flags}\n"
    )


@pytest.fixture
def cpu(monkeypatch):
    """`cpu(native)`: no GPU, and a CPU whose /proc/cpuinfo has native bf16 flags or not."""

    def simulate(native: bool) -> None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
        monkeypatch.setattr(machine, "cpu_bf16_flags", lambda cpuinfo=None: ["avx512_bf16"] if native else [])
        monkeypatch.delenv("WORLD_SIZE", raising=False)
        monkeypatch.delenv(LAUNCHER_PRECISION, raising=False)

    return simulate


@pytest.fixture
def gpu(monkeypatch):
    """`gpu(bf16)`: a CUDA GPU that supports bf16 or not (the CPU has no native bf16 either way)."""

    def simulate(supported: bool) -> None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: supported)
        monkeypatch.setattr(machine, "cpu_bf16_flags", lambda cpuinfo=None: [])

    return simulate


def run_config(**fields) -> RunConfig:
    return RunConfig(name="precision", recipe="lumos", data=DATA, **fields)


# cpu_bf16_flags


@pytest.mark.parametrize(
    ("flags", "found"),
    [
        ("", []),
        ("avx512_bf16", ["avx512_bf16"]),
        ("amx_bf16 amx_tile amx_int8", ["amx_bf16"]),
        ("amx_bf16 avx512_bf16 avx512_fp16", ["avx512_bf16", "amx_bf16"]),
        ("avx512_bf16x avx512_bf16_foo xamx_bf16", []),  # a longer flag that starts like one is not it
        ("avx512bw avx512_vnni", []),
    ],
)
def test_cpu_bf16_flags_reads_the_flags_line(flags, found):
    assert cpu_bf16_flags(cpuinfo(flags)) == found


def test_cpu_bf16_flags_without_a_flags_line():
    assert cpu_bf16_flags("") == []
    assert cpu_bf16_flags("processor\t: 0\nFeatures\t: fp asimd bf16\n") == []  # an Arm CPU's line is not `flags`
    assert cpu_bf16_flags("model name\t: avx512_bf16 amx_bf16 inside\n") == []  # only the flags line counts


def test_cpu_bf16_flags_of_this_machine_is_a_list():
    flags = cpu_bf16_flags()
    assert isinstance(flags, list) and set(flags) <= set(machine.CPU_BF16_FLAGS)


# decide_bf16


@pytest.mark.parametrize("native", [True, False])
def test_false_is_fp32_everywhere(cpu, gpu, native):
    cpu(native)
    assert decide_bf16(False) is False
    gpu(True)
    assert decide_bf16(False) is False


def test_auto_on_a_cpu_follows_its_native_bf16(cpu):
    cpu(True)
    assert decide_bf16("auto") is True and decide_bf16(True) is True
    cpu(False)
    assert decide_bf16("auto") is False


def test_true_on_a_cpu_without_native_bf16_names_the_setting(cpu):
    cpu(False)
    with pytest.raises(RunError, match=r"^grounder_dpo\.bf16: true, but this machine has no GPU") as err:
        decide_bf16(True, "grounder_dpo.bf16")
    assert "avx512_bf16" in str(err.value) and "auto" in str(err.value)
    with pytest.raises(RunError, match=r"^bf16: true"):
        decide_bf16(True)


def test_a_gpu_decides_as_asked_or_by_its_support(gpu):
    gpu(True)
    assert decide_bf16("auto") is True and decide_bf16(True) is True
    gpu(False)
    assert decide_bf16("auto") is False
    assert decide_bf16(True) is True  # as asked: the trainer says what the GPU cannot do


def test_precision_record_says_what_was_decided_and_why(cpu):
    cpu(True)
    assert precision_record({"planner_sft": True}) == {
        "bf16": {"planner_sft": True},
        "device": "cpu",
        "cpu_bf16_flags": ["avx512_bf16"],
    }


# the config


def bf16_of(config: RunConfig) -> dict:
    return {name: settings.bf16 for name, settings in config.stage_settings().items()}


def test_run_bf16_fills_every_stage_that_does_not_set_its_own():
    config = run_config(bf16="auto", grounder_sft={"bf16": False, "epochs": 3}, planner_dpo={"beta": 0.2})
    stages = bf16_of(config)
    assert set(stages) == set(ALL_STAGES)
    assert stages == {**{name: "auto" for name in ALL_STAGES}, "grounder_sft": False}
    assert config.grounder_sft.epochs == 3 and config.planner_dpo.beta == 0.2  # the rest of a block stays
    assert config.bf16 == "auto"


def test_run_bf16_reaches_pilotrl_grpo_only_where_it_runs():
    assert "pilotrl.rl" not in run_config(bf16=True).stage_settings()
    config = run_config(bf16=True, pilotrl={"rl": {"tasks": 8}, "sft": {"bf16": "auto"}})
    stages = bf16_of(config)
    assert stages["pilotrl.rl"] is True and stages["pilotrl.sft"] == "auto" and stages["planner_sft"] is True


def test_without_run_bf16_each_stage_keeps_its_own():
    config = run_config(planner_sft={"bf16": "auto"}, planner_dpo={"bf16": True})
    assert config.bf16 is None
    assert bf16_of(config) == {
        **{name: False for name in ALL_STAGES},
        "planner_sft": "auto",
        "planner_dpo": True,
    }
    assert run_config().planner_sft.gradient_checkpointing is False
    assert run_config(planner_sft={"gradient_checkpointing": True}).planner_sft.gradient_checkpointing is True


def test_a_saved_config_with_run_bf16_loads_back_the_same(tmp_path):
    config = run_config(bf16="auto", grounder_sft={"bf16": False})
    saved = tmp_path / "config.yaml"
    saved.write_text(config_to_yaml(config))
    again = load_config(saved)
    assert again == config and config_to_yaml(again) == saved.read_text()


def test_bf16_that_is_no_precision_names_file_line_and_field(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\nbf16: maybe\ndata:\n  train:\n    - {kind: suite, split: train, n: 10}\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    message = str(err.value)
    assert f"{path}, line 2: field 'bf16" in message

    path.write_text("name: x\ndata:\n  train:\n    - {kind: suite, split: train, n: 10}\nplanner_sft:\n  bf16: 2\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert f"{path}, line 6: field 'planner_sft.bf16" in str(err.value)


@pytest.mark.parametrize("value", ["auto", True, False])
def test_a_config_file_takes_each_precision(tmp_path, value):
    path = tmp_path / "ok.yaml"
    path.write_text(f"name: x\nbf16: {json.dumps(value)}\ndata:\n  train:\n    - {{kind: suite, split: train, n: 5}}\n")
    assert set(bf16_of(load_config(path)).values()) == {value}


# trainer arguments


def test_auto_on_a_native_cpu_trains_in_bf16_on_the_cpu(cpu, tmp_path):
    from trl import DPOConfig, GRPOConfig, SFTConfig

    cpu(True)
    args = common_args(SFTSettings(bf16="auto"), tmp_path, seed=3)
    assert args["bf16"] is True and args["use_cpu"] is True
    assert args["activation_checkpointing"] is False and args["dataloader_pin_memory"] is False
    # transformers refuses bf16 without a GPU unless use_cpu is set ("Your setup doesn't support bf16/gpu")
    sft = SFTConfig(**trainer_args(SFTSettings(bf16="auto"), tmp_path, seed=3))
    assert sft.bf16 and sft.use_cpu and not sft.gradient_checkpointing
    dpo = DPOConfig(**trainer_args(DPOSettings(bf16="auto"), tmp_path, seed=3))
    assert dpo.bf16 and dpo.use_cpu
    grpo = GRPOConfig(**common_args(GRPOSettings(bf16="auto"), tmp_path, seed=3))
    assert grpo.bf16 and grpo.use_cpu


def test_fp32_on_a_cpu_without_native_bf16(cpu, tmp_path):
    from trl import SFTConfig

    cpu(False)
    for asked in ("auto", False):
        args = common_args(SFTSettings(bf16=asked), tmp_path, seed=0)
        assert args["bf16"] is False and "use_cpu" not in args
    assert not SFTConfig(**trainer_args(SFTSettings(bf16="auto"), tmp_path, seed=0)).bf16
    with pytest.raises(RunError, match=r"^SFTSettings\.bf16: true"):
        common_args(SFTSettings(bf16=True), tmp_path, seed=0)


def test_false_on_a_native_cpu_is_fp32_without_use_cpu(cpu, tmp_path):
    cpu(True)
    args = common_args(DPOSettings(bf16=False), tmp_path, seed=0)
    assert args["bf16"] is False and "use_cpu" not in args


def test_several_cpu_processes_need_use_cpu_even_in_fp32(cpu, monkeypatch, tmp_path):
    cpu(False)
    monkeypatch.setenv("WORLD_SIZE", "2")
    args = common_args(SFTSettings(bf16=False), tmp_path, seed=0)
    assert args["use_cpu"] is True and args["bf16"] is False


def test_gradient_checkpointing_passes_through(cpu, tmp_path):
    from trl import SFTConfig

    cpu(False)
    assert common_args(SFTSettings(), tmp_path, 0)["activation_checkpointing"] is False
    assert common_args(GRPOSettings(gradient_checkpointing=True), tmp_path, 0)["activation_checkpointing"] is True
    on = SFTConfig(**trainer_args(SFTSettings(gradient_checkpointing=True), tmp_path, 0))
    assert on.gradient_checkpointing


def test_a_gpu_trains_without_use_cpu(gpu, tmp_path):
    gpu(True)
    args = common_args(SFTSettings(bf16="auto"), tmp_path, seed=0)
    assert args["bf16"] is True and "use_cpu" not in args and args["dataloader_pin_memory"] is True


# the launcher: `accelerate launch` exports its config's mixed_precision, which must not decide a stage's precision


@pytest.mark.parametrize("launched", [None, "bf16", "fp16", "no"])
def test_trainer_configs_hold_the_stages_precision_whatever_the_launcher_says(cpu, monkeypatch, tmp_path, launched):
    from trl import DPOConfig, SFTConfig

    cpu(True)
    if launched:
        monkeypatch.setenv(LAUNCHER_PRECISION, launched)
    for bf16, expected in ((False, "no"), (True, "bf16")):
        configs = [
            trl_config(SFTConfig, **trainer_args(SFTSettings(bf16=bf16), tmp_path, 0)),
            trl_config(DPOConfig, **trainer_args(DPOSettings(bf16=bf16), tmp_path, 0)),
            grpo_config(GRPOSettings(batch_size=2, num_generations=2, bf16=bf16), 1.0, tmp_path, 0, [1.0], 16),
        ]  # fmt: skip
        assert [config.mixed_precision for config in configs] == [expected] * 3
        assert os.environ.get(LAUNCHER_PRECISION) == launched  # the launcher's variable is left as it was


SFT_EXAMPLES = [
    ("What is 12 plus 30?", "R1 = Calculator(12 + 30)"),
    ("How many legs do 3 spiders have?", "R1 = Calculator(3 * 8)"),
    ("Tom has 5 apples and eats 2. How many are left?", "R1 = Calculator(5 - 2)"),
    ("What is 7 times 6?", "R1 = Calculator(7 * 6)"),
]


def trained(monkeypatch, out, bf16: bool) -> tuple[str, list[float]]:
    """Two SFT steps of coalign-base through coalign's own `sft`: the mixed precision its trainer's Accelerator
    ran with, and the losses it logged."""
    seen, train = [], LogitsLossSFTTrainer.train

    def spy(self, *args, **kwargs):
        seen.append(self.accelerator.mixed_precision)
        return train(self, *args, **kwargs)

    monkeypatch.setattr(LogitsLossSFTTrainer, "train", spy)
    settings = SFTSettings(
        learning_rate=1e-3, epochs=1, batch_size=2, grad_accum=1, max_length=64, logging_steps=1, bf16=bf16
    )
    log = json.loads((sft(base_path("coalign-base"), SFT_EXAMPLES, out, settings) / "train_log.json").read_text())
    return seen[0], log["losses"]


@pytest.mark.slow
def test_the_trainer_runs_at_the_stages_precision_under_either_launcher(cpu, monkeypatch, tmp_path):
    """Issue 59: under `accelerate launch` with mixed_precision bf16, a stage at `bf16: false` trained in bf16
    autocast (its losses bf16's) while precision.json said fp32."""
    cpu(True)  # native bf16 simulated: bf16 autocast runs on any CPU, emulated where it is not native
    fp32 = trained(monkeypatch, tmp_path / "fp32", bf16=False)
    monkeypatch.setenv(LAUNCHER_PRECISION, "bf16")
    under_bf16_launcher = trained(monkeypatch, tmp_path / "held", bf16=False)
    monkeypatch.setenv(LAUNCHER_PRECISION, "no")
    bf16 = trained(monkeypatch, tmp_path / "bf16", bf16=True)
    assert fp32[0] == "no" and len(fp32[1]) == 2
    assert under_bf16_launcher == fp32  # mixed precision 'no', and the fp32 losses to the bit
    assert bf16[0] == "bf16" and bf16[1] != fp32[1]  # bf16 moves the losses: the comparison above tells them apart


# the run


def test_prepare_run_records_each_decision(cpu, tmp_path):
    cpu(True)
    config = run_config(bf16="auto", grounder_sft={"bf16": False})
    run = prepare_run(config, tmp_path / "run", Console(quiet=True))
    record = json.loads(run.path("precision.json").read_text())
    assert record == {
        "bf16": {**{name: True for name in ALL_STAGES}, "grounder_sft": False, "inference": True},
        "device": "cpu",
        "cpu_bf16_flags": ["avx512_bf16"],
    }
    assert decide_precision(config) == record["bf16"]


def test_prepare_run_on_a_cpu_without_native_bf16(cpu, tmp_path):
    cpu(False)
    run = prepare_run(run_config(bf16="auto"), tmp_path / "run", Console(quiet=True))
    record = json.loads(run.path("precision.json").read_text())
    assert record["bf16"] == {**{name: False for name in ALL_STAGES}, "inference": False}
    assert record["cpu_bf16_flags"] == []


def test_precision_json_records_what_the_launcher_asked_and_what_overrode_it(cpu, monkeypatch, tmp_path):
    cpu(True)
    monkeypatch.setenv(LAUNCHER_PRECISION, "bf16")
    config = run_config(planner_sft={"bf16": True}, pilotrl={"sft": {"bf16": "auto"}})
    run = prepare_run(config, tmp_path / "run", Console(quiet=True))
    record = json.loads(run.path("precision.json").read_text())
    assert record["bf16"] == {**{name: False for name in ALL_STAGES}, "planner_sft": True, "pilotrl.sft": True,
                              "inference": True}  # fmt: skip
    assert record["launcher"] == {
        LAUNCHER_PRECISION: "bf16",
        "overridden": ["grounder_sft", "planner_dpo", "grounder_round_sft", "planner_round_sft"],
    }
    monkeypatch.delenv(LAUNCHER_PRECISION)
    assert "launcher" not in precision_record(decide_precision(config))  # none asked: nothing to record


def test_inference_follows_the_run_bf16_where_it_sets_one(cpu):
    cpu(True)
    assert inference_bf16(run_config(bf16="auto")) is True
    assert inference_bf16(run_config(bf16=False)) is False
    assert inference_bf16(run_config(bf16=False, planner_sft={"bf16": True})) is False  # the run's, not the stage's


@pytest.mark.parametrize(
    "fields",
    [
        {"planner_sft": {"bf16": True}, "grounder_sft": {"bf16": True}},
        {"planner_sft": {"bf16": "auto"}, "grounder_sft": {"bf16": "auto"}},
        {"grounder_round_sft": {"bf16": "auto"}},
        {"pilotrl": {"sft": {"bf16": True}}},
    ],
)
def test_without_run_bf16_inference_is_bf16_where_a_stage_trains_in_bf16(cpu, fields):
    """Issue 55: stages in bf16 and no run-level bf16 loaded two 7B agents in fp32 to generate and score."""
    cpu(True)
    config = run_config(**fields)
    assert config.bf16 is None
    assert inference_bf16(config) is True
    assert decide_precision(config)["inference"] is True


def test_without_run_bf16_inference_is_fp32_where_every_stage_trains_in_fp32(cpu, gpu):
    cpu(True)
    assert inference_bf16(run_config()) is False  # on a native-bf16 CPU too: the tiny configs' results stay
    cpu(False)
    assert inference_bf16(run_config(planner_sft={"bf16": "auto"})) is False  # auto decided fp32 here
    gpu(True)
    assert inference_bf16(run_config(planner_dpo={"bf16": "auto"})) is True


def test_shipped_configs_infer_as_their_stages_train(cpu):
    """On a CPU with native bf16, the tiny configs (every stage fp32, no run-level bf16) still generate and score
    in fp32, so their published numbers hold; the paper configs (every stage bf16) now do so in bf16."""
    cpu(True)
    names = sorted(path.stem for path in BUNDLED.glob("*.yaml"))
    inference = {name: inference_bf16(load_config(name)) for name in names}
    assert {name for name in names if name.startswith("tiny")} == {name for name, bf16 in inference.items() if not bf16}
    assert all(inference[name] for name in names if name.startswith(("paper", "smol")))


@pytest.mark.parametrize(
    ("fields", "setting"),
    [({"planner_dpo": {"bf16": True}}, "planner_dpo.bf16"), ({"pilotrl": {"sft": {"bf16": True}}}, "pilotrl.sft.bf16")],
)
def test_true_on_a_cpu_without_native_bf16_stops_before_the_run_folder(cpu, tmp_path, fields, setting):
    cpu(False)
    folder = tmp_path / "run"
    with pytest.raises(RunError, match=rf"^{setting.replace('.', '[.]')}: true, but this machine has no GPU"):
        prepare_run(run_config(**fields), folder, Console(quiet=True))
    assert not folder.exists()


def test_run_bf16_true_on_a_cpu_without_native_bf16_stops_before_the_run_folder(cpu, tmp_path):
    cpu(False)
    with pytest.raises(RunError, match=r"bf16: true, but this machine has no GPU"):
        prepare_run(run_config(bf16=True), tmp_path / "run", Console(quiet=True))
    assert not (tmp_path / "run").exists()
