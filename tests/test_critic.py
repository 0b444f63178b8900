"""Stage 2's critics: re-indexing, execution judging, verdict parsing, and the LLM critic over real HTTP."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from coalign.stages.critic import (
    CriticInput,
    ExecutionCritic,
    LLMCritic,
    NoCritic,
    Verdict,
    make_critic,
    openai_backend,
    parse_verdict,
    reindex,
)
from coalign.tasks import Task
from coalign.tools.executor import execute

# gold numbering has gaps on purpose: corrections must come back as R1, R2
TASK = Task(
    "t1",
    "maths",
    "toy",
    "Half of 48, plus 48?",
    ("Half of 48", "Add 48"),
    ("R2 = Calculator(48 / 2)", "R5 = Calculator(48 + R2)"),
    "72",
)
GOLD = "R1 = Calculator(48 / 2); R2 = Calculator(48 + R1)"
SUBGOALS = ("Half of 48", "Add 48")
RIGHT = "R1 = Calculator(48 / 2); R2 = Calculator(R1 + 48)"
WRONG = "R1 = Calculator(48 * 2)"
KEY = "sk-test-7f3a9c1e-unique-secret"


def item(actions: str = RIGHT) -> CriticInput:
    return CriticInput(TASK, SUBGOALS, actions)


# --------------------------------------------------------------------------- reindex


def test_reindex_closes_gaps_and_renames_references() -> None:
    assert reindex("R2 = Calculator(48 / 2); R5 = Calculator(48 + R2)") == GOLD


def test_reindex_is_word_boundary_safe() -> None:
    text = "R12 = Calculator(3); R1 = Calculator(4); R7 = Calculator(R12 * R1 + R12)"
    assert reindex(text) == "R1 = Calculator(3); R2 = Calculator(4); R3 = Calculator(R1 * R2 + R1)"


def test_reindex_multi_output() -> None:
    text = "R3 = SetEquation(x + y = 10, x - y = 2); R4, R6 = SolveEquation(R3); R8 = Calculator(R4 * R6)"
    out = reindex(text)
    assert out == "R1 = SetEquation(x + y = 10, x - y = 2); R2, R3 = SolveEquation(R1); R4 = Calculator(R2 * R3)"
    assert execute(out).answer == execute(text).answer == "24"


# --------------------------------------------------------------------------- simple critics


def test_execution_critic_keeps_correct_and_corrects_the_rest() -> None:
    right, wrong, garbage = ExecutionCritic().judge([item(RIGHT), item(WRONG), item("The answer is 72.")])
    assert right == Verdict(True, RIGHT, note="correct answer")
    assert (wrong.success, wrong.actions, wrong.note) == (False, GOLD, "wrong answer")
    assert (garbage.success, garbage.actions) == (False, GOLD)
    assert garbage.note.startswith("execution failed")


def test_execution_critic_drops_a_failure_without_gold() -> None:
    task = Task("t2", "maths", "toy", "q", ("s",), (), "1")
    (verdict,) = ExecutionCritic().judge([CriticInput(task, ("s",), WRONG)])
    assert verdict.actions is None and not verdict.success and "no gold" in verdict.note


def test_execution_critic_scores_qa_tasks_by_their_benchmark_rule() -> None:
    from coalign.tasks.qa_suite import generate_qa_suite

    yes_no = generate_qa_suite("heldin", 1)[0]
    choice = next(t for t in generate_qa_suite("heldout", 20) if t.meta["template"] == "heldout_choice")
    gold = [CriticInput(t, t.subgoals, "; ".join(t.actions)) for t in (yes_no, choice)]
    assert [v.success for v in ExecutionCritic().judge(gold)] == [True, True]
    last = yes_no.actions[-1]
    flipped = last.replace("<", ">") if "<" in last else last.replace(">", "<")  # the other yes/no
    wrong = "; ".join([*yes_no.actions[:-1], flipped])
    (verdict,) = ExecutionCritic().judge([CriticInput(yes_no, yes_no.subgoals, wrong)])
    assert (verdict.success, verdict.note) == (False, "wrong answer")


def test_no_critic_keeps_everything() -> None:
    verdicts = NoCritic().judge([item(RIGHT), item(WRONG), item("nonsense")])
    assert [(v.success, v.actions) for v in verdicts] == [(True, RIGHT), (True, WRONG), (True, "nonsense")]


def test_make_critic_names() -> None:
    assert isinstance(make_critic("execution"), ExecutionCritic)
    assert isinstance(make_critic("none"), NoCritic)
    critic = make_critic("llm", base_url="http://127.0.0.1:1", model="m", timeout_s=0.3, max_calls=5)
    assert isinstance(critic, LLMCritic) and critic.max_calls == 5 and critic.complete.timeout_s == 0.3
    with pytest.raises(ValueError, match="unknown critic"):
        make_critic("gpt")


# --------------------------------------------------------------------------- parse_verdict


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Final answer reached", ("reached", None, None)),
        ("The subgoals are fine.\n\n**Final answer reached.**", ("reached", None, None)),
        (
            "Corrected Subgoals: Subgoal 1: Halve 48; Subgoal 2: Add 48\n"
            "Corrected Actions: R1 = Calculator(48 / 2); R2 = Calculator(R1 + 48)",
            ("corrected", ("Halve 48", "Add 48"), "R1 = Calculator(48 / 2); R2 = Calculator(R1 + 48)"),
        ),
        (  # chatter, markdown labels, placeholder brackets, ** as power kept
            "The second step is wrong.\n- **Corrected Subgoals:** <Subgoal 1: Cube 2>\n"
            "- **Corrected Actions:** `R1 = Calculator(2**3)`\nHope this helps!",
            ("corrected", ("Cube 2",), "R1 = Calculator(2**3)"),
        ),
        (  # value on the line after the label, inside a code fence
            "Corrected Actions:\n```\nR1 = Calculator(1 + 1)\n```",
            ("corrected", None, "R1 = Calculator(1 + 1)"),
        ),
        ("Corrected Subgoals: Subgoal 1: Add them", ("corrected", ("Add them",), None)),  # actions line missing
        ("Corrected Subgoals: add them\nCorrected Actions: R1 = Count([1])", ("corrected", None, "R1 = Count([1])")),
        (
            "<think>Maybe Final answer reached? No: Corrected Actions: R9 = Bad()</think>\nFinal answer reached",
            ("reached", None, None),
        ),
        (
            "Let me check... the sum is 72 so the final answer reached?\n</think>\n"
            "Corrected Actions: R1 = Calculator(72)",
            ("corrected", None, "R1 = Calculator(72)"),
        ),
        ("<think>I will say Final answer reached", ("unparseable", None, None)),  # cut off while thinking
        ("The final answer is not reached.", ("unparseable", None, None)),
        ("", ("unparseable", None, None)),
    ],
)
def test_parse_verdict(text: str, expected: tuple) -> None:
    assert parse_verdict(text) == expected


# --------------------------------------------------------------------------- LLM critic over loopback HTTP


@dataclass
class Reply:
    """One scripted server response."""

    content: str | None = "Final answer reached"  # chat message content (None: use `raw`)
    status: int = 200
    delay_s: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    raw: bytes | None = None  # the body as sent
    declared_length: int | None = None  # Content-Length that lies about `raw`
    echo_auth: bool = False  # put the request's Authorization header in the body (a careless server)


@dataclass
class Server:
    url: str
    script: list[Reply]  # popped per request; the default Reply once empty
    default: Reply = field(default_factory=Reply)
    auth: list[str | None] = field(default_factory=list)
    bodies: list[dict] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


def _handler(server: Server) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:  # keep test output quiet
            pass

        def do_POST(self) -> None:
            with server.lock:
                server.in_flight += 1
                server.max_in_flight = max(server.max_in_flight, server.in_flight)
                reply = server.script.pop(0) if server.script else server.default
            try:
                self._respond(reply)
            except OSError:  # the client gave up (timeout test)
                pass
            finally:
                with server.lock:
                    server.in_flight -= 1

        def _respond(self, reply: Reply) -> None:
            length = int(self.headers.get("Content-Length", 0))
            body = json.loads(self.rfile.read(length))
            auth = self.headers.get("Authorization")
            with server.lock:
                server.auth.append(auth)
                server.bodies.append(body)
            time.sleep(reply.delay_s)
            if auth != f"Bearer {KEY}" or self.path != "/v1/chat/completions":
                reply = Reply(None, 401, raw=b'{"error": "bad key or path"}')
            if reply.raw is not None:
                data = reply.raw
            elif reply.echo_auth:
                data = json.dumps({"error": f"rejected header Authorization: {auth}"}).encode()
            else:
                data = json.dumps({"choices": [{"message": {"role": "assistant", "content": reply.content}}]}).encode()
            self.send_response(reply.status)
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(reply.declared_length or len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[Server]:
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("COALIGN_TEST_KEY", KEY)
    state = Server(url="", script=[])
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    httpd.daemon_threads = True
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield state
    httpd.shutdown()
    httpd.server_close()
    thread.join(timeout=5)


def critic(server: Server, **kwargs) -> LLMCritic:
    settings = {"max_concurrency": 1, "max_retries": 2, "backoff_s": 0.01, "max_delay_s": 0.05} | kwargs
    complete = openai_backend(server.url, "critic-model", api_key_env="COALIGN_TEST_KEY", timeout_s=0.3)
    return LLMCritic(complete, **settings)


def test_reached_keeps_the_generated_actions_and_sends_the_key(server: Server) -> None:
    llm = critic(server)
    (verdict,) = llm.judge([item(WRONG)])
    assert verdict == Verdict(True, WRONG, note="critic: final answer reached")
    assert server.auth == [f"Bearer {KEY}"]
    request = server.bodies[0]
    assert request["model"] == "critic-model" and request["temperature"] == 0.1
    prompt = request["messages"][0]["content"]
    assert TASK.question in prompt and WRONG in prompt and GOLD in prompt and "'Calculator'" in prompt
    assert "Subgoal 1: Half of 48; Subgoal 2: Add 48" in prompt
    assert llm.stats["calls"] == 1 and llm.stats["retries"] == 0


def test_corrected_verdict_gives_reindexed_actions_and_subgoals(server: Server) -> None:
    server.script = [
        Reply(
            "Corrected Subgoals: Subgoal 1: Halve 48; Subgoal 2: Add 48\n"
            "Corrected Actions: R3 = Calculator(48/2); R4 = Calculator(R3+48)"
        ),
        Reply("Corrected Subgoals: Subgoal 1: x\nCorrected Actions: just add them"),
    ]
    good, bad = critic(server).judge([item(WRONG), item(WRONG)])
    corrected = "R1 = Calculator(48/2); R2 = Calculator(R1+48)"
    assert good == Verdict(False, corrected, ("Halve 48", "Add 48"), "critic: corrected")
    assert (bad.success, bad.actions, bad.corrected_subgoals) == (False, GOLD, ("x",))
    assert "do not parse" in bad.note


def test_5xx_is_retried(server: Server) -> None:
    server.script = [Reply(status=503)]
    llm = critic(server)
    (verdict,) = llm.judge([item()])
    assert verdict.success
    assert llm.stats["retries"] == 1 and llm.stats["calls"] == 2 and llm.stats["failures"]["http_5xx"] == 1


def test_429_honours_retry_after_over_the_back_off(server: Server) -> None:
    server.script = [Reply(status=429, headers={"Retry-After": "0"})]
    llm = critic(server, backoff_s=5.0, max_delay_s=10.0)  # the back-off alone would sleep >= 5 s
    start = time.monotonic()
    (verdict,) = llm.judge([item()])
    assert verdict.success and time.monotonic() - start < 2.0
    assert llm.stats["failures"]["http_429"] == 1 and llm.stats["retries"] == 1


def test_retry_after_is_capped(server: Server) -> None:
    server.script = [Reply(status=503, headers={"Retry-After": "3600"})]
    start = time.monotonic()
    (verdict,) = critic(server, max_delay_s=0.05).judge([item()])
    assert verdict.success and time.monotonic() - start < 2.0


def test_slow_response_times_out_then_succeeds(server: Server) -> None:
    server.script = [Reply(delay_s=0.6)]
    llm = critic(server)
    (verdict,) = llm.judge([item()])
    assert verdict.success
    assert llm.stats["failures"]["timeout"] == 1 and llm.stats["retries"] == 1


def test_persistent_5xx_drops_the_item_after_the_retries(server: Server) -> None:
    server.default = Reply(status=500)
    llm = critic(server, max_retries=2)
    (verdict,) = llm.judge([item()])
    assert verdict == Verdict(False, None, note="http 500 after 3 tries")
    assert llm.stats["calls"] == 3 and llm.stats["retries"] == 2


def test_other_4xx_is_not_retried(server: Server) -> None:
    server.script = [Reply(None, 400, raw=b'{"error": "max_tokens too large"}')]
    llm = critic(server)
    (verdict,) = llm.judge([item()])
    assert verdict.actions is None and verdict.note.startswith("http 400: ") and "max_tokens" in verdict.note
    assert llm.stats["calls"] == 1 and llm.stats["failures"]["http_other"] == 1


def test_garbage_text_is_unparseable_and_falls_back_to_gold(server: Server) -> None:
    server.script = [Reply("I am not sure what you mean.")]
    llm = critic(server)
    (verdict,) = llm.judge([item(WRONG)])
    assert verdict == Verdict(False, GOLD, note="unparseable verdict")
    assert llm.stats["failures"]["unparseable"] == 1


def test_truncated_json_body_is_counted_and_dropped(server: Server) -> None:
    server.script = [Reply(None, raw=b'{"choices": [{"message": {"content": "Final ans')]
    llm = critic(server)
    (verdict,) = llm.judge([item()])
    assert verdict.actions is None and "bad response" in verdict.note
    assert llm.stats["failures"]["bad_response"] == 1 and llm.stats["calls"] == 1


def test_body_cut_short_of_its_length_is_a_connection_error_and_retried(server: Server) -> None:
    server.script = [Reply(None, raw=b'{"choices": [', declared_length=500)]
    llm = critic(server)
    (verdict,) = llm.judge([item()])
    assert verdict.success
    assert llm.stats["failures"]["connection"] == 1 and llm.stats["retries"] == 1


def test_connection_refused_is_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    with socket.socket() as sock:  # a port that was free a moment ago, nobody listening
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    llm = LLMCritic(openai_backend(f"http://127.0.0.1:{port}/v1", "m", timeout_s=0.3), max_retries=1, backoff_s=0.01)
    (verdict,) = llm.judge([item()])
    assert verdict.actions is None and verdict.note.startswith("connection error")
    assert llm.stats["failures"]["connection"] == 2


def test_concurrency_bound_is_honoured(server: Server) -> None:
    server.default = Reply(delay_s=0.05)
    verdicts = critic(server, max_concurrency=2).judge([item() for _ in range(8)])
    assert all(v.success for v in verdicts) and len(server.bodies) == 8
    assert server.max_in_flight == 2  # reached, never exceeded


def test_budget_exhaustion(server: Server) -> None:
    llm = critic(server, max_calls=3)
    verdicts = llm.judge([item() for _ in range(5)])
    assert [v.success for v in verdicts] == [True, True, True, False, False]
    assert verdicts[-1] == Verdict(False, None, note="critic budget exhausted")
    assert len(server.bodies) == 3 and llm.stats["budget_exhausted"] == 2
    assert llm.judge([item()])[0].note == "critic budget exhausted"  # the budget spans calls to judge


def test_the_key_never_leaks(server: Server) -> None:
    server.script = [
        Reply(status=400, echo_auth=True),
        Reply(status=503),
        Reply(status=503),
        Reply(status=503),
        Reply(delay_s=0.6),
        Reply("garbage"),
    ]
    llm = critic(server, max_retries=2)
    verdicts = llm.judge([item() for _ in range(4)])
    assert server.auth and all(a == f"Bearer {KEY}" for a in server.auth)
    assert "***" in verdicts[0].note  # the echoed key was scrubbed, not just absent
    texts = [repr(llm), str(llm.stats), json.dumps(llm.stats), repr(llm.complete)]
    texts += [v.note for v in verdicts] + [repr(v) for v in verdicts]
    assert not any(KEY in text for text in texts)
