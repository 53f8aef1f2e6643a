"""Latency as users feel it: a request's samples of a tail, whether it met the SLO, goodput, and the
saturation knee.

Goodput follows ``vllm bench serve --goodput``: a request is good when its time to first token, its mean
time per output token after the first and its whole time are each within the SLO's bound (the bounds it
gives); a failed request is never good. A lane meets the SLO at a level while at least ``min_good_share``
of its requests there are good. The paired change in the good share is each candidate boot against the
mean of the control boots on either side of it (the interleaved design's pair), with a t interval over
pairs: reported, not judged.
"""

from __future__ import annotations

import itertools
import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Sequence

from campaign.gates.common.streams import StreamStats
from campaign.gates.speed.spec import Level, Slo, load_order

__all__ = ["BootGoodput", "highest_meeting", "is_good", "knee", "paired_share_change", "pooled", "samples"]


def samples(stats: StreamStats, quantity: str) -> tuple[float, ...]:
    """A request's samples of a latency tail: its TTFT, its whole time, or each gap between its chunks."""
    if quantity == "itl":
        return stats.itl_s
    return (stats.ttft_s,) if quantity == "ttft" else (stats.elapsed_s,)


def is_good(stats: StreamStats, slo: Slo) -> bool:
    # one token has no time per output token (vLLM counts it 0): only its TTFT and whole time are bounded
    tpot = 1.0 / stats.decode_tok_s if stats.decode_tok_s else 0.0
    return ((slo.ttft_s is None or stats.ttft_s <= slo.ttft_s) and (slo.tpot_s is None or tpot <= slo.tpot_s)
            and (slo.e2e_s is None or stats.elapsed_s <= slo.e2e_s))


@dataclass
class BootGoodput:
    """One boot at one level: its requests in the counted rows, the good ones, and the reps' measured time."""

    role: str
    position: int
    candidate: bool
    requests: int = 0
    good: int = 0
    seconds: float = 0.0

    def add(self, stats: Sequence[StreamStats], failed: int, seconds: float, slo: Slo) -> None:
        self.requests += len(stats) + failed
        self.good += sum(is_good(s, slo) for s in stats)
        self.seconds += seconds

    @property
    def share(self) -> float | None:
        return self.good / self.requests if self.requests else None


@dataclass
class Pooled:
    requests: int = 0
    good: int = 0
    seconds: float = 0.0
    boots: list[float | None] = field(default_factory=list)


def pooled(boots: Sequence[BootGoodput], slo: Slo) -> dict[str, dict[str, Any]]:
    """Per lane (control, candidate): requests, good, the good share, goodput (good requests a second of
    measured reps), each boot's share, and whether the lane met the SLO here."""
    out: dict[str, Pooled] = {}
    for boot in sorted(boots, key=lambda b: b.position):
        lane = out.setdefault("candidate" if boot.candidate else "control", Pooled())
        lane.requests, lane.good, lane.seconds = lane.requests + boot.requests, lane.good + boot.good, \
            lane.seconds + boot.seconds
        lane.boots.append(None if boot.share is None else round(boot.share, 4))
    return {name: {"requests": lane.requests, "good": lane.good,
                   "share": round(lane.good / lane.requests, 4) if lane.requests else None,
                   "goodput_rps": round(lane.good / lane.seconds, 3) if lane.seconds else None,
                   "boot_shares": lane.boots,
                   "meets_slo": bool(lane.requests) and lane.good / lane.requests >= slo.min_good_share}
            for name, lane in out.items()}


def paired_share_change(boots: Sequence[BootGoodput], confidence: float) -> dict[str, Any] | None:
    """The candidate's good share minus its bracketing controls' mean, per pair; the mean over pairs and, from
    two pairs, its t interval. None when no candidate boot has a control boot on both sides."""
    by_position = {b.position: b.share for b in boots}
    diffs = []
    for boot in boots:
        before, after = by_position.get(boot.position - 1), by_position.get(boot.position + 1)
        if boot.candidate and boot.share is not None and before is not None and after is not None:
            diffs.append(boot.share - (before + after) / 2)
    if not diffs:
        return None
    mean = statistics.fmean(diffs)
    out: dict[str, Any] = {"change": round(mean, 4), "pairs": len(diffs), "confidence": confidence, "ci": None}
    if len(diffs) >= 2:
        # imported here: scipy.stats takes half a second to import, which every command would pay at start
        from scipy import stats as sps

        half = float(sps.t.ppf(1 - (1 - confidence) / 2, len(diffs) - 1)) * statistics.stdev(diffs) / math.sqrt(len(diffs))
        out["ci"] = [round(mean - half, 4), round(mean + half, 4)]
    return out


def highest_meeting(levels: Sequence[Level], met: dict[Level, bool]) -> dict[str, Level | None]:
    """Per kind of load (concurrency, rate), the highest level a lane serves within the SLO with every lower
    level of that kind also within it: where goodput stays above the target as the load rises."""
    out: dict[str, Level | None] = {}
    for kind, chosen in (("concurrency", [lv for lv in levels if isinstance(lv, int)]),
                         ("rate", [lv for lv in levels if isinstance(lv, str)])):
        if not chosen:
            continue
        best: Level | None = None
        for level in sorted(chosen, key=load_order):
            if not met.get(level):
                break
            best = level
        out[kind] = best
    return out


KNEE_EFFICIENCY = 0.5  # past the knee, a step up in load buys less than half its proportional throughput


def knee(levels: Sequence[Level], throughput: dict[Level, float], within_slo: dict[Level, bool] | None) -> dict[str, Any]:
    """Per kind of load, the level after which throughput stops growing with the load: the first level from
    which the next step up gives less than ``KNEE_EFFICIENCY`` of its proportional gain (load x2, throughput
    under x1.5), or past which the SLO breaks. None when every measured step still grows (the knee is above
    the levels measured); a kind with one measured level has no knee to find."""
    out: dict[str, Any] = {}
    for kind, of_kind in (("concurrency", [lv for lv in levels if isinstance(lv, int)]),
                          ("rate", [lv for lv in levels if isinstance(lv, str)])):
        chosen: list[Level] = sorted((lv for lv in of_kind if throughput.get(lv)), key=load_order)
        if len(chosen) < 2:
            continue
        out[kind] = {"level": None, "why": "throughput still grew at every step measured"}
        for low, high in itertools.pairwise(chosen):
            load = load_order(high)[1] / load_order(low)[1]
            gain = (throughput[high] / throughput[low] - 1) / (load - 1)
            if within_slo is not None and not within_slo.get(high, False):
                out[kind] = {"level": low, "why": f"the SLO breaks at the next level ({gain:.0%} of the "
                                                  "proportional throughput gain)"}
                break
            if gain < KNEE_EFFICIENCY:
                out[kind] = {"level": low, "why": f"the next level gives {gain:.0%} of the proportional "
                                                  f"throughput gain (under {KNEE_EFFICIENCY:.0%})"}
                break
    return out
