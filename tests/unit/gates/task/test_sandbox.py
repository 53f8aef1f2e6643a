"""The code sandbox, with real subprocesses: hostile programs are killed or contained, and each is
incorrect with its reason. Programs here are written to misbehave; nothing is mocked."""

from __future__ import annotations

import os
import socket
import time
import uuid
from pathlib import Path

import pytest

from campaign.gates.task.sandbox import SandboxLimits, run_python

FAST = SandboxLimits(timeout_s=2.0, memory_bytes=256 << 20)
ADD = "def add(a, b):\n    return a + b\n"
CHECK = "assert add(2, 3) == 5\n"


def test_a_correct_program_passes() -> None:
    result = run_python(ADD, CHECK, FAST)
    assert result.passed and result.reason == "passed" and result.exit_code == 0


def test_a_wrong_answer_fails_with_the_assertion() -> None:
    result = run_python("def add(a, b):\n    return a - b\n", CHECK, FAST)
    assert not result.passed and result.reason.startswith("wrong answer: AssertionError")


def test_an_endless_loop_is_killed_at_the_time_limit() -> None:
    start = time.monotonic()
    result = run_python("while True:\n    pass\n" + ADD, CHECK, FAST)
    assert not result.passed and result.reason.startswith("timeout: still running after 2s")
    assert time.monotonic() - start < 6


def test_unbounded_allocation_meets_the_memory_limit() -> None:
    result = run_python("hog = []\nwhile True:\n    hog.append(bytearray(1 << 24))\n", CHECK, FAST)
    assert not result.passed and "memory limit" in result.reason


def test_writing_outside_its_directory_is_refused_and_reported(tmp_path: Path) -> None:
    target = tmp_path / f"escape-{uuid.uuid4().hex}"
    program = f"try:\n    open({str(target)!r}, 'w').write('x')\nexcept OSError:\n    pass\n" + ADD
    result = run_python(program, CHECK, FAST)
    assert not target.exists()
    assert not result.passed  # it would have passed the tests; the attempt alone makes it incorrect
    assert result.reason.startswith("sandbox violation: write outside its directory")


def test_kernel_fences_hold_without_the_audit_hook(tmp_path: Path) -> None:
    """The audit hook only names the reason; Landlock (or the uid drop) is what stops the write."""
    target = tmp_path / f"escape-{uuid.uuid4().hex}"
    result = run_python(f"open({str(target)!r}, 'w').write('x')\n", "pass\n", FAST, audit_hook=False)
    assert not target.exists()
    assert not result.passed and "PermissionError" in result.reason
    inside = run_python("open('scratch.txt', 'w').write('ok')\n", "assert open('scratch.txt').read() == 'ok'\n",
                        FAST, audit_hook=False)
    assert inside.passed, inside.reason


def test_no_network_even_to_loopback() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port = server.getsockname()[1]
        program = (f"import socket\ns = socket.socket()\ns.settimeout(1)\ns.connect(('127.0.0.1', {port}))\n")
        hooked = run_python(program, "pass\n", FAST)
        bare = run_python(program, "pass\n", FAST, audit_hook=False)
    assert not hooked.passed and "socket.connect is not allowed" in hooked.reason
    assert not bare.passed and ("Permission" in bare.reason or "refused" in bare.reason.lower()
                                or "unreachable" in bare.reason.lower())
    assert bare.containment["network"] != "none" or "landlock" in bare.containment["filesystem"]


def test_no_child_processes_and_no_early_exit() -> None:
    spawned = run_python("import subprocess\nsubprocess.run(['true'])\n", "pass\n", FAST)
    assert not spawned.passed and "subprocess.Popen is not allowed" in spawned.reason
    exited = run_python("import sys\nsys.exit(0)\n", "assert False\n", FAST)
    assert not exited.passed and "exited" in exited.reason
    hard = run_python("import os\nos._exit(0)\n", "assert False\n", FAST)
    assert not hard.passed and "before reporting a result" in hard.reason


def test_cannot_signal_processes_outside() -> None:
    result = run_python(f"import os\nos.kill({os.getpid()}, 0)\n", "pass\n", FAST, audit_hook=False)
    assert not result.passed  # Landlock's signal scope (or the uid drop) refuses it


def test_containment_is_reported() -> None:
    result = run_python(ADD, CHECK, FAST)
    assert set(result.containment) == {"limits", "network", "filesystem", "user"}
    assert "as=268435456" in result.containment["limits"]


@pytest.mark.parametrize("program", ["def add(a, b:\n", "raise ValueError('nope')\n"])
def test_broken_programs_fail_with_their_error(program: str) -> None:
    result = run_python(program, CHECK, FAST)
    assert not result.passed and result.reason.startswith("program: ")


def test_a_main_block_in_the_reply_does_not_run() -> None:
    # replies often end with a demo that reads input(); the HumanEval harness does not run it either
    result = run_python(ADD + "if __name__ == '__main__':\n    print(add(int(input()), 1))\n", CHECK, FAST)
    assert result.passed, result.reason
