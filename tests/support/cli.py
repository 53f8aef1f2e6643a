"""The one way tests run the command line: ``python -m campaign.cli`` in a subprocess, as a user would."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

__all__ = ["campaign"]


def campaign(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None,
             timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    """Run ``campaign ARGS``; ``env`` adds to (never replaces) the test's environment."""
    return subprocess.run([sys.executable, "-m", "campaign.cli", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=timeout, env={**os.environ, **(env or {})})
