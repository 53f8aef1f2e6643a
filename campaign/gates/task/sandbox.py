"""Run model-written Python against a task's tests, fenced in.

Each run gets a fresh temporary directory, a fresh session (so the whole process group is killed on
timeout), a wall-clock limit enforced from outside, and the limits and fences that
``_sandbox_child.py`` puts up from inside. The result is always a verdict with a reason: passed,
wrong answer, an error, a timeout, the memory limit, or a sandbox violation. A run whose status line
is missing (the program killed its own interpreter, or exited early) is incorrect, never correct.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["SandboxLimits", "SandboxResult", "run_python"]

_CHILD = (Path(__file__).with_name("_sandbox_child.py")).read_text(encoding="utf-8")
_TAIL = 2000


@dataclass(frozen=True)
class SandboxLimits:
    timeout_s: float = 10.0  # wall clock, enforced from outside by killing the process group
    memory_bytes: int = 512 << 20  # address space
    file_bytes: int = 8 << 20  # largest file it may write (its stdout and stderr included)


@dataclass
class SandboxResult:
    passed: bool
    reason: str
    elapsed_s: float
    exit_code: int | None
    containment: dict[str, str] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    stdout_tail: str = ""
    stderr_tail: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def run_python(program: str, tests: str, limits: SandboxLimits = SandboxLimits(), *,
               audit_hook: bool = True, as_main: bool = False, argv: list[str] | None = None,
               site_packages: bool = False, preload: tuple[str, ...] = ()) -> SandboxResult:
    """Run ``program`` then ``tests`` (which raise on a wrong answer) in one fenced interpreter.

    ``audit_hook=False`` leaves only the kernel's fences; tests use it to prove those hold alone. A screen
    script runs ``as_main`` (its ``if __name__ == "__main__":`` block runs) with its ``argv``, and with the
    runner's site-packages, which model-written code never gets; modules in ``preload`` (numpy) are
    imported before the audit hook, as they set variables while loading."""
    workdir = Path(tempfile.mkdtemp(prefix="campaign-sandbox-"))
    try:
        return _run(program, tests, limits, workdir, audit_hook,
                    {"as_main": as_main, "argv": argv or ["program.py"], "site": site_packages,
                     "preload": list(preload)})
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _run(program: str, tests: str, limits: SandboxLimits, workdir: Path, audit_hook: bool,
         mode: dict[str, Any]) -> SandboxResult:
    (workdir / "program.py").write_text(program, encoding="utf-8")
    (workdir / "tests.py").write_text(tests, encoding="utf-8")
    nonce = secrets.token_hex(16)
    cfg = {"nonce": nonce, "workdir": str(workdir), "memory_bytes": limits.memory_bytes,
           "cpu_seconds": int(limits.timeout_s) + 2, "file_bytes": limits.file_bytes, "audit_hook": audit_hook,
           "as_main": mode["as_main"], "argv": mode["argv"], "preload": mode["preload"]}
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": str(workdir), "TMPDIR": str(workdir)}
    out_path, err_path = workdir / ".stdout", workdir / ".stderr"
    timed_out = False
    start = time.monotonic()
    # read back through these handles, never by name: the program may swap its .stdout for a FIFO or a link
    # to /dev/zero; RLIMIT_FSIZE holds what it writes here to file_bytes, and the read is bounded to that
    with open(out_path, "wb+") as out, open(err_path, "wb+") as err:
        flags = ["-I", "-B"] if mode["site"] else ["-I", "-S", "-B"]
        proc = subprocess.Popen([sys.executable, *flags, "-c", _CHILD], stdin=subprocess.PIPE,
                                stdout=out, stderr=err, cwd=workdir, env=env, start_new_session=True)
        try:
            assert proc.stdin is not None
            proc.stdin.write((json.dumps(cfg) + "\n").encode())
            proc.stdin.close()
        except BrokenPipeError:
            pass
        try:
            proc.wait(timeout=limits.timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        _kill_group(proc.pid)  # whatever it started goes with it, finished or not
        if timed_out:
            proc.wait()
        elapsed = time.monotonic() - start
        stdout, stderr = _read_back(out, limits.file_bytes), _read_back(err, limits.file_bytes)
    status = _status_line(stdout, nonce)
    code = proc.returncode
    result = SandboxResult(passed=False, reason="", elapsed_s=round(elapsed, 4), exit_code=code,
                           stdout_tail=_strip_status(stdout, nonce)[-_TAIL:], stderr_tail=stderr[-_TAIL:])
    if status is not None:
        result.containment = status.get("containment") or {}
        result.violations = list(status.get("violations") or [])
    if timed_out:
        result.reason = f"timeout: still running after {limits.timeout_s:g}s, killed"
    elif status is not None:
        result.passed = bool(status.get("passed")) and code == 0 and not result.violations
        result.reason = str(status.get("reason") or ("passed" if result.passed else "failed"))
    elif code is not None and code < 0:
        result.reason = _signal_reason(-code)
    else:
        result.reason = f"exited with code {code} before reporting a result" + _last_error(stderr)
    return result


def _read_back(handle: Any, limit: int) -> str:
    """What the program wrote to one of its output files, through the runner's own handle: at most ``limit``
    bytes (its file-size limit), the last of them when it wrote more."""
    size = handle.seek(0, os.SEEK_END)
    handle.seek(max(0, size - limit))
    return handle.read(limit).decode("utf-8", errors="replace")


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _status_line(stdout: str, nonce: str) -> dict[str, Any] | None:
    for line in reversed(stdout.splitlines()):
        if line.startswith(nonce + " "):
            try:
                return json.loads(line[len(nonce) + 1:])
            except ValueError:
                return None
    return None


def _strip_status(stdout: str, nonce: str) -> str:
    return "\n".join(line for line in stdout.splitlines() if not line.startswith(nonce + " "))


def _signal_reason(signum: int) -> str:
    name = signal.Signals(signum).name if signum in signal.Signals._value2member_map_ else f"signal {signum}"
    if signum == signal.SIGXCPU:
        return "killed: CPU time limit (SIGXCPU)"
    if signum == signal.SIGXFSZ:
        return "killed: file size limit (SIGXFSZ)"
    if signum in (signal.SIGSEGV, signal.SIGBUS, signal.SIGABRT):
        return f"crashed ({name}), likely the memory limit"
    return f"killed by {name}"


def _last_error(stderr: str) -> str:
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    return f": {lines[-1][:200]}" if lines else ""
