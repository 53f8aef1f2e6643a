"""A private temporary folder outlives no process for good: a promotion, rejudge or verify killed inside one
(SIGKILL leaves no `finally`) leaves its copy of a bundle, and the next use of the same prefix removes the
folders of processes that are gone, and only those."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from campaign.fsutil import private_tempdir


@pytest.fixture
def tmp_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def _dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    return int(done.stdout)


def test_a_killed_users_folder_is_removed_and_a_live_ones_kept(tmp_root: Path) -> None:
    dead = tmp_root / f"campaign-promote-{_dead_pid()}-abc"
    (dead / "bundle").mkdir(parents=True)
    (dead / "bundle" / "SUMMARY.json").write_text("{}")
    live = tmp_root / f"campaign-promote-{os.getppid()}-def"  # the process that started this one: alive
    live.mkdir()
    other = tmp_root / f"campaign-rejudge-{_dead_pid()}-ghi"  # another prefix: its own use sweeps it
    other.mkdir()
    with private_tempdir("campaign-promote-") as made:
        assert made.parent == tmp_root and made.name.startswith(f"campaign-promote-{os.getpid()}-")
        assert stat.S_IMODE(made.stat().st_mode) == 0o700
        (made / "copy").write_text("x")
        assert not dead.exists() and live.is_dir() and other.is_dir()
    assert not made.exists()


def test_a_folder_that_names_no_process_or_is_a_link_is_left_alone(tmp_root: Path) -> None:
    older = tmp_root / "campaign-promote-4_rrqngu"  # an older tool's name: no pid in it
    older.mkdir()
    wordy = tmp_root / "campaign-promote-other-1-x"
    wordy.mkdir()
    target = tmp_root / "elsewhere"
    target.mkdir()
    link = tmp_root / f"campaign-promote-{_dead_pid()}-lnk"
    link.symlink_to(target)
    with private_tempdir("campaign-promote-"):
        pass
    assert older.is_dir() and wordy.is_dir() and link.is_symlink() and target.is_dir()
