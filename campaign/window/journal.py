"""The window's journal: append-only JSONL, an intent record before each step and a result after it,
fsynced per record, so a reader after a crash knows exactly which steps finished."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any, Callable

from campaign.fsutil import JsonlAppender, read_jsonl

__all__ = ["Journal"]


# Fault injection for the crash tests: the runner SIGKILLs itself right after writing record N
# (counted per process), so every step of a window can be tested as a crash point.
_KILL_AFTER = int(os.environ.get("CAMPAIGN_FAULT_KILL_AFTER_RECORD", "0") or 0)
_written = 0


class Journal:
    def __init__(self, path: Path, echo: Callable[[str], None] | None = None) -> None:
        self.path = path
        self.echo = echo
        self._out = JsonlAppender(path)

    def record(self, event: str, step: str, **fields: Any) -> None:
        global _written
        self._out.append({"t": time.time(), "event": event, "step": step, **fields})
        if self.echo:
            where = " ".join(f"{k}={fields[k]}" for k in ("lane", "gate", "backend", "cause", "status") if k in fields)
            line = f"{time.strftime('%H:%M:%S')} {step} {event}{' ' + where if where else ''}"
            observe = getattr(self.echo, "event", None)  # a progress display wants the record, not the line
            if observe is not None:
                observe(event, step, fields, line)
            else:
                self.echo(line)
        _written += 1
        if _KILL_AFTER and _written == _KILL_AFTER:
            os.kill(os.getpid(), signal.SIGKILL)

    def reopen(self) -> None:
        self._out = JsonlAppender(self.path)

    def intent(self, step: str, **fields: Any) -> None:
        self.record("intent", step, **fields)

    def done(self, step: str, **fields: Any) -> None:
        self.record("done", step, **fields)

    def failed(self, step: str, **fields: Any) -> None:
        self.record("failed", step, **fields)

    def close(self) -> None:
        self._out.close()

    def finished_steps(self) -> set[str]:
        return {r["step"] for r in read_jsonl(self.path) if r.get("event") == "done"}
