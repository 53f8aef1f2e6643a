"""Durations and sizes as people write them in a contract ("40m", "64g"), parsed once at load, and
cpusets. Each has a bound, checked before anything is expanded or waited for: a contract cannot make
validation allocate without limit (``cpus: "0-4000000000"``) or a window wait forever
(``deadline: 99999999999999999999999h``) or spin (``poll_interval: 0.0000001ms``).

The patterns run on text from the contract, so each is linear: the text is stripped first and no two
unbounded repeats can trade characters (``\\s*(unit)?\\s*$`` was quadratic on a run of spaces).
"""

from __future__ import annotations

import math
import re
from typing import Annotated

from pydantic import AfterValidator, BeforeValidator, WithJsonSchema

__all__ = ["MAX_CPUS", "MAX_DURATION_S", "MAX_SIZE_BYTES", "MIN_DURATION_S", "Cpuset", "Duration", "Size",
           "duration_json_schema", "format_cpuset", "format_seconds", "parse_cpuset", "parse_duration", "parse_size"]

_DURATION = re.compile(r"^(\d++(?:\.\d++)?+)\s*+(ms|s|m|h)?+$")  # possessive: linear (benchmarks/patterns.py)
_DURATION_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}
_SIZE = re.compile(r"^(\d++(?:\.\d++)?+)\s*+([kmgt]?+)(i?+b)?+$", re.IGNORECASE)
_SIZE_BYTES = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}

# A duration in a contract is a budget, a deadline, a timeout or a poll interval. Under a millisecond no
# clock here measures it and a poll would spin; over a week no window, failsafe or readiness wait lasts
# (and 1e23 hours overflows the timers it is handed to).
MIN_DURATION_S = 0.001
MAX_DURATION_S = 7 * 24 * 3600.0
# A size is /dev/shm, a memory limit or a copy limit: 16 TiB is more than any one box's memory today.
MAX_SIZE_BYTES = 1 << 44
# CPU numbers 0..8191: the largest NR_CPUS a Linux distribution kernel is built with (x86-64), so no
# machine has a CPU past it; checked before a range is expanded.
MAX_CPUS = 8192


def format_seconds(seconds: float) -> str:
    """A bound as a contract would write it: 1ms, 100ms, 1s, 168h."""
    if seconds < 1:
        return f"{seconds * 1000:g}ms"
    if seconds % 3600 == 0:
        return f"{seconds / 3600:g}h"
    if seconds % 60 == 0:
        return f"{seconds / 60:g}m"
    return f"{seconds:g}s"


def _said(value: object) -> str:
    text = value.strip() if isinstance(value, str) else str(value)
    return text if len(text) <= 40 else text[:40] + "..."


def parse_duration(value: object, *, minimum: float = MIN_DURATION_S, maximum: float = MAX_DURATION_S) -> float:
    """Seconds from ``90``, ``"90s"``, ``"40m"``, ``"8h"``, ``"250ms"``, within [minimum, maximum]."""
    if isinstance(value, bool):
        raise ValueError("a duration is a number of seconds or a string like '40m'")
    if isinstance(value, int):  # float() of an int past 1e308 would raise OverflowError
        seconds = float(value) if abs(value) < 1 << 64 else math.copysign(math.inf, value)
    elif isinstance(value, float):
        seconds = value
    else:
        match = _DURATION.match(str(value).strip())
        if not match:
            raise ValueError(f"{value!r} is not a duration (use e.g. 90s, 40m, 8h)")
        seconds = float(match.group(1)) * _DURATION_SECONDS[match.group(2)]  # inf for a run of digits
    if math.isnan(seconds) or seconds <= 0:
        raise ValueError("a duration must be a positive, finite number of seconds")
    if seconds < minimum:
        raise ValueError(f"{_said(value)} is under the {format_seconds(minimum)} minimum")
    if seconds > maximum:
        raise ValueError(f"{_said(value)} is over the {format_seconds(maximum)} maximum")
    return seconds


def parse_size(value: object) -> int:
    """Bytes from ``1024``, ``"64g"``, ``"512MiB"`` (binary units, as docker's --shm-size), at most
    ``MAX_SIZE_BYTES``."""
    if isinstance(value, bool):
        raise ValueError("a size is a number of bytes or a string like '64g'")
    if isinstance(value, int):
        size: float = value
    else:
        match = _SIZE.match(str(value).strip())
        if not match:
            raise ValueError(f"{value!r} is not a size (use e.g. 64g, 512m, 1024)")
        size = float(match.group(1)) * _SIZE_BYTES[match.group(2).lower()]  # inf for a run of digits
    if size > MAX_SIZE_BYTES:
        raise ValueError(f"{_said(value)} is over the {MAX_SIZE_BYTES:,}-byte (16 TiB) maximum")
    if int(size) <= 0:
        raise ValueError("a size must be positive")
    return int(size)


# What `campaign schema` says a duration or a size is: the number or the text the parser takes. The JSON
# Schema patterns are ECMA regexes (an editor's), the same language as the parser's without its possessive
# marks; surrounding whitespace is allowed because the parser strips it. A text's bounds (under 1ms, over
# 168h, over 16 TiB) are not expressible in a pattern: only the loader refuses those.
_DURATION_TEXT = r"^\s*\d+(\.\d+)?\s*(ms|s|m|h)?\s*$"
_SIZE_TEXT = r"^\s*\d+(\.\d+)?\s*[kmgtKMGT]?([iI]?[bB])?\s*$"


def duration_json_schema(minimum: float = MIN_DURATION_S) -> WithJsonSchema:
    return WithJsonSchema({"anyOf": [
        {"type": "number", "minimum": minimum, "maximum": MAX_DURATION_S},
        {"type": "string", "pattern": _DURATION_TEXT}]})


Duration = Annotated[float, BeforeValidator(parse_duration), duration_json_schema()]
Size = Annotated[int, BeforeValidator(parse_size), WithJsonSchema({"anyOf": [
    {"type": "number", "minimum": 1, "maximum": MAX_SIZE_BYTES},
    {"type": "string", "pattern": _SIZE_TEXT}]})]


def _cpu_number(word: str, text: str) -> int:
    if not (word.isascii() and word.isdigit()):
        raise ValueError(f"{text!r} is not a cpuset: write CPU numbers and ranges, e.g. '1' or '0-3,8'")
    if len(word) > 5 or int(word) >= MAX_CPUS:
        raise ValueError(f"{_said(text)!r}: CPU {word[:12]}{'...' if len(word) > 12 else ''} is past CPU "
                         f"{MAX_CPUS - 1}, the last any Linux machine can have")
    return int(word)


def parse_cpuset(text: str) -> frozenset[int]:
    """A Linux cpuset list, as taskset and docker's --cpuset-cpus write it: '1', '0-3', '0-3,8,10-11';
    every number is checked against ``MAX_CPUS`` before a range is expanded."""
    cpus: set[int] = set()
    for part in str(text).replace(" ", "").split(","):
        first, dash, last = part.partition("-")
        low = _cpu_number(first, text)
        high = _cpu_number(last, text) if dash else low
        if high < low:
            raise ValueError(f"{text!r} is not a cpuset: write CPU numbers and ranges, e.g. '1' or '0-3,8'")
        cpus.update(range(low, high + 1))
    return frozenset(cpus)


def format_cpuset(cpus: frozenset[int] | set[int]) -> str:
    """The canonical form (ranges merged, ascending), so two spellings of one set compare equal."""
    out, ordered = [], sorted(cpus)
    start = prev = None
    for cpu in ordered + [None]:
        if start is None:
            start = prev = cpu
        elif cpu is not None and prev is not None and cpu == prev + 1:
            prev = cpu
        else:
            out.append(str(start) if start == prev else f"{start}-{prev}")
            start = prev = cpu
    return ",".join(out)


def _checked_cpuset(text: str) -> str:
    parse_cpuset(text)
    return text


Cpuset = Annotated[str, AfterValidator(_checked_cpuset)]
