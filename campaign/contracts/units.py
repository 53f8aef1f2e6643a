"""Durations and sizes as people write them in a contract ("40m", "64g"), parsed once at load."""

from __future__ import annotations

import math
import re
from typing import Annotated

from pydantic import AfterValidator, BeforeValidator

__all__ = ["Cpuset", "format_cpuset", "parse_cpuset", "Duration", "Size", "parse_duration", "parse_size"]

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_DURATION_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b)?\s*$", re.IGNORECASE)
_SIZE_BYTES = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_duration(value: object) -> float:
    """Seconds from ``90``, ``"90s"``, ``"40m"``, ``"8h"``, ``"250ms"``."""
    if isinstance(value, bool):
        raise ValueError("a duration is a number of seconds or a string like '40m'")
    if isinstance(value, (int, float)):
        seconds = float(value)
    else:
        match = _DURATION.match(str(value))
        if not match:
            raise ValueError(f"{value!r} is not a duration (use e.g. 90s, 40m, 8h)")
        seconds = float(match.group(1)) * _DURATION_SECONDS[match.group(2)]
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError("a duration must be a positive, finite number of seconds")
    return seconds


def parse_size(value: object) -> int:
    """Bytes from ``1024``, ``"64g"``, ``"512MiB"`` (binary units, as docker's --shm-size)."""
    if isinstance(value, bool):
        raise ValueError("a size is a number of bytes or a string like '64g'")
    if isinstance(value, int):
        size = value
    else:
        match = _SIZE.match(str(value))
        if not match:
            raise ValueError(f"{value!r} is not a size (use e.g. 64g, 512m, 1024)")
        size = int(float(match.group(1)) * _SIZE_BYTES[match.group(2).lower()])
    if size <= 0:
        raise ValueError("a size must be positive")
    return size


Duration = Annotated[float, BeforeValidator(parse_duration)]
Size = Annotated[int, BeforeValidator(parse_size)]


def parse_cpuset(text: str) -> frozenset[int]:
    """A Linux cpuset list, as taskset and docker's --cpuset-cpus write it: '1', '0-3', '0-3,8,10-11'."""
    cpus: set[int] = set()
    for part in str(text).replace(" ", "").split(","):
        first, dash, last = part.partition("-")
        if not first.isdigit() or (dash and not last.isdigit()) or (last and int(last) < int(first)):
            raise ValueError(f"{text!r} is not a cpuset: write CPU numbers and ranges, e.g. '1' or '0-3,8'")
        cpus.update(range(int(first), int(last or first) + 1))
    return frozenset(cpus)


def format_cpuset(cpus: frozenset[int] | set[int]) -> str:
    """The canonical form (ranges merged, ascending), so two spellings of one set compare equal."""
    out, ordered = [], sorted(cpus)
    start = prev = None
    for cpu in ordered + [None]:
        if start is None:
            start = prev = cpu
        elif cpu is not None and cpu == prev + 1:
            prev = cpu
        else:
            out.append(str(start) if start == prev else f"{start}-{prev}")
            start = prev = cpu
    return ",".join(out)


def _checked_cpuset(text: str) -> str:
    parse_cpuset(text)
    return text


Cpuset = Annotated[str, AfterValidator(_checked_cpuset)]

