"""Docker engines, local or remote: one client per engine, so a campaign can drive several boxes.

``unix://`` is this box's socket; ``tcp://`` goes to another box's engine, with TLS client certificates
when the contract gives them (``docker.tls.TLSConfig``); ``ssh://user@box`` tunnels through the system
``ssh`` client (the user's keys, agent and ``~/.ssh/config`` apply; no paramiko needed). A lane without a
host uses the runner's environment (DOCKER_HOST, DOCKER_TLS_VERIFY, DOCKER_CERT_PATH) like the CLI.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from campaign.contracts.schema import DockerHost
from campaign.errors import PreflightError

__all__ = ["API_VERSION", "client_for", "client_kwargs", "describe", "is_local"]

# Pinned rather than negotiated: negotiation costs a round trip per client and would make constructing a
# client for an unreachable box fail before pre-flight can say which box it was. 1.41 is Docker 20.10's
# API (DeviceRequests, ShmSize, Mounts are all older), understood by every later engine.
API_VERSION = "1.41"
_clients: dict[str, Any] = {}
_lock = threading.Lock()


def describe(host: DockerHost | None) -> str:
    return host.url if host else os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock (default)")


def is_local(host: DockerHost | None) -> bool:
    """Whether the lane's engine is this box (its ports and files are this box's)."""
    url = host.url if host else os.environ.get("DOCKER_HOST", "unix://")
    return url.startswith("unix://") or url.startswith("tcp://127.") or url.startswith("tcp://localhost")


def _path(text: str | None) -> str | None:
    if text is None:
        return None
    path = Path(text).expanduser()
    if not path.is_absolute():
        raise PreflightError(f"docker TLS file {text!r} must be an absolute (or ~/) path")
    if not path.is_file():
        raise PreflightError(f"docker TLS file {path} not found")
    return str(path)


def client_kwargs(host: DockerHost) -> dict[str, Any]:
    """Arguments for ``docker.DockerClient`` (exposed so tests can check what a remote client gets)."""
    import docker.tls

    kwargs: dict[str, Any] = {"base_url": host.url, "version": API_VERSION, "timeout": 60}
    if host.url.startswith("ssh://"):
        kwargs["use_ssh_client"] = True
    if host.tls is not None:
        if not host.url.startswith("tcp://"):
            raise PreflightError(f"docker host {host.url}: tls applies to tcp:// only")
        cert, key = _path(host.tls.client_cert), _path(host.tls.client_key)
        if (cert is None) != (key is None):
            raise PreflightError(f"docker host {host.url}: give both tls client_cert and client_key, or neither")
        kwargs["tls"] = docker.tls.TLSConfig(client_cert=(cert, key) if cert and key else None,
                                             ca_cert=_path(host.tls.ca_cert), verify=host.tls.verify)
    return kwargs


def client_for(host: DockerHost | None) -> Any:
    """A cached client for the engine; nothing is sent until it is used."""
    import docker
    import docker.errors

    key = host.model_dump_json() if host else "<env>"
    with _lock:
        if key not in _clients:
            try:
                if host is None:
                    _clients[key] = docker.from_env(version=API_VERSION, timeout=60)
                else:
                    _clients[key] = docker.DockerClient(**client_kwargs(host))
            except docker.errors.DockerException as exc:
                raise PreflightError(f"docker engine {describe(host)}: {exc}") from exc
        return _clients[key]
