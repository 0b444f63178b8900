"""Fixtures shared by test modules."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer

import pytest

from tests.fault_server import KEY, Server, handler

# Ray reads these once, when it is first imported, and vLLM imports it with its engine (tests/models/test_vllm.py), so a
# later Ray test in the same worker (tests/core/test_ray_jobs.py) would run with Ray's defaults: on Linux bound to the
# machine's address, not 127.0.0.1, and waiting for ever on its cluster's token. Set for every test, before either.
RAY_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
for _name, _value in RAY_ENV.items():
    os.environ.setdefault(_name, _value)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files holding `slow` tests first, each file's tests in their own order: `make test` hands whole files to its
    workers in this order, and a file of minutes handed out last ran alone at the end (longest first, the
    scheduling heuristic). The same order in every worker, as xdist requires."""
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow)


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[Server]:
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("COALIGN_TEST_KEY", KEY)
    state = Server(url="", script=[])
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler(state))
    httpd.daemon_threads = True
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield state
    httpd.shutdown()
    httpd.server_close()
    thread.join(timeout=5)
