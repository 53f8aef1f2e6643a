"""Engine /metrics in the Prometheus text format, parsed into samples and differenced.

Raw scrape text is what a gate records; parsing and deltas are pure, so a bundle can be re-judged.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable

__all__ = ["Samples", "counter_deltas", "metric_name", "parse_prometheus", "sample_key", "series", "series_sum",
           "totals"]

Samples = dict[str, float]  # "name" or 'name{label="v",...}' (labels sorted) -> value

_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(?:\s+\S+)?\s*$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')


def sample_key(name: str, labels: dict[str, str] | None = None) -> str:
    if not labels:
        return name
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return f"{name}{{{inner}}}"


def metric_name(key: str) -> str:
    """The metric a sample key belongs to (a histogram's ``_sum`` and ``_count`` are metrics of their own)."""
    return key.partition("{")[0]


def parse_prometheus(text: str) -> Samples:
    """Samples of a text exposition; comments, blank and unparseable lines are skipped (an engine may
    add lines this parser does not know, and one odd line must not lose the rest)."""
    samples: Samples = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = _LINE.match(line)
        if not match:
            continue
        name, _, label_text, value_text = match.groups()
        labels = dict(_LABEL.findall(label_text)) if label_text else {}
        try:
            value = float(value_text)
        except ValueError:
            continue
        if math.isnan(value):
            continue
        samples[sample_key(name, labels)] = value
    return samples


def counter_deltas(before: Samples, after: Samples) -> Samples:
    """after - before for every sample after the row. A series first seen after counts from zero (an
    engine may export a labelled counter only once it is non-zero). A negative delta on a counter
    means the engine restarted between the scrapes; it is kept, so the caller can refuse it."""
    return {key: value - before.get(key, 0.0) for key, value in after.items()}


def series(samples: Samples, name: str) -> list[tuple[dict[str, str], float]]:
    """Every sample of metric ``name`` with its labels (an engine labels one counter by engine index,
    model, finish reason, position...)."""
    out = []
    for key, value in samples.items():
        base, brace, rest = key.partition("{")
        if base != name:
            continue
        out.append((dict(_LABEL.findall(rest[:-1])) if brace else {}, value))
    return out


def series_sum(samples: Samples, name: str, **labels: str) -> float | None:
    """The sum of ``name`` over every label set that has ``labels``; None when the engine exports no
    such series (absent is not zero)."""
    found = [value for have, value in series(samples, name) if all(have.get(k) == v for k, v in labels.items())]
    return sum(found) if found else None


def totals(samples: Samples, names: Iterable[str] | None = None) -> Samples:
    """Each metric's value summed over its label sets, in the order the metrics first appear; only the
    metrics in ``names`` when given (one absent from the scrape stays absent, not zero)."""
    wanted = None if names is None else set(names)
    out: Samples = {}
    for key, value in samples.items():
        name = metric_name(key)
        if wanted is None or name in wanted:
            out[name] = out.get(name, 0.0) + value
    return out
