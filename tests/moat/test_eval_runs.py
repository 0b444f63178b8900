"""`coalign eval` of a lumos or moat run folder: which checkpoints it evaluates and what it refuses (issue 74, item 1).

The run folders are made as training leaves them, without training: a config, checkpoint folders and finished
evaluation stages, each recorded with the checkpoints it took. An evaluation that is still as recorded is kept, so
no model loads: a wrong choice of checkpoints would try to evaluate afresh and fail on the empty folders.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from coalign.cli import app
from coalign.config import RunConfig, config_to_yaml
from coalign.core.runs import Run, atomic_write_text, write_json
from coalign.moat.bench import recipe_config
from coalign.moat.evaluate import eval_dependencies
from coalign.registry import load_config

runner = CliRunner()


def _metrics(accuracy: float) -> dict:
    """An evaluation's metrics.json, its held-in accuracy telling evaluations apart."""
    sets = {"suite-heldin": {"n": 200, "accuracy": accuracy}}
    return {"heldin": {"sets": sets, "average": {"accuracy": accuracy}, "families": {"suite-heldin": "maths"}}}


def _trained(folder: Path, config: RunConfig, evaluations: dict[str, tuple[Path, Path, float]]) -> None:
    """A run folder as training leaves it: `config` saved, and each evaluation stage finished on its planner and
    grounder (folders made here) with its metrics."""
    run = Run(folder)
    atomic_write_text(run.path("config.yaml"), config_to_yaml(config))
    for stage, (planner, grounder, accuracy) in evaluations.items():
        for checkpoint in (planner, grounder):
            checkpoint.mkdir(parents=True, exist_ok=True)
            (checkpoint / "config.json").write_text("{}")
        write_json(run.path(stage, "metrics.json"), _metrics(accuracy))
        run.mark_done(stage, [run.path(stage)], inputs=[planner, grounder], depends_on=eval_dependencies(config))


def _evaluating(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("evaluating")]


def test_the_guides_eval_of_a_moat_run_takes_its_last_finished_round(tmp_path, monkeypatch):
    """`coalign eval tiny --run-dir runs/tiny-moat` as moat.md gives it, after `coalign train tiny --run-dir
    runs/tiny-moat --set recipe=moat`: round 2's planner and grounder, not the cold start, said in one line."""
    monkeypatch.chdir(tmp_path)
    folder, ckpt = Path("runs/tiny-moat"), Path("runs/tiny-moat/checkpoints")
    _trained(
        folder,
        load_config("tiny", {"recipe": "moat"}),
        {
            "round0_eval": (ckpt / "planner_sft", ckpt / "grounder_sft", 0.25),
            "round1_eval": (ckpt / "round1_planner", ckpt / "round1_grounder_sft", 0.5),
            "round2_eval": (ckpt / "round2_planner", ckpt / "round2_grounder_sft", 0.75),
        },
    )
    result = runner.invoke(app, ["eval", "tiny", "--run-dir", "runs/tiny-moat"])
    assert result.exit_code == 0, result.output
    assert _evaluating(result.output) == [
        "evaluating round 2 of a moat run: planner checkpoints/round2_planner, grounder checkpoints/round2_grounder_sft"
    ]
    assert "75.0" in result.output and "25.0" not in result.output  # round 2's numbers, kept as recorded
    assert not (folder / "eval").exists()


def test_eval_of_a_bench_moat_folder_takes_its_rounds_checkpoints_wherever_they_are(tmp_path):
    """A bench's MOAT folder (`seed0/moat`, config `tiny-moat`) holds no cold start: a round whose DPO kept no pair
    evaluated the seed's cold-start planner, in the folder beside it."""
    cold, moat = tmp_path / "seed0" / "cold_start" / "checkpoints", tmp_path / "seed0" / "moat"
    rounds = {"round1_eval": (cold / "planner_sft", moat / "checkpoints" / "round1_grounder_sft", 0.5)}
    _trained(moat, recipe_config(load_config("tiny"), "moat", 0), rounds)
    result = runner.invoke(app, ["eval", "tiny", "--run-dir", str(moat)])
    assert result.exit_code == 0, result.output
    assert _evaluating(result.output) == [
        f"evaluating round 1 of a moat run: planner {cold / 'planner_sft'}, grounder checkpoints/round1_grounder_sft"
    ]
    assert "50.0" in result.output


@pytest.mark.parametrize(("config", "trained"), [("tiny", "tiny-pilotrl"), ("tiny-pilotrl", "tiny")])
def test_a_run_of_a_recipe_the_configs_evaluation_cannot_take_is_named_in_one_line(tmp_path, config, trained):
    """A pilotrl run under a lumos config, and a lumos run under a pilotrl one: the run's recipe, in one line."""
    folder = tmp_path / "run"
    saved = load_config(trained)
    _trained(folder, saved, {})
    result = runner.invoke(app, ["eval", config, "--run-dir", str(folder)])
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert lines[0].startswith(f"error: {folder} holds a {saved.recipe} run, and this config's recipe is ")
    assert sorted(p.name for p in folder.iterdir()) == ["config.yaml"]  # nothing written
