"""What one window's run carries from step to step (``Window``), what it has to show so far (``Progress``)
and what it gives back (``WindowOutcome``); the id a new window gets; and two habits every step shares:
saying a line, and setting an interrupted file aside.

The steps of a window (``begin``, ``takedown``, ``screening``, ``lanevisit``) import this module; it imports
none of them, only what a window holds: the contract, its state, its signing key, its outcomes."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from campaign.contracts.load import LoadedContract
from campaign.daily.state import WindowState
from campaign.gates.result import GateResult
from campaign.signing import SigningKey
from campaign.window.judge import LaneOutcome

__all__ = ["Progress", "Window", "WindowOutcome", "new_window_id", "say", "set_aside"]


@dataclass
class WindowOutcome:
    bundle: Path
    window_id: str
    verdicts: dict[str, dict[str, str]]  # candidate -> gate -> verdict
    signed: bool
    summary: dict[str, Any]


def new_window_id(loaded: LoadedContract) -> str:
    """A new window's id: when it starts, the contract's name and version, and its canonical digest."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    return f"{stamp}-{loaded.contract.contract}-v{loaded.contract.version}-{loaded.canonical_sha256[:8]}"


@dataclass
class Window:
    loaded: LoadedContract
    record_path: Path
    freeze_record: dict[str, Any]
    bundle: Path
    window_id: str
    key: SigningKey
    state: WindowState
    model_paths: dict[str, str]
    echo: Callable[[str], None] | None = None
    finished_gates: set[tuple[Any, Any]] = field(default_factory=set)
    resumed: bool = False
    escalated: bool = False


@dataclass
class Progress:
    """What the window has to show so far; the ``finally`` of run._execute summarizes whatever it holds."""

    lanes: dict[str, LaneOutcome] = field(default_factory=dict)  # by visit key
    results: list[GateResult] = field(default_factory=list)
    status: str = "interrupted"
    restore_record: dict[str, Any] | None = None


def say(window: Window, line: str) -> None:
    if window.echo:
        window.echo(line)


def set_aside(path: Path) -> None:
    """Keep an interrupted attempt's file in the bundle under a new name; judges read only the final one."""
    n = 1
    while (target := path.with_name(f"{path.stem}.interrupted-{n}{path.suffix}")).exists():
        n += 1
    path.rename(target)
