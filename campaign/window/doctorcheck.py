"""One line of `campaign doctor`: what was checked, whether it is fine, what it found, and the fix."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Check"]


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""
    # fine for a window to run (`campaign run` proceeds, saying the same), but a gap to close: shown as WARN
    warn: bool = False

    def line(self) -> str:
        head = f"{'WARN' if self.warn else 'ok  ' if self.ok else 'FAIL'}  {self.name}: {self.detail}"
        return head if (self.ok and not self.warn) or not self.fix else f"{head} -> {self.fix}"
