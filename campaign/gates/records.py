"""The raw records both halves of a gate share: the live half writes them, the offline half (judges,
``campaign rejudge``, ``promote``) reads them back through this module only.

A visit is one boot of one lane. Its key names the lane and the boot: the first boot is the lane's name,
a control's later boots add ``@rerun<N>``. ``@`` is not allowed in a lane name, so no lane name can
collide with another lane's later boot.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from campaign.fsutil import read_jsonl

__all__ = ["GreedyReplay", "VisitKey", "greedy_replays", "raw_path", "read_records", "select"]

_KEY = re.compile(r"^(?P<lane>[^@/\\]++)(?:@rerun(?P<boot>[1-9]\d*+))?+$")  # possessive: linear


@dataclass(frozen=True, order=True)
class VisitKey:
    """One boot of a lane: ``boot`` 0 is its first, N its N-th re-run (controls only)."""

    lane: str
    boot: int = 0

    def __post_init__(self) -> None:
        if "@" in self.lane or self.boot < 0:
            raise ValueError(f"not a visit: lane {self.lane!r}, boot {self.boot}")

    def __str__(self) -> str:
        return self.lane if self.boot == 0 else f"{self.lane}@rerun{self.boot}"

    @classmethod
    def parse(cls, text: str) -> VisitKey:
        match = _KEY.match(text)
        if match is None:
            raise ValueError(f"{text!r} is not a visit key (<lane> or <lane>@rerun<N>)")
        return cls(match["lane"], int(match["boot"] or 0))


def raw_path(bundle: Path, gate_id: str, visit: VisitKey | str) -> Path:
    return bundle / "raw" / gate_id / f"{visit}.jsonl"


def read_records(bundle: Path, gate_id: str, visit: VisitKey | str) -> list[dict[str, Any]]:
    """Records of one visit of one gate, in the order they were written ([] when the visit wrote none)."""
    path = raw_path(bundle, gate_id, visit)
    if not path.exists():
        key = visit if isinstance(visit, VisitKey) else VisitKey.parse(visit)
        # bundles written before visit keys were values named a control's re-run <lane>.rerun<N>
        path = bundle / "raw" / gate_id / f"{key.lane}.rerun{key.boot}.jsonl" if key.boot else path
    return read_jsonl(path) if path.exists() else []


def select(records: list[dict[str, Any]], **tags: Any) -> list[dict[str, Any]]:
    """Records whose tags include every given key with that value."""
    return [r for r in records if all((r.get("tags") or {}).get(k) == v for k, v in tags.items())]


@dataclass(frozen=True)
class GreedyReplay:
    """A measured greedy chat request and the reply it got: sent again, it must come back byte-identical."""

    prompt: str | None
    path: str
    request: dict[str, Any]
    reply: str


def greedy_replays(records: list[dict[str, Any]], *, limit: int) -> list[GreedyReplay]:
    """Up to ``limit`` first-repeat, temperature-0, non-streamed chat requests that got a reply."""
    out: list[GreedyReplay] = []
    for record in records:
        request = record.get("request") or {}
        if (record.get("tags") or {}).get("repeat") != 0 or request.get("temperature") != 0 or request.get("stream"):
            continue
        try:
            reply = record["response"]["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            continue
        out.append(GreedyReplay(prompt=(record.get("tags") or {}).get("prompt"), path=str(record["path"]),
                                request=request, reply=reply))
        if len(out) == limit:
            break
    return out
