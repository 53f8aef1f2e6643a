"""Start the daily lane by hand (`campaign daily start`): the incumbent's lane spec, detached, with its
pidfile, so a demo or a fresh box has a daily for windows to stop and restore."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx

from campaign.contracts.load import LoadedContract
from campaign.contracts.units import parse_cpuset
from campaign.lanes.runtimes.gpus import visible_devices
from campaign.errors import InputError, RunError
from campaign.fsutil import atomic_write_bytes
from campaign.lanes.engines.registry import adapter_for
from campaign.lanes.bootlog import HINTS, classify_failure, describe_exit
from campaign.lanes.runtimes.process import BASE_ENV_KEYS
from campaign.lanes.session import resolve_executable, resolve_refs
from campaign.window.incumbent import _cmdline, _read_pid

__all__ = ["daily_command", "describe_container_daily", "describe_daily", "find_daily_pidfile", "start_daily"]


def daily_command(loaded: LoadedContract) -> list[str]:
    spec = loaded.contract.incumbent
    if spec is None or spec.lane is None:
        raise InputError(f"{loaded.path}: `incumbent.lane` names no lane to start as the daily")
    # the same resolution of ${env:NAME} references as every lane's launch: a missing variable is refused
    lane = resolve_refs(loaded.lanes[spec.lane])
    model = str(loaded.resolve(lane.model.path).resolve())
    return [resolve_executable(lane), *adapter_for(lane.engine).server_args(lane, model)]


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
    log_path.parent.mkdir(parents=True, exist_ok=True)
    offset = log_path.stat().st_size if log_path.exists() else 0  # the log is appended to: read this start's part
    with open(log_path, "ab") as log:
        popen = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                 start_new_session=True, close_fds=True)
    if lane.cpus:  # the daily's lane is pinned: so is the daily, from its first thread
        os.sched_setaffinity(popen.pid, parse_cpuset(lane.cpus))
    atomic_write_bytes(pidfile, f"{popen.pid}\n".encode())
    key = adapter_for(lane.engine).api_key(lane)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if popen.poll() is not None:
            with open(log_path, "rb") as handle:
                handle.seek(offset)
                text = handle.read().decode(errors="replace")
            cause = classify_failure(text, popen.returncode)
            hint = f": {HINTS[cause]}" if cause in HINTS else f" ({cause})"
            raise RunError(f"daily {describe_exit(popen.returncode)} while loading{hint}; see {log_path}")
        try:
            if httpx.get(spec.endpoint.rstrip("/") + "/v1/models", headers=headers, timeout=2.0).status_code == 200:
                return popen.pid, True
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise RunError(f"daily did not answer at {spec.endpoint} within {wait:g}s; see {log_path}")


def find_daily_pidfile(loaded: LoadedContract | None) -> Path | None:
    """Where the daily's pid is kept: the contract's incumbent pidfile, else the last promotion's, else
    the newest window's snapshot (a window restores the daily under the same pidfile)."""
    if loaded is not None and loaded.contract.incumbent is not None and loaded.contract.incumbent.pidfile:
        return loaded.resolve(loaded.contract.incumbent.pidfile)
    from campaign.window.ledger import Ledger
    from campaign.window.state import WindowState, windows_dir

    with_pidfile = [entry for entry in Ledger().entries() if entry.get("pidfile")]
    if with_pidfile:
        return Path(with_pidfile[-1]["pidfile"])
    states = sorted(windows_dir().glob("*/state.json"), key=lambda p: p.stat().st_mtime) if windows_dir().exists() else []
    for state_file in reversed(states):
        snap = WindowState.load(state_file.parent.name).incumbent
        if snap and snap.get("pidfile"):
            return Path(snap["pidfile"])
    return None


def describe_daily(pidfile: Path) -> dict[str, object]:
    """The daily as the kernel sees it now: pid, whether it runs, its command line with credential values
    redacted, and where its output goes (a restored daily writes to the window's state folder, not to
    the log it was first started with)."""
    from campaign.lanes.redact import Redactor, launch_secrets

    pid = _read_pid(pidfile)
    argv = _cmdline(pid) if pid is not None else None
    if pid is None or argv is None:
        return {"pidfile": str(pidfile), "running": False, "pid": pid}
    try:
        log = os.readlink(f"/proc/{pid}/fd/1")
    except OSError:
        log = None
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
        env = dict(p.decode(errors="replace").split("=", 1) for p in environ.split(b"\0") if b"=" in p)
    except OSError:
        env = {}
    shown = Redactor(launch_secrets(argv, env)).argv(argv)
    return {"pidfile": str(pidfile), "running": True, "pid": pid, "argv": shown, "log": log}


def describe_container_daily(spec: Any) -> dict[str, object]:
    """A container daily as its engine sees it now: whether it runs, its image and command, and a `docker
    run` line that starts it by hand (environment values left out: only their names are shown)."""
    from campaign.errors import PreflightError
    from campaign.lanes.redact import Redactor, launch_secrets
    from campaign.window import dailycontainer

    host = spec.docker_host.model_dump(mode="json") if spec.docker_host else None
    try:
        snap = dailycontainer.snapshot(spec.container, host, {"stop_timeout": spec.stop_timeout})
    except PreflightError as exc:
        return {"container": spec.container, "running": False, "problem": str(exc)}
    shown = Redactor(launch_secrets(snap["argv"], snap["env"])).argv(snap["argv"])
    return {"container": snap["container"], "running": True, "container_id": snap["container_id"][:12],
            "image_id": snap["image_id"], "argv": shown, "restart_policy": snap["restart_policy"].get("Name"),
            "run_by_hand": Redactor(launch_secrets(snap["argv"], snap["env"])).text(dailycontainer.describe(snap))}
