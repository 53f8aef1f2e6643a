"""A bound judged against what the instrument resolves on the device (gates.common.resolution)."""

from __future__ import annotations

import pytest

from campaign.gates.common.resolution import judge_bound
from campaign.gates.result import Verdict

HERE = (0.6, "the control's generation against its teacher forcing, max")


@pytest.mark.parametrize(("value", "bound", "resolves", "verdict"), [
    (0.2, 1.0, HERE, Verdict.PASS),  # a bound above the resolution: judged as written
    (1.1, 1.0, HERE, Verdict.FAIL),
    (0.2, 1.0, None, Verdict.PASS),  # nothing measured of the instrument: judged as written
    (1.1, 1.0, None, Verdict.FAIL),
    (0.3, 0.5, HERE, Verdict.INCONCLUSIVE),  # within the device's rounding, under a bound finer than it
    (0.55, 0.5, HERE, Verdict.INCONCLUSIVE),
    (0.0, 0.5, HERE, Verdict.INCONCLUSIVE),  # an A/A's zero says nothing a bound below the resolution can judge
    (2.75, 0.5, HERE, Verdict.FAIL),  # beyond the bound and the rounding: a loss, whatever the bound
])
def test_a_bound_below_the_resolution_is_undecided_within_it_and_fails_beyond_it(
        value: float, bound: float, resolves: tuple[float, str] | None, verdict: Verdict) -> None:
    got, reason = judge_bound("noninferiority max |delta|", value, bound, resolves)
    assert got is verdict, reason
    if verdict is Verdict.INCONCLUSIVE:
        assert reason == (f"noninferiority max |delta|: the bound {bound} nats is below what the instrument resolves "
                          f"on this device (0.600000 nats, {HERE[1]}); measured {value:.6f}, within it: a bound of "
                          "at least 0.600000 can be judged here")
