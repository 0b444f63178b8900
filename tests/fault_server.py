"""A loopback OpenAI-compatible server that answers from a script of replies and faults.

Each request pops the next `Reply` (the default once the script is empty): a chat completion (or, on
`/v1/completions`, the `n` texts of `Server.completions`), an HTTP error, a delay past the client's
timeout, a truncated or lying body, or a careless echo of the Authorization header. `GET /v1/models`
lists `Server.models`. It records what it received, so tests can check keys and concurrency.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler

KEY = "sk-test-7f3a9c1e-unique-secret"  # the only key the server accepts; tests grep for it everywhere


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


def echo(body: dict) -> list[str]:
    """The default completions: the prompt and each candidate's number (order can be checked), and a newline a
    client must strip."""
    return [f"{body['prompt']}#{i}\n" for i in range(body.get("n", 1))]


@dataclass
class Server:
    url: str
    script: list[Reply]  # popped per request; the default Reply once empty
    default: Reply = field(default_factory=Reply)
    completions: Callable[[dict], list[str]] = echo  # a /v1/completions request's texts
    models: list[dict] = field(default_factory=list)  # GET /v1/models's `data`
    auth: list[str | None] = field(default_factory=list)
    bodies: list[dict] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


def handler(server: Server) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:  # keep test output quiet
            pass

        def do_GET(self) -> None:
            auth = self.headers.get("Authorization")
            with server.lock:
                server.auth.append(auth)
            ok = auth == f"Bearer {KEY}" and self.path == "/v1/models"
            body = {"object": "list", "data": server.models} if ok else {"error": "bad key or path"}
            data = json.dumps(body).encode()
            self.send_response(200 if ok else 401)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:
            with server.lock:
                server.in_flight += 1
                server.max_in_flight = max(server.max_in_flight, server.in_flight)
                reply = server.script.pop(0) if server.script else server.default
            self.answered = False
            try:
                self._respond(reply)
            except OSError:  # the client gave up (timeout test)
                pass
            finally:
                self._leave()

        def _leave(self) -> None:
            """No longer in flight: called before the answer's bytes go out (a client that has them may send its
            next request before this thread runs again) or, failing that, once the request ends."""
            if not self.answered:
                self.answered = True
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
            if auth != f"Bearer {KEY}" or self.path not in ("/v1/chat/completions", "/v1/completions"):
                reply = Reply(None, 401, raw=b'{"error": "bad key or path"}')
            if reply.raw is not None:
                data = reply.raw
            elif reply.echo_auth:
                data = json.dumps({"error": f"rejected header Authorization: {auth}"}).encode()
            elif self.path == "/v1/completions":
                texts = server.completions(body)
                choices = [{"index": i, "text": t, "finish_reason": "stop"} for i, t in enumerate(texts)]
                data = json.dumps({"object": "text_completion", "choices": choices}).encode()
            else:
                data = json.dumps({"choices": [{"message": {"role": "assistant", "content": reply.content}}]}).encode()
            self._leave()
            self.send_response(reply.status)
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(reply.declared_length or len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler
