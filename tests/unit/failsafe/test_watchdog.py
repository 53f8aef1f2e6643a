"""The watchdog is loud and persistent: a failed restore is retried with backoff, a final failure is
recorded where `campaign status` reads it, an unreadable state is reported, and failsafe and watchdog no
longer import each other.

No engine and no daily here: where a restore must fail or succeed, the fault is injected by replacing the
watchdog's restore function (``watchdog._restore``), which is what these tests are about, not a stand-in
for an engine. Waits use an injected clock, so the backoff schedule is checked without sleeping it.
"""

from __future__ import annotations

import ast
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from campaign.daily.state import WindowState, boot_id, boottime, process_start_time
from campaign.errors import RunError
from campaign.failsafe import watchdog
from campaign.failsafe.watchdog import Report, fire_reason, restore_until_served
from campaign.fsutil import read_jsonl
from tests.support.cli import campaign
from tests.support.contracts import REPO, demo_like, write_contract

WINDOW = "t-demo-20990101-000000"


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> WindowState:
    """An armed window whose runner is this test process (alive, so nothing fires by itself)."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    bundle = tmp_path / "runs" / WINDOW
    bundle.mkdir(parents=True)
    contract = write_contract(tmp_path, demo_like(18000))
    made = WindowState(window=WINDOW, bundle=str(bundle), contract=str(contract), record=str(tmp_path / "r.json"),
                       runner_pid=os.getpid(), runner_start_time=process_start_time(os.getpid()),
                       boot_id=boot_id(), failsafe_generation=1, failsafe_backend="watchdog", armed=True,
                       deadline_boottime=boottime() + 3600, deadline_wall=time.time() + 3600)
    made.save()
    return made


def _journal(state: WindowState) -> list[dict[str, Any]]:
    path = Path(state.bundle) / "journal.jsonl"
    return read_jsonl(path) if path.exists() else []


def _log(state: WindowState) -> str:
    path = state.directory / "watchdog.log"
    return path.read_text() if path.exists() else ""


class FakeClock:
    """Boot-clock seconds that move only when the code under test sleeps."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.waits: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.now += seconds


def _failing_restore(monkeypatch: pytest.MonkeyPatch, failures: int | None) -> list[dict[str, Any]]:
    """Injected fault: the first ``failures`` restores raise (all of them when None), then one succeeds."""
    calls: list[dict[str, Any]] = []

    def fake(window: str, **kwargs: Any) -> dict[str, Any]:
        calls.append({"window": window, **kwargs})
        if failures is None or len(calls) <= failures:
            raise RunError(f"restore failed: daily did not answer (attempt {len(calls)})")
        return {"event": "done", "action": "started"}

    monkeypatch.setattr(watchdog, "_restore", fake)
    return calls


def test_restore_is_retried_with_backoff_until_it_succeeds(state: WindowState,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A restore that fails twice then succeeds (fault injected by replacing the restore function)."""
    calls = _failing_restore(monkeypatch, failures=2)
    clock = FakeClock()
    status = restore_until_served(WINDOW, reason="runner is gone", generation=1,
                                  report=Report(WINDOW, "watchdog generation 1 (a)"), sleep=clock.sleep, clock=clock)
    assert status == 0
    assert len(calls) == 3
    assert all(c["if_needed"] and c["generation"] == 1 and c["reason"] == "runner is gone" for c in calls)
    assert clock.waits == [watchdog.RETRY_FIRST, watchdog.RETRY_FIRST * 2]
    fresh = state.reload()
    assert not fresh.armed and fresh.failsafe_failed is None
    # each failed attempt is in the log and, while the bundle is known, the journal (Report.know)
    log = _log(state)
    assert "attempt 1 failed: restore failed: daily did not answer (attempt 1); retrying in 2s" in log
    assert "attempt 2 failed" in log and "attempt 3: the daily serves again (started)" in log


def test_each_failed_attempt_goes_to_the_journal(state: WindowState, monkeypatch: pytest.MonkeyPatch) -> None:
    """Same injected fault; the report knows the bundle, as a watchdog's does after reading the state."""
    _failing_restore(monkeypatch, failures=2)
    clock = FakeClock()
    report = Report(WINDOW, "watchdog generation 1 (b)")
    report.know(state)
    assert restore_until_served(WINDOW, reason="deadline reached", generation=1, report=report,
                                sleep=clock.sleep, clock=clock) == 0
    records = [r for r in _journal(state) if r["step"] == "failsafe.restore"]
    assert [(r["event"], r["attempt"], r["retry_in"]) for r in records] == [("failed", 1, 2.0), ("failed", 2, 4.0)]
    assert all(r["by"] == "watchdog generation 1 (b)" for r in records)


def test_final_failure_is_recorded_where_status_reads_it(state: WindowState,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A restore that never succeeds (injected fault): the watchdog gives up after RESTORE_LIMIT, loudly."""
    calls = _failing_restore(monkeypatch, failures=None)
    clock = FakeClock()
    report = Report(WINDOW, "watchdog generation 1 (a)")
    report.know(state)
    status = restore_until_served(WINDOW, reason="deadline reached", generation=1, report=report,
                                  sleep=clock.sleep, clock=clock)
    assert status == watchdog.EXIT_RESTORE_FAILED != 0
    assert clock.waits[:6] == [2.0, 4.0, 8.0, 16.0, 32.0, watchdog.RETRY_CAP]
    assert max(clock.waits) == watchdog.RETRY_CAP and sum(clock.waits) <= watchdog.RESTORE_LIMIT
    assert sum(clock.waits) + watchdog.RETRY_CAP > watchdog.RESTORE_LIMIT  # it kept trying to the limit
    assert len(calls) == len(clock.waits) + 1

    fresh = state.reload()
    assert fresh.armed  # the daily is still owed: the next command's orphan sweep tries again
    assert fresh.failsafe_failed is not None
    assert fresh.failsafe_failed.attempts == len(calls)
    assert "daily did not answer" in fresh.failsafe_failed.error
    final = _journal(state)[-1]
    assert final["step"] == "failsafe.restore" and final["event"] == "failed" and final["final"] is True
    assert f"restoring the daily FAILED after {len(calls)} attempts" in final["error"]
    assert "ERROR failsafe.restore: restoring the daily FAILED" in _log(state)

    from campaign.window.status import window_status

    (row,) = window_status(WINDOW)
    assert row["failsafe_failed"]["error"] == fresh.failsafe_failed.error
    assert row["failsafe_failed"]["at"] == time.strftime("%Y-%m-%d %H:%M:%S",
                                                         time.localtime(fresh.failsafe_failed.at))
    assert "failsafe restore FAILED at " in row["daily"] and "daily did not answer" in row["daily"]
    assert row["phase"] == "failsafe.restore failed"

    shown = campaign("status", WINDOW, "--json", env={"XDG_STATE_HOME": os.environ["XDG_STATE_HOME"]},
                     cwd=REPO, timeout=120)
    assert shown.returncode == 0, shown.stderr
    (cli_row,) = json.loads(shown.stdout)
    assert cli_row["failsafe_failed"] == row["failsafe_failed"] and "FAILED" in cli_row["daily"]


def test_the_partner_giving_up_second_does_not_report_again(state: WindowState,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Both watchdogs of a pair retry the same failing restore (injected fault) at the same time, on a
    short real clock: one final record, not two."""
    _failing_restore(monkeypatch, failures=None)
    monkeypatch.setattr(watchdog, "RETRY_FIRST", 0.01)
    monkeypatch.setattr(watchdog, "RETRY_CAP", 0.02)
    monkeypatch.setattr(watchdog, "RESTORE_LIMIT", 0.5)
    results: list[int] = []

    def one(role: str) -> None:
        report = Report(WINDOW, f"watchdog generation 1 ({role})")
        report.know(state)
        results.append(restore_until_served(WINDOW, reason="deadline reached", generation=1, report=report))

    threads = [threading.Thread(target=one, args=(role,)) for role in "ab"]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert results == [watchdog.EXIT_RESTORE_FAILED] * 2
    finals = [r for r in _journal(state) if r.get("final")]
    assert len(finals) == 1, finals
    assert "(already recorded by the partner)" in _log(state)


def test_someone_else_restoring_stops_the_retries(state: WindowState, monkeypatch: pytest.MonkeyPatch) -> None:
    """Injected: the first attempt fails, then restore reports that another restorer got there first."""
    outcomes: list[Any] = [RunError("restore failed: busy"), {"event": "skipped", "reason": "already restored"}]

    def fake(window: str, **kwargs: Any) -> dict[str, Any]:
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    monkeypatch.setattr(watchdog, "_restore", fake)
    clock = FakeClock()
    assert restore_until_served(WINDOW, reason="runner is gone", generation=1, report=Report(WINDOW, "w"),
                                sleep=clock.sleep, clock=clock) == 0
    assert clock.waits == [2.0] and not outcomes
    assert state.reload().failsafe_failed is None


def _watch_in_thread(generation: int = 1) -> tuple[threading.Thread, list[int]]:
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(watchdog.watch(WINDOW, generation, "a")), daemon=True)
    thread.start()
    return thread, result


def test_unreadable_state_is_reported_not_swallowed(state: WindowState, monkeypatch: pytest.MonkeyPatch) -> None:
    # the partner is left out: a real one would not see this test's short limits
    monkeypatch.setattr(watchdog, "_keep_partner", lambda state, generation, role, last: last)
    monkeypatch.setattr(watchdog, "POLL", 0.02)
    monkeypatch.setattr(watchdog, "UNREADABLE_LIMIT", 1.0)
    thread, result = _watch_in_thread()
    ack = state.directory / "watchdog-1.ack"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not ack.exists():
        time.sleep(0.02)
    assert ack.exists(), _log(state)
    # replaced whole, as the product writes it: a write_text in place is read empty first at this poll rate
    half = state.directory / "state.json.half"
    half.write_text('{"window": "half a state')
    os.replace(half, state.directory / "state.json")
    thread.join(15)
    assert not thread.is_alive() and result == [watchdog.EXIT_STATE_UNREADABLE]
    log = _log(state)
    assert log.count("cannot read the window state") == 1, log  # once when it starts, not at every poll
    assert "not valid JSON" in log and "gives up" in log
    records = [r for r in _journal(state) if r["step"] == "failsafe.state"]
    assert [r.get("final") for r in records] == [None, True]
    assert all("not valid JSON" in r["error"] for r in records)


def test_a_state_that_becomes_readable_again_is_watched_on(state: WindowState,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(watchdog, "_keep_partner", lambda state, generation, role, last: last)
    monkeypatch.setattr(watchdog, "POLL", 0.02)
    thread, result = _watch_in_thread()
    good = (state.directory / "state.json").read_text()
    (state.directory / "state.json").write_text("{")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and "cannot read the window state" not in _log(state):
        time.sleep(0.02)
    (state.directory / "state.json").write_text(good)
    while time.monotonic() < deadline and "readable again" not in _log(state):
        time.sleep(0.02)
    assert thread.is_alive() and "readable again" in _log(state)
    fresh = state.reload()
    with fresh.locked():
        fresh.armed = False
        fresh.save()
    thread.join(10)
    assert result == [0] and "the window is disarmed; exiting" in _log(state)


def test_the_real_watchdog_reports_an_unreadable_state_in_its_log(state: WindowState) -> None:
    """The entry point a window spawns, started on a state it cannot read: it says so and keeps trying."""
    (state.directory / "state.json").write_text("not json at all")
    with open(state.directory / "watchdog.log", "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "campaign.failsafe.watchdog", WINDOW, "1", "--role", "a"],
                                stdout=log, stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and "cannot read the window state" not in _log(state):
            time.sleep(0.05)
        assert "ERROR failsafe.state: cannot read the window state" in _log(state), _log(state)
        assert proc.poll() is None  # not an exit 0 as if the window were over
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()


def test_a_removed_state_ends_the_watch(state: WindowState) -> None:
    (state.directory / "state.json").unlink()
    assert watchdog.watch(WINDOW, 1, "a") == 0
    assert "the window's state is gone" in _log(state)


def test_fire_reasons(state: WindowState) -> None:
    assert fire_reason(state) is None
    assert fire_reason(state.model_copy(update={"deadline_boottime": boottime() - 1})) == "deadline reached"
    assert fire_reason(state.model_copy(update={"runner_start_time": 1})) == "runner is gone"
    state.beat()
    assert fire_reason(state) is None
    assert fire_reason(state.model_copy(update={"heartbeat_grace": -1.0})) == "runner heartbeat older than -1s"


def _imported_modules(path: Path) -> set[str]:
    """Every module a file imports, at any depth: a function-level import is a cycle too."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
    return names


def test_failsafe_and_watchdog_do_not_import_each_other() -> None:
    window = REPO / "campaign" / "failsafe"
    assert "campaign.failsafe.watchdog" not in _imported_modules(window / "failsafe.py")
    assert "campaign.failsafe.failsafe" not in _imported_modules(window / "watchdog.py")
    shared = _imported_modules(window / "watchdogfiles.py")
    assert not shared & {"campaign.failsafe.watchdog", "campaign.failsafe.failsafe"}


def test_the_standalone_failsafe_processes_load_no_docker_sdk() -> None:
    """The watchdog pair and the systemd timer's restore_now start fast and run where the SDK may be broken:
    docker, requests and urllib3 load only when a restore reaches a container (daily.restore imports the
    runtimes, and the Docker error boundary, at first use). boxwatchdog.py runs in a container of any python
    image: standard library only."""
    code = ("import sys, campaign.failsafe.watchdog, campaign.failsafe.restore_now\n"
            "print(sorted(m for m in ('docker', 'requests', 'urllib3') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert done.stdout.strip() == "[]"
    box = {name.split(".")[0] for name in _imported_modules(REPO / "campaign" / "failsafe" / "boxwatchdog.py")}
    assert box <= set(sys.stdlib_module_names), box - set(sys.stdlib_module_names)



def test_the_systemd_timer_restores_the_same_way(state: WindowState, monkeypatch: pytest.MonkeyPatch) -> None:
    """restore_now (what the systemd timer runs), with the injected fault: retried, then served."""
    from campaign.failsafe import restore_now

    calls = _failing_restore(monkeypatch, failures=1)
    monkeypatch.setattr(watchdog, "RETRY_FIRST", 0.01)
    assert restore_now.main([WINDOW, "2"]) == 0  # a timer of a generation no longer armed does nothing
    assert calls == []
    assert restore_now.main([WINDOW, "1"]) == 0
    assert [c["by"] for c in calls] == ["systemd timer"] * 2 and calls[0]["generation"] == 1
    assert not state.reload().armed
    assert any(r["step"] == "failsafe.restore" and r["by"] == "systemd timer" for r in _journal(state))


def test_the_systemd_timer_reports_an_unreadable_state(state: WindowState) -> None:
    from campaign.failsafe import restore_now

    (state.directory / "state.json").write_text("[")
    assert restore_now.main([WINDOW, "1"]) == watchdog.EXIT_STATE_UNREADABLE
    assert "ERROR failsafe.state: cannot read the window state, so the daily cannot be restored" in _log(state)
