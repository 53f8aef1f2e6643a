"""The one way tests run the command line: ``python -m campaign.cli`` in a subprocess, as a user would (a
fixture's keys and freeze excepted: ``keys_and_freeze``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

__all__ = ["assert_exit_as_decided", "campaign", "frozen_window", "keys_and_freeze"]


def campaign(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None,
             timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    """Run ``campaign ARGS``; ``env`` adds to (never replaces) the test's environment."""
    return subprocess.run([sys.executable, "-m", "campaign.cli", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=timeout, env={**os.environ, **(env or {})})


def keys_and_freeze(contract: Path, *, allow: Path | None = None) -> Path:
    """`campaign keys init` then `campaign freeze CONTRACT [--allow-path ALLOW]`, in this process: what a
    fixture needs before the command it tests, without two interpreter starts (about 1 s a test, some 40
    tests). The commands themselves run in a subprocess in ``frozen_window`` and the CLI's own tests. The
    freeze record's path."""
    from campaign.contracts.freeze import freeze
    from campaign.contracts.load import ALLOW_PATH_ENV, load_contract
    from campaign.signing import init_keys, load_signing_key

    init_keys()
    with pytest.MonkeyPatch.context() as patch:
        if allow is not None:
            patch.setenv(ALLOW_PATH_ENV, str(allow.resolve()))
        path, _ = freeze(load_contract(contract), load_signing_key(), None)
    return path


def frozen_window(contract: Path, out: Path, *, env: dict[str, str] | None = None,
                  run_env: dict[str, str] | None = None) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """keys init, freeze, run (it must finish), verify, as a user does; the bundle and the verify result."""
    assert campaign("keys", "init", env=env).returncode == 0
    frozen = campaign("freeze", str(contract), env=env)
    assert frozen.returncode == 0, frozen.stderr
    ran = campaign("run", str(contract), "--out", str(out), env={**(env or {}), **(run_env or {})})
    assert ran.returncode in (0, 3), ran.stdout + ran.stderr  # completed: promotable or not
    bundle = next(out.iterdir())
    assert_exit_as_decided(ran, bundle)
    return bundle, campaign("verify", str(bundle), env=env)


def assert_exit_as_decided(ran: subprocess.CompletedProcess[str], bundle: Path) -> None:
    """`campaign run` exited as its completed window decided (README, "Exit codes"): 0 when the report calls a
    candidate PROMOTABLE, 3 when it calls none so."""
    import json

    from campaign.receipts.decision import decisions

    promotable = [d.candidate for d in decisions(json.loads((bundle / "SUMMARY.json").read_text()))
                  if d.decision == "PROMOTABLE"]
    assert ran.returncode == (0 if promotable else 3), (ran.returncode, promotable, ran.stdout + ran.stderr)
