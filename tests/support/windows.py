"""A whole window as most integration tests need one: its own signing key, the contract frozen, run and
(if asked) verified, each step asserted; the bundle and the run's output come back."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.cli import assert_exit_as_decided, campaign, keys_and_freeze

__all__ = ["window_bundle"]


def window_bundle(root: Path, contract: Path, *, allow: Path | None = None,
                  verify: bool = False) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """Keys under ``root/xdg``, then freeze, run (bundles under ``root/runs``) and optionally verify
    ``contract``; ``allow`` is a folder outside the contract's the contract may read."""
    trust = ["--allow-path", str(allow)] if allow is not None else []
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CONFIG_HOME", str(root / "xdg"))
        keys_and_freeze(contract, allow=allow)
        ran = campaign("run", str(contract), "--out", str(root / "runs"), *trust)
        assert ran.returncode in (0, 3), ran.stdout + ran.stderr  # completed: promotable or not
        bundle = next((root / "runs").iterdir())
        assert_exit_as_decided(ran, bundle)
        if verify:
            verified = campaign("verify", str(bundle))
            assert verified.returncode == 0, verified.stderr
        return bundle, ran
