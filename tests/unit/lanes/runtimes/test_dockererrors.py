"""The one boundary for Docker errors (``lanes/runtimes/dockererrors.py``): what docker-py, requests,
urllib3 and ssl raise comes out as one ``DockerError`` kind, one line naming the engine and the step.

The unreachable, timed-out, missing-socket and TLS cases are real: docker-py's own client is pointed at a
closed port, a socket file that does not exist, a listener that never answers, and a plain-TCP listener
spoken to with TLS, all on this machine. The engine's answers (404, 409, 500, the "HTTP request to an
HTTPS server" 400) are docker-py's real exception classes built as docker-py builds them, around a
requests ``Response`` made here: no engine is needed to say no.
"""

from __future__ import annotations

import socket
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import docker
import docker.errors
import pytest
import requests

from campaign.errors import (
    CampaignError,
    DockerError,
    DockerNotFound,
    DockerRefused,
    DockerTLSError,
    DockerUnreachable,
    InputError,
    RunError,
)
from campaign.lanes.runtimes.dockererrors import classify, docker_errors

REPO = Path(__file__).resolve().parents[4]


def _answer(status: int, message: str) -> requests.Response:
    response = requests.Response()
    response.status_code, response.url, response.reason = status, "http+docker://localhost/v1.41/x", "x"
    response._content = ('{"message": "%s"}' % message).encode()
    return response


def _api_error(status: int, message: str) -> docker.errors.APIError:
    """What docker-py raises for an engine's error answer (its own factory, on a real HTTPError)."""
    response = _answer(status, message)
    try:
        docker.errors.create_api_error_from_http_exception(requests.exceptions.HTTPError(response=response))
    except docker.errors.APIError as exc:
        return exc
    raise AssertionError("docker-py raised nothing")


def _raised(call, engine: str = "tcp://box:2376") -> DockerError:  # noqa: ANN001 - any callable
    with pytest.raises(DockerError) as caught, docker_errors("removing container abc", engine):
        call()
    return caught.value


@pytest.fixture
def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A listener that accepts and never says a word (an engine wedged, a firewall that swallows)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    yield int(server.getsockname()[1])
    server.close()


@pytest.fixture
def plain_port() -> Iterator[int]:
    """A listener that answers in plain text, whatever it is sent: TLS spoken to it fails its handshake."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(10)

    def serve() -> None:
        try:
            while True:
                conn, _ = server.accept()
                with conn:
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nno")
        except OSError:
            return

    threading.Thread(target=serve, daemon=True).start()
    yield int(server.getsockname()[1])
    server.close()


def _client(url: str, **kwargs: object) -> docker.DockerClient:
    return docker.DockerClient(base_url=url, version="1.41", **kwargs)


def test_a_closed_port_is_unreachable_never_not_found(closed_port: int) -> None:
    error = _raised(_client(f"tcp://127.0.0.1:{closed_port}", timeout=5).info, f"tcp://127.0.0.1:{closed_port}")
    assert type(error) is DockerUnreachable and isinstance(error.__cause__, requests.exceptions.ConnectionError)
    assert str(error) == (f"docker engine tcp://127.0.0.1:{closed_port}: removing container abc: "
                          "connection refused (no engine listening there)")
    assert error.engine == f"tcp://127.0.0.1:{closed_port}" and error.status is None


def test_a_missing_socket_is_unreachable(tmp_path: Path) -> None:
    error = _raised(_client(f"unix://{tmp_path}/docker.sock", timeout=5).info)
    assert type(error) is DockerUnreachable and "no engine socket there" in str(error)


def test_an_engine_that_never_answers_is_unreachable(silent_port: int) -> None:
    error = _raised(_client(f"tcp://127.0.0.1:{silent_port}", timeout=0.5).info)
    assert type(error) is DockerUnreachable and "timed out" in str(error)
    assert isinstance(error.__cause__, requests.exceptions.ReadTimeout)


def test_a_failed_tls_handshake_is_a_tls_error(plain_port: int) -> None:
    tls = docker.tls.TLSConfig(verify=False)
    error = _raised(_client(f"tcp://127.0.0.1:{plain_port}", tls=tls, timeout=5).info)
    assert type(error) is DockerTLSError and isinstance(error.__cause__, requests.exceptions.SSLError)
    assert str(error).startswith("docker engine tcp://box:2376: removing container abc: ")


def test_ssl_errors_raised_as_they_are_are_tls_errors() -> None:
    context = ssl.create_default_context()
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        with socket.create_connection(server.getsockname()) as raw:
            conn, _ = server.accept()
            with conn:
                conn.sendall(b"not a TLS record at all\r\n\r\n")
                with pytest.raises(ssl.SSLError) as caught:
                    context.wrap_socket(raw, server_hostname="box")
    assert classify(caught.value) is DockerTLSError


def test_the_engine_saying_no_such_container_is_the_only_not_found() -> None:
    error = _raised(lambda: (_ for _ in ()).throw(_api_error(404, "No such container: abc")))
    assert type(error) is DockerNotFound and error.status == 404
    assert str(error) == "docker engine tcp://box:2376: removing container abc: 404 No such container: abc"
    image = _api_error(404, "No such image: sha256:0")
    assert isinstance(image, docker.errors.ImageNotFound) and classify(image) is DockerNotFound


@pytest.mark.parametrize(("status", "message", "kind"), [
    (409, "Conflict. The container name \\\"/x\\\" is already in use", DockerRefused),
    (500, "driver failed programming external connectivity", DockerRefused),
    (400, "Client sent an HTTP request to an HTTPS server.", DockerTLSError),
])
def test_an_engine_that_answered_and_said_no(status: int, message: str, kind: type[DockerError]) -> None:
    error = _raised(lambda: (_ for _ in ()).throw(_api_error(status, message)))
    assert type(error) is kind and error.status == status and "\n" not in str(error)


def test_a_connection_dropped_mid_stream_is_unreachable() -> None:
    assert classify(ConnectionResetError(104, "Connection reset by peer")) is DockerUnreachable
    assert classify(TimeoutError("timed out")) is DockerUnreachable
    import urllib3.exceptions

    assert classify(urllib3.exceptions.ProtocolError("Connection broken", ConnectionResetError())) \
        is DockerUnreachable


def test_what_is_not_an_engine_error_passes_as_it_was() -> None:
    with pytest.raises(ValueError, match="a bug"), docker_errors("x"):
        raise ValueError("a bug")
    with pytest.raises(FileNotFoundError), docker_errors("x"):
        open("/nonexistent/watchdog.py", "rb")  # a local file is not the engine
    inner = InputError("a nested block's, or client_for's, own refusal")
    with pytest.raises(InputError) as caught, docker_errors("x"):
        raise inner
    assert caught.value is inner


def test_the_kinds_sit_under_run_error_with_its_exit_code() -> None:
    for kind in (DockerNotFound, DockerUnreachable, DockerTLSError, DockerRefused):
        assert issubclass(kind, DockerError) and issubclass(kind, RunError) and kind("x").exit_code == 1
    from campaign.lanes.runtimes.dockerhost import EngineUnreachable

    assert issubclass(EngineUnreachable, DockerUnreachable)  # ssh tunnel down, client refused: never "gone"
    assert isinstance(DockerUnreachable("a\nb"), CampaignError) and str(DockerUnreachable("a\nb")) == "a\\nb"


def test_the_engine_is_named_from_docker_host_when_none_is_given(monkeypatch: pytest.MonkeyPatch,
                                                                  closed_port: int) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"tcp://127.0.0.1:{closed_port}")
    with pytest.raises(DockerUnreachable, match=rf"^docker engine tcp://127.0.0.1:{closed_port}: listing: "), \
            docker_errors("listing"):
        docker.from_env(version="1.41", timeout=5).containers.list()


def test_the_boundary_imports_no_docker_sdk_until_an_error_is_mapped() -> None:
    """The failsafe's standalone processes (watchdog, restore_now) may import it: it loads no SDK."""
    code = ("import sys, campaign.lanes.runtimes.dockererrors\n"
            "print(sorted(m for m in ('docker', 'requests', 'urllib3') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert done.stdout.strip() == "[]"
