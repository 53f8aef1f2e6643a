"""Boot-log rules and launch-failure classification.

A lane that dies or never becomes ready is a launch failure (INCONCLUSIVE), never a finding; what
killed it is read from the exit code and the log, so the report says "/dev/shm too small", not "FAIL".
"""

from __future__ import annotations

import re
from pathlib import Path

from campaign.contracts.schema import BootLogRules

__all__ = ["check_rules", "classify_failure", "log_tail"]

_CAUSES: list[tuple[str, re.Pattern[str]]] = [
    ("shm_too_small", re.compile(r"/dev/shm|Insufficient space in /dev/shm|shm_size", re.I)),
    ("gpu_out_of_memory", re.compile(r"CUDA out of memory|CUDA error: out of memory|cudaErrorMemoryAllocation", re.I)),
    ("out_of_memory", re.compile(r"out of memory|Cannot allocate memory|std::bad_alloc|failed to allocate|"
                                 r"less than desired (?:CPU|GPU) memory utilization|"  # vLLM's memory budget
                                 r"No available memory for the cache blocks", re.I)),
    ("bad_argument", re.compile(r"unknown argument|unrecognized argument|invalid argument|error: argument|"
                                r"no such option|unknown option", re.I)),
    ("port_in_use", re.compile(r"address already in use|couldn't bind|bind failed", re.I)),
    ("model_load_failed", re.compile(r"failed to load model|error loading model|unable to load model|"
                                     r"No such file or directory|"
                                     r"HFValidationError|LocalEntryNotFoundError|OfflineModeIsEnabled", re.I)),
    ("missing_image", re.compile(r"No such image|pull access denied|manifest unknown", re.I)),
]


def log_tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def classify_failure(log_text: str, exit_code: int | None) -> str:
    """A short cause for a lane that exited or never became ready."""
    for cause, pattern in _CAUSES:
        if pattern.search(log_text):
            return cause
    if exit_code in (137, -9):
        return "killed"  # SIGKILL: the kernel's OOM killer or an outside kill
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
