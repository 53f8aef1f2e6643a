"""Lane files read back where the running lane sees them, and checked again before a promotion: a real
process reads through its own /proc/<pid>/root; a file swapped after the freeze fails the lane at boot
(constructed by changing the file under a running process: no engine is needed to read a file)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from campaign.contracts.resolve import EffectiveLane
from campaign.errors import LaunchError, RunError
from campaign.lanes.runtimes.base import LaunchSpec
from campaign.lanes.runtimes.process import ProcessRuntime
from campaign.lanes.session import files_unchanged, read_back_files


def _lane(path: Path, sha: str) -> EffectiveLane:
    return EffectiveLane.model_validate({
        "name": "wide", "role": "candidate", "control": "base", "runtime": "process", "engine": "llamacpp",
        "executable": "sleep", "port": 1, "model": {"path": "/m"},
        "files": [{"name": "slotmap", "path": str(path), "sha256": sha}]})


@pytest.fixture
def sleeping(tmp_path: Path):
    lane = ProcessRuntime().start(LaunchSpec(lane="wide", argv=["sleep", "30"], env={}, log_path=tmp_path / "log"))
    yield lane
    lane.stop(timeout=1.0)


def test_a_process_lanes_file_is_read_back_and_a_swapped_one_fails_the_lane(tmp_path: Path, sleeping) -> None:
    slots = tmp_path / "slots.json"
    slots.write_bytes(b"[4, 4]\n")
    pinned = hashlib.sha256(b"[4, 4]\n").hexdigest()
    lane = _lane(slots, pinned)
    assert read_back_files(sleeping, lane) == {"slotmap": {"path": str(slots), "pinned_sha256": pinned,
                                                           "sha256": pinned}}
    slots.write_bytes(b"[9, 9]\n")  # swapped after the freeze check, under the running lane
    with pytest.raises(LaunchError, match=r"file slotmap at .* has sha256 [0-9a-f]{64}, not the pinned") as caught:
        read_back_files(sleeping, lane)
    assert caught.value.cause == "file_mismatch"
    slots.unlink()
    with pytest.raises(LaunchError, match="cannot read file slotmap back"):
        read_back_files(sleeping, lane)


def test_a_promotion_refuses_a_file_that_moved_or_changed(tmp_path: Path) -> None:
    slots = tmp_path / "slots.json"
    slots.write_bytes(b"[4, 4]\n")
    lane = _lane(slots, hashlib.sha256(b"[4, 4]\n").hexdigest())
    files_unchanged(lane)
    slots.write_bytes(b"[4, 5]\n")
    with pytest.raises(RunError, match="changed since the window measured it"):
        files_unchanged(lane)
    slots.unlink()
    with pytest.raises(RunError, match="is gone"):
        files_unchanged(lane)
