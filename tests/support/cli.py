"""The one way tests run the command line: ``python -m campaign.cli`` in a subprocess, as a user would."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

__all__ = ["campaign", "frozen_window"]


def campaign(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None,
             timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    """Run ``campaign ARGS``; ``env`` adds to (never replaces) the test's environment."""
    return subprocess.run([sys.executable, "-m", "campaign.cli", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=timeout, env={**os.environ, **(env or {})})


def frozen_window(contract: Path, out: Path, *, env: dict[str, str] | None = None,
                  run_env: dict[str, str] | None = None) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """keys init, freeze, run (it must finish), verify, as a user does; the bundle and the verify result."""
    assert campaign("keys", "init", env=env).returncode == 0
    frozen = campaign("freeze", str(contract), env=env)
    assert frozen.returncode == 0, frozen.stderr
    ran = campaign("run", str(contract), "--out", str(out), env={**(env or {}), **(run_env or {})})
    assert ran.returncode == 0, ran.stdout + ran.stderr
    bundle = next(out.iterdir())
    return bundle, campaign("verify", str(bundle), env=env)
