"""Window state of a test's own (claims, journals, failsafes) in its tmp folder: a fixture the modules that
read or write state directly take (``pytestmark = pytest.mark.usefixtures("state_home")``)."""

from __future__ import annotations

from pathlib import Path

import pytest

__all__ = ["state_home"]


@pytest.fixture
def state_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``XDG_STATE_HOME`` of this test alone; its path."""
    home = tmp_path / "xdg-state"
    monkeypatch.setenv("XDG_STATE_HOME", str(home))
    return home
