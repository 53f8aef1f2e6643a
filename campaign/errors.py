"""The one exception tree of campaign.

Every error the tool raises on purpose is a ``CampaignError``. Lower-level errors (OSError, httpx,
docker, yaml) are wrapped with ``raise ... from exc`` so the CLI can print one line and pick the exit
code from the class: 2 for input the user must fix, 1 for a run that failed.

    CampaignError
    +-- InputError            bad input the user must fix (exit 2)
    |   +-- ContractError     a contract or freeze record: names file, line and field
    |   +-- FrozenChanged     contract or referenced file changed after freezing
    |   +-- AxisError         a candidate's computed difference is not its declared axis
    |   +-- KeyMaterialError  missing, unreadable or too-open signing key
    +-- RunError              a run that could not complete (exit 1)
    |   +-- PreflightError    refused before anything was stopped or started
    |   +-- LaunchError       a lane did not come up (classified; INCONCLUSIVE, not a finding)
    |   +-- EngineError       an engine answered wrongly or not at all
    |   |   +-- CapabilityError   the engine (or its adapter) cannot do what a gate asks
    |   |   +-- ScoreError        a scoring response cannot be read as the positions asked for
    |   +-- DockerError       a Docker engine call failed; names the engine and what was being done
    |       +-- DockerNotFound     the engine answered: no such container or image (the one "gone")
    |       +-- DockerUnreachable  no answer: refused, reset, no socket, timed out, ssh tunnel down
    |       +-- DockerTLSError     the TLS handshake failed: certificate, CA or client certificate refused
    |       +-- DockerRefused      the engine answered and said no: a conflict, any other 4xx or 5xx
    +-- VerifyError           a bundle failed verification (exit 1)
"""

from __future__ import annotations

from campaign.terminal import shown

__all__ = [
    "AxisError",
    "CampaignError",
    "CapabilityError",
    "ContractError",
    "DockerError",
    "DockerNotFound",
    "DockerRefused",
    "DockerTLSError",
    "DockerUnreachable",
    "EngineError",
    "FrozenChanged",
    "InputError",
    "KeyMaterialError",
    "LaunchError",
    "PreflightError",
    "RunError",
    "ScoreError",
    "VerifyError",
]


class CampaignError(Exception):
    """Its text is one line whatever it quotes: a key, a path or a file name from an input may hold a
    newline, an escape sequence or a bidi override, shown as visible escapes wherever the error is printed,
    logged or recorded (``terminal.shown``, idempotent)."""

    exit_code = 1

    def __str__(self) -> str:
        return shown(super().__str__())


class InputError(CampaignError):
    exit_code = 2


class ContractError(InputError):
    """An error located in a file: ``file:line: field: message``."""

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None,
                 field: str | None = None) -> None:
        self.file, self.line, self.field, self.message = file, line, field, message
        where = file or "<contract>"
        if line is not None:
            where += f":{line}"
        super().__init__(f"{where}: {field}: {message}" if field else f"{where}: {message}")


class FrozenChanged(InputError):
    pass


class AxisError(InputError):
    pass


class KeyMaterialError(InputError):
    pass


class RunError(CampaignError):
    pass


class PreflightError(RunError):
    pass


class LaunchError(RunError):
    """A lane failed to launch; ``cause`` is a short classification, e.g. ``readiness_timeout``."""

    def __init__(self, message: str, *, cause: str = "unknown", log_tail: str = "") -> None:
        self.cause, self.log_tail = cause, log_tail
        super().__init__(message)


class EngineError(RunError):
    pass


class CapabilityError(EngineError):
    pass


class ScoreError(EngineError):
    pass


class DockerError(RunError):
    """A Docker engine call that did not do what was asked: ``engine`` is where (DOCKER_HOST or the box's
    URL), ``status`` the engine's HTTP status when it answered (None when it did not)."""

    def __init__(self, message: str, *, engine: str = "", status: int | None = None) -> None:
        self.engine, self.status = engine, status
        super().__init__(message)


class DockerNotFound(DockerError):
    pass


class DockerUnreachable(DockerError):
    pass


class DockerTLSError(DockerError):
    pass


class DockerRefused(DockerError):
    pass


class VerifyError(CampaignError):
    pass
