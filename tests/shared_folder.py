"""Run by tests/core/test_launch.py under torchrun: each rank checks the run folder argv[1] (`Run.check_shared`) and
writes what came of it to argv[2]/rank<R>.txt. With argv[3] `apart`, rank 1 plays a rank on another node that
does not mount the folder: its host is node2 and its folder another one."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

from coalign.core import ranks, runs
from coalign.core.errors import RunError

runs.SHARED_WAIT_S = 0.5
folder, out = Path(sys.argv[1]), Path(sys.argv[2])
if sys.argv[3] == "apart" and ranks.rank() == 1:
    socket.gethostname = lambda: "node2"
    folder = out / "node2"
try:
    runs.Run(folder).check_shared()
    found = "ok"
except RunError as err:
    found = f"error: {err}"
(out / f"rank{ranks.rank()}.txt").write_text(found)
