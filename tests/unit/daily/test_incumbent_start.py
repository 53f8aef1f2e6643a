"""A restored daily that dies while loading is told with its exit code and its log's last line (credentials
cut), so a port still held or a missing file is named, not only "exited". A real child process (a shell
script), no engine."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from campaign.daily import incumbent
from campaign.errors import RunError
from tests.support.contracts import free_port

# the first run is held (snapshotted while it runs); the restarted one dies while "loading"
KEY = "sk-daily-" + "0123456789abcdef"
DIES = """#!/bin/sh
if [ -e "$0.hold" ]; then sleep 30; fi
echo "loading"
echo "couldn't bind HTTP server socket for key $2: address already in use"
sleep 1
exit 3
"""


def test_a_daily_that_dies_while_loading_is_told_with_its_exit_code_and_log(tmp_path: Path) -> None:
    script = tmp_path / "daily-server"
    script.write_text(DIES)
    script.chmod(0o755)
    pidfile, hold = tmp_path / "daily.pid", tmp_path / "daily-server.hold"
    hold.touch()
    first = subprocess.Popen([str(script), "--api-key", KEY], stdout=subprocess.DEVNULL, start_new_session=True)
    pidfile.write_text(f"{first.pid}\n")
    deadline = time.monotonic() + 10
    while str(script).encode() not in Path(f"/proc/{first.pid}/cmdline").read_bytes():  # until its exec
        assert time.monotonic() < deadline
        time.sleep(0.01)
    settings = {"endpoint": f"http://127.0.0.1:{free_port()}", "api_key_env": None, "served_model": None,
                "stop_timeout": 5.0, "ready_budget": 20.0}
    snap = incumbent.snapshot_pidfile(pidfile, settings)  # read back from /proc while it runs
    first.kill()
    first.wait()
    hold.unlink()
    log = tmp_path / "daily.log"
    pid = incumbent.start(snap, log)
    with pytest.raises(RunError) as died:
        incumbent.prove(snap, budget=20.0)
    message = str(died.value)
    assert f"pid {pid} exited while loading" in message and "exit code 3" in message
    assert "address already in use" in message and str(log) in message
    assert KEY not in message  # the engine's own log line, its credentials cut before any record keeps it
