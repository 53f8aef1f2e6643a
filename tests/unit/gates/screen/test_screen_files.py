"""A screen's trace and slot map are read once, bounded, and only as regular files: a FIFO, a device or a
loop in their place is a TraceError (the screen could not measure) naming the file, at once."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from campaign.errors import InputError
from campaign.gates.screen.cachereplay import TraceError, load_slot_map, load_trace
from campaign.gates.screen.gate import _still_pinned


@pytest.mark.parametrize("name", ["t.jsonl", "t.npz", "slots.json"])
@pytest.mark.parametrize("kind, words", [("fifo", "is a FIFO"), ("device", "is a device"), ("loop", "symlink loop")])
def test_screen_files_that_are_not_files_are_named_at_once(tmp_path: Path, name: str, kind: str, words: str) -> None:
    path = tmp_path / name
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        path.symlink_to("/dev/zero")
    else:
        path.symlink_to(path.name)
    started = time.monotonic()
    with pytest.raises(TraceError) as caught:
        load_slot_map(path, 2, 8) if name == "slots.json" else load_trace(path)
    assert time.monotonic() - started < 2
    assert str(caught.value).startswith(f"{path}: cannot read: ") and words in str(caught.value)
    with pytest.raises(InputError, match=words):
        _still_pinned(path, "0" * 64)
