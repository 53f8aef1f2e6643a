"""A daily that is a container, usually started by hand with ``docker run``: snapshot it from the engine,
stop it (not remove it), start that same container again or recreate it from the snapshot, prove it.

The snapshot is the engine's own create config read back (``docker inspect``): image id, entrypoint, cmd,
env, labels, user, working dir, exposed ports and the whole host config (mounts, device requests and
GPUs, shm size, ipc, network mode, published ports, restart policy, ulimits). Recreating posts that
config back to the engine's create endpoint under the same name, so nothing is re-derived.

A restart policy would bring the daily back by itself in the middle of the window, fighting the lanes
for the port and the GPU: it is set to ``no`` before the stop and put back at restore.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

from campaign.daily.secretstate import refuse_unresolved, same_words
from campaign.errors import DockerNotFound, PreflightError, RunError
from campaign.lanes.runtimes.dockererrors import docker_errors

__all__ = ["BUNDLE_HOST_CONFIG", "describe", "ensure_restart_policy", "engine_of", "is_running", "prove", "snapshot",
           "start", "stop"]

# What of the host config the bundle shows: serving facts. Log drivers and the like may carry credentials
# (a splunk token, a loki URL with a password) and are kept only in the private snapshot.
BUNDLE_HOST_CONFIG = ("NetworkMode", "PortBindings", "Binds", "Mounts", "ShmSize", "IpcMode", "DeviceRequests",
                      "Devices", "Runtime", "RestartPolicy", "Ulimits", "Privileged", "CapAdd", "CapDrop", "Tmpfs",
                      "PidMode", "Init", "CpusetCpus", "Memory", "NanoCpus")

# Config keys a recreated container gets back verbatim (Hostname and Domainname are derived by the engine).
_CONFIG_KEYS = ("Image", "Entrypoint", "Cmd", "Env", "Labels", "User", "WorkingDir", "ExposedPorts", "Tty",
                "OpenStdin", "StopSignal", "StopTimeout", "Healthcheck")


def _client(snap_or_host: dict[str, Any] | None) -> Any:
    from campaign.contracts.schema import DockerHost
    from campaign.lanes.runtimes.dockerhost import client_for

    return client_for(DockerHost.model_validate(snap_or_host) if snap_or_host else None)


def _engine_name(host: dict[str, Any] | None) -> str:
    from campaign.contracts.schema import DockerHost
    from campaign.lanes.runtimes.dockerhost import describe as describe_host

    return describe_host(DockerHost.model_validate(host) if host else None)


def _where(client: Any) -> str:
    """The engine as the contract or DOCKER_HOST names it (``client_for`` notes it on the client)."""
    return str(getattr(client, "campaign_engine", None) or getattr(client.api, "base_url", "the docker engine"))


def _inspect(client: Any, name: str, where: str | None = None) -> dict[str, Any] | None:
    """The container's attributes, or None when the engine says there is no such container. An engine that
    could not be asked raises its ``DockerError`` kind: never None, so nothing takes it for gone."""
    try:
        with docker_errors(f"inspecting container {name!r}", where or _where(client)):
            return dict(client.api.inspect_container(name))
    except DockerNotFound:
        return None


def container_id(docker_host: dict[str, Any] | None, name: str) -> str | None:
    """The id of the container holding ``name`` on that engine now, or None."""
    attrs = _inspect(_client(docker_host), name)
    return attrs["Id"] if attrs else None


def env_digest(env: list[str] | None) -> str:
    return hashlib.sha256("\0".join(sorted(env or [])).encode()).hexdigest()


def _mounts(attrs: dict[str, Any]) -> list[list[Any]]:
    """Mounts as a recreated container has them again: an anonymous volume (an image's VOLUME) gets a new
    name and path each time, so it counts by its destination only."""
    out = []
    for m in attrs.get("Mounts") or []:
        name = m.get("Name") or ""
        anonymous = m.get("Type") == "volume" and len(name) == 64
        source = None if anonymous else (name if m.get("Type") == "volume" else m.get("Source"))
        out.append([m.get("Type"), source, m.get("Destination"), bool(m.get("RW"))])
    return sorted(out, key=lambda mount: [str(part) for part in mount])


def engine_of(docker_host: dict[str, Any] | None) -> dict[str, Any]:
    """The engine as the runner reaches it now, written down: the systemd timer and a watchdog restore in
    another environment, where DOCKER_HOST may not be set."""
    if docker_host:
        return docker_host
    import os

    url = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    tls = None
    if url.startswith("tcp://") and os.environ.get("DOCKER_CERT_PATH"):
        certs = os.environ["DOCKER_CERT_PATH"]
        tls = {"ca_cert": f"{certs}/ca.pem", "client_cert": f"{certs}/cert.pem", "client_key": f"{certs}/key.pem",
               "verify": os.environ.get("DOCKER_TLS_VERIFY", "") not in ("", "0")}
    return {"url": url, "tls": tls}


def snapshot(container: str, docker_host: dict[str, Any] | None, settings: dict[str, Any], *,
             running: bool = True) -> dict[str, Any]:
    """The daily container as the engine holds it. Refuses (touching nothing) when it does not exist on
    that engine, is not running (unless ``running`` is False), or its image is not on the engine any more."""
    docker_host = engine_of(docker_host)
    client = _client(docker_host)
    where = _engine_name(docker_host)
    try:
        attrs = _inspect(client, container, where)
    except RunError as exc:
        raise PreflightError(f"incumbent: {exc}") from exc
    if attrs is None:
        raise PreflightError(f"incumbent container {container!r} does not exist on docker engine {where}: start "
                             "the daily first, or name the engine it runs on (incumbent.docker_host)")
    if running and not (attrs.get("State") or {}).get("Running"):
        raise PreflightError(f"incumbent container {container!r} on {where} is not running: there is nothing to "
                             "restore to; start it first")
    try:
        with docker_errors(f"looking up image {attrs['Image']}", where):
            client.images.get(attrs["Image"])
    except DockerNotFound:
        raise PreflightError(f"incumbent container {container!r}: its image {attrs['Image']} is not on {where} "
                             "any more, so it could not be recreated if it were removed") from None
    config, host_config = attrs.get("Config") or {}, attrs.get("HostConfig") or {}
    return {"runtime": "docker", "container": attrs["Name"].lstrip("/"), "container_id": attrs["Id"],
            "image_id": attrs["Image"], "docker_host": docker_host,
            "config": {key: config.get(key) for key in _CONFIG_KEYS if config.get(key) is not None},
            "host_config": host_config, "mounts": _mounts(attrs), "env_sha256": env_digest(config.get("Env")),
            "restart_policy": host_config.get("RestartPolicy") or {"Name": "no"},
            # argv and env in the shapes the process daily has, for redaction and `daily show`
            "argv": [*(config.get("Entrypoint") or []), *(config.get("Cmd") or [])],
            "env": dict(item.split("=", 1) for item in config.get("Env") or [] if "=" in item),
            **settings}


def _differences(snap: dict[str, Any], attrs: dict[str, Any]) -> list[str]:
    config, host_config = attrs.get("Config") or {}, attrs.get("HostConfig") or {}
    wanted = snap["config"]
    checks = [("image id", attrs.get("Image") == snap["image_id"]),
              ("entrypoint", same_words(wanted.get("Entrypoint") or None, config.get("Entrypoint") or None, snap)),
              ("cmd", same_words(wanted.get("Cmd") or None, config.get("Cmd") or None, snap)),
              ("env", env_digest(config.get("Env")) == snap["env_sha256"]),
              ("mounts", _mounts(attrs) == snap["mounts"]),
              *((name, (host_config.get(key) or None) == (snap["host_config"].get(key) or None))
                for name, key in _HOST_CONFIG_PROVEN)]
    return [name for name, same in checks if not same]


# What, besides image, command, env and mounts, makes the restored daily the one that was measured: the GPUs
# it sees, where it listens, its /dev/shm (NCCL and vLLM's workers live there) and its IPC namespace.
_HOST_CONFIG_PROVEN = (("devices", "DeviceRequests"), ("network", "NetworkMode"), ("published ports", "PortBindings"),
                       ("shm size", "ShmSize"), ("ipc mode", "IpcMode"))


def is_running(snap: dict[str, Any]) -> bool:
    """The daily's name runs the snapshot's image, command, env, mounts, devices, network, ports, shm and ipc now."""
    attrs = _inspect(_client(snap.get("docker_host")), snap["container"])
    return bool(attrs and (attrs.get("State") or {}).get("Running") and not _differences(snap, attrs))


def stop(snap: dict[str, Any]) -> str | None:
    """Stop (never remove) the daily; its restart policy is set to ``no`` first so it stays down."""
    client = _client(snap.get("docker_host"))
    attrs = _inspect(client, snap["container"])
    if attrs is None or not (attrs.get("State") or {}).get("Running"):
        return None
    with docker_errors(f"stopping the daily container {snap['container']!r}", _where(client)):
        if (snap["restart_policy"].get("Name") or "no") != "no":
            client.api.update_container(attrs["Id"], restart_policy={"Name": "no"})
        client.api.stop(attrs["Id"], timeout=max(1, round(float(snap.get("stop_timeout") or 30))))
    return str(attrs["Id"])


def ensure_restart_policy(snap: dict[str, Any]) -> None:
    """Put the daily's own restart policy back. A runner killed between holding it at ``no`` and the stop
    leaves a daily that still serves: restore finds it serving, and this is what gives it its policy back."""
    client = _client(snap.get("docker_host"))
    attrs = _inspect(client, snap["container"])
    if attrs and (attrs.get("HostConfig") or {}).get("RestartPolicy") != snap["restart_policy"] \
            and (snap["restart_policy"].get("Name") or "no") != "no":
        with docker_errors(f"putting back the restart policy of {snap['container']!r}", _where(client)):
            client.api.update_container(attrs["Id"], restart_policy=snap["restart_policy"])


def _recreate(client: Any, snap: dict[str, Any]) -> str:
    refuse_unresolved(snap, "recreated")
    body = {**snap["config"], "Image": snap["image_id"], "HostConfig": snap["host_config"]}
    # the engine's own words are the useful part: the kind's line carries them
    with docker_errors(f"recreating the daily container {snap['container']!r} from its snapshot", _where(client)):
        return str(client.api.create_container_from_config(body, name=snap["container"])["Id"])


def start(snap: dict[str, Any]) -> dict[str, Any]:
    """Start the daily container again; recreate it from the snapshot if someone removed it. Its restart
    policy is put back as it was."""
    client = _client(snap.get("docker_host"))
    attrs = _inspect(client, snap["container"])
    action = "started"
    if attrs is not None and _differences(snap, attrs):
        raise RunError(f"container {snap['container']!r} is not the snapshot's daily any more (differs in "
                       f"{', '.join(_differences(snap, attrs))}); it was left as it is")
    if attrs is None:
        container_id, action = _recreate(client, snap), "recreated"
    else:
        container_id = attrs["Id"]
    with docker_errors(f"starting the daily container {snap['container']!r}", _where(client)):
        if (snap["restart_policy"].get("Name") or "no") != "no":
            client.api.update_container(container_id, restart_policy=snap["restart_policy"])
        if attrs is None or not (attrs.get("State") or {}).get("Running"):
            client.api.start(container_id)
    return {"container_id": container_id, "action": action}


def prove(snap: dict[str, Any], *, budget: float, completion: Any) -> dict[str, Any]:
    """Running as the snapshot says (image id, cmd, env digest, mounts, devices, network, published ports,
    shm size, ipc mode), then a real completion."""
    client = _client(snap.get("docker_host"))
    deadline = time.monotonic() + budget

    def still_up() -> None:
        attrs = _inspect(client, snap["container"])
        if attrs is None or not (attrs.get("State") or {}).get("Running"):
            state = (attrs or {}).get("State") or {}
            raise RunError(f"restored daily container {snap['container']!r} is not running "
                           f"(exit code {state.get('ExitCode')})")
        different = _differences(snap, attrs)
        if different:
            raise RunError(f"restored daily container differs from the snapshot in {', '.join(different)}")

    still_up()
    answer = completion(snap, deadline, still_up)
    attrs = _inspect(client, snap["container"]) or {}
    return {"container_id": attrs.get("Id"), "image_id_matches": True, "cmd_matches": True, "env_matches": True,
            "mounts_match": True, "devices_match": True, "network_ports_shm_ipc_match": True,
            "completion": answer, "proved_at": time.time()}


def describe(snap: dict[str, Any]) -> str:
    """How to start the daily by hand, as far as a `docker run` line can say it (the snapshot is exact)."""
    config, host = snap["config"], snap["host_config"]
    words = ["docker", "run", "-d", "--name", snap["container"]]
    if host.get("NetworkMode") not in (None, "", "default", "bridge"):
        words += ["--network", host["NetworkMode"]]
    for port, bindings in sorted((host.get("PortBindings") or {}).items()):
        for binding in bindings or []:
            words += ["-p", f"{binding.get('HostIp') + ':' if binding.get('HostIp') else ''}"
                            f"{binding.get('HostPort')}:{port.split('/')[0]}"]
    for mount in host.get("Binds") or []:
        words += ["-v", mount]
    if host.get("ShmSize"):
        words += ["--shm-size", str(host["ShmSize"])]
    if host.get("IpcMode") not in (None, "", "private", "shareable"):
        words += ["--ipc", host["IpcMode"]]
    for request in host.get("DeviceRequests") or []:
        devices = request.get("DeviceIDs") or []
        count = request.get("Count")
        words += ["--gpus", f"device={','.join(devices)}" if devices else ("all" if count == -1 else str(count))]
    for limit in host.get("Ulimits") or []:
        words += ["--ulimit", f"{limit.get('Name')}={limit.get('Soft')}:{limit.get('Hard')}"]
    if (snap["restart_policy"].get("Name") or "no") != "no":
        words += ["--restart", snap["restart_policy"]["Name"]]
    for name in sorted(snap["env"]):
        words += ["-e", name]  # values stay in the environment that starts it, never on a shown line
    if config.get("Entrypoint"):
        words += ["--entrypoint", config["Entrypoint"][0]]
    words.append(snap["image_id"])
    words += [*(config.get("Entrypoint") or [])[1:], *(config.get("Cmd") or [])]
    return " ".join(json.dumps(w) if (not w or any(c in w for c in " \"'$")) else w for w in words)
