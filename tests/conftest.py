"""Fixtures shared by test modules."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer

import pytest

from tests.fault_server import KEY, Server, handler

# Ray reads these once, when it is first imported, and vLLM imports it with its engine (tests/test_vllm.py), so a
# later Ray test in the same worker (tests/test_ray_jobs.py) would run with Ray's defaults: on Linux bound to the
# machine's address, not 127.0.0.1, and waiting for ever on its cluster's token. Set for every test, before either.
RAY_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
for _name, _value in RAY_ENV.items():
    os.environ.setdefault(_name, _value)

# Test files that start several processes of their own (torchrun, gloo, DeepSpeed, Ray). Two of them side by side
# put four or more busy processes on `make test`'s two cores, where gloo's ranks wait on each other: each ran 2-3x
# slower than alone. Under xdist they are one unit of work, run one after another on one worker, and first, while
# the other workers take the rest.
MULTIPROCESS = frozenset(f"tests/test_{name}.py" for name in ("parallel", "ray_jobs", "sharded", "ranks", "launch"))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: item.nodeid.split("::")[0] not in MULTIPROCESS)  # stable: file order otherwise kept


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    from xdist.scheduler import LoadFileScheduling

    class MultiprocessFilesTogether(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            scope = super()._split_scope(nodeid)
            return "multiprocess" if scope in MULTIPROCESS else scope

    return MultiprocessFilesTogether(config, log) if config.getoption("dist") == "loadfile" else None


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
