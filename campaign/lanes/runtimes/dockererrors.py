"""The one boundary for Docker errors: ``with docker_errors("removing container abc", engine=...)``.

docker-py raises its own errors when the engine answers (``NotFound``, ``APIError``), requests' and
urllib3's when it does not (refused, reset, timed out, TLS), and ``ssl``'s or the socket's from a stream
already open. Each is raised again here as one kind of ``campaign.errors.DockerError``, ``from`` the
original, with one line naming the engine and what was being done:

    DockerNotFound     the engine answered: no such container or image. The only kind that means "gone".
    DockerUnreachable  no answer: connection refused or reset, no socket, timed out, the ssh tunnel down.
    DockerTLSError     the TLS handshake failed (certificate not signed by the CA, client certificate
                       refused), or a plain-HTTP request reached an engine that wants TLS.
    DockerRefused      the engine answered and said no: a name conflict (409), any other 4xx or 5xx.

Anything else (a bug, a local file) passes through unchanged, and so does a ``CampaignError`` (a nested
block, or ``client_for``'s own refusals). Every docker-py call of the runtimes, the container daily, the
engine failsafe and promotion's container code runs inside such a block, directly or through a runtime
function; callers catch the kinds, never ``Exception``.

This module imports only ``campaign.errors`` at load time (docker, requests, urllib3 and ssl are looked
up when an error is being mapped): the failsafe's standalone processes may import it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from campaign.errors import CampaignError, DockerError, DockerNotFound, DockerRefused, DockerTLSError, DockerUnreachable

__all__ = ["DEFAULT_ENGINE", "classify", "default_engine", "docker_errors", "why"]

DEFAULT_ENGINE = "unix:///var/run/docker.sock (default)"


def default_engine() -> str:
    """The engine a client without a contract's host reaches: DOCKER_HOST, else the local socket."""
    return os.environ.get("DOCKER_HOST") or DEFAULT_ENGINE


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _tls_words(lowered: str) -> str | None:
    if "certificate verify failed" in lowered or "certificate_verify_failed" in lowered:
        return "its TLS certificate is not signed by the given ca_cert (or names another host)"
    if "unknown ca" in lowered or "bad certificate" in lowered or "certificate required" in lowered:
        return "it refused our TLS client certificate"
    if "http request to an https server" in lowered:
        return "the engine wants TLS: give the host's `tls` (ca_cert, client_cert, client_key)"
    return None


def why(exc: BaseException) -> str:
    """One line for an engine call that failed: what a person can act on, not a stack of wrappers."""
    text = _one_line(str(exc))
    lowered = text.lower()
    if tls := _tls_words(lowered):
        return tls
    explanation = getattr(exc, "explanation", None)
    if explanation and getattr(exc, "response", None) is not None:  # the engine answered: its own words
        status = getattr(exc, "status_code", None)
        return f"{status} {_one_line(str(explanation))[:200]}" if status else _one_line(str(explanation))[:200]
    if "connection refused" in lowered:
        return "connection refused (no engine listening there)"
    if "timed out" in lowered or "timeout" in lowered:
        return "no answer (timed out)"
    if "no route to host" in lowered or "network is unreachable" in lowered:
        return "no route to that box"
    if "name or service not known" in lowered or "failed to resolve" in lowered:
        return "unknown host name"
    if "no such file or directory" in lowered or "filenotfounderror" in lowered:
        return "no engine socket there"
    if "connection reset" in lowered or "connection aborted" in lowered or "remote end closed" in lowered:
        return "the connection was dropped (reset)"
    return f"{type(exc).__name__}: {text[:160]}"


def classify(exc: BaseException) -> type[DockerError] | None:
    """The kind ``exc`` is, or None when it is not an engine call's error (a bug, a local file)."""
    import ssl

    import docker.errors
    import requests.exceptions
    import urllib3.exceptions

    if isinstance(exc, docker.errors.NotFound):  # ImageNotFound included
        return DockerNotFound
    if isinstance(exc, docker.errors.APIError):
        if _tls_words(str(exc).lower()):  # 400 "Client sent an HTTP request to an HTTPS server."
            return DockerTLSError
        return DockerRefused
    if isinstance(exc, (docker.errors.TLSParameterError, requests.exceptions.SSLError, ssl.SSLError,
                        urllib3.exceptions.SSLError)):
        return DockerTLSError
    if isinstance(exc, (requests.exceptions.RequestException, urllib3.exceptions.HTTPError, ConnectionError,
                        TimeoutError)):
        # requests' ConnectionError wraps an SSL failure met while connecting: its words tell
        return DockerTLSError if _tls_words(str(exc).lower()) else DockerUnreachable
    if isinstance(exc, docker.errors.DockerException):  # the SDK's own (a bad argument, a context): a failure
        return DockerError
    return None


@contextlib.contextmanager
def docker_errors(what: str, engine: str | None = None) -> Iterator[None]:
    """Run docker-py calls; their errors come out as ``DockerError`` kinds, one line:
    ``docker engine <engine>: <what>: <why>``. ``engine`` is the URL shown (DOCKER_HOST when None)."""
    try:
        yield
    except CampaignError:
        raise
    except Exception as exc:  # classified below: what is not an engine call's error is raised as it was
        kind = classify(exc)
        if kind is None:
            raise
        where = engine or default_engine()
        status = getattr(exc, "status_code", None)
        raise kind(f"docker engine {where}: {what}: {why(exc)}", engine=where,
                   status=status if isinstance(status, int) else None) from exc
