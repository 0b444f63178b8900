"""The real-model configs (`smol`, `smol-suite`, `smol-pilotrl`) and `coalign demo smol`: what a fresh clone
runs offline."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from coalign.cli import app
from coalign.registry import load_config
from coalign.tasks.sources import load_data

runner = CliRunner()


@pytest.mark.slow
def test_smol_trains_on_shipped_gsm8k_and_holds_out_svamp():
    config = load_config("smol")
    assert config.recipe == "lumos" and config.bf16 == "auto"
    assert config.models.planner == config.models.grounder == "smollm2-135m"
    train, record = load_data(config.data.train, skip_bad_rows=False)
    heldin, _ = load_data(config.data.heldin, skip_bad_rows=False)
    heldout, _ = load_data(config.data.heldout, skip_bad_rows=False)
    assert record["tasks"] == len(train) == config.data.train[0].n
    assert {t.dataset for t in train} == {"gsm8k"} and {t.dataset for t in heldout} == {"svamp"}
    assert {t.dataset for t in heldin} == {"gsm8k"} and not {t.id for t in train} & {t.id for t in heldin}
    # deferred subgoals: the planner writes the calculation, the grounder's Calculator computes it
    first = train[0]
    assert first.subgoals == (
        "Natalia sold 48/2 clips in May.",
        "Natalia sold 48+R1 clips altogether in April and May.",
    )
    assert config.moat.tasks <= len(train)
    assert all(getattr(config, stage).bf16 == "auto" for stage in ("planner_sft", "grounder_sft", "planner_dpo"))


def test_smol_suite_is_the_tiny_suite_s_splits_on_smollm2_generated_by_vllm():
    """Where SmolLM2 has room: the bundled maths suite, held in and held out (far and near) as `tiny` splits it,
    and vLLM writes every sampled and evaluated turn."""
    config, tiny = load_config("smol-suite"), load_config("tiny")
    assert config.recipe == "lumos" and config.generation.backend == "vllm"
    assert config.models.planner == config.models.grounder == "smollm2-135m"
    for split in ("train", "heldin", "heldout"):
        sources, tiny_sources = getattr(config.data, split), getattr(tiny.data, split)
        assert [(s.kind, s.split) for s in sources] == [(s.kind, s.split) for s in tiny_sources]
        assert {s.kind for s in sources} == {"suite"}
    assert config.moat.tasks <= config.data.train[0].n


def test_smol_pilotrl_is_adaplan_on_the_six_environments():
    config = load_config("smol-pilotrl")
    assert config.recipe == "pilotrl" and config.pilotrl.model == "smollm2-135m"
    assert config.pilotrl.mode == "adaplan" and len(config.pilotrl.heldin + config.pilotrl.heldout) == 6
    assert config.pilotrl.sft.bf16 == config.pilotrl.rl.bf16 == "auto"


def test_an_unknown_demo_names_the_three():
    result = runner.invoke(app, ["demo", "nope"])
    assert result.exit_code == 2
    assert "moat, smol and pilotrl" in result.output


def test_the_smol_demo_is_the_bench_at_a_quarter():
    from coalign.cli import _config
    from coalign.registry import DEMOS

    bench, demo = load_config("smol"), _config("smol", list(DEMOS["smol"].settings))
    assert demo.data.train[0].n * 4 == bench.data.train[0].n and demo.data.train[0].subgoals == "deferred"
    assert demo.moat.tasks < bench.moat.tasks and demo.data.heldout[0].n < bench.data.heldout[0].n
    assert demo.models == bench.models and demo.planner_sft == bench.planner_sft
