"""`campaign doctor`'s checks of the daily (the contract's incumbent), before a window stops it.

Four lines: the daily exists (its pidfile names a live process, or its container runs); it is what listens
on the endpoint's port (a process: the listening socket's inode, from /proc/net/tcp and tcp6, found among
the daily's own open files or its children's; a container: its host network with the socket held by one
of its processes, or a published port that is the endpoint's); it answers a real completion, with its own
key; and the failsafe can start it again (a process: its launch read back whole from /proc, as the
window's snapshot reads it; a container: its engine answers and still holds its image). A stray server
on the daily's port, with no daily or beside it, is a failed line naming the process that holds the
port, never an "ok". Each fix named is the contract's own (its incumbent lane's `campaign daily start`,
its pidfile, its container), not the demo's.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from campaign.contracts.load import LoadedContract
from campaign.errors import CampaignError
from campaign.lanes.redact import Redactor, launch_secrets
from campaign.lanes.runtimes.base import PROC_ARGS_BYTES, read_proc
from campaign.terminal import shown
from campaign.window.doctorcheck import Check

__all__ = ["daily_checks", "port_owner"]

PROC_NET_BYTES = 16 << 20  # a line per socket (~150 bytes): a hundred thousand sockets
LISTEN = "0A"


def _listening_inodes(port: int) -> set[str]:
    """Inodes of the TCP sockets listening on ``port`` (any address, IPv4 or IPv6) in this network namespace."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = read_proc(table, PROC_NET_BYTES).decode(errors="replace").splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == LISTEN and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    return inodes


def port_owner(port: int) -> tuple[bool, int | None]:
    """(something listens, the pid holding the listening socket); the pid is None when nothing listens or
    the holder is a process this user cannot see (another user's, another pid namespace's)."""
    inodes = _listening_inodes(port)
    if not inodes:
        return False, None
    wanted = {f"socket:[{inode}]" for inode in inodes}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            for fd in os.scandir(entry / "fd"):
                if os.readlink(fd.path) in wanted:
                    return True, int(entry.name)
        except OSError:  # gone, or not ours to read
            continue
    return True, None


def _describe(pid: int | None) -> str:
    if pid is None:
        return "a process this user cannot see"
    try:
        argv = [p.decode(errors="replace") for p in read_proc(f"/proc/{pid}/cmdline", PROC_ARGS_BYTES).split(b"\0") if p]
    except OSError:
        argv = []
    # a daily started by hand with --api-key KEY and a stale pidfile: its key never reaches doctor's line
    argv = Redactor(launch_secrets(argv, {})).argv(argv)
    return f"pid {pid} ({shown(' '.join(argv)[:120]) or 'no command line'})"


def _is_within(pid: int, root: int) -> bool:
    """``pid`` is ``root`` or one of its descendants (an engine's API server may be a child of what was started)."""
    for _ in range(64):
        if pid == root:
            return True
        try:
            stat = read_proc(f"/proc/{pid}/stat").decode(errors="replace")
        except OSError:
            return False
        pid = int(stat.rsplit(")", 1)[1].split()[1])
        if pid <= 1:
            return False
    return False


def daily_checks(loaded: LoadedContract) -> list[Check]:
    spec = loaded.contract.incumbent
    if spec is None:
        return []
    port = urlsplit(spec.endpoint).port or (443 if spec.endpoint.startswith("https") else 80)
    if spec.runtime == "docker":
        return _container_checks(loaded, spec, port)
    return _process_checks(loaded, spec, port)


def _start_fix(loaded: LoadedContract, spec: Any) -> str:
    if spec.lane:
        return f"campaign daily start {loaded.path} (its incumbent lane {spec.lane})"
    return f"start the daily as you run it and write its pid into {loaded.resolve(spec.pidfile)}"


def _process_checks(loaded: LoadedContract, spec: Any, port: int) -> list[Check]:
    from campaign.daily.incumbent import _cmdline, _pid_or_why, snapshot_pidfile

    pidfile = loaded.resolve(spec.pidfile)
    pid, why = _pid_or_why(pidfile)
    alive = pid is not None and _cmdline(pid) is not None
    listening, owner = port_owner(port)
    checks = [Check("daily runs", True, f"pid {pid} (pidfile {pidfile})") if alive else
              Check("daily runs", False, f"no live process in {pidfile}" + (f": {why}" if why else ""),
                    _start_fix(loaded, spec))]
    name = f"daily listens on :{port}"
    if not listening:
        checks.append(Check(name, False, f"nothing listens on port {port} of {spec.endpoint}",
                            _start_fix(loaded, spec) if not alive else "check the daily's --port and its log"))
    elif alive and owner is not None and pid is not None and _is_within(owner, pid):
        checks.append(Check(name, True, f"the daily (pid {owner}) holds port {port}"))
    else:
        who = "no daily runs, yet" if not alive else f"the daily is pid {pid}, but"
        checks.append(Check(name, False, f"{who} port {port} is held by {_describe(owner)}: a window would stop the "
                                         "daily and measure or restore against another server",
                            "stop what holds the port, or fix incumbent.endpoint / pidfile in the contract"))
    checks.append(_completion(spec, listening))
    if alive:
        try:
            snapshot_pidfile(pidfile, {})
            checks.append(Check("failsafe can restart the daily", True,
                                "its launch reads back whole from /proc (command line, environment, binary)"))
        except CampaignError as exc:
            checks.append(Check("failsafe can restart the daily", False, str(exc),
                                "run the daily as this user, from a binary still on disk"))
    return checks


def _completion(spec: Any, listening: bool) -> Check:
    """One real chat completion at the endpoint, with the daily's own key (``api_key_env``)."""
    name = "daily answers a completion"
    if not listening:
        return Check(name, False, f"nothing answers at {spec.endpoint}")
    key = os.environ.get(spec.api_key_env) if spec.api_key_env else None
    if spec.api_key_env and not key:
        return Check(name, False, f"{spec.api_key_env} is not set here: the proof completion would go without "
                                  "the daily's key", f"export {spec.api_key_env}")
    body = {"model": spec.served_model or "default", "max_tokens": 4, "temperature": 0,
            "messages": [{"role": "user", "content": "Say OK."}]}
    started = time.monotonic()
    try:
        response = httpx.post(spec.endpoint.rstrip("/") + "/v1/chat/completions", json=body, timeout=60.0,
                              headers={"Authorization": f"Bearer {key}"} if key else {})
        choices = response.json().get("choices") if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError) as exc:
        return Check(name, False, f"{spec.endpoint}: {type(exc).__name__}")
    if not choices:
        return Check(name, False, f"{spec.endpoint}: HTTP {response.status_code}, no completion",
                     "the endpoint must serve /v1/chat/completions (served_model, api_key_env)")
    return Check(name, True, f"{spec.endpoint} in {time.monotonic() - started:.1f}s")


def _container_checks(loaded: LoadedContract, spec: Any, port: int) -> list[Check]:
    from campaign.daily import dailycontainer

    host = spec.docker_host.model_dump(mode="json") if spec.docker_host else None
    try:
        snap = dailycontainer.snapshot(spec.container, host, {})
    except CampaignError as exc:
        listening, owner = port_owner(port)
        stray = f"; port {port} is held by {_describe(owner)}" if listening else ""
        return [Check("daily runs", False, f"{exc}{stray}",
                      f"start the daily container {spec.container} (`docker start {spec.container}`, or your `docker "
                      "run`)"), _completion(spec, listening)]
    checks = [Check("daily runs", True, f"container {spec.container} ({snap['container_id'][:12]}), image "
                                        f"{snap['image_id'][:19]}")]
    local = dailycontainer.engine_of(host)["url"].startswith("unix://")  # its ports are this host's
    checks.append(_container_port(snap, port, local))
    checks.append(_completion(spec, port_owner(port)[0] or not local))
    policy = snap["restart_policy"].get("Name") or "no"
    checks.append(Check("failsafe can restart the daily", True, f"its engine answers and holds its image; restart "
                                                                f"policy {policy}"))
    return checks


def _container_port(snap: dict[str, Any], port: int, local: bool) -> Check:
    """Host network: the listening socket is one of the container's processes' (on this host's engine: its
    cgroup names the container); a bridge: the endpoint's port is one the container publishes."""
    name = f"daily listens on :{port}"
    host_config = snap["host_config"]
    if host_config.get("NetworkMode") == "host":
        if not local:
            return Check(name, True, f"host network on its box, port {port} (not checked from here)")
        listening, owner = port_owner(port)
        if not listening:
            return Check(name, False, f"the container shares the host's network, but nothing listens on {port}",
                         "check the engine's --port in the container's command")
        if owner is not None and not _in_container(owner, snap["container_id"]):
            return Check(name, False, f"port {port} is held by {_describe(owner)}, not by the daily container",
                         "stop what holds the port, or fix incumbent.endpoint in the contract")
        return Check(name, True, f"host network, port {port} held by the daily container")
    published = {binding.get("HostPort") for bindings in (host_config.get("PortBindings") or {}).values()
                 for binding in bindings or []}
    if str(port) in published:
        return Check(name, True, f"{host_config.get('NetworkMode') or 'bridge'} network, publishes {port}")
    return Check(name, False, f"the container publishes {sorted(p for p in published if p) or 'no port'}, not the "
                              f"endpoint's {port}", "publish the endpoint's port (`docker run -p HOST:CONTAINER`) or "
                                                    "fix incumbent.endpoint in the contract")


def _in_container(pid: int, container_id: str) -> bool:
    """The process runs in that container: its cgroup path names the container's id (cgroup v1 and v2)."""
    try:
        return container_id in read_proc(f"/proc/{pid}/cgroup").decode(errors="replace")
    except OSError:
        return False
