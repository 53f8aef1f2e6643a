"""A tie at the top is the greedy token at rank 1, on every engine's shape of scores: by id (llama-server,
vLLM) and by text only (llama-cpp-python's echo). Constructed, not found: no CPU's rounding is needed
to produce the tie."""

from __future__ import annotations

import pytest

from campaign.gates.teacher_forced import InstrumentCheck, check_instrument
from campaign.lanes.engines.scoring import Alt, Generation, Position, TokenSeq


@pytest.mark.parametrize("by_id", [True, False])
def test_exact_tie_at_the_top_is_rank_one(by_id: bool) -> None:
    lp = -1.779797
    greedy_id, other_id = (7, 9) if by_id else (None, None)
    # the tie partner listed first, as an engine sorting ties by id may list it
    top = (Alt(other_id, " b", lp), Alt(greedy_id, " a", lp), Alt(None if not by_id else 3, " c", -2.5))
    made = Position(greedy_id, " a", lp, top)
    gen = Generation(tokens=TokenSeq((7,), " a", (" a",)), positions=(made,), finish="length")
    forced = [Position(greedy_id, " a", lp, top), Position(None, "", -0.1, ())]
    check = InstrumentCheck()
    check_instrument(gen, forced, 0.0, "lane", check)
    assert check.failures == [] and check.within == 1 and check.rank1_strict == 1
    # and a token really below the top is not rank 1, tie or not
    below = [Position(greedy_id, " a", lp, (Alt(other_id, " b", lp + 0.5), *top)), Position(None, "", -0.1, ())]
    check = InstrumentCheck()
    check_instrument(gen, below, 0.01, "lane", check)
    assert check.within == 0 and "rank 2" in check.failures[0]
