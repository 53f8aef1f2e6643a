"""Boot logs are read bounded: their head and tail past BOOT_LOG_BYTES, only the tail for a failure's last
lines; a log that is missing, a FIFO or /dev/zero reads as empty at once."""

from __future__ import annotations

import os
import time
from pathlib import Path

from campaign.lanes.bootlog import log_tail, read_log


def test_a_small_log_is_read_whole(tmp_path: Path) -> None:
    log = tmp_path / "boot.log"
    log.write_text("one\ntwo\n")
    assert read_log(log) == "one\ntwo\n"
    assert log_tail(log, 1) == "two"


def test_a_huge_log_keeps_its_head_and_tail(tmp_path: Path) -> None:
    log = tmp_path / "boot.log"
    with open(log, "wb") as handle:
        handle.write(b"loaded model\n")
        handle.truncate(50 << 20)  # 50 MiB of a sparse middle
        handle.seek(0, os.SEEK_END)
        handle.write(b"\nSegmentation fault\n")
    text = read_log(log, 1 << 20)
    assert len(text) < (1 << 20) + 200
    assert text.startswith("loaded model") and text.rstrip().endswith("Segmentation fault")
    assert "bytes of the log left out" in text
    assert log_tail(log, 1) == "Segmentation fault"


def test_a_log_that_is_not_a_file_reads_as_empty_at_once(tmp_path: Path) -> None:
    fifo, zero, folder = tmp_path / "fifo.log", tmp_path / "zero.log", tmp_path / "dir.log"
    os.mkfifo(fifo)
    zero.symlink_to("/dev/zero")
    folder.mkdir()
    started = time.monotonic()
    for path in (fifo, zero, folder, tmp_path / "missing.log"):
        assert read_log(path) == "" and log_tail(path) == ""
    assert time.monotonic() - started < 2
