"""doctor names the process holding the daily's port by its command line, credentials cut: a daily started
by hand with --api-key KEY and a stale pidfile never puts its key in doctor's line. A real process."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from campaign.window.doctordaily import _describe

KEY = "sk-stray-" + "0123456789abcdef"


def test_the_holder_of_the_port_is_described_without_its_key() -> None:
    holder = subprocess.Popen(["sh", "-c", "sleep 30", "llama-server", "--port", "8000", "--api-key", KEY])
    try:
        deadline = time.monotonic() + 10
        while KEY.encode() not in Path(f"/proc/{holder.pid}/cmdline").read_bytes():  # until its exec
            assert time.monotonic() < deadline
            time.sleep(0.01)
        said = _describe(holder.pid)
        assert said.startswith(f"pid {holder.pid} (sh -c sleep 30 llama-server --port 8000 --api-key ")
        assert KEY not in said
    finally:
        holder.kill()
        holder.wait()
