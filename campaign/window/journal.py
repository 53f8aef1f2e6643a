"""The window's journal: append-only JSONL, an intent record before each step and a result after it,
fsynced per record, so a reader after a crash knows exactly which steps finished."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from campaign.fsutil import JsonlAppender, read_jsonl

__all__ = ["Journal"]


class Journal:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._out = JsonlAppender(path)

    def record(self, event: str, step: str, **fields: Any) -> None:
        self._out.append({"t": time.time(), "event": event, "step": step, **fields})

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
