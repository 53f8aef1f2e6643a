"""Fault injection for the crash tests: a process SIGKILLs itself at a named point, so a step that is not
a journal record (a promotion's swap, its smoke) can be tested as a crash point too. The journal counts its
own records (``CAMPAIGN_FAULT_KILL_AFTER_RECORD``, window/journal.py)."""

from __future__ import annotations

import os
import signal

__all__ = ["crash_point"]


def crash_point(name: str) -> None:
    """SIGKILL this process here when ``CAMPAIGN_FAULT_KILL_AT`` names this point."""
    if os.environ.get("CAMPAIGN_FAULT_KILL_AT") == name:
        os.kill(os.getpid(), signal.SIGKILL)
