"""Arrival schedules of rate levels: when each request of a rep is sent.

A schedule is drawn before the rep from the contract's seed, the level and the prompt class, never the
lane, so every boot of every lane replays the same one (the comparison is paired on the load, not only on
the prompts); each rep of a row replays it too, so the reps' spread is the server's, not the schedule's.
"""

from __future__ import annotations

import random

from campaign.gates.speed.spec import RATE_UNIT, Arrival

__all__ = ["rate_of", "schedule"]


def rate_of(level: str) -> float:
    """Requests per second of a rate level's key ("2rps" -> 2.0)."""
    return float(level.removesuffix(RATE_UNIT))


def schedule(arrival: Arrival, level: str, cls: str, count: int) -> list[float]:
    """Seconds from the rep's start at which each of ``count`` requests is sent, the first at 0."""
    rate = rate_of(level)
    if arrival.process == "constant":
        return [i / rate for i in range(count)]
    # random.Random seeds a str through SHA-512 (version 2): the same draws on every Python and machine
    draws = random.Random(f"campaign-arrivals:{arrival.seed}:{level}:{cls}")
    offsets, at = [], 0.0
    for _ in range(count):
        offsets.append(at)
        at += draws.expovariate(rate)
    return offsets
