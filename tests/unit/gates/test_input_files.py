"""Gate input files (prompts, tasks, reference texts) are read once, bounded, and only as regular files: a
FIFO, a device, a folder or a symlink loop in their place is a ContractError naming the file and what it
is, at once (a FIFO never waits for a writer)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from campaign.errors import ContractError
from campaign.gates.common import inputs
from campaign.gates.common.inputs import load_prompts, read_jsonl_rows


@pytest.mark.parametrize("kind, words", [
    ("fifo", "input file is a FIFO (named pipe), not a regular file"),
    ("device", "input file is a device, not a regular file"),
    ("folder", "input file is a directory, not a regular file"),
    ("loop", "input file path is a symlink loop"),
    ("missing", "no such input file"),
])
def test_an_input_that_is_not_a_regular_file_is_named_at_once(tmp_path: Path, kind: str, words: str) -> None:
    path = tmp_path / "p.jsonl"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        path.symlink_to("/dev/zero")
    elif kind == "folder":
        path.mkdir()
    elif kind == "loop":
        path.symlink_to(path.name)
    started = time.monotonic()
    with pytest.raises(ContractError) as caught:
        load_prompts(path)
    assert time.monotonic() - started < 2
    assert str(caught.value) == f"{path}: {words}"


def test_an_input_over_the_cap_is_refused_before_it_is_parsed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text('{"id": 1, "prompt": "hi"}\n' * 100)
    monkeypatch.setattr(inputs, "INPUT_FILE_BYTES", 1000)
    with pytest.raises(ContractError, match=r"p\.jsonl: input file is over the 1,000-byte cap"):
        read_jsonl_rows(path)
    monkeypatch.setattr(inputs, "INPUT_FILE_BYTES", 1 << 20)
    assert len(read_jsonl_rows(path)) == 100
