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

    def line(self) -> str:
        head = f"{'ok  ' if self.ok else 'FAIL'}  {self.name}: {self.detail}"
        return head if self.ok or not self.fix else f"{head} -> {self.fix}"
