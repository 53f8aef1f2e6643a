"""The docker runtime: a lane is one container, created from the lane exactly and read back from the engine.

The container runs the image pinned by digest (started by its id, so a tag moved after pre-flight cannot
change what runs), with the lane's command, env, bind mounts (read-only unless declared otherwise),
/dev/shm size, GPU device requests, host network (or a published port) and no restart policy: a lane
that dies stays dead and is classified, never silently restarted. Its labels carry the window and the
contract hash, so leftovers of a crashed runner can be found (``find_leftovers``). Its output is
streamed into the bundle's boot.log through the redactor as it is produced.
"""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
import threading
from pathlib import Path, PurePosixPath
from typing import Any

from campaign.contracts.model import LANE_FILE_BYTES
from campaign.contracts.resolve import EffectiveLane
from campaign.errors import (
    DockerError,
    DockerNotFound,
    DockerRefused,
    DockerTLSError,
    DockerUnreachable,
    LaunchError,
    PreflightError,
)
from campaign.lanes.redact import RedactingLog, Redactor, redactor_for
from campaign.lanes.runtimes.base import LaunchSpec
from campaign.lanes.runtimes.dockererrors import docker_errors, why
from campaign.lanes.runtimes.dockerhost import EngineUnreachable, client_for, describe, is_local

__all__ = ["LABEL_CONTRACT", "LABEL_LANE", "LABEL_PREFIX", "LABEL_WINDOW", "DockerLane", "DockerRuntime", "EngineUnreachable",
           "check_lane", "container_path", "create_kwargs", "device_requests", "find_leftovers", "hash_on_engine",
           "host_path", "remove_container", "resolve_image"]

LABEL_PREFIX = "campaign."
LABEL_WINDOW = LABEL_PREFIX + "window"
LABEL_CONTRACT = LABEL_PREFIX + "contract"
LABEL_LANE = LABEL_PREFIX + "lane"


def _docker() -> Any:
    import docker  # imported late: process-only windows never need the SDK

    return docker


# --- images -------------------------------------------------------------------------------------------

def _normal_repo(name: str) -> str:
    for prefix in ("docker.io/library/", "docker.io/", "index.docker.io/library/", "library/"):
        if name.startswith(prefix):
            return name[len(prefix):]
    return name


def resolve_image(client: Any, ref: str, *, where: str = "") -> dict[str, Any]:
    """The local image ``ref`` pins, as ``docker image inspect`` returns it; PreflightError otherwise.

    ``sha256:<id>`` must be a local image's id. ``name@sha256:<digest>`` must be one of a local image's
    repo digests (what a registry pull records), or, for images that never went through a registry
    (``docker load``, ``docker import``), the id of a local image tagged ``name``. No pull is attempted:
    a window never fetches what it will measure.
    """
    name, _, digest = ref.rpartition("@") if "@" in ref else ("", "", ref)
    engine, doing = _engine(client), f"{where}resolving image {ref}"
    try:
        if not name:
            with docker_errors(doing, engine):
                attrs = client.api.inspect_image(digest)
            if attrs["Id"] != digest:
                raise PreflightError(f"{where}image {ref}: the engine resolved it to {attrs['Id']}")
            return attrs
        try:
            with docker_errors(doing, engine):
                attrs = client.api.inspect_image(ref)
            if any(_normal_repo(r) == _normal_repo(ref) for r in attrs.get("RepoDigests") or []):
                return attrs
        except DockerNotFound:
            pass
        with docker_errors(doing, engine):
            local = client.api.images(name=name)
            for image in local:
                if image["Id"] == digest:
                    return dict(client.api.inspect_image(digest))
        seen = ", ".join(f"{(i.get('RepoTags') or ['<untagged>'])[0]} = {i['Id']}" for i in local) or "none"
        raise PreflightError(f"{where}image {ref} is not on engine {engine}: local images named "
                             f"{name}: {seen}; no registry pull is attempted (load the pinned image first)")
    except DockerNotFound as exc:
        raise PreflightError(f"{where}image {ref} is not on engine {engine}; no registry pull is "
                             "attempted (load or pull the pinned image first)") from exc
    except (DockerUnreachable, DockerTLSError) as exc:
        raise EngineUnreachable(f"{where}docker engine {engine} unreachable: {why(exc.__cause__ or exc)}") from exc
    except DockerError as exc:  # it answered, and said no: a refusal before anything was stopped
        raise PreflightError(str(exc)) from exc


def _engine(client: Any) -> str:
    """The engine as the contract or DOCKER_HOST names it (``client_for`` notes it on the client)."""
    return str(getattr(client, "campaign_engine", None) or getattr(client.api, "base_url", "?"))


# --- paths: host <-> container ---------------------------------------------------------------------------

def _mount_source(lane: EffectiveLane, host: str) -> str:
    # a local engine gets the resolved path: a bind-mounted symlink would dangle inside the container
    return os.path.realpath(host) if is_local(lane.docker_host) else os.path.normpath(host)


def container_path(lane: EffectiveLane, host_file: str) -> str | None:
    """Where a host file appears inside the lane's container, through its bind mounts (None: not mounted)."""
    target = _mount_source(lane, host_file)
    for mount in sorted(lane.mounts, key=lambda m: -len(m.host)):
        source = _mount_source(lane, mount.host)
        if target == source:
            return mount.container
        if target.startswith(source.rstrip("/") + "/"):
            return str(PurePosixPath(mount.container) / os.path.relpath(target, source))
    return None


def host_path(lane: EffectiveLane, container_file: str) -> Path | None:
    """The host file behind a container path (a bind-mounted binary, say), when the engine is local."""
    if not is_local(lane.docker_host):
        return None
    for mount in sorted(lane.mounts, key=lambda m: -len(m.container)):
        inside = PurePosixPath(container_file)
        try:
            rel = inside.relative_to(mount.container)
        except ValueError:
            continue
        candidate = Path(_mount_source(lane, mount.host)) / rel
        return candidate if candidate.is_file() else None
    return None


# --- pre-flight -----------------------------------------------------------------------------------------

def check_lane(lane: EffectiveLane, model_host_path: str) -> dict[str, Any]:
    """Everything about a docker lane checkable before anything starts: the engine answers, the pinned
    image is there, bind-mount sources exist (local engines), the model is mounted, and the command is
    defined. Returns ``{"image_id", "model_path"}`` (the model's path inside the container)."""
    where = f"lane {lane.name}: "
    if not lane.image:
        raise PreflightError(f"{where}a docker lane needs `image`")
    client = client_for(lane.docker_host)
    attrs = resolve_image(client, lane.image, where=where)
    if not lane.executable and not (attrs.get("Config") or {}).get("Entrypoint"):
        raise PreflightError(f"{where}image {lane.image} has no ENTRYPOINT: set the lane's `executable` "
                             "(the server's path inside the container)")
    if lane.executable and not lane.executable.startswith("/"):
        raise PreflightError(f"{where}executable {lane.executable!r} must be an absolute path inside the container")
    if is_local(lane.docker_host):
        for mount in lane.mounts:
            if not os.path.exists(mount.host):
                raise PreflightError(f"{where}mount source {mount.host} does not exist")
    elif lane.files or lane.models:  # the pinned bytes are on this box; another box's engine would mount its own
        pinned = [*(f.name for f in lane.files), *(f"models.{role}" for role in lane.models)]
        raise PreflightError(f"{where}files and models ({', '.join(pinned)}) need a docker engine on this "
                             f"box: {describe(lane.docker_host)} would mount whatever lies at those paths there")
    inside = container_path(lane, model_host_path)
    if inside is None:
        raise PreflightError(f"{where}model {model_host_path} is not under any of the lane's mounts "
                             f"({', '.join(m.host for m in lane.mounts) or 'none'}): the container could not read it")
    return {"image_id": attrs["Id"], "model_path": inside}


def hash_on_engine(lane: EffectiveLane, image_id: str, box_paths: list[str], *, labels: dict[str, str]) -> dict[str, str]:
    """sha256 of files on the lane's own box, read by a one-shot container of the lane's image through the
    lane's mounts: the bytes the engine will load, hashed where they lie (the runner's copy, if it has
    one, proves nothing about the box's). No network; removed when done. The image needs ``sha256sum``."""
    inside = {path: container_path(lane, path) for path in box_paths}
    missing = [path for path, seen in inside.items() if seen is None]
    if missing:
        raise PreflightError(f"lane {lane.name}: {missing[0]} is not under any of the lane's mounts")
    client = client_for(lane.docker_host)
    types = _docker().types
    mounts = [types.Mount(target=m.container, source=_mount_source(lane, m.host), type="bind", read_only=True)
              for m in lane.mounts]
    where = f"lane {lane.name}: on {describe(lane.docker_host)}"
    try:
        with docker_errors("hashing the model in a one-shot container", describe(lane.docker_host)):
            container = client.api.create_container(
                image_id, entrypoint=["sha256sum", "--"], command=[inside[p] for p in box_paths],
                labels={**labels, LABEL_PREFIX + "purpose": "model-hash"}, network_disabled=True,
                host_config=client.api.create_host_config(mounts=mounts, network_mode="none"))
            try:
                client.api.start(container["Id"])
                code = client.api.wait(container["Id"], timeout=3600).get("StatusCode")
                said = client.api.logs(container["Id"], stdout=True, stderr=True).decode(errors="replace")
            finally:
                client.api.remove_container(container["Id"], force=True)
    except DockerError as exc:
        raise PreflightError(f"{where} the model could not be hashed: {why(exc.__cause__ or exc)}") from exc
    digests: dict[str, str] = {}
    for line in said.splitlines():
        parts = line.split(None, 1)
        if len(parts) == 2 and len(parts[0]) == 64:
            digests[parts[1].strip().lstrip("*")] = parts[0]
    found = {path: digests.get(inside[path] or "") for path in box_paths}
    if code != 0 or not all(found.values()):
        detail = " ".join(said.split())[-200:] or f"exit code {code}"
        raise PreflightError(f"{where} sha256sum of {', '.join(p for p, d in found.items() if not d)} failed: {detail}")
    return {path: digest for path, digest in found.items() if digest}


# --- the container --------------------------------------------------------------------------------------

def device_requests(gpus: str | int | None) -> list[Any]:
    """``gpus`` as Docker device requests: ``all``, a count, or device ids (``"0,1"`` or ``device=0,1``)."""
    if gpus is None:
        return []
    types = _docker().types
    text = str(gpus).strip()
    if text == "all":
        return [types.DeviceRequest(count=-1, capabilities=[["gpu"]])]
    if text.isdigit():
        return [types.DeviceRequest(count=int(text), capabilities=[["gpu"]])] if int(text) else []
    ids = [part.strip() for part in text.removeprefix("device=").split(",") if part.strip()]
    return [types.DeviceRequest(device_ids=ids, capabilities=[["gpu"]])]


def _ports(lane: EffectiveLane) -> dict[str, Any]:
    return {} if lane.network == "host" else {f"{lane.port}/tcp": (lane.host, lane.port)}


def create_kwargs(lane: EffectiveLane, spec: LaunchSpec, image_id: str, name: str) -> dict[str, Any]:
    """What ``containers.create`` gets for a lane: nothing else decides how the container runs."""
    types = _docker().types
    kwargs: dict[str, Any] = {
        "image": image_id,
        "name": name,
        "environment": dict(spec.env),
        "labels": {**spec.labels, LABEL_LANE: spec.lane},
        "mounts": [*(types.Mount(target=m.container, source=_mount_source(lane, m.host), type="bind",
                                 read_only=m.read_only) for m in lane.mounts),
                   *(types.Mount(target=lane.file_seen_at(f), source=_mount_source(lane, f.path), type="bind",
                                 read_only=True) for f in lane.files),
                   *(types.Mount(target=lane.model_seen_at(role), source=_mount_source(lane, m.path), type="bind",
                                 read_only=True) for role, m in lane.models.items())],
        "device_requests": device_requests(lane.gpus),
        "restart_policy": {"Name": "no"},
        "detach": True,
        "stdin_open": False,
        "tty": False,
    }
    if lane.executable:
        kwargs["entrypoint"], kwargs["command"] = [spec.argv[0]], list(spec.argv[1:])
    else:
        kwargs["command"] = list(spec.argv)  # after the image's ENTRYPOINT
    if spec.scratch:
        kwargs["tmpfs"] = {spec.scratch: "rw,mode=0700"}
    if lane.shm_size is not None:
        kwargs["shm_size"] = int(lane.shm_size)
    if lane.cpus:
        kwargs["cpuset_cpus"] = lane.cpus
    if lane.network == "host":
        kwargs["network_mode"] = "host"
    else:
        kwargs["ports"] = _ports(lane)
    return kwargs


class _ChunkReader(io.RawIOBase):
    """The engine's archive stream (an iterator of byte chunks) as a file tarfile can read in one pass."""

    def __init__(self, chunks: Any) -> None:
        self._chunks, self._left = iter(chunks), b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._left:
            self._left = next(self._chunks, b"")
            if not self._left:
                return 0
        n = min(len(buffer), len(self._left))
        buffer[:n], self._left = self._left[:n], self._left[n:]
        return n


def _container_name(spec: LaunchSpec) -> str:
    token = hashlib.sha256(spec.labels.get(LABEL_WINDOW, "").encode()).hexdigest()[:8]
    return f"campaign-{spec.lane}-{token}"


class DockerLane:
    def __init__(self, client: Any, container: Any, lane: EffectiveLane, spec: LaunchSpec,
                 launched: dict[str, Any], log: RedactingLog) -> None:
        self._client, self.container, self.lane, self.spec = client, container, lane, spec
        self._launched, self._log = launched, log
        self._engine = describe(lane.docker_host)
        self._attrs: dict[str, Any] = {}
        self._follower = threading.Thread(target=self._follow_logs, name=f"logs-{spec.lane}", daemon=True)
        self._follower.start()

    def _follow_logs(self) -> None:
        try:
            with docker_errors(f"following the log of container {self.container.id[:12]}", self._engine):
                for chunk in self._client.api.logs(self.container.id, stream=True, follow=True):
                    self._log.write(chunk)
        except DockerError as exc:  # the stream ends with the container; a broken stream is noted, not fatal
            try:
                self._log.write(f"\n[campaign] log stream ended: {type(exc).__name__}: {exc}\n".encode())
            except (OSError, ValueError):
                pass  # the log was closed by stop() after its drain: nothing left to write to
        except (OSError, ValueError):
            pass  # the same: a chunk that came after stop() closed the log

    def _state(self) -> dict[str, Any]:
        try:
            with docker_errors(f"inspecting container {self.container.id[:12]}", self._engine):
                self._attrs = self._client.api.inspect_container(self.container.id)
        except DockerNotFound:
            return {"Status": "removed"}
        except DockerError:
            pass  # keep the last known state; the engine may be briefly busy
        return self._attrs.get("State") or {}

    def _drain(self) -> None:
        self._follower.join(timeout=10)

    def alive(self) -> bool:
        if self._state().get("Status") in ("created", "running", "restarting"):
            return True
        self._drain()  # the last lines explain why it died: have them on disk before anyone reads the log
        return False

    def exit_code(self) -> int | None:
        state = self._state()
        return None if state.get("Status") in ("created", "running", "restarting", "removed") \
            else state.get("ExitCode")

    def failure_facts(self) -> dict[str, Any]:
        state = self._state()
        return {"oom_killed": bool(state.get("OOMKilled")), "error": state.get("Error") or ""}

    def unreachable_because(self) -> str | None:
        """Why the lane's published port cannot reach it, or None: a bridge lane whose container the engine
        gave no address on any network (dockerd run with --bridge=none, as on hosts without iptables). Its
        port then leads nowhere, and readiness would wait out its whole budget for a cause it cannot name."""
        if self.lane.network == "host":
            return None
        self._state()
        networks = (self._attrs.get("NetworkSettings") or {}).get("Networks") or {}
        if any((net or {}).get("IPAddress") or (net or {}).get("GlobalIPv6Address") for net in networks.values()):
            return None
        names = ", ".join(sorted(networks)) or "no network"
        return (f"container {self.container.id[:12]} has no address on its network ({names}): this engine gives "
                f"bridge containers none (dockerd --bridge=none?), so port {self.lane.port} leads nowhere; serve "
                "it with `network: host`, or give the engine a bridge")

    def inspect(self) -> dict[str, Any]:
        """What the engine says runs: image id, command, env, mounts, /dev/shm, devices, network."""
        self._state()
        attrs = self._attrs
        config, host_config = attrs.get("Config") or {}, attrs.get("HostConfig") or {}
        state = attrs.get("State") or {}
        return {
            "runtime": "docker",
            "docker_host": describe(self.lane.docker_host),
            "container_id": attrs.get("Id", self.container.id),
            "name": (attrs.get("Name") or "").lstrip("/"),
            "image_ref": self.lane.image,
            "image_id": attrs.get("Image"),
            "argv": [attrs.get("Path", ""), *(attrs.get("Args") or [])],
            "env": dict(e.split("=", 1) for e in (config.get("Env") or []) if "=" in e),
            "launched_argv": list(self._launched["argv"]),
            "launched_env": dict(self.spec.env),
            "entrypoint": config.get("Entrypoint"),
            "cmd": config.get("Cmd"),
            "mounts": sorted(({"source": m.get("Source"), "destination": m.get("Destination"),
                               "read_only": not m.get("RW", True), "type": m.get("Type")}
                              for m in attrs.get("Mounts") or []), key=lambda m: m["destination"] or ""),
            "shm_size": host_config.get("ShmSize"),
            "cpuset_cpus": host_config.get("CpusetCpus") or None,
            "tmpfs": host_config.get("Tmpfs") or {},
            "device_requests": host_config.get("DeviceRequests") or [],
            "network_mode": host_config.get("NetworkMode"),
            "port_bindings": host_config.get("PortBindings") or {},
            "restart_policy": host_config.get("RestartPolicy"),
            "labels": config.get("Labels") or {},
            "state": {"status": state.get("Status"), "exit_code": state.get("ExitCode"),
                      "oom_killed": state.get("OOMKilled"), "started_at": state.get("StartedAt")},
            "launched": {k: v for k, v in self._launched.items() if k != "argv"},
        }

    def file_sha256(self, path: str) -> str:
        """The sha256 of a file as the running container sees it, streamed out through the engine (no tool
        inside the image is needed)."""
        with docker_errors(f"reading {path} out of container {self.container.id[:12]}", self._engine):
            return self._sha256_of_archive(path)

    def _sha256_of_archive(self, path: str) -> str:
        stream, _ = self.container.get_archive(path)
        try:
            with tarfile.open(fileobj=_ChunkReader(stream), mode="r|") as archive:
                member = archive.next()  # the archive of one path starts with that path itself
                if member is None or not member.isfile() or member.name != PurePosixPath(path).name:
                    raise LaunchError(f"lane {self.lane.name}: {path} is not a regular file inside the container",
                                      cause="file_mismatch")
                if member.size > LANE_FILE_BYTES:
                    raise LaunchError(f"lane {self.lane.name}: {path} inside the container is {member.size:,} bytes, "
                                      f"over the {LANE_FILE_BYTES:,}-byte cap of a lane file", cause="file_mismatch")
                handle = archive.extractfile(member)
                digest = hashlib.sha256()
                while handle is not None and (block := handle.read(1 << 20)):
                    digest.update(block)
                return digest.hexdigest()
        finally:
            close = getattr(stream, "close", None)
            if close is not None:
                close()

    def tree_sha256s(self, path: str) -> dict[str, str]:
        """{relative path: sha256} of every file of a directory as the running container sees it, from one
        archive streamed out through the engine: the same rules as the manifest's walker (regular files and
        folders only, a bounded count)."""
        with docker_errors(f"reading {path} out of container {self.container.id[:12]}", self._engine):
            return self._tree_of_archive(path)

    def _tree_of_archive(self, path: str) -> dict[str, str]:
        from campaign.contracts.manifest import MAX_MANIFEST_FILES

        top, found = PurePosixPath(path).name, dict[str, str]()
        stream, _ = self.container.get_archive(path)
        try:
            with tarfile.open(fileobj=_ChunkReader(stream), mode="r|") as archive:
                for member in archive:
                    if member.name == top and member.isdir():
                        continue
                    if not member.name.startswith(top + "/") or not (member.isfile() or member.isdir()):
                        raise LaunchError(f"lane {self.lane.name}: {path} holds {member.name!r}, which is not a "
                                          "regular file or a folder", cause="file_mismatch")
                    if member.isfile():
                        digest, handle = hashlib.sha256(), archive.extractfile(member)
                        while handle is not None and (block := handle.read(1 << 20)):
                            digest.update(block)
                        found[member.name[len(top) + 1:]] = digest.hexdigest()
                        if len(found) > MAX_MANIFEST_FILES:
                            raise LaunchError(f"lane {self.lane.name}: {path} holds more than "
                                              f"{MAX_MANIFEST_FILES:,} files", cause="file_mismatch")
        finally:
            close = getattr(stream, "close", None)
            if close is not None:
                close()
        return found

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM, SIGKILL after ``timeout``; then the container is kept or removed, per the lane."""
        code: int | None = None
        short = self.container.id[:12]
        try:
            try:
                with docker_errors(f"stopping container {short}", self._engine):
                    self.container.stop(timeout=int(max(timeout, 1)))
                    code = self.container.wait(timeout=timeout + 30).get("StatusCode")
            except DockerNotFound:
                return None
            except DockerError as exc:  # a wedged or unreachable engine: record it, the failsafe owns the rest
                self._log.write(f"\n[campaign] stop failed: {type(exc).__name__}: {exc}\n".encode())
            self._drain()
            if self.lane.stop == "remove":
                try:
                    with docker_errors(f"removing container {short}", self._engine):
                        self.container.remove(v=True, force=True)
                except DockerNotFound:
                    pass
                except DockerError as exc:
                    self._log.write(f"\n[campaign] remove failed: {exc}\n".encode())
        finally:
            self._log.close()
        return code


class DockerRuntime:
    def __init__(self, lane: EffectiveLane, redactor: Redactor | None = None) -> None:
        self.lane, self.redactor = lane, redactor  # the boot's redactor (None: one made at start)

    def start(self, spec: LaunchSpec) -> DockerLane:
        lane = self.lane
        engine = describe(lane.docker_host)
        try:
            client = client_for(lane.docker_host)  # an ssh tunnel that died is re-opened here, or refused
            image = resolve_image(client, lane.image or "", where=f"lane {lane.name}: ")
        except EngineUnreachable as exc:
            raise LaunchError(str(exc), cause="engine_unreachable") from exc
        except PreflightError as exc:
            refused = isinstance(exc.__cause__, DockerRefused)  # it answered and said no: not a missing image
            raise LaunchError(str(exc), cause="create_failed" if refused else "missing_image") from exc
        log = RedactingLog(spec.log_path, self.redactor or redactor_for(lane))
        entry = [] if lane.executable else list((image.get("Config") or {}).get("Entrypoint") or [])
        kwargs = create_kwargs(lane, spec, image["Id"], _container_name(spec))
        launched = {"argv": [*entry, *spec.argv], "image_id": image["Id"],
                    "mounts": sorted(({"source": m["Source"], "destination": m["Target"],
                                       "read_only": bool(m.get("ReadOnly")), "type": "bind"}
                                      for m in kwargs["mounts"]), key=lambda m: m["destination"]),
                    "shm_size": kwargs.get("shm_size"), "cpuset_cpus": kwargs.get("cpuset_cpus"),
                    "device_requests": [dict(d) for d in kwargs["device_requests"]],
                    "network_mode": kwargs.get("network_mode", "default"),
                    "port_bindings": {k: [{"HostIp": h, "HostPort": str(p)}] for k, (h, p) in kwargs.get("ports", {}).items()}}
        try:
            container = self._create(client, kwargs, engine)
        except DockerNotFound as exc:
            log.close()
            raise LaunchError(f"lane {lane.name}: image {lane.image} vanished: {why(exc.__cause__ or exc)}",
                              cause="missing_image") from exc
        except DockerError as exc:
            said = exc.__cause__ or exc  # the engine's own words, as the boot log has always had them
            log.write(f"[campaign] create failed: {said}\n".encode())
            log.close()
            raise LaunchError(f"lane {lane.name}: docker could not create the container: {said}",
                              cause="create_failed") from exc
        try:
            with docker_errors(f"lane {lane.name}: starting its container", engine):
                container.start()
        except DockerError as exc:
            # e.g. the executable is not in the image: the engine says so here, not in the log
            said = exc.__cause__ or exc
            log.write(f"[campaign] start failed: {said}\n".encode())
            log.close()
            if lane.stop == "remove":
                try:
                    with docker_errors(f"lane {lane.name}: removing a container that did not start", engine):
                        container.remove(force=True)
                except DockerError:
                    pass  # the launch failure is the news; `campaign cleanup` finds the container by its labels
            from campaign.lanes.bootlog import classify_failure

            raise LaunchError(f"lane {lane.name}: docker could not start the container: {said}",
                              cause=classify_failure(str(said), None, started=False)) from exc
        return DockerLane(client, container, lane, spec, launched, log)

    @staticmethod
    def _create(client: Any, kwargs: dict[str, Any], engine: str) -> Any:
        base = kwargs["name"]
        for attempt in range(1, 20):
            try:
                with docker_errors(f"creating container {kwargs['name']}", engine):
                    return client.containers.create(**kwargs)
            except DockerRefused as exc:
                # a control visited twice in one window, or a kept container of this window: next name
                if exc.status == 409 and "already in use" in str(exc):
                    kwargs["name"] = f"{base}-{attempt + 1}"
                    continue
                raise
        raise LaunchError(f"no free container name after {base}-19", cause="create_failed")


def remove_container(client: Any, container_id: str) -> None:
    """Remove a container, by id; one already gone is fine. Any other failure is a ``DockerError`` kind:
    an engine that could not be asked (``DockerUnreachable``, ``DockerTLSError``) is never taken for gone."""
    try:
        with docker_errors(f"removing container {container_id[:12]}", _engine(client)):
            client.api.remove_container(container_id, force=True, v=True)
    except DockerNotFound:
        pass


def find_leftovers(client: Any, *, window: str | None = None, contract: str | None = None,
                   all_states: bool = True) -> list[dict[str, Any]]:
    """Containers this tool made (by label), optionally of one window or contract: what `campaign cleanup`
    lists and removes after a crashed runner. Each: id, name, lane, window, contract, status."""
    filters = [f"{LABEL_LANE}"]
    if window:
        filters.append(f"{LABEL_WINDOW}={window}")
    if contract:
        filters.append(f"{LABEL_CONTRACT}={contract}")
    with docker_errors("listing the containers windows left", _engine(client)):
        items = client.api.containers(all=all_states, filters={"label": filters})
    found = []
    for item in items:
        labels = item.get("Labels") or {}
        found.append({"id": item["Id"], "name": (item.get("Names") or ["?"])[0].lstrip("/"),
                      "lane": labels.get(LABEL_LANE), "window": labels.get(LABEL_WINDOW),
                      "contract": labels.get(LABEL_CONTRACT), "status": item.get("State")})
    return found
