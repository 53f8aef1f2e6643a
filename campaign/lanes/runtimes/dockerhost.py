"""Docker engines, local or remote: one client per engine, so a campaign can drive several boxes.

``unix://`` is this box's socket; ``tcp://`` goes to another box's engine, with TLS client certificates
when the contract gives them (``docker.tls.TLSConfig``); ``ssh://user@box`` forwards the box's engine socket
to a private local socket through one system ``ssh`` process per engine (``ssh -N -L``), in batch mode: a
key that is refused or a host key that is unknown is an error, never a prompt that hangs an unattended
window. The user's keys, agent and ``~/.ssh/config`` apply unless the contract names a key and a
known_hosts file. A lane without a host uses the runner's environment (DOCKER_HOST, DOCKER_TLS_VERIFY,
DOCKER_CERT_PATH) like the CLI.
"""

from __future__ import annotations

import atexit
import ctypes
import hashlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from campaign.contracts.schema import DockerHost, engine_is_local
from campaign.errors import DockerError, DockerTLSError, DockerUnreachable, PreflightError
from campaign.fsutil import UnreadableFile, open_regular
from campaign.lanes.runtimes.dockererrors import default_engine, docker_errors, why

__all__ = ["API_VERSION", "EngineUnreachable", "client_for", "client_kwargs", "describe", "engine_identity",
           "is_local", "ssh_command"]

# Pinned rather than negotiated: negotiation costs a round trip per client and would make constructing a
# client for an unreachable box fail before pre-flight can say which box it was. 1.41 is Docker 20.10's
# API (DeviceRequests, ShmSize, Mounts are all older), understood by every later engine.
API_VERSION = "1.41"


class EngineUnreachable(DockerUnreachable, PreflightError):
    """An engine did not answer (refused, timed out, TLS refused, ssh refused or gone): nothing is known about
    its images or containers. Before a window that is a refusal (a PreflightError); mid-window a lane's
    `engine_unreachable`; to a restore, a lane it could not stop (a DockerUnreachable, never "gone")."""



_clients: dict[str, Any] = {}
_tunnels: dict[str, subprocess.Popen[bytes]] = {}
_lock = threading.Lock()
SSH_CONNECT_WAIT = 20.0


def describe(host: DockerHost | None) -> str:
    return host.url if host else default_engine()


is_local = engine_is_local  # the contract's fact about an engine, named as the runtimes read it


def _path(text: str | None) -> str | None:
    if text is None:
        return None
    path = Path(text).expanduser()
    if not path.is_absolute():
        raise PreflightError(f"docker TLS file {text!r} must be an absolute (or ~/) path")
    if problem := _not_a_file(path):
        raise PreflightError(f"docker TLS file {path} {problem}")
    return str(path)


def _not_a_file(path: Path) -> str | None:
    """None when ``path`` is a regular file another program (docker's TLS, ssh) can read; else what it is,
    in words ("not found", "is a FIFO (named pipe), not a regular file", "path is a symlink loop")."""
    try:
        with open_regular(path):
            return None
    except UnreadableFile as exc:
        return "not found" if exc.reason.startswith("no such") else f"is unusable: {exc.reason}"


def client_kwargs(host: DockerHost) -> dict[str, Any]:
    """Arguments for ``docker.DockerClient`` (exposed so tests can check what a remote client gets). An
    ssh:// engine is reached through its tunnel's local socket, opened here."""
    import docker.tls

    kwargs: dict[str, Any] = {"base_url": host.url, "version": API_VERSION, "timeout": 60}
    if host.url.startswith("ssh://"):
        kwargs["base_url"] = "unix://" + _tunnel(host)
    if host.tls is not None:  # tcp:// only: the schema refuses it elsewhere
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

    if host is None and os.environ.get("DOCKER_HOST", "").startswith("ssh://"):
        host = DockerHost(url=os.environ["DOCKER_HOST"])  # the same batch-mode tunnel as a contract's ssh://
    key = host.model_dump_json() if host else "<env>"
    with _lock:
        tunnel = _tunnels.get(key)
        if tunnel is not None and tunnel.poll() is not None:  # the link dropped: a new tunnel, a new client
            _clients.pop(key, None)
        if key not in _clients:
            try:
                if host is None:
                    _clients[key] = docker.from_env(version=API_VERSION, timeout=60)
                else:
                    _clients[key] = docker.DockerClient(**client_kwargs(host))
                    if host.tls is not None:
                        # requests lets REQUESTS_CA_BUNDLE (set on many machines) override the session's own
                        # CA, so the contract's ca_cert would silently not be the one checked
                        _clients[key].api.trust_env = False
            except docker.errors.DockerException as exc:
                raise EngineUnreachable(f"docker engine {describe(host)}: {exc}") from exc
            _clients[key].campaign_engine = describe(host)  # the name errors give it (dockererrors)
        return _clients[key]


def ssh_command(host: DockerHost, local_socket: str) -> list[str]:
    """The ssh line that forwards the box's engine socket to ``local_socket``: batch mode (no prompt), a
    forward that fails is an exit, a dead link is noticed within 30 s."""
    parts = urlsplit(host.url)
    if not parts.hostname:
        raise PreflightError(f"docker host {host.url}: no box named in the URL")
    command = ["ssh", "-N", "-o", "BatchMode=yes", "-o", "ExitOnForwardFailure=yes", "-o", "ConnectTimeout=10",
               "-o", "ControlMaster=no", "-o", "ControlPath=none",
               "-o", "ServerAliveInterval=10", "-o", "ServerAliveCountMax=3", "-o", "StreamLocalBindUnlink=yes"]
    if parts.port:
        command += ["-p", str(parts.port)]
    if parts.username:
        command += ["-l", parts.username]
    if host.ssh is not None and host.ssh.identity_file:
        command += ["-i", _ssh_path(host, host.ssh.identity_file), "-o", "IdentitiesOnly=yes"]
    if host.ssh is not None and host.ssh.known_hosts:
        command += ["-o", f"UserKnownHostsFile={_ssh_path(host, host.ssh.known_hosts)}",
                    "-o", "StrictHostKeyChecking=yes"]
    return [*command, "-L", f"{local_socket}:{host.socket}", "--", parts.hostname]


def _ssh_path(host: DockerHost, text: str) -> str:
    path = Path(text).expanduser()
    if not path.is_absolute():
        raise PreflightError(f"docker host {host.url}: ssh file {text} not found (give an absolute or ~/ path)")
    if problem := _not_a_file(path):
        raise PreflightError(f"docker host {host.url}: ssh file {path} {problem}")
    return str(path)


try:  # loaded once here: a forked child of a threaded runner must not load libraries
    _LIBC: Any = ctypes.CDLL("libc.so.6", use_errno=True)
except OSError:
    _LIBC = None


def _die_with_parent() -> None:
    # a runner killed with SIGKILL must not leave its tunnels behind holding the box's engine open (the
    # signal comes when the thread that started ssh ends; client_for then finds it dead and starts another)
    if _LIBC is not None:
        _LIBC.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _tunnel(host: DockerHost) -> str:
    """The local socket of a live tunnel to ``host``'s engine, started if needed. Called under ``_lock``."""
    key = host.model_dump_json()
    if shutil.which("ssh") is None:
        raise PreflightError(f"docker engine {host.url}: no ssh client on this machine (install openssh-client)")
    folder = Path(tempfile.gettempdir()) / f"campaign-ssh-{os.getuid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    for old in folder.glob("*.sock"):  # sockets of runners that were killed (their pid is the name's tail)
        pid = old.stem.rsplit("-", 1)[-1]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            old.unlink(missing_ok=True)
    local = str(folder / f"{hashlib.sha256(key.encode()).hexdigest()[:16]}-{os.getpid()}.sock")
    known = _tunnels.get(key)
    if known is not None and known.poll() is None and os.path.exists(local):
        return local
    if os.path.exists(local):
        os.unlink(local)
    proc = subprocess.Popen(ssh_command(host, local), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, preexec_fn=_die_with_parent)
    deadline = time.monotonic() + SSH_CONNECT_WAIT
    while time.monotonic() < deadline and proc.poll() is None and not os.path.exists(local):
        time.sleep(0.05)
    if proc.poll() is not None or not os.path.exists(local):
        if proc.poll() is None:
            proc.kill()
        said = (proc.communicate(timeout=5)[1] or b"").decode(errors="replace")
        lines = [line.strip() for line in said.splitlines() if line.strip() and not line.startswith("Warning:")]
        why = lines[-1] if lines else f"no tunnel within {SSH_CONNECT_WAIT:g}s"
        raise EngineUnreachable(f"docker engine {host.url}: ssh failed: {why}")
    _tunnels[key] = proc
    atexit.register(_close, proc, local)
    return local


def _close(proc: subprocess.Popen[bytes], local: str) -> None:
    if proc.poll() is None:
        proc.terminate()
    try:
        os.unlink(local)
    except OSError:
        pass


def engine_identity(host: DockerHost | None) -> dict[str, str]:
    """Which engine a URL reaches: two URLs (TLS and ssh, say) can reach one box, and two windows on one box
    would measure each other. The engine's id, name and data root together tell engines apart (a cloned
    VM image can share the id)."""
    client = client_for(host)
    try:
        with docker_errors("asking who it is", describe(host)):
            info = client.info()
    except (DockerUnreachable, DockerTLSError) as exc:  # before a window: a refusal, the box named
        raise EngineUnreachable(f"docker engine {describe(host)} unreachable: {why(exc.__cause__ or exc)}") from exc
    except DockerError as exc:
        raise PreflightError(str(exc)) from exc
    return {"id": str(info.get("ID") or ""), "name": str(info.get("Name") or ""),
            "root": str(info.get("DockerRootDir") or ""), "url": describe(host)}
