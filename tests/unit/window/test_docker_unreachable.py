"""An engine that does not answer is never taken for "the container is gone": status says unknown, the
orphan sweep says the restore FAILED (and leaves the window armed for the next try), cleanup fails with the
engine named. The engine is a real closed port on this machine (connection refused); nothing is faked."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest

from campaign.daily.state import WindowState, boot_id, boottime, process_start_time
from tests.support.cli import campaign
from tests.support.contracts import REPO, demo_like, write_contract

WINDOW = "w-unreachable-engine"


@pytest.fixture
def engine() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{sock.getsockname()[1]}"


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, engine: str) -> WindowState:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    bundle = tmp_path / "runs" / WINDOW
    bundle.mkdir(parents=True)
    made = WindowState(window=WINDOW, bundle=str(bundle), contract=str(write_contract(tmp_path, demo_like(18000))),
                       record=str(tmp_path / "r.json"), runner_pid=os.getpid(),
                       runner_start_time=process_start_time(os.getpid()), boot_id=boot_id(),
                       failsafe_generation=1, failsafe_backend="engine", failsafe_container="f" * 64, armed=True,
                       incumbent_stopped=True, deadline_boottime=boottime() + 3600, deadline_wall=time.time() + 3600,
                       incumbent={"runtime": "docker", "container": "daily", "docker_host": {"url": engine},
                                  "restart_policy": {"Name": "no"}})
    made.save()
    return made


def test_status_says_unknown_never_stopped(state: WindowState, engine: str) -> None:
    from campaign.window.status import window_status

    (row,) = window_status(WINDOW)
    assert row["daily"].startswith(f"unknown (docker engine {engine}: inspecting container 'daily': "
                                   "connection refused"), row["daily"]
    assert f"box watchdog: unknown (docker engine {engine}: asking the box watchdog how it is: connection " \
           "refused" in row["daily"]


def test_the_orphan_sweep_reports_a_failed_restore_and_keeps_the_window_armed(state: WindowState,
                                                                              engine: str) -> None:
    from campaign.window.orphans import restore_orphaned_windows

    with state.locked():
        fresh = state.reload()
        fresh.deadline_boottime = boottime() - 1  # the deadline passed: whoever notices restores
        fresh.save()
    (line,) = restore_orphaned_windows()
    assert line.startswith(f"window {WINDOW}: deadline passed; restoring the daily FAILED: restore failed: "
                           f"docker engine {engine}: inspecting container 'daily': connection refused"), line
    after = state.reload()
    assert after.armed and not after.restored  # owed still: the next command tries again


def test_cleanup_names_the_engine_that_did_not_answer(engine: str, tmp_path: Path) -> None:
    done = campaign("cleanup", "--docker-host", engine, env={"XDG_STATE_HOME": str(tmp_path / "state")},
                    cwd=REPO, timeout=120)
    assert done.returncode == 1
    assert f"docker engine {engine}: listing the containers windows left: connection refused" in done.stderr
