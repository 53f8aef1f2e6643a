"""`campaign status` and `campaign abort`: read a window's state and journal; restore on request."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

from campaign.contracts.load import load_contract
from campaign.daily import incumbent
from campaign.daily.restore import restore
from campaign.daily.state import WindowState, process_start_time, windows_dir
from campaign.errors import CampaignError, InputError
from campaign.fsutil import read_jsonl
from campaign.gates.base import GateContext
from campaign.gates.registry import gate_for

__all__ = ["abort_window", "window_status"]


def _states(window: str | None) -> list[WindowState]:
    if window is not None:
        name = Path(window).name
        if not (windows_dir() / name / "state.json").exists():
            raise InputError(f"no window {name!r} under {windows_dir()}")
        return [WindowState.load(name)]
    # lstat: a state.json that is a dangling link or a loop sorts (and is then refused by its load), never a traceback
    found = windows_dir().glob("*/state.json") if windows_dir().exists() else []
    dirs = sorted(found, key=lambda p: p.lstat().st_mtime)
    # none yet is an answer, not an error: `campaign status` exits 0 with nothing to show (cron, scripts)
    # every window still running or still holding a daily down (one per box), else the newest
    states = [WindowState.load(d.parent.name) for d in dirs]
    live = [s for s in states if s.armed or process_start_time(s.runner_pid) == s.runner_start_time]
    return live or states[-1:]


def _planned(state: WindowState) -> int:
    from campaign.window.schedule import most_steps

    loaded = load_contract(state.contract, check_files=False)
    gates = [gate_for(spec, GateContext(bundle=Path(state.bundle), contract=loaded)) for spec in loaded.contract.gates]
    return most_steps(loaded, gates, boots=False)


def _failsafe_failed(state: WindowState) -> dict[str, Any] | None:
    """The failsafe's final failure to restore the daily (watchdog or systemd timer), if it gave up."""
    failed = state.failsafe_failed
    if failed is None:
        return None
    return {"at": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(failed.at)), "error": failed.error,
            "by": failed.by, "attempts": failed.attempts}


def window_status(window: str | None = None) -> list[dict[str, Any]]:
    rows = []
    for state in _states(window):
        journal = Path(state.bundle) / "journal.jsonl"
        records = read_jsonl(journal) if journal.exists() else []
        last = records[-1] if records else {}
        current: dict[str, Any] = next((r for r in reversed(records) if r.get("event") == "intent"), {})
        done = {(r.get("gate"), r.get("lane")) for r in records if r.get("step") == "gate" and r.get("event") == "done"}
        daily = "none declared"
        if state.incumbent:
            if state.incumbent.get("runtime") == "docker":
                try:
                    up = incumbent.is_serving(state.incumbent)
                except CampaignError as exc:  # an engine that does not answer (a DockerError): "unknown", never
                    # "stopped"; status must not fail
                    up, daily = False, f"unknown ({str(exc)[:160] or type(exc).__name__})"
                else:
                    daily = f"running (container {state.incumbent['container']})" if up else "stopped"
            else:
                pid = incumbent.running_pid(state.incumbent)
                daily = f"running (pid {pid})" if pid else "stopped"
        box_failsafe = _box_failsafe(state)
        if box_failsafe:
            daily = f"{daily}; {box_failsafe}"
        failed = _failsafe_failed(state)
        if failed and not state.restored:  # `campaign status` prints `daily` as is: it must say so
            daily = f"{daily}; failsafe restore FAILED at {failed['at']}: {failed['error']}"
        rows.append({
            "window": state.window, "bundle": state.bundle,
            "phase": f"{last.get('step', 'not started')} {last.get('event', '')}".strip(),
            "lane": current.get("lane"), "gate": current.get("gate"),
            "gates_done": len(done), "gates_planned": _planned(state),
            "runner_pid": state.runner_pid,
            "runner_alive": process_start_time(state.runner_pid) == state.runner_start_time,
            "armed": state.armed,
            "deadline": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(state.deadline_wall))
            if state.deadline_wall else None, "deadline_wall": state.deadline_wall,
            "restored": state.restored, "daily": daily, "failsafe_failed": failed,
            "signed": (Path(state.bundle) / "receipt.dsse.json").exists(),
            "boxes": state.boxes, "failsafe_backend": state.failsafe_backend,
            "failsafe_supervisor": state.failsafe_supervisor,
            **_ended(Path(state.bundle)),
        })
    return rows


def _ended(bundle: Path) -> dict[str, Any]:
    """What an ended window decided, from its SUMMARY.json (the report's own rules): per candidate the
    decision, the deciding gate and its reason; and where its report is (``campaign publish`` writes it
    next to the bundle), or None before it is published. Empty while the window runs or if it left no summary."""
    from campaign.fsutil import UnreadableFile, load_json_strict
    from campaign.receipts.decision import decisions

    report = bundle.parent / f"{bundle.name}.published" / "report.html"
    found: dict[str, Any] = {"decisions": [], "report": str(report) if report.is_file() else None}
    try:
        summary = load_json_strict(bundle / "SUMMARY.json", what="SUMMARY") if (bundle / "SUMMARY.json").is_file() else None
    except UnreadableFile:  # a damaged summary: status says nothing decided rather than failing
        summary = None
    if isinstance(summary, dict):
        found["decisions"] = [{"candidate": d.candidate, "decision": d.decision, "gate": d.gate, "reason": d.reason}
                              for d in decisions(summary)]
    return found


def _box_failsafe(state: WindowState) -> str | None:
    """What the watchdog on the daily's box last said, when the deadline is kept there (the runner may be gone)."""
    if state.failsafe_backend != "engine" or not state.failsafe_container or not state.incumbent:
        return None
    from campaign.failsafe.enginefailsafe import box_report

    return box_report(state)


def abort_window(window: str, *, wait: float = 120.0) -> str:
    state = _states(window)[0]
    if process_start_time(state.runner_pid) == state.runner_start_time:
        os.kill(state.runner_pid, signal.SIGTERM)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and process_start_time(state.runner_pid) == state.runner_start_time:
            time.sleep(0.2)
    state = state.reload()
    if state.incumbent is not None and not state.restored:
        restore(state.window, reason="abort", by="campaign abort")
        if state.failsafe_backend == "engine" and state.armed:  # proven back: the box's watchdog goes
            from campaign.failsafe.failsafe import disarm

            disarm(state)
        return f"window {state.window}: runner gone; daily restored and proved"
    return f"window {state.window}: stopped; daily {'restored' if state.restored else 'was never stopped'}"
