"""What earlier windows of a contract measured, read from their journals: each lane's boot and stop, each
gate's run per visit, the daily's take-down and restore, and the time around them. ``campaign plan`` sizes
its estimate by these, and the window sizes its restore reserve by the last restores.

A bundle belongs to a contract's family when its journal's start record names the contract (any version):
its window id says so first (``<stamp>-<contract>-v<version>-<digest>``), so only those journals are read."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from campaign.errors import InputError
from campaign.fsutil import UnreadableFile, read_jsonl

__all__ = ["HISTORY_BUNDLES", "Measured", "family_bundles", "measured", "visit_of"]

# The newest bundles of a family read for a plan: the newest says what the window takes now, a few more
# give the restores a reserve is sized by. Each journal is read bounded.
HISTORY_BUNDLES = 5


@dataclass
class Measured:
    """One earlier window's timings, in seconds. A gate's key is (lane, rerun, gate): a lane's first boot
    and its later boots (a control's re-boot, a pair) do different work."""

    bundle: str
    boots: dict[str, float] = field(default_factory=dict)
    stops: dict[str, float] = field(default_factory=dict)
    gates: dict[tuple[str, bool, str], float] = field(default_factory=dict)
    requests: dict[str, dict[str, int]] = field(default_factory=dict)  # gate -> visit -> as that window planned
    takedown: float | None = None
    restore: float | None = None  # the restore's start to the daily's proof
    before: float | None = None  # start to the take-down (or the first boot), screens not counted
    after: float | None = None  # the daily's proof (or the last stop) to the end: disarm, judge, sign
    total: float | None = None  # start to end of a window that completed


def visit_of(key: str) -> tuple[str, bool]:
    """(lane, rerun) of a journal's visit key: ``base@rerun2`` is base's later boot."""
    lane, _, rest = key.partition("@")
    return lane, bool(rest)


def family_bundles(out_dir: Path, contract: str, *, exclude: Path | None = None,
                   limit: int = HISTORY_BUNDLES) -> list[Path]:
    """The newest bundles under ``out_dir`` whose journal starts with ``contract``, newest first."""
    if not out_dir.is_dir():
        return []
    named = sorted((p for p in out_dir.iterdir() if f"-{contract}-v" in p.name and p.is_dir()
                    and (p / "journal.jsonl").is_file()), key=lambda p: p.name, reverse=True)
    found: list[Path] = []
    for bundle in named:
        if exclude is not None and bundle.resolve() == exclude.resolve():
            continue
        records = _records(bundle)
        if records and records[0].get("step") == "start" and records[0].get("contract") == contract:
            found.append(bundle)
        if len(found) >= limit:
            break
    return found


def _records(bundle: Path) -> list[dict[str, Any]]:
    try:
        return read_jsonl(bundle / "journal.jsonl", what="journal")
    except (InputError, UnreadableFile, ValueError, OSError):  # a journal torn or replaced: no evidence, skipped
        return []


def measured(bundle: Path) -> Measured:
    """The timings one bundle's journal holds (a resumed window: its latest run of each step)."""
    records = _records(bundle)
    found = Measured(bundle=str(bundle))
    began: dict[tuple[Any, ...], float] = {}
    screens, anchor = 0.0, _anchor(records)
    for record in records:
        step, event, t = record.get("step"), record.get("event"), float(record.get("t") or 0.0)
        if step == "plan" and isinstance(record.get("requests"), dict):
            found.requests = record["requests"]
        elif step == "incumbent.restore" and event == "done" and isinstance(record.get("proof"), dict):
            found.restore = float(record["proof"].get("proved_at") or t) - t
        if step not in ("boot", "gate", "stop") or not record.get("lane"):
            continue
        key = (step, str(record["lane"]), record.get("gate"))
        if event == "intent":
            began[key] = t
        elif event == "done" and key in began:
            took = t - began.pop(key)
            lane, rerun = visit_of(str(record["lane"]))
            if step == "boot":
                found.boots[lane] = took
            elif step == "stop":
                found.stops[lane] = took
            else:
                found.gates[(lane, rerun, str(record.get("gate")))] = took
                screens += took if anchor is None or t <= anchor else 0.0  # a screen runs before the live part
    _phases(found, records, screens)
    return found


def _anchor(records: list[dict[str, Any]]) -> float | None:
    """When the live part began: the daily's snapshot, else the first boot."""
    for record in records:
        if record.get("step") in ("incumbent.snapshot", "boot") and record.get("event") == "intent":
            return float(record.get("t") or 0.0)
    return None


def _phases(found: Measured, records: list[dict[str, Any]], screens: float) -> None:
    """The take-down, and the time before and after the visits."""
    first = {(r.get("step"), r.get("event")): float(r.get("t") or 0.0) for r in reversed(records)}
    last = {(r.get("step"), r.get("event")): float(r.get("t") or 0.0) for r in records}
    start, end, anchor = first.get(("start", "done")), last.get(("end", "done")), _anchor(records)
    if ("incumbent.snapshot", "intent") in first and ("incumbent.stop", "done") in first:
        found.takedown = first[("incumbent.stop", "done")] - first[("incumbent.snapshot", "intent")]
    if start is not None and anchor is not None:
        found.before = max(anchor - start - screens, 0.0)
    complete = any(r.get("step") == "end" and r.get("status") == "complete" for r in records)
    if start is not None and end is not None and complete:
        found.total = end - start
        restored = [float(r["proof"].get("proved_at") or 0.0) for r in records
                    if r.get("step") == "incumbent.restore" and isinstance(r.get("proof"), dict)]
        closed = restored[-1] if restored else last.get(("stop", "done"))
        if closed is not None:
            found.after = max(end - closed, 0.0)
