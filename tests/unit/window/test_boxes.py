"""One window per box: overlap found by engine identity (not URL), a claim held by one runner refuses the
next naming the holder, and is free again once released (as when its runner dies)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from campaign.errors import PreflightError
from campaign.window.boxes import THIS_MACHINE, Box, claim, overlapping


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    return tmp_path


def test_two_urls_of_one_engine_are_one_box() -> None:
    box = Box("k1", "tcp://b:2376")
    same_by_ssh = Box("k1", "ssh://ops@b")
    other = Box("k2", "tcp://c:2376")
    assert overlapping({"a.yaml": [box], "b.yaml": [same_by_ssh]}) == ["a.yaml and b.yaml both use ssh://ops@b"]
    assert overlapping({"a.yaml": [box], "b.yaml": [other]}) == []
    here = Box(THIS_MACHINE, THIS_MACHINE)
    assert overlapping({"a.yaml": [box, here], "b.yaml": [other, here]}) == ["a.yaml and b.yaml both use this machine"]


def test_a_claimed_box_refuses_a_second_window_naming_the_first_until_released() -> None:
    boxes = [Box("k1", "tcp://b:2376"), Box("k2", "tcp://c:2376")]
    first = claim("w1", boxes)
    with pytest.raises(PreflightError, match=r"ssh://ops@b is in window w1 \(runner pid \d+\) already"):
        claim("w2", [Box("k1", "ssh://ops@b")])
    free_one = claim("w3", [Box("k3", "tcp://d:2376")])  # another box is free
    first.release()
    claim("w2", [Box("k1", "ssh://ops@b")]).release()
    free_one.release()


def test_a_dead_runners_claim_is_free(tmp_path: Path) -> None:
    code = ("from campaign.window.boxes import Box, claim; import os; "
            "claim('w1', [Box('k1', 'tcp://b:2376')]); os._exit(0)")
    done = subprocess.run([sys.executable, "-c", code], env={"XDG_STATE_HOME": str(tmp_path), "PATH": "/usr/bin"},
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    claim("w2", [Box("k1", "tcp://b:2376")]).release()  # the kernel let go when that runner ended
