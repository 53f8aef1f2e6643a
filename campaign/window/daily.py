"""Start the daily lane by hand (`campaign daily start`): the incumbent's lane spec, detached, with its
pidfile, so a demo or a fresh box has a daily for windows to stop and restore."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import httpx

from campaign.contracts.load import LoadedContract
from campaign.errors import InputError, RunError
from campaign.fsutil import atomic_write_bytes
from campaign.lanes.adapter import adapter_for
from campaign.lanes.bootlog import HINTS, classify_failure, describe_exit
from campaign.lanes.process import BASE_ENV_KEYS
from campaign.lanes.session import resolve_executable, resolve_refs
from campaign.window.incumbent import _cmdline, _read_pid

__all__ = ["daily_command", "start_daily"]


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
    assert spec is not None and spec.pidfile is not None
    pidfile = loaded.resolve(spec.pidfile)
    pid = _read_pid(pidfile)
    if pid is not None and _cmdline(pid) is not None:
        return pid, False
    argv = daily_command(loaded)
    lane = resolve_refs(loaded.lanes[spec.lane or ""])
    env = {k: os.environ[k] for k in BASE_ENV_KEYS if k in os.environ} | dict(lane.env)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        popen = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                 start_new_session=True, close_fds=True)
    atomic_write_bytes(pidfile, f"{popen.pid}\n".encode())
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if popen.poll() is not None:
            text = log_path.read_text(errors="replace") if log_path.exists() else ""
            cause = classify_failure(text, popen.returncode)
            hint = f": {HINTS[cause]}" if cause in HINTS else f" ({cause})"
            raise RunError(f"daily {describe_exit(popen.returncode)} while loading{hint}; see {log_path}")
        try:
            if httpx.get(spec.endpoint.rstrip("/") + "/v1/models", timeout=2.0).status_code == 200:
                return popen.pid, True
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise RunError(f"daily did not answer at {spec.endpoint} within {wait:g}s; see {log_path}")
