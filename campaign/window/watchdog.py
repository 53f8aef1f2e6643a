"""Moved to ``campaign.failsafe.watchdog``. Kept for one release: a watchdog armed by 0.2.0 re-spawns its
partner as ``python -m campaign.window.watchdog``, and a tool upgraded under an armed window must still
let it bring the daily back."""

import sys

from campaign.failsafe.watchdog import main

if __name__ == "__main__":
    sys.exit(main())
