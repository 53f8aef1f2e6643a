"""What the tool reads from /proc is bounded too: past the cap an OSError, never a truncated command line."""

from __future__ import annotations

import errno
import os

import pytest

from campaign.lanes.runtimes.base import read_proc


def test_proc_files_are_read_whole_under_the_cap() -> None:
    assert read_proc(f"/proc/{os.getpid()}/cmdline", 8 << 20).split(b"\0")[0]
    assert read_proc("/proc/self/stat").startswith(str(os.getpid()).encode())


def test_past_the_cap_is_an_error_not_a_truncation() -> None:
    with pytest.raises(OSError) as caught:
        read_proc("/proc/self/environ" if os.environ else "/proc/self/cmdline", 1)
    assert caught.value.errno == errno.EFBIG
