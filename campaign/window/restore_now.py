"""Moved to ``campaign.failsafe.restore_now``. Kept for one release: a systemd timer armed by 0.2.0 runs
``python -m campaign.window.restore_now``, and a tool upgraded under an armed window must still let it
bring the daily back."""

import sys

from campaign.failsafe.restore_now import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
