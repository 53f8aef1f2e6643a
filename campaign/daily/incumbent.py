"""The incumbent (daily) lane: snapshot it, stop it, start it again exactly as it was, prove it serves.

Process incumbents are found through their pidfile and read back from ``/proc`` (argv, environment,
working directory, executable digest); a restore relaunches that snapshot verbatim in its own session
and rewrites the pidfile. Container incumbents are read back from their Docker engine
(``daily.dailycontainer``); a restore starts that same container, or recreates it from the snapshot.
The proof is the running daily matching the snapshot and a real completion succeeding with the daily's
own credentials.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx

from campaign.contracts.hashing import sha256_file
from campaign.contracts.units import format_cpuset, parse_cpuset
from campaign.daily.secretstate import refuse_unresolved, same_words
from campaign.daily.state import EXIT_WAIT_S, PIDFILE_BYTES, process_start_time, wait_gone
from campaign.errors import PreflightError, RunError
from campaign.fsutil import UnreadableFile, atomic_write_bytes, read_text_bounded
from campaign.lanes.bootlog import log_tail
from campaign.lanes.redact import Redactor, launch_secrets
from campaign.lanes.runtimes.base import PROC_ARGS_BYTES, read_proc

__all__ = ["SETTINGS", "is_serving", "prove", "running_pid", "snapshot", "snapshot_pidfile", "start", "stop"]

SETTINGS = ("endpoint", "api_key_env", "served_model", "stop_timeout", "ready_budget")
# the dailies this process started, by pid: a start that dies while loading is then told with its exit code
# and its log's last line (a port still held, a missing file), not only that it died
_STARTED: dict[int, tuple[subprocess.Popen[bytes], Path]] = {}


def _pid_or_why(pidfile: Path) -> tuple[int | None, str]:
    """The pid a pidfile names, or None and what is wrong with the pidfile, in words."""
    try:
        text = read_text_bounded(pidfile, PIDFILE_BYTES, what="pidfile").strip()
    except UnreadableFile as exc:
        return None, exc.reason
    if not text.isascii() or not text.isdigit() or int(text) < 1:  # never 0 or -1: kill(-1) is everyone
        return None, f"pidfile holds {text[:20]!r}, not a process id"
    return int(text), ""


def _read_pid(pidfile: Path) -> int | None:
    return _pid_or_why(pidfile)[0]


def _cmdline(pid: int) -> list[str] | None:
    try:
        raw = read_proc(f"/proc/{pid}/cmdline", PROC_ARGS_BYTES)
    except OSError:
        return None
    argv = [part.decode(errors="replace") for part in raw.split(b"\0") if part]
    return argv or None  # a zombie (or a kernel thread) has no command line: not a running daily


def snapshot(spec: Any, base_dir: Path) -> dict[str, Any]:
    """Everything needed to start the daily again as it is now. Refuses if it is not running."""
    settings = {"endpoint": spec.endpoint, "api_key_env": spec.api_key_env, "served_model": spec.served_model,
                "stop_timeout": spec.stop_timeout, "ready_budget": spec.readiness.budget}
    if spec.runtime == "docker":
        from campaign.daily import dailycontainer

        host = spec.docker_host.model_dump(mode="json") if spec.docker_host else None
        return dailycontainer.snapshot(spec.container, host, settings)
    return snapshot_pidfile((base_dir / spec.pidfile).resolve(), settings)


def snapshot_pidfile(pidfile: Path, settings: dict[str, Any]) -> dict[str, Any]:
    """The live process named by ``pidfile``, read back from /proc, plus how to reach and stop it."""
    pid, why = _pid_or_why(pidfile)
    if pid is None or _cmdline(pid) is None:
        said = f"{pidfile}: {why}" if why else f"no live process in {pidfile}"
        raise PreflightError(f"incumbent is not running ({said}): there is nothing to "
                             "restore to; start the daily first (`campaign daily start`) or drop `incumbent`")
    try:
        environ = read_proc(f"/proc/{pid}/environ", PROC_ARGS_BYTES)
        cwd = os.readlink(f"/proc/{pid}/cwd")
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError as exc:
        raise PreflightError(f"incumbent pid {pid}: cannot read its launch from /proc: {exc.strerror}") from exc
    env = dict(p.decode(errors="replace").split("=", 1) for p in environ.split(b"\0") if b"=" in p)
    try:
        exe_sha256 = sha256_file(Path(exe), what="executable")
    except UnreadableFile as exc:  # replaced on disk since it started ("... (deleted)"): no restore could match
        raise PreflightError(f"incumbent pid {pid}: {exc}") from exc
    return {"runtime": "process", "pid": pid, "start_time": process_start_time(pid), "argv": _cmdline(pid),
            "env": env, "cwd": cwd, "exe": exe, "exe_sha256": exe_sha256, "pidfile": str(pidfile),
            "cpus": _pinned_to(pid), **settings}


def _pinned_to(pid: int) -> str | None:
    """The daily's CPUs when it is pinned to fewer than this host has, so a restore pins it again."""
    try:
        cpus = os.sched_getaffinity(pid)
    except OSError:
        return None
    return format_cpuset(cpus) if cpus != set(range(os.cpu_count() or 0)) else None


def is_serving(snap: dict[str, Any]) -> bool:
    """The daily runs as its snapshot says (it may still be loading)."""
    if snap.get("runtime") == "docker":
        from campaign.daily import dailycontainer

        return dailycontainer.is_running(snap)
    return running_pid(snap) is not None


def running_pid(snap: dict[str, Any]) -> int | None:
    """The pid serving as the daily now, if it runs the snapshot's command line."""
    pid = _read_pid(Path(snap["pidfile"]))
    if pid is not None and same_words(snap["argv"], _cmdline(pid), snap):
        return pid
    return None


def stop(snap: dict[str, Any], *, escalate_after: float | None = None) -> int | str | None:
    """Stop the daily (a container is stopped, never removed); what was stopped, or None if nothing ran."""
    if snap.get("runtime") == "docker":
        from campaign.daily import dailycontainer

        return dailycontainer.stop(snap)
    pid = running_pid(snap)
    if pid is None:
        return None
    group = os.getpgid(pid) == pid
    kill = (lambda sig: os.killpg(pid, sig)) if group else (lambda sig: os.kill(pid, sig))
    try:
        kill(signal.SIGTERM)
        if not wait_gone(pid, snap["stop_timeout"] if escalate_after is None else escalate_after):
            kill(signal.SIGKILL)
            wait_gone(pid, EXIT_WAIT_S)
    except ProcessLookupError:
        wait_gone(pid, EXIT_WAIT_S)  # it exited between the check and the signal: reap it if it is ours
    return pid


def start(snap: dict[str, Any], log_path: Path) -> int | dict[str, Any]:
    """Relaunch the snapshot verbatim, detached from whoever restores it (runner or failsafe): a process
    daily's new pid, or what was done to a container daily."""
    if snap.get("runtime") == "docker":
        from campaign.daily import dailycontainer

        return dailycontainer.start(snap)
    refuse_unresolved(snap, "started again")
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        try:
            popen = subprocess.Popen(snap["argv"], cwd=snap["cwd"], env=snap["env"], stdin=subprocess.DEVNULL,
                                     stdout=log, stderr=subprocess.STDOUT, start_new_session=True, close_fds=True)
        except OSError as exc:
            raise RunError(f"cannot start the incumbent {snap['argv'][0]}: {exc.strerror}") from exc
    if snap.get("cpus"):
        # pinned as it was; a CPU gone from this host leaves it unpinned rather than down
        with contextlib.suppress(OSError, ValueError):
            os.sched_setaffinity(popen.pid, parse_cpuset(snap["cpus"]))
    atomic_write_bytes(Path(snap["pidfile"]), f"{popen.pid}\n".encode())
    _STARTED[popen.pid] = (popen, log_path)
    return popen.pid


def prove(snap: dict[str, Any], *, budget: float | None = None, api_key: str | None = None) -> dict[str, Any]:
    """The daily serves again: same command line and binary (or container config) as the snapshot, and a
    real completion, with the key in ``api_key_env`` or else ``api_key`` (what the window recorded: a
    systemd timer's environment has no such variable)."""
    budget = snap["ready_budget"] if budget is None else budget
    completion = functools.partial(_completion, api_key=api_key)
    if snap.get("runtime") == "docker":
        from campaign.daily import dailycontainer

        return dailycontainer.prove(snap, budget=budget, completion=completion)
    deadline = time.monotonic() + budget
    pid = running_pid(snap)
    if pid is None:
        raise RunError("restored incumbent is not running the snapshot's command line")
    try:
        exe_sha = sha256_file(Path(os.readlink(f"/proc/{pid}/exe")), what="executable")
    except (OSError, UnreadableFile) as exc:
        raise RunError(f"restored incumbent pid {pid}: cannot hash what it runs: {exc}") from exc
    if exe_sha != snap["exe_sha256"]:
        raise RunError("restored incumbent runs a different binary than the snapshot")

    def still_up() -> None:
        if _cmdline(pid) is None:
            raise RunError(f"restored incumbent pid {pid} exited while loading{_how_it_ended(pid, snap)}")

    answer = completion(snap, deadline, still_up)
    return {"pid": pid, "argv_matches": True, "exe_sha256_matches": True, "completion": answer,
            "proved_at": time.time()}


def _how_it_ended(pid: int, snap: dict[str, Any]) -> str:
    """`` (exit code N; its log ends: ...)`` for a daily this process started, else nothing. The log is the
    engine's own output: its credentials are cut before the restore record or the ledger keeps the line."""
    if pid not in _STARTED:
        return ""
    popen, log_path = _STARTED[pid]
    code = popen.poll()
    redactor = Redactor(launch_secrets(snap.get("argv") or [], snap.get("env") or {}, [snap.get("api_key_env") or ""]))
    last = redactor.text(log_tail(log_path, 1))[:300]
    said = f"; its log ({log_path}) ends: {last}" if last else ""
    return f" (exit code {code}{said})" if code is not None else f" ({said[2:]})" if said else ""


def _completion(snap: dict[str, Any], deadline: float, still_up: Any, *, api_key: str | None = None) -> dict[str, Any]:
    """One real chat completion with the daily's own key, retried until ``deadline`` while it loads."""
    key = (os.environ.get(snap["api_key_env"]) or api_key) if snap.get("api_key_env") else None
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    body = {"model": snap.get("served_model") or "default", "max_tokens": 4, "temperature": 0,
            "messages": [{"role": "user", "content": "Say OK."}]}
    last = "no attempt"
    with httpx.Client(base_url=snap["endpoint"], headers=headers, timeout=30.0) as client:
        while time.monotonic() < deadline:
            still_up()
            try:
                response = client.post("/v1/chat/completions", json=body)
                if response.status_code == 200 and response.json().get("choices"):
                    return {"status": 200, "text": response.json()["choices"][0].get("message", {}).get("content")}
                last = f"HTTP {response.status_code}"
            except (httpx.HTTPError, ValueError) as exc:
                last = type(exc).__name__
            time.sleep(0.5)
    raise RunError(f"restored incumbent did not serve a completion within {snap['ready_budget']:g}s "
                   f"(last: {last})")
