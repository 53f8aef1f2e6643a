"""`campaign daily stop` when no daily is known: one line, exit 2 (a real daily: tests/integration/window/
test_daily_stop.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_daily_stop_with_no_daily_known_says_so_in_one_line(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "campaign.cli", "daily", "stop"], capture_output=True, text=True,
                          timeout=60, env={"PATH": "/usr/bin:/bin", "XDG_STATE_HOME": str(tmp_path / "state"),
                                           "XDG_CONFIG_HOME": str(tmp_path / "config")})
    assert done.returncode == 2 and "no daily known" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
