"""Boot-log rules and launch-failure classification.

A lane that dies or never becomes ready is a launch failure (INCONCLUSIVE), never a finding; what
killed it is read from the exit code and the log, so the report says "/dev/shm too small", not "FAIL".
"""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

from campaign.contracts.engines import EngineFacts
from campaign.contracts.schema import BootLogRules
from campaign.fsutil import UnreadableFile, open_regular

__all__ = ["BOOT_LOG_BYTES", "HINTS", "HUB_REFUSED", "TAIL_BYTES", "check_rules", "classify_failure", "describe_exit", "log_tail",
           "read_log"]

# A boot log is what an engine printed while loading: tens to hundreds of KB (vLLM, llama.cpp verbose). An
# engine that loops on a warning can write gigabytes, so rules and failure classes read at most its first
# and last 4 MiB (load-time lines are at the head, the cause of a death at the tail).
BOOT_LOG_BYTES = 8 << 20
# The tail shown with a launch failure: its last lines, out of the last 256 KiB.
TAIL_BYTES = 256 << 10

_CAUSES: list[tuple[str, re.Pattern[str]]] = [
    ("shm_too_small", re.compile(r"/dev/shm|Insufficient space in /dev/shm|shm_size|insufficient shared memory|"
                                 r"\bBus error\b|SIGBUS", re.I)),
    ("gpu_unavailable", re.compile(r"could not select device driver|nvidia-container-cli|no CUDA-capable device|"
                                   r"unknown or invalid runtime name: nvidia", re.I)),
    # PyTorch's words and CUDA's (an engine's own, such as llama.cpp's cudaMalloc, are its adapter's)
    ("gpu_out_of_memory", re.compile(r"CUDA out of memory|CUDA error: out of memory|cudaErrorMemoryAllocation",
                                     re.I)),
    ("out_of_memory", re.compile(r"out of memory|Cannot allocate memory|std::bad_alloc|failed to allocate", re.I)),
    ("bad_argument", re.compile(r"unknown argument|unrecognized argument|invalid argument|error: argument|"
                                r"no such option|unknown option", re.I)),
    ("port_in_use", re.compile(r"address already in use|couldn't bind|bind failed", re.I)),
    ("model_load_failed", re.compile(r"failed to load model|error loading model|unable to load model|"
                                     r"No such file or directory", re.I)),
    ("missing_image", re.compile(r"No such image|pull access denied|manifest unknown", re.I)),
]
# The Hugging Face hub client refusing a model path (offline, or a folder that is not a model): the words of
# every engine that loads through it (vLLM's and SGLang's facts name it).
HUB_REFUSED = re.compile(r"HFValidationError|LocalEntryNotFoundError|OfflineModeIsEnabled")
# Said by the engine when it could not even exec the command (docker start), before any log exists.
_NOT_STARTED = re.compile(r"executable file not found|exec format error|no such file or directory|"
                          r"permission denied|not a directory", re.I)


def read_log(path: Path, limit: int = BOOT_LOG_BYTES, *, tail_only: bool = False) -> str:
    """A log's text, bounded: the whole file when it holds at most ``limit`` bytes, else its first and last
    halves around a line saying how much was left out (or only the last ``limit`` bytes with ``tail_only``).
    A log that is missing or not a regular file reads as empty: a log is evidence, never an input to refuse."""
    try:
        with open_regular(path, what="log") as fd:
            size = os.fstat(fd).st_size
            if size <= limit:
                return _text(os.pread(fd, limit, 0))
            tail = _text(os.pread(fd, limit if tail_only else limit // 2, size - (limit if tail_only else limit // 2)))
            if tail_only:
                return tail
            head = _text(os.pread(fd, limit // 2, 0))
            return f"{head}\n[... {size - limit:,} bytes of the log left out ...]\n{tail}"
    except (UnreadableFile, OSError):
        return ""


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def log_tail(path: Path, lines: int = 40) -> str:
    return "\n".join(read_log(path, TAIL_BYTES, tail_only=True).splitlines()[-lines:])


# A death by signal, as a process lane reports it (-N) and as a container or a shell does (128 + N).
_SIGNAL_CAUSES = {signal.SIGILL: "illegal_instruction", signal.SIGSEGV: "segfault",
                  signal.SIGBUS: "shm_too_small", signal.SIGKILL: "killed", signal.SIGABRT: "aborted"}

# What a user should do about each cause: shown after the message, so nobody is left with "code -4".
HINTS = {
    "illegal_instruction": "the engine binary uses CPU instructions this machine cannot run; rebuild it here: "
                           "make engine",
    "segfault": "the engine crashed (SIGSEGV) while loading; see the boot log's last lines",
    "shm_too_small": "a bus error (SIGBUS), usually a full /dev/shm: give the lane a larger shm_size",
    "oom_killed": "the kernel or the container's memory limit killed the engine: give it more memory or a "
                  "smaller model or context",
    "killed": "the engine was killed (SIGKILL) by something outside it; out of memory is the usual cause",
    "aborted": "the engine aborted (SIGABRT); see the boot log's last lines",
    "engine_unreachable": "the lane's docker engine did not answer (a box down, its network, its certificate): "
                          "nothing was started there",
    "missing_executable": "exit 127: the executable or one of its shared libraries is missing; check the "
                          "lane's executable and `ldd` on it",
}


def _signal_of(exit_code: int | None) -> signal.Signals | None:
    if exit_code is None:
        return None
    number = -exit_code if exit_code < 0 else exit_code - 128 if 128 < exit_code < 160 else None
    try:
        return signal.Signals(number) if number is not None else None
    except ValueError:
        return None


def describe_exit(exit_code: int | None) -> str:
    """``died by SIGILL`` or ``exited with status 1``: never a raw negative return code."""
    sig = _signal_of(exit_code)
    if sig is not None:
        return f"died by {sig.name}"
    if exit_code is None:
        return "did not exit"
    return f"exited with status {exit_code}"


def classify_failure(log_text: str, exit_code: int | None, *, oom_killed: bool = False,
                     started: bool = True, engine: EngineFacts | None = None) -> str:
    """A short cause for a lane that exited or never became ready. ``oom_killed`` is the kernel's or the
    engine's own word (docker's State.OOMKilled, a cgroup's oom_kill count); ``started=False`` means the
    runtime could not exec the command; ``engine``'s own words (``boot_failures``) are read before the shared
    ones."""
    if oom_killed:
        return "oom_killed"
    if not started and not _CAUSES[1][1].search(log_text) and _NOT_STARTED.search(log_text):
        return "cannot_execute"
    sig = _signal_of(exit_code)
    # These signals say what happened more surely than any line the engine printed before it died.
    if sig in (signal.SIGILL, signal.SIGSEGV, signal.SIGBUS):
        return _SIGNAL_CAUSES[sig]
    if exit_code == 127:
        return "missing_executable"
    for cause, pattern in (*(engine.boot_failures if engine else ()), *_CAUSES):
        if pattern.search(log_text):
            return cause
    if sig is not None and sig in _SIGNAL_CAUSES:
        return _SIGNAL_CAUSES[sig]
    if not started:
        return "start_failed"
    if exit_code is None:
        return "readiness_timeout"
    return f"exited_{exit_code}"


def check_rules(log_text: str, rules: BootLogRules) -> list[str]:
    """Violations of ``require`` / ``forbid``, as sentences; empty means the log passes."""
    problems = []
    for pattern in rules.require:
        if not re.search(pattern, log_text, re.M):
            problems.append(f"boot log lacks required pattern {pattern!r}")
    for pattern in rules.forbid:
        match = re.search(pattern, log_text, re.M)
        if match:
            line = log_text[:match.start()].count("\n") + 1
            problems.append(f"boot log line {line} matches forbidden pattern {pattern!r}: "
                            f"{log_text.splitlines()[line - 1][:200]!r}")
    return problems
