"""PilotRL's reward curves from fake run folders: no training, only the train_log.json files stages write."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from coalign.core.errors import DataError
from coalign.pilotrl.curves import bench_curves, plot_curves, stage_curves, stage_summaries

KEYS = {c: f"rewards/reward_{c}/mean" for c in ("format", "adherence", "end_to_end", "plan_quality")}
USED = {"executor": ("format", "adherence", "end_to_end"), "planner": ("format", "end_to_end", "plan_quality"),
        "joint": ("format", "end_to_end")}  # fmt: skip


def write_stage(run_dir: Path, i: int, stage: str, steps: int, base: float = 0.0, logged: list[int] | None = None):
    """A finished stage's train_log.json: one row per logged step, reward = base + step, components after it."""
    rows = []
    for step in logged or range(1, steps + 1):
        row = {"step": step, "epoch": step / steps, "reward": base + step, "step_time": 0.1}
        row.update({KEYS[c]: base + step + (j + 1) / 10 for j, c in enumerate(USED[stage])})
        rows.append(row)
    folder = run_dir / "checkpoints" / f"grpo{i}-{stage}"
    folder.mkdir(parents=True)
    (folder / "train_log.json").write_text(json.dumps({"train_loss": 0.0, "steps": steps, "history": rows}))


def three_stage_run(run_dir: Path, base: float = 0.0) -> Path:
    write_stage(run_dir, 1, "executor", 3, base)
    write_stage(run_dir, 2, "planner", 4, base)
    write_stage(run_dir, 3, "joint", 2, base)
    (run_dir / "checkpoints" / "sft").mkdir()
    return run_dir


def test_stages_follow_one_another_on_a_global_step_axis(tmp_path: Path) -> None:
    curves = stage_curves(three_stage_run(tmp_path))
    assert [(c["stage"], c["label"]) for c in curves] == [("executor", "1"), ("planner", "2"), ("joint", "3")]
    assert [(c["start"], c["end"]) for c in curves] == [(0, 3), (3, 7), (7, 9)]
    assert [c["steps"] for c in curves] == [[1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert curves[1]["reward"] == [1.0, 2.0, 3.0, 4.0]  # each stage's own rows, only the axis moves


def test_offsets_count_the_steps_trained_not_the_last_logged(tmp_path: Path) -> None:
    write_stage(tmp_path, 1, "executor", 5, logged=[2, 4])  # logging_steps 2: step 5 is not logged
    write_stage(tmp_path, 2, "joint", 2)
    curves = stage_curves(tmp_path)
    assert curves[0]["steps"] == [2, 4] and curves[1]["steps"] == [6, 7] and curves[1]["start"] == 5


def test_only_the_components_a_stage_used(tmp_path: Path) -> None:
    curves = stage_curves(three_stage_run(tmp_path))
    components = [sorted(k for k in c if k in KEYS) for c in curves]
    assert components == [sorted(USED[s]) for s in ("executor", "planner", "joint")]
    assert curves[0]["adherence"] == pytest.approx([1.2, 2.2, 3.2])
    assert curves[1]["plan_quality"] == pytest.approx([1.3, 2.3, 3.3, 4.3])


def test_summaries_give_each_stage_its_mean_reward_and_groups_without_variance(tmp_path: Path) -> None:
    """TRL's `frac_reward_zero_std` (groups whose rollouts all scored alike) is kept where every row logs it."""
    three_stage_run(tmp_path)
    log = tmp_path / "checkpoints" / "grpo2-planner" / "train_log.json"
    record = json.loads(log.read_text())
    for row, share in zip(record["history"], (1.0, 0.5, 0.5, 0.0)):
        row["frac_reward_zero_std"] = share
    log.write_text(json.dumps(record))
    curves = stage_curves(tmp_path)
    assert "frac_reward_zero_std" not in curves[0] and curves[1]["frac_reward_zero_std"] == [1.0, 0.5, 0.5, 0.0]
    summaries = stage_summaries(curves)
    assert summaries[0] == {"stage": "executor", "label": "1", "steps": 3, "reward": 2.0}
    assert summaries[1] == {"stage": "planner", "label": "2", "steps": 4, "reward": 2.5, "frac_reward_zero_std": 0.5}
    assert stage_summaries(stage_curves(tmp_path / "none")) == []


def test_no_stages_no_curves(tmp_path: Path) -> None:
    assert stage_curves(tmp_path / "absent") == []
    (tmp_path / "checkpoints" / "sft").mkdir(parents=True)
    assert stage_curves(tmp_path) == []


def test_a_stage_still_training_ends_the_curves(tmp_path: Path) -> None:
    write_stage(tmp_path, 1, "executor", 3)
    (tmp_path / "checkpoints" / "grpo2-planner" / "trainer").mkdir(parents=True)  # no train_log.json yet
    assert [c["stage"] for c in stage_curves(tmp_path)] == ["executor"]


def test_two_stages_with_one_number_are_refused(tmp_path: Path) -> None:
    write_stage(tmp_path, 1, "executor", 3)
    write_stage(tmp_path, 1, "joint", 3)  # left by an earlier rl.order: which one ran last is unknown
    with pytest.raises(ValueError, match="several GRPO stages numbered 1"):
        stage_curves(tmp_path)


@pytest.mark.parametrize(
    "text, field",
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "expected a JSON object"),
        (json.dumps({"history": []}), "field 'steps'"),
        (json.dumps({"steps": 2, "history": {"step": 1}}), "field 'history'"),
        (json.dumps({"steps": 2, "history": [{"step": 1, "reward": 0.5}, {"step": 2}]}), "field 'history[1].reward'"),
        (json.dumps({"steps": 1, "history": [{"step": 1, "reward": 1, KEYS["format"]: "x"}]}), "reward_format"),
    ],
)
def test_a_malformed_log_names_the_file_and_field(tmp_path: Path, text: str, field: str) -> None:
    write_stage(tmp_path, 1, "executor", 2)
    bad = tmp_path / "checkpoints" / "grpo2-joint"
    bad.mkdir()
    (bad / "train_log.json").write_text(text)
    with pytest.raises(DataError) as err:
        stage_curves(tmp_path)
    assert str(bad / "train_log.json") in str(err.value) and field in str(err.value)


def test_bench_curves_average_over_seeds_where_all_have_the_step(tmp_path: Path) -> None:
    three_stage_run(tmp_path / "seed0" / "pilotrl", base=0.0)
    three_stage_run(tmp_path / "seed1" / "pilotrl", base=10.0)
    write_stage(tmp_path / "seed0" / "all", 1, "executor", 4)
    write_stage(tmp_path / "seed1" / "all", 1, "executor", 4, base=2.0, logged=[1, 3, 4])
    curves = bench_curves(tmp_path, [0, 1], ["pilotrl", "all"])
    pilotrl = curves["pilotrl"]
    assert [c["steps"] for c in pilotrl] == [[1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert pilotrl[1]["reward"] == pytest.approx([6.0, 7.0, 8.0, 9.0])
    assert pilotrl[1]["plan_quality"] == pytest.approx([6.3, 7.3, 8.3, 9.3]) and "adherence" not in pilotrl[1]
    assert curves["all"][0]["steps"] == [1, 3, 4]  # seed 1 did not log step 2
    assert curves["all"][0]["reward"] == pytest.approx([2.0, 4.0, 5.0])


def test_bench_curves_keep_only_stages_every_seed_reached(tmp_path: Path) -> None:
    three_stage_run(tmp_path / "seed0" / "pilotrl")
    write_stage(tmp_path / "seed1" / "pilotrl", 1, "executor", 3)
    assert [c["stage"] for c in bench_curves(tmp_path, [0, 1], ["pilotrl"])["pilotrl"]] == ["executor"]
    assert bench_curves(tmp_path, [0, 2], ["pilotrl"]) == {"pilotrl": []}  # seed 2 never ran


def test_bench_curves_refuse_seeds_that_ran_different_stages(tmp_path: Path) -> None:
    write_stage(tmp_path / "seed0" / "v", 1, "executor", 3)
    write_stage(tmp_path / "seed1" / "v", 1, "joint", 3)
    with pytest.raises(ValueError, match="v: GRPO stage 1 differs"):
        bench_curves(tmp_path, [0, 1], ["v"])


def test_plot_writes_a_png_with_three_panels(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import matplotlib.pyplot as plt

    three_stage_run(tmp_path / "seed0" / "pilotrl")
    write_stage(tmp_path / "seed0" / "all", 1, "executor", 9)
    curves = bench_curves(tmp_path, [0], ["pilotrl", "all"])
    figures = []
    monkeypatch.setattr(plt, "close", figures.append)  # keep the figure to look at it
    out = plot_curves(curves, tmp_path / "plots" / "curves.png")
    assert out == tmp_path / "plots" / "curves.png"
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 1000
    assert [p.name for p in out.parent.iterdir()] == ["curves.png"]  # no temporary file left
    (fig,) = figures
    executor, planner, e2e, _ = fig.axes
    assert [line.get_label() for line in e2e.lines if not line.get_label().startswith("_")] == [
        "pilotrl (1->2->3)", "all (1)"]  # fmt: skip
    xs, ys = executor.lines[0].get_data()
    assert list(xs) == list(range(1, 10)) and math.isnan(ys[3]) and ys[0] == pytest.approx(1.2)  # stage 2: a gap
    assert sorted(line.get_xdata()[0] for line in planner.lines if line.get_linestyle() == ":") == [3, 7]
