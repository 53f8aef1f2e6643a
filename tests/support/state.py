"""Window state of a test's own (claims, journals, failsafes) in its tmp folder: a fixture the modules that
read or write state directly take (``pytestmark = pytest.mark.usefixtures("state_home")``); and a temp folder
of a test's own, for the tests that check what a command left in it."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

__all__ = ["own_tempdir", "state_home"]


@pytest.fixture
def state_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``XDG_STATE_HOME`` of this test alone; its path."""
    home = tmp_path / "xdg-state"
    monkeypatch.setenv("XDG_STATE_HOME", str(home))
    return home


@pytest.fixture
def own_tempdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``tempfile.gettempdir()`` (and TMPDIR for the commands it runs) of this test alone; its path. A test
    that checks a command left nothing in the temp folder must not see what another test, on another
    pytest-xdist worker, has there at that moment (a verify's private copy, measured failing so)."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    monkeypatch.setenv("TMPDIR", str(folder))
    return folder
