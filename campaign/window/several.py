"""`campaign run A.yaml B.yaml`: one window per contract, all at once, one box each.

Every contract is loaded, checked against its freeze record and pre-flighted before any window starts,
and the boxes they touch must not overlap (two windows on one box would measure each other). Each window
is then an ordinary detached runner: its own process, bundle, state, failsafe and box claim, so one
window's failure never reaches another's box. The command waits for all of them and returns non-zero if
any did not end signed with its daily proven back.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Callable

from campaign.contracts.freeze import check_frozen, default_record_path
from campaign.contracts.load import load_contract
from campaign.daily.state import WindowState, process_start_time
from campaign.errors import CampaignError, InputError, PreflightError
from campaign.fsutil import UnreadableFile, load_json_strict
from campaign.lanes.bootlog import log_tail
from campaign.receipts.decision import exit_code, read_with_current_rule
from campaign.signing import TrustedKeys
from campaign.window.boxes import boxes_of, claim, overlapping
from campaign.window.detach import detach_window
from campaign.window.plan import refuse_unfit
from campaign.window.preflight import preflight

__all__ = ["run_several"]


def run_several(contracts: list[Path], *, out_dir: Path, trusted: TrustedKeys,
                show: Callable[[list[str]], None], every: float = 2.0,
                accept_tool_defaults: bool = False) -> list[dict[str, Any]]:
    """Start a window per contract and wait for all; returns one outcome per window."""
    if len({c.resolve() for c in contracts}) != len(contracts):
        raise InputError("a contract is named twice: one window per contract")
    boxes = {}
    for path in contracts:
        loaded = load_contract(path)
        check_frozen(loaded, default_record_path(loaded.path), trusted, accept_tool_defaults=accept_tool_defaults)
        refuse_unfit(loaded, out_dir)  # a window that cannot fit its deadline stops them all, before any starts
        boxes[str(path)] = boxes_of(loaded)
    clash = overlapping(boxes)
    if clash:
        raise PreflightError(f"two windows on one box would measure each other: {'; '.join(clash)}; nothing started")
    for path in contracts:  # every pre-flight before any window starts: a bad contract stops them all
        try:
            held = claim(f"pre-flight of {path.name}", boxes[str(path)])  # no model hashing on a busy box
            try:
                preflight(load_contract(path))
            finally:
                held.release()
        except CampaignError as exc:
            raise _same_kind(exc)(f"{path}: {exc}; nothing started") from exc
    started: list[tuple[Path, str, Path, int]] = []
    try:
        for path in contracts:
            window, bundle, pid = detach_window(path, out_dir=out_dir, record=None, trusted=trusted,
                                                preflighted=True, accept_tool_defaults=accept_tool_defaults)
            started.append((path, window, bundle, pid))
        show([f"window {window} started for {path} on {', '.join(b.name for b in boxes[str(path)])}"
              for path, window, _, _ in started])
        states = {window: _wait_for_state(window, bundle, pid) for _, window, bundle, pid in started}
    except CampaignError as exc:
        running = ", ".join(window for _, window, _, _ in started) or "none"
        raise _same_kind(exc)(f"{exc} (windows already running: {running}; follow them with `campaign status`)") from exc
    while any(_alive(state) for state in states.values()):
        time.sleep(every)
        states = {window: state.reload() for window, state in states.items()}
    outcomes = []
    for path, window, bundle, _ in started:
        summary_file = bundle / "SUMMARY.json"
        try:
            summary = load_json_strict(summary_file, what="SUMMARY") if summary_file.exists() else {}
        except UnreadableFile:  # read bounded; one window's unreadable summary is that window's "not proven"
            summary = {}
        summary = read_with_current_rule(summary) if isinstance(summary, dict) else {}
        signed = (bundle / "receipt.dsse.json").exists()
        restore = summary.get("restore") or {}
        # True: proven back; None: no daily declared, or never stopped; False: not proven, or no summary at all
        proved = restore.get("proved") if summary else False
        outcomes.append({"contract": str(path), "window": window, "bundle": str(bundle), "signed": signed,
                         "restored": proved, "exit_code": exit_code(summary, signed=signed),
                         "decisions": {name: entry.get("overall") for name, entry in
                                       (summary.get("candidates") or {}).items()}})
    return outcomes


def _same_kind(exc: CampaignError) -> type[CampaignError]:
    return InputError if isinstance(exc, InputError) else PreflightError


def _wait_for_state(window: str, bundle: Path, pid: int) -> WindowState:
    """The window's state once its runner wrote it; a runner that ended before that failed its own
    pre-flight (a box claimed meanwhile, say), and its log's last line says why."""
    while True:
        try:
            return WindowState.load(window)
        except (InputError, OSError):
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
            if process_start_time(pid) is None:
                said = log_tail(bundle / "runner.log").strip().splitlines()  # its last lines, read bounded
                raise PreflightError(f"window {window} did not start: {said[-1] if said else 'no output'}") from None
            time.sleep(0.2)


def _alive(state: WindowState) -> bool:
    return process_start_time(state.runner_pid) == state.runner_start_time
