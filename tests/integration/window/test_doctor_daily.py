"""`campaign doctor` checks the daily: a real daily llama-server (started by `campaign daily start`) passes its
four lines; with the daily stopped and a stray real server (python -m http.server) on the daily's port, or a
pidfile naming a process that does not listen, doctor says so and names the holder, never "ok". (A container
daily on the host network: tests/integration/docker/test_docker_daily.py.)"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from tests.support.cli import campaign

pytestmark = pytest.mark.integration


def _lines(done: subprocess.CompletedProcess[str]) -> dict[str, str]:
    """doctor's lines by check name: 'ok: DETAIL' or 'FAIL: DETAIL -> FIX'."""
    import re

    return {match.group(2): f"{match.group(1)}: {match.group(3)}" for line in done.stdout.splitlines()
            if (match := re.match(r"^(ok|FAIL)\s+(.+?): (.*)$", line))}


def _stray(port: int) -> subprocess.Popen:
    server = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        import socket

        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return server
        time.sleep(0.1)
    server.kill()
    raise AssertionError("the stray server never listened")


def test_doctor_checks_the_daily_and_names_a_stray_server_on_its_port(daily: dict) -> None:
    contract, port = str(daily["contract"]), daily["port"]
    pid = int((daily["root"] / "daily.pid").read_text())
    fine = _lines(campaign("doctor", contract, "--no-smoke"))
    assert fine["daily runs"].startswith(f"ok: pid {pid} "), fine
    assert fine[f"daily listens on :{port}"] == f"ok: the daily (pid {pid}) holds port {port}", fine
    assert fine["daily answers a completion"].startswith(f"ok: http://127.0.0.1:{port} in "), fine
    assert fine["failsafe can restart the daily"].startswith("ok: "), fine

    assert campaign("daily", "stop", contract).returncode == 0
    stray = _stray(port)
    try:
        done = campaign("doctor", contract, "--no-smoke")
        lines = _lines(done)
        assert done.returncode == 1 and not any(line.startswith("ok") and f":{port}" in name
                                                for name, line in lines.items()), done.stdout
        # the contract's own fix: its incumbent lane started by `campaign daily start`, not the demo's `make`
        assert lines["daily runs"].startswith("FAIL: no live process in "), lines
        assert f"-> campaign daily start {contract} (its incumbent lane base)" in lines["daily runs"]
        held = lines[f"daily listens on :{port}"]
        assert held.startswith(f"FAIL: no daily runs, yet port {port} is held by pid {stray.pid} (") and \
            "http.server" in held, held
        assert lines["daily answers a completion"].startswith("FAIL: "), lines
        assert "make model" not in done.stdout

        # a pidfile naming a live process that does not listen: the daily is not what answers there
        other = subprocess.Popen(["sleep", "60"])
        try:
            (daily["root"] / "daily.pid").write_text(f"{other.pid}\n")
            lines = _lines(campaign("doctor", contract, "--no-smoke"))
            assert lines["daily runs"].startswith(f"ok: pid {other.pid} "), lines
            assert lines[f"daily listens on :{port}"].startswith(
                f"FAIL: the daily is pid {other.pid}, but port {port} is held by pid {stray.pid} ("), lines
        finally:
            other.kill()
            other.wait()
    finally:
        stray.kill()
        stray.wait()
