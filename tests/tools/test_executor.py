"""The executor: R# substitution, per-step errors, the answer rule, and hostile model text."""

from __future__ import annotations

import json
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coalign.tools import executor
from coalign.tools.executor import MAX_ACTIONS, StepResult, Trace, execute


def test_references_are_replaced_by_earlier_values() -> None:
    trace = execute("R1 = Calculator(28 * 1/7); R2 = Calculator(28 - R1)")
    assert [s.outputs for s in trace.steps] == [{"R1": "4"}, {"R2": "24"}]
    assert (trace.answer, trace.error) == ("24", None)


def test_a_negative_value_is_substituted_as_one_operand() -> None:
    trace = execute("R1 = Calculator(2 - 5); R2 = Calculator(28 - R1); R3 = Calculator(R1^2)")
    assert [s.outputs for s in trace.steps] == [{"R1": "-3"}, {"R2": "31"}, {"R3": "9"}]


def test_r1_does_not_match_inside_r12() -> None:
    actions = [f"R{i} = Calculator({i})" for i in range(1, 13)] + ["R13 = Calculator(R12 - R1)"]
    trace = execute(actions)
    assert trace.steps[-1].outputs == {"R13": "11"}


def test_a_list_of_actions_runs_like_the_joined_text() -> None:
    actions = ["R1 = Calculator(48 / 2)", "R2 = Calculator(48 + R1)"]
    assert execute(actions) == execute("; ".join(actions))
    assert execute(actions).answer == "72"


def test_multi_output_solve_fills_each_output_in_unknown_order() -> None:
    trace = execute("R1 = SetEquation(x + y = 10); R2 = SetEquation(x - y = 2); R3, R4 = SolveEquation(R1, R2)")
    assert trace.steps[-1].outputs == {"R3": "6", "R4": "4"}
    assert trace.answer == "4"


def test_equation_values_are_substituted_as_equations() -> None:
    trace = execute("R1 = SetEquation(x + 3 = 10); R2 = SolveEquation(R1); R3 = Calculator(R2 * 2)")
    assert [s.outputs for s in trace.steps] == [{"R1": "x + 3 = 10"}, {"R2": "7"}, {"R3": "14"}]
    two = execute("R1 = SetEquation(x + y = 10, x - y = 2); R2, R3 = SolveEquation(R1)")
    assert two.steps[-1].outputs == {"R2": "6", "R3": "4"}


def test_answer_is_the_highest_numbered_output_not_the_last_step() -> None:
    trace = execute("R2 = Calculator(2); R1 = Calculator(1)")
    assert trace.answer == "2"
    assert execute("R1 = Calculator(1); R1 = Calculator(5)").answer == "5"


def test_every_step_is_attempted_and_errors_are_recorded_per_step() -> None:
    trace = execute("R1 = Calculator(1 / 0); R2 = Calculator(2 + 2); R3 = Calculator(R1 + 1); R4 = Nope(1)")
    assert [s.error is None for s in trace.steps] == [False, True, False, False]
    assert trace.steps[0].error == "Calculator: division by zero"
    assert trace.steps[1].outputs == {"R2": "4"}
    assert trace.steps[2].error == "R1 not set by an earlier action"
    assert "unknown tool 'Nope'" in trace.steps[3].error
    assert trace.error == "step 1: Calculator: division by zero"
    assert trace.answer is None


def test_any_failed_step_means_no_answer_even_if_the_last_step_worked() -> None:
    trace = execute("R1 = Calculator(x); R2 = Calculator(3 * 4)")
    assert trace.steps[1].outputs == {"R2": "12"}
    assert trace.answer is None
    assert trace.error.startswith("step 1: Calculator: ")


def test_malformed_action_text_is_a_recorded_error() -> None:
    trace = execute("R1 = Calculator(2 + 2); R2 = add five")
    assert trace.steps[0].outputs == {"R1": "4"}
    assert "not an action" in trace.steps[1].error
    assert trace.answer is None


def test_output_count_must_match_the_values_a_tool_gives() -> None:
    trace = execute("R1 = SolveEquation(x + y = 10, x - y = 2)")
    assert trace.steps[0].error == "SolveEquation gave 2 value(s) but the action names 1 output(s)"


def test_to_json_is_json_serialisable_and_complete() -> None:
    trace = execute("R1 = Calculator(2 + 2); R2 = Calculator(R9)")
    row = json.loads(json.dumps(trace.to_json()))
    assert row == {
        "steps": [
            {"action": "R1 = Calculator(2 + 2)", "outputs": {"R1": "4"}, "error": None},
            {"action": "R2 = Calculator(R9)", "outputs": {}, "error": "R9 not set by an earlier action"},
        ],
        "answer": None,
        "error": "step 2: R9 not set by an earlier action",
    }


def test_a_buggy_tool_is_recorded_but_interrupts_still_stop_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(argument: str) -> tuple[str, ...]:
        raise RuntimeError("boom")

    def interrupted(argument: str) -> tuple[str, ...]:
        raise KeyboardInterrupt

    monkeypatch.setitem(executor.DOMAINS, "test", {"Broken": broken, "Stop": interrupted})
    trace = execute("R1 = Broken(1)", domain="test")
    assert trace.steps == [StepResult("R1 = Broken(1)", {}, "Broken: RuntimeError: boom")]
    with pytest.raises(KeyboardInterrupt):
        execute("R1 = Stop(1)", domain="test")


def _spin(argument: str) -> tuple[str, ...]:
    while True:
        pass


def _sleep(argument: str) -> tuple[str, ...]:
    time.sleep(float(argument))
    return (argument,)


def _interrupt(argument: str) -> tuple[str, ...]:
    raise KeyboardInterrupt


def _stubborn(argument: str) -> tuple[str, ...]:
    """Swallows every Exception while it waits, as careless tool code might."""
    while True:
        try:
            time.sleep(10)
        except Exception:
            pass


SLOW_TOOLS = {"Spin": _spin, "Sleep": _sleep, "Stubborn": _stubborn, "Interrupt": _interrupt, "Say": lambda a: (a,)}


@pytest.mark.parametrize("tool", ["Spin", "Sleep", "Stubborn"])
def test_an_overrunning_tool_call_is_stopped_recorded_and_the_next_actions_run(
    monkeypatch: pytest.MonkeyPatch, tool: str
) -> None:
    monkeypatch.setitem(executor.DOMAINS, "test", SLOW_TOOLS)
    start = time.perf_counter()
    trace = execute(f"R1 = {tool}(30); R2 = Say(next); R3 = Say(R2 again)", domain="test", timeout_s=0.2)
    elapsed = time.perf_counter() - start
    assert 0.2 <= elapsed < 1.0
    assert trace.steps[0] == StepResult(f"R1 = {tool}(30)", {}, f"{tool}: timed out after 0.2 s")
    assert [s.outputs for s in trace.steps[1:]] == [{"R2": "next"}, {"R3": "next again"}]
    assert (trace.answer, trace.error) == (None, f"step 1: {tool}: timed out after 0.2 s")


def test_the_default_limit_is_read_at_each_call_and_calls_within_it_are_untouched(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(executor.DOMAINS, "test", SLOW_TOOLS)
    assert executor.ACTION_TIMEOUT_S == 1.0
    assert execute("R1 = Sleep(0.05)", domain="test").answer == "0.05"
    monkeypatch.setattr(executor, "ACTION_TIMEOUT_S", 0.1)
    assert execute("R1 = Sleep(0.3)", domain="test").error == "step 1: Sleep: timed out after 0.1 s"
    assert execute("R1 = Sleep(0.3)", domain="test", timeout_s=0.5).answer == "0.3"
    with pytest.raises(ValueError, match="timeout_s must be > 0"):
        execute("R1 = Say(1)", domain="test", timeout_s=0)


def test_the_timer_leaves_the_alarm_signal_as_it_found_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(executor.DOMAINS, "test", SLOW_TOOLS)
    alarms = []

    def ours(signum: int, frame: object) -> None:
        alarms.append(signum)

    previous = signal.signal(signal.SIGALRM, ours)
    try:
        execute("R1 = Spin(1); R2 = Say(1); R3 = Calculator(1 / 0)", domain="test", timeout_s=0.05)
        assert signal.getsignal(signal.SIGALRM) is ours and signal.getitimer(signal.ITIMER_REAL) == (0, 0)
        with pytest.raises(KeyboardInterrupt):
            execute("R1 = Interrupt(1)", domain="test", timeout_s=0.05)
        assert signal.getsignal(signal.SIGALRM) is ours and signal.getitimer(signal.ITIMER_REAL) == (0, 0)
        time.sleep(0.1)
        assert alarms == []  # no alarm of ours fired late into the handler put back
    finally:
        signal.signal(signal.SIGALRM, previous)


def test_another_running_timer_is_left_alone_and_the_size_limits_alone_apply(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(executor.DOMAINS, "test", SLOW_TOOLS)
    alarms = []
    previous = signal.signal(signal.SIGALRM, lambda signum, frame: alarms.append(signum))
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.5)
        trace = execute("R1 = Sleep(0.2)", domain="test", timeout_s=0.05)
        assert trace.answer == "0.2"  # not stopped
        assert 0 < signal.getitimer(signal.ITIMER_REAL)[0] < 0.5
        time.sleep(0.5)
        assert alarms == [signal.SIGALRM]  # the other timer still fired, once
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_in_a_worker_thread_the_executor_runs_on_size_limits_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """Python runs signal handlers only in the main thread: no timer there, and no error for trying."""
    monkeypatch.setitem(executor.DOMAINS, "test", SLOW_TOOLS)
    handler = signal.getsignal(signal.SIGALRM)
    with ThreadPoolExecutor(max_workers=2) as pool:
        slow = pool.submit(execute, "R1 = Sleep(0.3); R2 = Say(R1 done)", "test", 0.05)
        hostile = pool.submit(execute, _HOSTILE["power tower"])
        assert slow.result().answer == "(0.3) done"
        assert hostile.result().error == execute(_HOSTILE["power tower"]).error
    assert signal.getsignal(signal.SIGALRM) is handler


def test_only_numbers_are_parenthesised_other_values_go_in_as_they_are(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(executor.DOMAINS, "test", {"Say": lambda argument: (argument,)})
    trace = execute("R1 = Say(-3.5); R2 = Say(Zorvath Keep); R3 = Say(x = 2); R4 = Say(R1 R2 R3)", domain="test")
    assert trace.answer == "(-3.5) Zorvath Keep x = 2"


def test_an_unknown_domain_is_a_caller_error() -> None:
    with pytest.raises(KeyError, match="unknown domain 'chess'"):
        execute("R1 = Calculator(1)", domain="chess")


def test_whole_input_limits_reject_before_any_step_runs() -> None:
    too_many = execute([f"R{i} = Calculator({i})" for i in range(1, MAX_ACTIONS + 2)])
    assert too_many.steps == [] and too_many.error == f"too many actions ({MAX_ACTIONS + 1}, limit {MAX_ACTIONS})"
    assert execute([f"R{i} = Calculator({i})" for i in range(1, MAX_ACTIONS + 1)]).answer == str(MAX_ACTIONS)
    assert execute("").error == "empty action sequence"
    assert execute([]).error == "empty action sequence"
    assert execute(["R1 = Calculator(1)", 7]).error == "every action must be a string"  # type: ignore[list-item]


def test_substitution_cannot_blow_up_an_argument() -> None:
    grow = ["R1 = Calculator(10^900)"] + [f"R{i} = Calculator({' + '.join([f'R{i - 1}'] * 60)})" for i in range(2, 6)]
    trace = execute(grow)
    assert trace.answer is None
    assert any("too long" in (s.error or "") for s in trace.steps)


_HOSTILE = {
    "import": "R1 = Calculator(__import__('os').system('ls'))",
    "dunder walk": "R1 = Calculator(().__class__.__bases__[0].__subclasses__())",
    "lambda": "R1 = Calculator(lambda: 1)",
    "power tower": "R1 = Calculator(9**9**9**9)",
    "huge exponent": "R1 = Calculator(2^99999999)",
    "double exponent": "R1 = Calculator(10**10**10)",
    "deep parentheses": "R1 = Calculator(" + "(" * 10_000 + "1" + ")" * 10_000 + ")",
    "long sum": "R1 = Calculator(1" + "+1" * 200_000 + ")",
    "unicode digits": "R1 = Calculator(١٢٣ + 4)",
    "nul bytes": "R1 = Calculator(1\x00 + 2)",
    "nul action": "\x00" * 1000,
    "one megabyte line": "R1 = Calculator(" + "9" * 1_000_000 + ")",
    "self reference": "R1 = Calculator(R1)",
    "thousand actions": "; ".join(f"R{i} = Calculator({i})" for i in range(1, 1001)),
    "code": "R1 = Code(import os)",
    "unary chain": "R1 = Calculator(" + "-" * 1990 + "1)",
    "long chained power": "R1 = Calculator(" + "2^" * 900 + "2)",
    "big product": "R1 = Calculator(" + "*".join(["9^999"] * 300) + ")",
    "expanding power": "R1 = SetEquation((a + b + c + d + x + y + 1)^8 = 0)",
    "high degree solve": "R1 = SolveEquation(" + " + ".join(f"{k + 2}^{100 + k}*x^{k}" for k in range(9)) + " = 7)",
    "many unknowns": "R1 = SolveEquation(" + " + ".join(f"x{i}" for i in range(50)) + " = 1)",
    "big inequality": "R1 = SolveInequality(" + " + ".join(f"{k + 2}^{300 + k}*x^{k}" for k in range(5)) + " > 7)",
    "nonlinear system": "R1, R2 = SolveEquation(3^300*x^2 + 5^300*x*y - y^2 = 7^300, x*y - 2^200*y^2 = 3)",
    "sum of fractions": "R1 = SetEquation(" + " + ".join(f"1/(x + {i})" for i in range(1, 80)) + " = 1)",
    "brackets only": "R1 = Calculator(" + ")" * 500 + ")",
    "tool name injection": "R1 = __import__(os)",
    "5,000-digit output name": "R" + "1" * 5000 + " = Calculator(1 + 1)",
    "a solution past the digit limit": "R1, R2, R3, R4, R5, R6 = SolveEquation("
    + ", ".join(f"{a} = 10^999*{b}" for a, b in zip("abdef", "bdefg"))
    + ", g = 10^999)",
    "reference bomb": "R1 = Calculator(9^900); R2 = Calculator(" + " + ".join(["R1"] * 5000) + ")",
}
_LEGAL = {"unary chain": "1"}


@pytest.mark.parametrize("name", sorted(_HOSTILE))
def test_hostile_text_gives_a_trace_with_an_error_quickly(name: str) -> None:
    start = time.process_time()  # CPU time: the work done, whatever else the machine runs
    trace = execute(_HOSTILE[name])
    elapsed = time.process_time() - start
    assert isinstance(trace, Trace)
    if name in _LEGAL:
        assert trace.answer == _LEGAL[name] and trace.error is None
    else:
        assert trace.answer is None and trace.error
    json.dumps(trace.to_json())
    assert elapsed < 2.0, f"{name} took {elapsed:.2f} s"


def test_a_linear_system_with_huge_coefficients_is_solved_exactly_and_quickly() -> None:
    unknowns = dict(zip("abcdxy", range(1, 7)))
    equations = []
    for r in range(6):
        coefficients = [f"{(r * 7 + c) % 9 + 2}^{900 + r * c}" for c in range(6)]
        lhs = " + ".join(f"{k}*{v}" for k, v in zip(coefficients, unknowns))
        rhs = " + ".join(f"{k}*{n}" for k, n in zip(coefficients, unknowns.values()))
        equations.append(f"{lhs} = {rhs}")
    start = time.perf_counter()
    trace = execute("R1, R2, R3, R4, R5, R6 = SolveEquation(" + "; ".join(equations) + ")")
    assert time.perf_counter() - start < 2.0
    assert trace.steps[0].outputs == {f"R{n}": str(n) for n in range(1, 7)}


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_any_text_gives_a_trace(text: str) -> None:
    assert isinstance(execute(text), Trace)
    assert isinstance(execute(f"R1 = Calculator({text})"), Trace)
    assert isinstance(execute(f"R1 = SolveEquation({text})"), Trace)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="0123456789+-*/^()%.,=;<> xyR$", max_size=120))
def test_any_formula_like_text_gives_a_trace(text: str) -> None:
    for tool in ("Calculator", "SetEquation", "SolveEquation", "SolveInequality", "Define", "Count"):
        trace = execute(f"R1 = Calculator(2); R2 = {tool}({text})")
        assert isinstance(trace, Trace)
        assert (trace.answer is None) == (trace.error is not None)


def test_actions_on_separate_lines_are_named_as_such() -> None:
    """A model that puts each call on its own line gets that error, not "R1 not set by an earlier action"."""
    trace = execute("R1 = Calculator(2 + 3)\nR2 = Calculator(R1 * 2)", "maths")
    assert trace.error is not None and "actions on separate lines" in trace.error
    assert execute("R1 = Calculator(2 + 3); R2 = Calculator(R1 * 2)", "maths").answer == "10"
    assert execute("R1 = Calculator(\n2 + 3\n)", "maths").answer == "5"  # a line break inside one call is fine


def test_a_repeated_output_name_is_an_error() -> None:
    trace = execute("R1, R1 = SolveEquation(x + y = 3, x - y = 1)", "maths")
    assert trace.error is not None and "output name repeats" in trace.error
    assert execute("R1, R2 = SolveEquation(x + y = 3, x - y = 1)", "maths").error is None
