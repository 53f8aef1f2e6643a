"""A bound on a difference, judged against what the instrument resolves on this device.

A quality gate that compares two lanes' scores also measures the control against itself (its rerun, and its own
two kernel paths): that difference is the device's rounding of one computation, and a candidate that differs by
no more cannot be told from the control. A bound at or above it is judged as written. A bound below it cannot
be judged as written: a value beyond both the bound and the resolution is still a valid FAIL (more than the
device's rounding, and more than the contract allows); a value within the resolution is INCONCLUSIVE, naming
both numbers, never a FAIL."""

from __future__ import annotations

from campaign.gates.result import Verdict

__all__ = ["judge_bound"]


def judge_bound(what: str, value: float, bound: float, resolves: tuple[float, str] | None) -> tuple[Verdict, str]:
    """``what`` (e.g. "KL mean") measured at ``value`` nats against a not-above ``bound``; ``resolves``, what the
    instrument resolves here and where that comes from (None: not measured, the bound is judged as written)."""
    if resolves is None or bound >= resolves[0]:
        ok = value <= bound
        return (Verdict.PASS if ok else Verdict.FAIL), f"{what} {value:.6f} {'<=' if ok else '>'} {bound} nats"
    floor, source = resolves
    if value > floor:
        return Verdict.FAIL, (f"{what} {value:.6f} > {bound} nats, and beyond what the instrument resolves on this "
                              f"device ({floor:.6f} nats, {source})")
    return Verdict.INCONCLUSIVE, (f"{what}: the bound {bound} nats is below what the instrument resolves on this "
                                  f"device ({floor:.6f} nats, {source}); measured {value:.6f}, within it: a bound of "
                                  f"at least {floor:.6f} can be judged here")
