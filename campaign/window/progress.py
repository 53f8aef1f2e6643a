"""What a window shows while it runs: on a terminal, one live line (step done/total, lane, gate, elapsed,
about how long is left) and only the lines worth reading; elsewhere (a log file, CI, `runner.log`) every
journal line as plain text, each boot and gate line ending with its [done/total] and the estimate."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from campaign.terminal import shown

__all__ = ["WindowProgress"]

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
