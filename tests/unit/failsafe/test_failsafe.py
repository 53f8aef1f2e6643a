"""The failsafe's own parts, no engine: backend choice, the dry run, what arming writes, the deadline on
the boot clock, disarming, and refusing when the watchdog pair does not report active.

The processes started here are the project's own watchdogs (``python -m campaign.failsafe.watchdog``),
really spawned; the window they guard has no daily and its runner is this test process, alive, so
nothing fires unless a test makes it.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Iterator

import pytest

from campaign.daily.state import FailsafeFailure, WindowState, boot_id, boottime, process_start_time
from campaign.errors import PreflightError
from campaign.failsafe import failsafe
from campaign.failsafe.failsafe import arm, choose_backend, disarm, dry_run
from campaign.failsafe.watchdogfiles import ack_path, alive, pidfile

WINDOW = "t-failsafe-20990101-000000"


def _pids(state: WindowState) -> list[int]:
    pids = []
    for path in state.directory.glob("watchdog-*-*.pid"):
        try:
            pids.append(int(path.read_text().split()[0]))
        except (OSError, ValueError, IndexError):
            pass
    return pids


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[WindowState]:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    made = WindowState(window=WINDOW, bundle=str(tmp_path / "runs" / WINDOW), contract=str(tmp_path / "c.yaml"),
                       record=str(tmp_path / "r.json"), runner_pid=os.getpid(),
                       runner_start_time=process_start_time(os.getpid()), boot_id=boot_id())
    made.save()
    yield made
    # whatever a test left running: disarmed, the watchdogs leave by themselves; those that do not are
    # ours (spawned by this test, pids recorded with their start times) and are killed
    try:
        disarm(made)
    except Exception:
        pass
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(alive(p) for p in made.directory.glob("watchdog-*-*.pid")):
        time.sleep(0.05)
    for path in made.directory.glob("watchdog-*-*.pid"):
        if alive(path):
            os.kill(int(path.read_text().split()[0]), signal.SIGKILL)


def _wait_gone(paths: list[Path], seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not any(alive(p) for p in paths):
            return True
        time.sleep(0.05)
    return False


def test_an_explicit_backend_is_kept_and_auto_picks_one() -> None:
    assert choose_backend("watchdog") == "watchdog"
    assert choose_backend("systemd") == "systemd"
    assert choose_backend("auto") in {"systemd", "watchdog"}


def test_auto_keeps_the_deadline_on_the_engine_of_any_daily_container() -> None:
    from campaign.contracts.schema import FailsafeSpec, IncumbentSpec

    remote = IncumbentSpec(runtime="docker", container="d", endpoint="http://box:1", docker_host="tcp://10.0.0.2:2376")
    local = IncumbentSpec(runtime="docker", container="d", endpoint="http://127.0.0.1:1",
                          docker_host="unix:///var/run/docker.sock")
    process = IncumbentSpec(runtime="process", pidfile="d.pid", endpoint="http://127.0.0.1:1")
    docker_lane, process_lane = (SimpleNamespace(runtime="docker", docker_host=None),
                                 SimpleNamespace(runtime="process", docker_host=None))
    assert choose_backend("auto", remote) == "engine"
    # the engine restarts its watchdog, whatever kills ours; and it can remove every lane that holds the port
    assert choose_backend("auto", local, [docker_lane]) == "engine"
    assert choose_backend("auto", local, [docker_lane, process_lane]) in {"systemd", "watchdog"}
    assert choose_backend("auto", process) in {"systemd", "watchdog"}
    assert choose_backend("watchdog", local) == "watchdog"  # named: kept
    with pytest.raises(PreflightError, match="not a container"):
        choose_backend("engine", process)
    # auto falls back (the daily's image has no python) only on this machine's engine and only when the
    # contract did not configure the engine's watchdog itself
    plain = FailsafeSpec(deadline=600)
    assert failsafe.fallback_backend(plain, local) in {"systemd", "watchdog"}
    assert failsafe.fallback_backend(plain, remote) is None
    assert failsafe.fallback_backend(FailsafeSpec(deadline=600, python="/opt/py/bin/python3"), local) is None
    assert failsafe.fallback_backend(FailsafeSpec(deadline=600, backend="engine"), local) is None


def test_watchdog_dry_run_fires(tmp_path: Path) -> None:
    assert dry_run("watchdog", tmp_path) == "watchdog dry run fired"
    assert not [p for p in tmp_path.iterdir() if p.is_dir()]  # its scratch folder is gone again


def test_dry_run_of_an_unknown_backend_leaves_the_incumbent_alone(tmp_path: Path) -> None:
    with pytest.raises(PreflightError, match="failsafe dry run failed, so the incumbent was not touched: "
                                             "unknown failsafe backend 'cron'"):
        dry_run("cron", tmp_path)


def test_arm_records_the_deadline_and_the_pair_acks(state: WindowState) -> None:
    state.failsafe_failed = FailsafeFailure(at=1.0, error="an earlier generation's", by="w", attempts=3)
    state.save()
    boot_before, wall_before = boottime(), time.time()
    armed = arm(state, "watchdog", 900.0)
    boot_after, wall_after = boottime(), time.time()

    assert armed.armed and armed.failsafe_generation == 1 and armed.failsafe_backend == "watchdog"
    # the deadline is held on the boot clock (wall-clock changes cannot move it); wall time is for people
    assert boot_before + 900.0 <= armed.deadline_boottime <= boot_after + 900.0
    assert wall_before + 900.0 <= armed.deadline_wall <= wall_after + 900.0
    assert armed.failsafe_failed is None  # not this generation's failure
    assert armed.last_beat() is not None and boot_before <= armed.last_beat() <= boot_after
    assert WindowState.load(WINDOW) == armed  # what arm returns is what it saved

    pair = [pidfile(armed, 1, role) for role in "ab"]
    assert all(ack_path(armed, 1, role).exists() for role in "ab")
    assert all(alive(p) for p in pair)

    disarm(armed)
    assert not armed.reload().armed
    assert _wait_gone(pair), "a disarmed window's watchdogs must leave"
    assert "the window is disarmed; exiting" in (armed.directory / "watchdog.log").read_text()


def test_arming_again_supersedes_the_older_pair(state: WindowState) -> None:
    first = arm(state, "watchdog", 900.0)
    second = arm(first, "watchdog", 900.0)
    assert second.failsafe_generation == 2 and second.armed
    assert _wait_gone([pidfile(first, 1, role) for role in "ab"])
    assert all(alive(pidfile(second, 2, role)) for role in "ab")
    assert "superseded by generation 2" in (state.directory / "watchdog.log").read_text()


def test_arm_refuses_when_the_pair_does_not_ack(state: WindowState, monkeypatch: pytest.MonkeyPatch) -> None:
    # a state from another boot: the real watchdogs start, see it, and leave without acking
    state.boot_id = "another-boot"
    state.save()
    monkeypatch.setattr(failsafe, "ACK_WAIT", 3.0)
    with pytest.raises(PreflightError, match=r"failsafe watchdog pair \(pid \d+\) did not report active within "
                                             r"3s \(log: .*watchdog.log\); the incumbent was not touched"):
        arm(state, "watchdog", 900.0)
    after = state.reload()
    assert not after.armed and after.failsafe_generation == 1
    assert not ack_path(after, 1, "a").exists()
    assert "from another boot" in (state.directory / "watchdog.log").read_text()


def test_disarm_only_clears_armed(state: WindowState) -> None:
    state.armed, state.failsafe_generation, state.deadline_boottime = True, 4, boottime() + 60
    state.save()
    disarm(state)
    after = state.reload()
    assert not after.armed
    assert after.model_dump(exclude={"armed"}) == state.model_dump(exclude={"armed"})
