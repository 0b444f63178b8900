"""benchmarks/gpu_check.py's own logic (a run of it takes a GPU, or minutes on a CPU with --tiny): sampled tokens
counted up to each row's first EOS, --tiny changing only the sizes not given, the parts asked for, the paper part's
overrides making configs coalign accepts, its model's layers fitted to the disk, and its runs' failures and
timeouts reported. A `--tiny --parts paper` run takes 1.5-6 minutes on 2 CPU cores: not a test here."""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

import pytest
import torch

from coalign.cli import _overrides
from coalign.config import BUNDLED
from coalign.registry import load_config

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import gpu_check  # noqa: E402


class FixedModel:
    """A model whose `generate` returns the same three rows: a 2-token prompt, then 4 sampled tokens (EOS is 2)."""

    device = torch.device("cpu")

    def generate(self, **kwargs) -> torch.Tensor:
        return torch.tensor([[5, 6, 7, 2, 2, 0], [5, 6, 8, 9, 2, 0], [5, 6, 8, 8, 8, 8]])


def test_sampled_tokens_are_counted_through_each_rows_first_eos_and_no_further():
    counter = gpu_check.CountingModel(FixedModel())
    counter.generate(input_ids=torch.zeros(3, 2, dtype=torch.long), eos_token_id=2)
    assert counter.tokens == 2 + 3 + 4


def test_tiny_sets_only_the_sizes_not_given_and_one_step_is_refused():
    full, tiny = gpu_check._arguments([]), gpu_check._arguments(["--tiny", "--layers", "3"])
    assert (full.hidden, full.layers, full.vocab, full.train_batch, full.k) == (2048, 22, 32000, None, 15)
    assert (tiny.hidden, tiny.layers, tiny.vocab, tiny.train_batch, tiny.k) == (64, 3, 512, 2, 15)
    with pytest.raises(SystemExit):
        gpu_check._arguments(["--tiny", "--steps", "1"])


def test_parts_default_to_those_on_the_small_model_and_an_unknown_one_is_refused():
    assert gpu_check._arguments([]).parts == ("sampling", "scoring", "training")
    assert gpu_check._arguments(["--tiny", "--parts", "scoring, paper"]).parts == ("scoring", "paper")
    with pytest.raises(SystemExit):
        gpu_check._arguments(["--parts", "sampling,papers"])


@pytest.mark.parametrize("recipe", sorted(gpu_check.PAPER_CONFIGS))
@pytest.mark.parametrize("vllm", [True, False])
@pytest.mark.parametrize("gpu", [True, False])
def test_paper_overrides_given_as_set_options_make_a_config_that_runs_on_bundled_data(recipe, vllm, gpu):
    model = Path("/nowhere/model")
    overrides = gpu_check.paper_overrides(recipe, model, vllm, gpu)
    parsed = _overrides(gpu_check.set_options(overrides))  # as `coalign train --set` reads them
    assert parsed == json.loads(json.dumps(overrides))
    config = load_config(BUNDLED / f"{gpu_check.PAPER_CONFIGS[recipe]}.yaml", parsed)
    assert (config.recipe, config.lora.r, config.lora.merge) == (recipe, 16, True)
    trained = [s for k, s in config.stage_settings().items() if k.startswith("pilotrl") == (recipe == "pilotrl")]
    assert all(s.bf16 is gpu for s in trained)  # the paper's bf16 on a GPU, fp32 on a CPU
    assert gpu_check.kept_checkpoints(config) == 4
    if recipe == "pilotrl":
        assert config.pilotrl.model == str(model)
        assert config.pilotrl.rl.generation == ("vllm_colocate" if vllm else "hf")
        assert config.pilotrl.rl.order == ["executor", "planner", "joint"]  # every GRPO stage, as the paper
        return
    assert (config.models.planner, config.models.grounder) == (str(model), str(model))
    assert (config.generation.backend if config.generation else "hf") == ("vllm" if vllm else "hf")
    sources = [*config.data.train, *config.data.heldin, *config.data.heldout]
    assert all(s.path.as_posix().startswith("shipped:") for s in sources)  # nothing fetched from the hub
    assert config.moat.rounds == 1 and config.moat.stage1 and config.moat.stage2


def test_the_layers_that_fit_are_as_many_as_the_disk_holds_for_the_model_and_a_runs_checkpoints():
    shape = gpu_check.PAPER_SHAPE
    each = (2 if gpu_check.bf16() else 4) + gpu_check.CHECKPOINT_BYTES * 4

    def need(layers: int) -> int:
        return gpu_check._parameters(shape.model_copy(update={"num_layers": layers})) * each

    assert gpu_check.fitting_layers(shape, 2 * need(32), 4) == 32
    assert gpu_check.fitting_layers(shape, need(12), 4) == 12
    assert gpu_check.fitting_layers(shape, need(12) - 1, 4) == 11
    assert gpu_check.fitting_layers(shape, need(1) - 1, 4) == 0


def test_a_failed_command_gives_its_status_and_last_lines(tmp_path):
    command = [sys.executable, "-c", "import sys\nfor i in range(40): print(i)\nsys.exit(3)"]
    result = gpu_check.run_logged(command, tmp_path / "out.log", timeout=60)
    assert result["status"] == 3
    assert result["tail"] == [str(i) for i in range(40 - gpu_check.TAIL_LINES, 40)]
    if shutil.which("nvidia-smi") is None:
        assert result["peak_mib"] is None


def test_a_command_out_of_time_is_stopped_with_the_processes_it_started(tmp_path):
    sleeper = "import subprocess, sys, time\n" + (
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
        "print(p.pid, flush=True)\ntime.sleep(120)"
    )
    # 10 s: a machine under load (a test suite beside it) may take seconds to start both
    result = gpu_check.run_logged([sys.executable, "-c", sleeper], tmp_path / "out.log", timeout=10)
    assert result["status"] is None and result["seconds"] < 60
    grandchild = Path(f"/proc/{int(result['tail'][-1])}/status")
    for _ in range(100):  # killed: gone, or a zombie its new parent has yet to reap
        if not grandchild.exists() or "State:\tZ" in grandchild.read_text():
            break
        time.sleep(0.1)
    else:
        pytest.fail("the grandchild outlived the timeout")
