"""The HTTP client of OpenAI-compatible endpoints (vLLM servers, hosted APIs), shared by every caller of one.

MOAT's LLM critic, PilotRL's LLM judge and plan writer, and the `openai` generation backend all call an
endpoint through `request_json`; every failure is a classified `CallError`, so each caller can tell what
to retry and what to count. Keys are read from the environment at each call and never stored.
"""

from __future__ import annotations

import json
import os
import random
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from http.client import HTTPException

from coalign.core.endpoint_options import CriticBudget, OpenAIOptions

Complete = Callable[[str], str]  # one prompt in, the model's reply out


RETRYABLE = frozenset({"timeout", "connection", "http_429", "http_5xx"})
FAILURE_KINDS = ("timeout", "connection", "http_429", "http_5xx", "http_other", "bad_response", "unparseable")


class CallError(Exception):
    """A failed critic call, classified so the caller knows whether to retry and what to count."""

    def __init__(self, kind: str, detail: str, retry_after_s: float | None = None):
        super().__init__(detail)
        self.kind, self.detail, self.retry_after_s = kind, detail, retry_after_s


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Never follow redirects: a POST must not be replayed (with its key) somewhere else."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: ANN001 - urllib's signature
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


def _retry_after(value: str | None) -> float | None:
    """Retry-After in seconds (the HTTP-date form is rare for APIs and falls back to back-off)."""
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def _http_error(exc: urllib.error.HTTPError, key: str) -> CallError:
    """A classified HTTP error; the body's first bytes, with the key scrubbed, for one that is not retried."""
    code = exc.code
    if code == 429 or code >= 500:
        kind = "http_429" if code == 429 else "http_5xx"
        return CallError(kind, f"http {code}", _retry_after(exc.headers.get("Retry-After")))
    try:
        body = exc.read(300).decode("utf-8", "replace")
    except (OSError, HTTPException):
        body = ""
    if key:
        body = body.replace(key, "***")
    detail = " ".join(body.split())[:200]
    return CallError("http_other", f"http {code}" + (f": {detail}" if detail else ""))


def request_json(options: OpenAIOptions, path: str, payload: dict | None = None) -> object:
    """The decoded JSON reply of an OpenAI-compatible endpoint: `payload` POSTed to `base_url` + `path`, or a
    GET when there is none. Every failure is a classified `CallError` whose text never holds the key.

    The key is read from `options.api_key_env` at each call and goes only into the Authorization header
    (none is sent when the variable is unset, as a local vLLM server needs none); it is never stored.
    """
    key = os.environ.get(options.api_key_env, "")
    request = urllib.request.Request(
        f"{options.base_url.rstrip('/')}{path}",
        data=None if payload is None else json.dumps(payload).encode(),
        headers={"Content-Type": "application/json"},
        method="GET" if payload is None else "POST",
    )
    if key:
        request.add_unredirected_header("Authorization", f"Bearer {key}")
    try:
        with _OPENER.open(request, timeout=options.timeout_s) as response:
            raw = response.read()
    except urllib.error.HTTPError as exc:
        raise _http_error(exc, key) from None
    except (TimeoutError, urllib.error.URLError, HTTPException, OSError) as exc:
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        if isinstance(reason, TimeoutError):
            raise CallError("timeout", f"timeout after {options.timeout_s:g} s") from None
        raise CallError("connection", f"connection error ({type(reason).__name__})") from None
    try:
        body = json.loads(raw)
        json.dumps(body, ensure_ascii=False).encode()  # a lone surrogate (`\ud800`) could not be written later
    except ValueError:  # UnicodeEncodeError is one
        raise CallError(
            "bad_response", f"bad response body ({len(raw)} bytes, not JSON or not valid Unicode)"
        ) from None
    return body


def retry_delay(budget: CriticBudget, attempt: int, retry_after_s: float | None) -> float:
    """Seconds before retry `attempt` + 1: the server's Retry-After when given, else exponential back-off with
    jitter; both capped at `budget.max_delay_s`."""
    if retry_after_s is not None:
        return min(retry_after_s, budget.max_delay_s)
    return min(budget.backoff_s * 2**attempt * (1 + random.random()), budget.max_delay_s)


@dataclass(frozen=True)
class OpenAIChat:
    """`Complete` over an OpenAI-compatible `/chat/completions` endpoint (vLLM, hosted APIs), by
    `request_json`: the key is never stored here, so it cannot reach a repr, and it is scrubbed from any
    error text."""

    options: OpenAIOptions

    def __call__(self, prompt: str) -> str:
        o = self.options
        payload = {
            "model": o.model,
            "messages": [{"role": "user", "content": prompt}],
            "temperature": o.temperature,
            "max_tokens": o.max_tokens,
        }
        body = request_json(o, "/chat/completions", payload)
        try:
            content = body["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            raise CallError("bad_response", "bad response body (not a chat completion)") from None
        if not isinstance(content, str):
            raise CallError("bad_response", "bad response body (message content is not text)")
        return content
