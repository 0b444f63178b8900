"""Progress where the output is not a terminal: a job's log, a pipe."""

import io
import sys

from coalign.core.console import LineProgress, make_console, progress_bar


def lines(every: float, steps: int, total: int | None = 3) -> list[str]:
    out = io.StringIO()
    with LineProgress(make_console(file=out), every=every) as bar:
        task = bar.add_task("eval held-in", total=total)
        for _ in range(steps):
            bar.advance(task)
    return out.getvalue().splitlines()


def test_a_log_gets_a_progress_line_per_interval_and_one_at_the_end():
    assert [line.split(" (")[0] for line in lines(0.0, 3)] == [f"eval held-in: {i}/3" for i in (1, 2, 3)]
    assert [line.split(" (")[0] for line in lines(3600.0, 3)] == ["eval held-in: 3/3"]  # only the end
    assert lines(3600.0, 2) == []  # not done, and the interval not over
    assert lines(0.0, 1, total=None)[0].startswith("eval held-in: 1 (00:00:")  # no total known


def test_progress_goes_to_lines_where_the_output_is_not_a_terminal(monkeypatch):
    monkeypatch.setattr("sys.stdout", io.StringIO())
    with progress_bar() as bar:
        bar.advance(bar.add_task("turns", total=1))
    assert isinstance(bar, LineProgress) and sys.stdout.getvalue().startswith("turns: 1/1 (")
