"""Prometheus text exposition, parsed into flat counters, and the speculative-decoding numbers that
vLLM and llama-server both expose under their own prefix (``vllm:``, ``llamacpp:``).

Keys are ``name`` or ``name{label="value",...}`` with labels sorted. Labels that only say which
engine or model a series belongs to are dropped and their series summed, so a key means the same
thing on every server (``vllm:spec_decode_num_accepted_tokens_per_pos_total{position="0"}``).
``_created`` series are timestamps, not measurements, and are skipped.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

__all__ = ["SpecDecode", "metric", "parse_prometheus", "spec_decode_delta"]

IDENTITY_LABELS = frozenset({"engine", "model_name", "model"})
_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\S+)?$")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"')


def parse_prometheus(text: str, *, drop_labels: frozenset[str] = IDENTITY_LABELS) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if not match:
            continue
        name, labels, raw = match.groups()
        if name.endswith("_created"):
            continue
        try:
            value = float(raw)
        except ValueError:
            continue
        kept = sorted((k, v) for k, v in _LABEL.findall(labels or "") if k not in drop_labels)
        key = name + ("{" + ",".join(f'{k}="{v}"' for k, v in kept) + "}" if kept else "")
        out[key] = out.get(key, 0.0) + value
    return out


def metric(metrics: dict[str, float], name: str, **labels: str) -> float | None:
    key = name + ("{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}" if labels else "")
    return metrics.get(key)


@dataclass(frozen=True)
class SpecDecode:
    """Speculative decoding between two scrapes: counts, and what follows from them."""

    drafts: float
    draft_tokens: float
    accepted_tokens: float
    accepted_per_position: list[float] = field(default_factory=list)

    @property
    def acceptance_rate(self) -> float | None:
        """Accepted draft tokens per proposed draft token."""
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens else None

    @property
    def mean_acceptance_length(self) -> float | None:
        """Tokens emitted per verification step: 1 (the target's own token) + accepted per draft."""
        return 1.0 + self.accepted_tokens / self.drafts if self.drafts else None

    @property
    def per_position_rate(self) -> list[float | None]:
        """Position k accepted per draft (a draft that stops early never reaches later positions)."""
        return [a / self.drafts if self.drafts else None for a in self.accepted_per_position]


def spec_decode_delta(before: dict[str, float], after: dict[str, float], prefix: str) -> SpecDecode | None:
    """None when the server exposes no speculative-decoding counters (it was not speculating)."""
    names = {"drafts": f"{prefix}spec_decode_num_drafts_total",
             "draft_tokens": f"{prefix}spec_decode_num_draft_tokens_total",
             "accepted_tokens": f"{prefix}spec_decode_num_accepted_tokens_total"}
    if names["drafts"] not in after:
        return None

    def delta(key: str) -> float:
        value = after.get(key, 0.0) - before.get(key, 0.0)
        if value < 0 or math.isnan(value):
            raise ValueError(f"counter {key} went from {before.get(key)} to {after.get(key)}: server restarted?")
        return value

    per_pos_prefix = f'{prefix}spec_decode_num_accepted_tokens_per_pos_total{{position="'
    positions = sorted(int(k[len(per_pos_prefix):].split('"', 1)[0]) for k in after if k.startswith(per_pos_prefix))
    per_pos = [delta(f'{per_pos_prefix}{p}"}}') for p in positions]
    return SpecDecode(drafts=delta(names["drafts"]), draft_tokens=delta(names["draft_tokens"]),
                      accepted_tokens=delta(names["accepted_tokens"]), accepted_per_position=per_pos)
