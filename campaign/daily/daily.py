"""Start the daily lane by hand (`campaign daily start`): the incumbent's lane spec, detached, with its
pidfile, so a demo or a fresh box has a daily for windows to stop and restore.

The daily's output never reaches its ``--log`` raw: it goes through a pipe into a small detached process
(``python -m campaign.daily.daily --pump LOG FD``) that writes it through the same redaction as every
lane's boot log (``campaign.lanes.redact.RedactingLog``: the resolved ``${env:...}`` values, the values of
credential options and variables, every credential shape), into a file created 0600. The pump ends when
the daily closes its output (it exited).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, TypedDict

import httpx

from campaign.contracts.load import LoadedContract
from campaign.contracts.units import parse_cpuset
from campaign.daily.dailystop import MARK_ENV, new_mark, record_started, stop_daily
from campaign.daily.incumbent import _cmdline, _read_pid
from campaign.errors import InputError, RunError
from campaign.fsutil import atomic_write_bytes
from campaign.lanes.bootlog import HINTS, classify_failure, describe_exit
from campaign.lanes.command import engine_argv, resolve_executable, resolve_refs
from campaign.lanes.engines.registry import adapter_for
from campaign.lanes.runtimes.gpus import visible_devices
from campaign.lanes.runtimes.process import BASE_ENV_KEYS

__all__ = ["daily_command", "describe_container_daily", "describe_daily", "find_daily_pidfile", "start_daily",
           "stop_daily"]


def daily_command(loaded: LoadedContract) -> list[str]:
    spec = loaded.contract.incumbent
    if spec is None or spec.lane is None:
        raise InputError(f"{loaded.path}: `incumbent.lane` names no lane to start as the daily")
    # the same resolution of ${env:NAME} references as every lane's launch: a missing variable is refused
    lane = resolve_refs(loaded.lanes[spec.lane])
    model = str(loaded.resolve(lane.model.path).resolve())
    # the lane's executable on this host with the host's model path, even for a docker-runtime lane
    return engine_argv(resolve_executable(lane), lane, model)


def start_daily(loaded: LoadedContract, log_path: Path, *, wait: float = 300.0) -> tuple[int, bool]:
    """(pid, started): an already-running daily is left alone."""
    spec = loaded.contract.incumbent
    if spec is not None and spec.runtime == "docker":
        raise InputError(f"{loaded.path}: the daily is a container ({spec.container}): start it with `docker run` "
                         "(`campaign daily show` prints the command of a known one)")
    assert spec is not None and spec.pidfile is not None
    pidfile = loaded.resolve(spec.pidfile)
    pid = _read_pid(pidfile)
    if pid is not None and _cmdline(pid) is not None:
        return pid, False
    argv = daily_command(loaded)
    lane = resolve_refs(loaded.lanes[spec.lane or ""])
    env = {k: os.environ[k] for k in BASE_ENV_KEYS if k in os.environ} | dict(lane.env)
    visible = visible_devices(lane.gpus, f"daily ({lane.name})")  # the lane's GPUs, as its lane got them
    if visible is not None:
        env["CUDA_DEVICE_ORDER"], env["CUDA_VISIBLE_DEVICES"] = "PCI_BUS_ID", visible
    env[MARK_ENV] = mark = new_mark()  # `campaign daily stop` knows it by this, through every restart
    log_path.parent.mkdir(parents=True, exist_ok=True)
    offset = log_path.stat().st_size if log_path.exists() else 0  # the log is appended to: read this start's part
    popen, pump = _launch_logged(argv, env, log_path, _daily_secrets(loaded.lanes[spec.lane or ""], argv, env))
    if lane.cpus:  # the daily's lane is pinned: so is the daily, from its first thread
        os.sched_setaffinity(popen.pid, parse_cpuset(lane.cpus))
    atomic_write_bytes(pidfile, f"{popen.pid}\n".encode())
    record_started(pidfile, popen.pid, mark, argv)
    key = adapter_for(lane.engine).api_key(lane)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if popen.poll() is not None:
            _wait_quietly(pump, 10.0)  # its last words are on disk before they are read
            with open(log_path, "rb") as handle:  # the tail it wrote since it started, bounded
                size = handle.seek(0, os.SEEK_END)
                handle.seek(max(offset, size - (1 << 20)))
                text = handle.read(1 << 20).decode(errors="replace")
            cause = classify_failure(text, popen.returncode, engine=adapter_for(lane.engine).facts)
            hint = f": {HINTS[cause]}" if cause in HINTS else f" ({cause})"
            raise RunError(f"daily {describe_exit(popen.returncode)} while loading{hint}; see {log_path}")
        try:
            if httpx.get(spec.endpoint.rstrip("/") + "/v1/models", headers=headers, timeout=2.0).status_code == 200:
                return popen.pid, True
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise RunError(f"daily did not answer at {spec.endpoint} within {wait:g}s; see {log_path}")


def _daily_secrets(lane: Any, argv: list[str], env: dict[str, str]) -> list[str]:
    """Every credential value the daily's log must never hold: the lane's ${env:...} values as resolved,
    and the values of its credential options and variables."""
    from campaign.lanes.redact import lane_secrets, launch_secrets

    return list(dict.fromkeys([*lane_secrets(lane), *launch_secrets(argv, env)]))


def _launch_logged(argv: list[str], env: dict[str, str], log_path: Path,
                   secrets: list[str]) -> tuple[subprocess.Popen[bytes], subprocess.Popen[bytes]]:
    """(daily, pump): the daily detached, its stdout and stderr a pipe read by the redacting pump. The
    secrets reach the pump on its stdin, never on a command line (/proc/PID/cmdline is world-readable)."""
    read_end, write_end = os.pipe()
    try:
        pump = subprocess.Popen([sys.executable, "-m", "campaign.daily.daily", "--pump", str(log_path.resolve()),
                                 str(read_end)], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, pass_fds=(read_end,), start_new_session=True)
        assert pump.stdin is not None
        pump.stdin.write(json.dumps(secrets).encode())
        pump.stdin.close()
        try:
            popen = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=write_end,
                                     stderr=subprocess.STDOUT, start_new_session=True, close_fds=True)
        except OSError:
            os.close(write_end)  # the pump sees the end of its input and stops
            write_end = -1
            _wait_quietly(pump, 10.0)
            raise
    finally:
        os.close(read_end)
        if write_end != -1:
            os.close(write_end)
    return popen, pump


def _wait_quietly(process: subprocess.Popen[bytes], timeout: float) -> None:
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        pass


def pump(log_path: Path, fd: int) -> None:
    """The pump's body: the daily's output from ``fd``, line by line through the redactor, into the log
    (0600), until the daily closes it. Interrupts meant for the terminal that started it are ignored."""
    import signal

    from campaign.lanes.redact import RedactingLog, Redactor

    for signum in (signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)
    secrets = json.loads(sys.stdin.buffer.read(16 << 20) or b"[]")
    log = RedactingLog(log_path, Redactor(secrets, key=os.urandom(32)))
    try:
        with os.fdopen(fd, "rb", buffering=0) as source:
            while chunk := source.read(1 << 16):
                log.write(chunk)
    finally:
        log.close()


def find_daily_pidfile(loaded: LoadedContract | None) -> Path | None:
    """Where the daily's pid is kept: the contract's incumbent pidfile, else the last promotion's, else
    the newest window's snapshot (a window restores the daily under the same pidfile)."""
    if loaded is not None and loaded.contract.incumbent is not None and loaded.contract.incumbent.pidfile:
        return loaded.resolve(loaded.contract.incumbent.pidfile)
    from campaign.daily.ledger import Ledger
    from campaign.daily.state import WindowState, windows_dir

    with_pidfile = [entry for entry in Ledger().entries() if entry.get("pidfile")]
    if with_pidfile:
        return Path(with_pidfile[-1]["pidfile"])
    states = sorted(windows_dir().glob("*/state.json"), key=lambda p: p.stat().st_mtime) if windows_dir().exists() else []
    for state_file in reversed(states):
        snap = WindowState.load(state_file.parent.name).incumbent
        if snap and snap.get("pidfile"):
            return Path(snap["pidfile"])
    return None


class DailyNow(TypedDict, total=False):
    """``describe_daily``'s answer: argv and log only when the daily runs."""

    pidfile: str
    running: bool
    pid: int | None
    argv: list[str]
    log: str | None


def describe_daily(pidfile: Path) -> DailyNow:
    """The daily as the kernel sees it now: pid, whether it runs, its command line with credential values
    redacted, and where its output goes (a restored daily writes to the window's state folder, not to
    the log it was first started with)."""
    from campaign.lanes.redact import Redactor, launch_secrets

    pid = _read_pid(pidfile)
    argv = _cmdline(pid) if pid is not None else None
    if pid is None or argv is None:
        return {"pidfile": str(pidfile), "running": False, "pid": pid}
    try:
        log: str | None = os.readlink(f"/proc/{pid}/fd/1")
    except OSError:
        log = None
    if log is not None and log.startswith("pipe:"):  # started by `daily start`: its pump writes the log
        log = _pumped_log(log) or log
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
        env = dict(p.decode(errors="replace").split("=", 1) for p in environ.split(b"\0") if b"=" in p)
    except OSError:
        env = {}
    shown = Redactor(launch_secrets(argv, env)).argv(argv)
    return {"pidfile": str(pidfile), "running": True, "pid": pid, "argv": shown, "log": log}


def _pumped_log(pipe: str) -> str | None:
    """The log a redacting pump writes from this pipe (``pipe:[inode]``), read from the pump's command line."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            words = (entry / "cmdline").read_bytes().split(b"\0")
            if b"--pump" in words and len(words) > words.index(b"--pump") + 2:
                at = words.index(b"--pump")
                if os.readlink(entry / "fd" / words[at + 2].decode()) == pipe:
                    return words[at + 1].decode(errors="replace")
        except (OSError, ValueError):
            continue
    return None


def describe_container_daily(spec: Any) -> dict[str, object]:
    """A container daily as its engine sees it now: whether it runs, its image and command, and a `docker
    run` line that starts it by hand (environment values left out: only their names are shown)."""
    from campaign.daily import dailycontainer
    from campaign.errors import PreflightError
    from campaign.lanes.redact import Redactor, launch_secrets

    host = spec.docker_host.model_dump(mode="json") if spec.docker_host else None
    try:
        snap = dailycontainer.snapshot(spec.container, host, {"stop_timeout": spec.stop_timeout})
    except PreflightError as exc:
        return {"container": spec.container, "running": False, "problem": str(exc)}
    shown = Redactor(launch_secrets(snap["argv"], snap["env"])).argv(snap["argv"])
    return {"container": snap["container"], "running": True, "container_id": snap["container_id"][:12],
            "image_id": snap["image_id"], "argv": shown, "restart_policy": snap["restart_policy"].get("Name"),
            "run_by_hand": Redactor(launch_secrets(snap["argv"], snap["env"])).text(dailycontainer.describe(snap))}


if __name__ == "__main__" and sys.argv[1:2] == ["--pump"]:
    pump(Path(sys.argv[2]), int(sys.argv[3]))
