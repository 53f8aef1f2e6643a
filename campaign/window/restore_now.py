"""``python -m campaign.window.restore_now WINDOW``: what the systemd timer runs at the deadline."""

from __future__ import annotations

import sys

from campaign.window.restore import restore
from campaign.window.state import WindowState

if __name__ == "__main__":
    window = sys.argv[1]
    state = WindowState.load(window)
    if state.armed:
        restore(window, reason="deadline reached", by="systemd timer")
