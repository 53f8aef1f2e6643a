"""The sandbox reads a program's output back through the runner's own handles, bounded: a program that swaps
its .stdout for a FIFO or a link to /dev/zero is still read at once, and only what it wrote."""

from __future__ import annotations

import time

import pytest

from campaign.gates.task.sandbox import SandboxLimits, run_python


@pytest.mark.parametrize("swap", ["os.mkfifo('.stdout')", "os.symlink('/dev/zero', '.stdout')"])
def test_a_swapped_output_file_is_not_read_by_name(swap: str) -> None:
    program = f"import os\nos.unlink('.stdout')\n{swap}\nprint('hello')\n"
    started = time.monotonic()
    result = run_python(program, "", SandboxLimits(timeout_s=5), audit_hook=False)
    assert time.monotonic() - started < 5
    assert result.passed and result.stdout_tail == "hello\n"


def test_output_is_read_up_to_the_file_limit() -> None:
    program = "import sys\nsys.stdout.write('x' * 5000)\nsys.stdout.flush()\n"
    result = run_python(program, "", SandboxLimits(timeout_s=5, file_bytes=4096))
    assert len(result.stdout_tail) <= 2000 and not result.passed  # past RLIMIT_FSIZE the write fails
