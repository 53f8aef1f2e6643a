"""A daily lane as the tests see it from outside: does it answer, and which process is it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

__all__ = ["daily_pid", "n_ctx", "first_record_of_each_kind", "kill_runner_and_watchdogs", "runner_past_the_daily_stop",
           "serves", "watchdog_pids"]


def disarm_windows(state_root: Path) -> None:
    """Every window under ``state_root`` disarmed, then time for its watchdogs to see it: a teardown's first
    step, as a failsafe still armed from a failed test would start the daily again after it is stopped."""
    from campaign.daily.state import WindowState

    for state_file in state_root.glob("campaign/windows/*/state.json"):
        state = WindowState.load(state_file.parent.name)
        with state.locked():
            state = state.reload()
            state.armed = False
            state.save()
    time.sleep(0.5)  # a watchdog polls every 0.25 s and exits once disarmed


def serves(port: int) -> bool:
    try:
        response = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", timeout=20.0, json={
            "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]})
        return response.status_code == 200 and bool(response.json()["choices"])
    except httpx.HTTPError:
        return False


def serves_within(port: int, seconds: float) -> bool:
    """Whether the daily on ``port`` serves a completion before ``seconds`` pass."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if serves(port):
            return True
        time.sleep(0.2)
    return False


def daily_pid(root: Path) -> int:
    return int((root / "daily.pid").read_text())


def first_record_of_each_kind(journal: Path) -> list[tuple[int, tuple[str, str]]]:
    """(1-based position, (step, event)) of the first record of each kind a full window journaled, counting
    only the records the runner writes (restore records come from restore()): every state a killed runner
    can leave the daily in (a second lane's boot leaves it as the first one's did)."""
    from campaign.fsutil import read_jsonl

    steps = [(r["step"], r["event"]) for r in read_jsonl(journal) if r["step"] != "incumbent.restore"]
    return [(index + 1, step) for index, step in enumerate(steps) if step not in steps[:index]]


def runner_past_the_daily_stop(contract: Path, out: Path) -> tuple[subprocess.Popen, str]:
    """A `campaign run` started in the background, returned (with its window id) once it has journaled the
    daily's stop: from here on a dead runner leaves the daily down unless the failsafe brings it back."""
    from campaign.fsutil import read_jsonl

    runner = subprocess.Popen([sys.executable, "-m", "campaign.cli", "run", str(contract), "--out", str(out)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        journals = list(out.glob("*/journal.jsonl"))
        if journals and any(r["step"] == "incumbent.stop" and r["event"] == "done" for r in read_jsonl(journals[0])):
            return runner, journals[0].parent.name
        time.sleep(0.05)
    runner.kill()
    raise AssertionError("the window never stopped the daily")


def watchdog_pids(state) -> dict[str, int]:  # noqa: ANN001 - a WindowState
    generation = state.failsafe_generation
    return {role: int((state.directory / f"watchdog-{generation}-{role}.pid").read_text().split()[0])
            for role in "ab"}


def kill_runner_and_watchdogs(runner: subprocess.Popen, state) -> None:  # noqa: ANN001 - a WindowState
    """SIGKILL the runner and both watchdogs of the window's failsafe, so nobody is left to restore."""
    pids = watchdog_pids(state)
    for pid in (pids["a"], pids["b"]):
        os.kill(pid, signal.SIGSTOP)  # frozen first, so neither can start the other again in between
    for pid in (runner.pid, pids["a"], pids["b"]):
        os.kill(pid, signal.SIGKILL)
    runner.wait()



def n_ctx(port: int, key: str | None) -> int | None:
    """The context size of whatever answers on ``port`` with ``key`` (None: it did not answer 200): which
    flags serve there, behind which key."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        chat = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", headers=headers, timeout=30.0,
                          json={"max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]})
        props = httpx.get(f"http://127.0.0.1:{port}/props", headers=headers, timeout=10.0)
    except httpx.HTTPError:
        return None
    if chat.status_code != 200 or props.status_code != 200:
        return None
    return int(props.json()["default_generation_settings"]["n_ctx"])
