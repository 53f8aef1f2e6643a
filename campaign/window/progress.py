"""What a window shows while it runs: on a terminal, one live line (step done/total, lane, gate, elapsed,
about how long is left) and only the lines worth reading; elsewhere (a log file, CI, `runner.log`) every
journal line as plain text, each boot and gate line ending with its [done/total] and the estimate. The
daily's return is said as it happens ("daily restored and proved in 1.1 s").

And what it shows when it ends (``outcome_lines``), what a person reads first in the morning: one line for
the daily, one per candidate (its decision, the figure it rests on with its CI and boot pairs, and the cause
to act on first), then any lane that did not run, the warnings, and the bundle. The decision and its figure
are the report's (``receipts/decision.py`` over the headlines each gate result carries): one wording.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from campaign.errors import CampaignError
from campaign.fsutil import load_json_strict
from campaign.receipts.decision import PROMOTABLE, deciding, decisions, headline, suspicion
from campaign.terminal import shown, styled
from campaign.window.takedown import NEVER_STOPPED

__all__ = ["WindowProgress", "daily_words", "outcome_lines"]

# On a terminal these are printed above the live line; the rest only move it.
_WORTH_A_LINE = {("done", "boot"), ("failed", "boot"), ("done", "incumbent.stop"), ("done", "incumbent.restore"),
                 ("failed", "incumbent.restore"), ("done", "judge"), ("done", "end"), ("done", "resume"),
                 ("failed", "gate")}


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 60}:{seconds % 60:02d}"


class WindowProgress:
    """Callable with a plain line (the window's own messages); ``event`` takes journal records."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.live = console.is_terminal
        self.total: int | None = None
        self.done = 0
        self.started = time.monotonic()
        self._progress: Progress | None = None
        self._task: Any = None

    def __call__(self, line: str) -> None:
        self.console.print(shown(line), highlight=False, markup=False, emoji=False)

    def _estimate(self) -> str:
        elapsed = time.monotonic() - self.started
        if not self.total:
            return f"{_duration(elapsed)} elapsed"
        left = (elapsed / self.done * (self.total - self.done)) if self.done else None
        about = f", about {max(1, round(left / 60))} min left" if left is not None and self.done < self.total else ""
        return f"{_duration(elapsed)} elapsed{about}"

    def event(self, event: str, step: str, fields: dict[str, Any], line: str) -> None:
        if step == "plan" and event == "done":
            self.total = int(fields.get("steps") or 0) or None
            if self.live and self.total:
                # a lane's or gate's name is data: never read as markup
                self._progress = Progress(TextColumn("{task.description}", markup=False), BarColumn(),
                                          MofNCompleteColumn(), TimeElapsedColumn(),
                                          TextColumn("{task.fields[left]}", markup=False),
                                          console=self.console, transient=True)
                self._task = self._progress.add_task("window", total=self.total, left="")
                self._progress.start()
            return
        counted = event in ("done", "failed") and step in ("boot", "gate")
        if counted:
            self.done += 1
        if self._progress is not None:
            what = shown(f"{fields.get('lane', '')} {fields.get('gate', step)}".strip())
            left = self._estimate().partition(", ")[2]
            self._progress.update(self._task, completed=min(self.done, self.total or 0),
                                  description=f"{what[:40]:40}", left=left)
            if (event, step) in _WORTH_A_LINE:
                self._progress.console.print(shown(line), highlight=False, markup=False, emoji=False)
            if step == "end":
                self._progress.stop()
            return
        if counted and self.total:
            line = f"{line} [{self.done}/{self.total}, {self._estimate()}]"
        self.console.print(shown(line), highlight=False, markup=False, emoji=False)


# What a reason may take of a console line; the report and SUMMARY.md hold it whole.
SHOWN_REASON_CHARS = 200
_COLOURS = {"PROMOTABLE": "green", "REFUSED": "red", "INCONCLUSIVE": "yellow"}


def daily_words(record: dict[str, Any] | None) -> str | None:
    """The daily's restore as a person reads it, from the restore's record (the journal's, or the bundle's
    incumbent/restore.json): the time from the restore's start to its proof completion. None: no record."""
    if not isinstance(record, dict):
        return None
    if record.get("action") == NEVER_STOPPED:
        return "daily never stopped: the window ended at its screens"
    proof = record.get("proof")
    if record.get("event") != "done" or not isinstance(proof, dict):
        error = record.get("error") or "no proof recorded"
        return f"daily NOT proved back ({error}): check it now (campaign daily show)"
    began, proved = record.get("t"), proof.get("proved_at")
    took = f" in {proved - began:.1f} s" if isinstance(began, (int, float)) and isinstance(proved, (int, float)) else ""
    if record.get("action") == "already serving":
        return f"daily serving (already back when the runner came to restore it) and proved{took}"
    return f"daily restored and proved{took}"


def _daily_line(summary: dict[str, Any], bundle: Path) -> Text | None:
    restore = summary.get("restore")
    if not isinstance(restore, dict):
        return None
    if not restore.get("incumbent"):
        return styled("no daily declared: nothing was stopped")
    if restore.get("proved") is False:
        return styled(("daily NOT proved back", "bold red"), f" ({restore.get('error') or 'no proof'}): check it "
                                                             "now (campaign daily show)")
    try:  # the record holds when the restore began and when its proof completed; SUMMARY.json only that it did
        record = load_json_strict(bundle / "incumbent" / "restore.json", what="restore record")
    except CampaignError:
        record = {"event": "done", "action": restore.get("action"), "proof": {}}
    words = daily_words(record) or ""
    return styled((words, "green" if restore.get("proved") else "yellow"))


def _gate_results(bundle: Path) -> list[dict[str, Any]]:
    """The bundle's gate results with their presentation, as the report reads them; none when it cannot
    (a window that ended before judging): the decisions are then shown without their figures."""
    from campaign.window.report import load_report_data  # the gates' own builders, for a result of an older shape

    try:
        return list(load_report_data(bundle)["gates"])
    except CampaignError:
        return []


def outcome_lines(summary: dict[str, Any], bundle: Path, *, explain: bool = False) -> list[Text]:
    """What `campaign run` and `campaign resume` print at the end; every text from the bundle shown safely.
    A candidate's line is its deciding gate's headline; ``explain`` (``--explain``) adds that gate's full
    reasoning under it, as the report's folded details hold it."""
    lines = [line for line in [_daily_line(summary, bundle)] if line is not None]
    if suspect := suspicion(summary):  # first: it qualifies every line after it
        lines.append(styled(("A/A FALSE DECISION:", "bold red"), f" {suspect}: this window's decisions are suspect"))
    for decision in decisions(summary, _gate_results(bundle)):
        promotable = decision.decision == PROMOTABLE
        # a gate's headline; a promotable candidate's reason, then each required gate's headline on a line of
        # its own; any other decision of no gate (no daily declared, ...) the figures it rests on
        evidence = (deciding(decision.gate, decision.reason) if decision.gate or promotable else
                    decision.figure or deciding(None, decision.reason, SHOWN_REASON_CHARS))
        # a gate reported, not required, that did not pass: shown, never deciding
        also = f"; also: {'; '.join(decision.also)}" if decision.also else ""
        lines.append(styled(f"{decision.candidate}: ", (decision.decision, _COLOURS.get(decision.decision, "bold")),
                            f": {evidence}; next: {decision.next_step}{also}"))
        entry = (summary.get("candidates") or {}).get(decision.candidate) or {}
        gates = entry.get("gates") or {}
        lines += [styled(f"  {gate}: {headline(gates[gate])}") for gate in entry.get("promotion_gates") or []
                  if promotable and isinstance(gates.get(gate), dict)]
        lines += [styled(f"  - {reason}") for reason in decision.details] if explain else []
    for name, lane in (summary.get("lanes") or {}).items():
        if lane.get("status") != "ran":
            lines.append(styled(f"lane {name}: {lane.get('status')} ({lane.get('cause')}): {lane.get('message')}"))
    for warning in summary.get("warnings") or []:
        lines.append(styled(("WARNING:", "bold red"), " ", str(warning)))
    lines.append(styled(f"bundle: {bundle}"))
    return lines
