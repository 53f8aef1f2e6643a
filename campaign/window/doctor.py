"""`campaign doctor [CONTRACT]`: what a window needs, checked before it runs, one line per check.

Every engine a contract names is really started here and asked for one completion (a binary built for
another CPU dies by SIGILL at load, and `--version` would not show it); the model digests, the ports,
the Docker engine and its storage driver, the signing key and its mode, the failsafe backend (its dry
run) and free disk for bundles are checked the way the window checks them. Nothing is stopped: the
daily keeps serving (a lane is smoked on a free port of its own).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import stat
import time
from pathlib import Path
from typing import TYPE_CHECKING

from campaign.contracts.engines import ENGINES
from campaign.contracts.load import LoadedContract
from campaign.errors import CampaignError
from campaign.fsutil import JsonlAppender, private_tempdir
from campaign.window.doctorcheck import Check
from campaign.window.doctordaily import daily_checks

if TYPE_CHECKING:
    from campaign.contracts.resolve import EffectiveLane

__all__ = ["Check", "run_checks"]

MIN_FREE_BYTES = 2 * 1024**3  # a bundle with raw records and boot logs, and room for a published archive


def run_checks(loaded: LoadedContract | None, out_dir: Path, *, smoke: bool = True) -> list[Check]:
    checks = [_signing_key(), _failsafe(loaded), _disk(out_dir)]
    if loaded is not None:
        checks += _outside_supervisor(loaded)
        checks += _models(loaded)
        checks += _ports(loaded)
        checks += daily_checks(loaded)
        if any(lane.runtime == "docker" for lane in loaded.lanes.values()) or (
                loaded.contract.incumbent is not None and loaded.contract.incumbent.runtime == "docker"):
            checks.append(_docker())
        checks += _engines(loaded, smoke=smoke)
    else:
        checks.append(_docker(required=False))
    return checks


def _signing_key() -> Check:
    from campaign.signing import config_dir, load_signing_key

    path = config_dir() / "signing.key"
    try:
        load_signing_key()
    except CampaignError as exc:
        return Check("signing key", False, str(exc), "campaign keys init")
    return Check("signing key", True, f"{path} (mode {stat.S_IMODE(path.stat().st_mode):04o})")


def _failsafe(loaded: LoadedContract | None) -> Check:
    from campaign.daily.state import state_root
    from campaign.failsafe.failsafe import choose_backend, dry_run

    requested = loaded.contract.failsafe.backend if loaded is not None and loaded.contract.failsafe else "auto"
    backend = choose_backend(requested)
    root = state_root()
    try:
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
        return Check("failsafe", True, dry_run(backend, root))
    except (CampaignError, OSError) as exc:
        return Check("failsafe", False, f"{backend}: {exc}",
                     "a window stops the daily only behind a failsafe that fires; fix the backend or pick "
                     "another in the contract's failsafe.backend")


def _outside_supervisor(loaded: LoadedContract) -> list[Check]:
    """Who keeps the daily's deadline if the runner and its watchdog pair are killed together: for a daily
    behind the watchdog pair, the periodic check (`campaign failsafe install`), installed and running; without
    it a WARN, as `campaign run` warns: the pair still restores the daily unless all three are killed together."""
    from campaign.failsafe.failsafe import choose_backend
    from campaign.failsafe.supervisor import guard

    spec, failsafe = loaded.contract.incumbent, loaded.contract.failsafe
    if spec is None or failsafe is None:
        return []
    try:
        backend = choose_backend(failsafe.backend, spec, loaded.lanes.values())
    except CampaignError as exc:
        return [Check("failsafe supervisor", False, str(exc), "fix the contract's failsafe.backend")]
    if backend != "watchdog":
        return [Check("failsafe supervisor", True, f"{backend}: outside the runner's process tree")]
    supervisor, warning = guard(backend, None)
    if warning:  # a window runs without one (its watchdog pair restores the daily), saying this same warning
        return [Check("failsafe supervisor", True, warning, "campaign failsafe install (and a running cron daemon)",
                      warn=True)]
    return [Check("failsafe supervisor", True, supervisor)]


def _disk(out_dir: Path) -> Check:
    probe = out_dir
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    detail = f"{free / 1024**3:.1f} GiB free at {probe}"
    if free < MIN_FREE_BYTES:
        return Check("disk for bundles", False, detail, f"free at least {MIN_FREE_BYTES // 1024**3} GiB or "
                                                        "pick another --out")
    return Check("disk for bundles", True, detail)


def _models(loaded: LoadedContract) -> list[Check]:
    from campaign.lanes.session import is_local

    checks, seen = [], set()
    for lane in loaded.lanes.values():
        path = loaded.resolve(lane.model.path)
        if path in seen:
            continue
        seen.add(path)
        if not is_local(lane):  # the file is the box's: hashed there, by a container, at the window's pre-flight
            checks.append(Check(f"model {lane.model.path}", True,
                                "on another box's engine: hashed there at pre-flight"))
        else:
            checks.append(model_check(lane, path))
    pinned: set[tuple[str, str, str | None]] = set()
    for lane in loaded.lanes.values():  # every other pinned model (a drafter, a tokenizer), each once
        for role, model in lane.models.items():
            if is_local(lane) and (role, model.path, model.sha256) not in pinned:
                pinned.add((role, model.path, model.sha256))
                checks.append(pinned_model_check(lane, role))
    return checks


def pinned_model_check(lane: EffectiveLane, role: str) -> Check:
    """One line for a lane's model of ``role`` (``models:``) against its pin: hashed, or walked against its
    manifest."""
    from campaign.contracts.manifest import ManifestError
    from campaign.fsutil import UnreadableFile
    from campaign.lanes.modelcheck import model_problem

    model = lane.models[role]
    name = f"model {role} {model.path}"
    fix = f"put the pinned {role} model at {model.path} (lane {lane.name}'s models.{role}), or pin the one there"
    try:
        problem = model_problem(lane, role)
    except (UnreadableFile, ManifestError, CampaignError) as exc:
        return Check(name, False, str(exc), fix)
    if problem:
        return Check(name, False, problem, fix)
    return Check(name, True, "the manifest's files match" if model.is_directory else "sha256 matches the pin")


def model_check(lane: EffectiveLane, path: Path) -> Check:
    """One line for a local lane's model: a FIFO, a device (``/dev/zero``), a folder pinned as a file, a
    symlink loop or a missing path is a failed check naming the path and what it is, never a hang or a
    traceback; a pinned file is hashed once."""
    from campaign.lanes.session import local_model, model_sha256

    name = f"model {lane.model.path}"
    try:
        kind = local_model(lane, path)[1]
        got = model_sha256(lane, path) if lane.model.sha256 else None
    except CampaignError as exc:
        return Check(name, False, str(exc), f"put the model at {path} (lane {lane.name}'s model.path), or point "
                                            "model.path at where it is")
    if got is not None and lane.model.sha256 is not None and got != lane.model.sha256:
        return Check(name, False, f"sha256 {got[:12]}..., pinned {lane.model.sha256[:12]}...",
                     "the file changed since the contract was written: fetch the pinned one")
    if got is not None:
        return Check(name, True, "sha256 matches the pin")
    return Check(name, True, f"present ({'a folder' if kind == 'folder' else 'a file'}, no pin)")


def _ports(loaded: LoadedContract) -> list[Check]:
    from campaign.lanes.session import is_local, port_is_free
    from campaign.window.preflight import daily_port_of

    daily_port = daily_port_of(loaded)
    checks, seen = [], set()
    for lane in loaded.lanes.values():
        if not is_local(lane) or (lane.host, lane.port) in seen:
            continue
        seen.add((lane.host, lane.port))
        name = f"port {lane.host}:{lane.port}"
        if lane.port == daily_port:
            continue  # the daily's port: its own lines say who holds it (the window stops the daily before a lane)
        if port_is_free(lane.host, lane.port):
            checks.append(Check(name, True, "free"))
        else:
            checks.append(Check(name, False, "in use", "stop what listens there: another server would be "
                                                      "measured instead of the lane"))
    return checks


def _docker(required: bool = True) -> Check:
    try:
        from campaign.lanes.runtimes.dockererrors import docker_errors
        from campaign.lanes.runtimes.dockerhost import client_for

        client = client_for(None)  # DOCKER_HOST=ssh:// too, through the same tunnel as a window's
        with docker_errors("asking its version"):
            info = client.info()
    except (ImportError, CampaignError) as exc:  # no SDK, no engine, no permission: each means "no docker here"
        if not required:
            return Check("docker engine", True, f"not reachable ({type(exc).__name__}); no docker lane asked for")
        return Check("docker engine", False, f"not reachable: {exc}",
                     "start one (scripts/docker-up.sh) or set DOCKER_HOST")
    return Check("docker engine", True, f"{info.get('ServerVersion')} answers, storage driver "
                                        f"{info.get('Driver')}")


def _engines(loaded: LoadedContract, *, smoke: bool) -> list[Check]:
    """Each distinct engine (runtime, engine, executable, image) started here and asked for a completion."""
    from campaign.lanes.session import check_lane, is_local, resolve_executable

    checks, seen = [], set()
    for lane in loaded.lanes.values():
        key = (lane.runtime, lane.engine, lane.executable, lane.image)
        if key in seen:
            continue
        seen.add(key)
        name = f"engine {lane.engine} ({lane.executable or lane.image}, lane {lane.name})"
        # realpath, not Path.resolve: a symlink loop is the model check's failed line, not a traceback here
        model = (os.path.realpath(loaded.resolve(lane.model.path)) if is_local(lane)
                 else lane.model.path)  # another box's path, as that box sees it
        if is_local(lane) and not _usable_model(lane, loaded.resolve(lane.model.path)):
            # started on a FIFO or /dev/zero, an engine would hang for its whole readiness budget
            checks.append(Check(name, False, "not started: its model is not usable (see the model's line)"))
            continue
        try:
            if lane.runtime == "process":
                resolve_executable(lane)
            check_lane(lane, model)
        except CampaignError as exc:
            hint = ENGINES[lane.engine].build_hint
            fix = (f"install {lane.executable} or give lane {lane.name}'s executable its path"
                   + (f" (this repository builds it: {hint})" if hint else "")) if lane.runtime == "process" else ""
            checks.append(Check(name, False, str(exc), fix))
            continue
        if not smoke or not is_local(lane):
            checks.append(Check(name, True, "found (not started)"))
            continue
        checks.append(_smoke(name, lane, model))
    return checks


def _usable_model(lane: EffectiveLane, path: Path) -> bool:
    """A regular file or a folder (not hashed again: the model's own line did that)."""
    from campaign.lanes.session import local_model

    try:
        local_model(lane, path)
    except CampaignError:
        return False
    return True


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _smoke(name: str, lane: EffectiveLane, model: str) -> Check:
    """Boot the lane on a free port through the window's own launch path (so a death is classified the
    same way), one completion, stop."""
    from campaign.errors import LaunchError
    from campaign.lanes.session import boot_lane

    trial = lane.model_copy(update={"port": _free_port()})
    with private_tempdir("campaign-doctor-") as tmp:
        log = tmp / "boot.log"
        sink = JsonlAppender(tmp / "warm.jsonl")
        started = time.monotonic()

        async def once() -> None:
            run = await boot_lane(trial, model_path=model, log_path=log, warm_sink=sink,
                                  labels={"campaign.doctor": "1"})
            await run.stop()

        try:
            asyncio.run(once())
        except LaunchError as exc:
            return Check(name, False, f"{exc.cause}: {exc}",
                         "make engine" if exc.cause == "illegal_instruction" else "see the message")
        except Exception as exc:  # top level of one check: whatever broke (a DockerError, an OS error, a bug)
            # is this check's failed line, with its type, and the other checks still run
            return Check(name, False, f"{type(exc).__name__}: {exc}")
        finally:
            sink.close()
    return Check(name, True, f"served a completion here ({time.monotonic() - started:.1f}s from start)")

