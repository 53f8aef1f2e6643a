"""How verdicts combine (campaign.verdicts), and an older summary read by today's rule."""

from __future__ import annotations

import copy

from hypothesis import given
from hypothesis import strategies as st

from campaign.gates.result import Verdict, combine
from campaign.receipts.decision import decisions, read_with_current_rule
from campaign.verdicts import VERDICT_RULE, combine_names

NAMES = st.lists(st.sampled_from(["PASS", "FAIL", "INCONCLUSIVE", "VOID"]), max_size=6)


@given(NAMES)
def test_a_valid_fail_decides_and_pass_needs_every_verdict(verdicts: list[str]) -> None:
    got = combine_names(verdicts)
    if "FAIL" in verdicts:
        assert got == "FAIL"
    elif verdicts and set(verdicts) == {"PASS"}:
        assert got == "PASS"
    else:
        assert got == "INCONCLUSIVE"  # nothing, or something undecided
    assert combine([Verdict(v) for v in verdicts]).value == got


def v1_summary() -> dict:
    """A window judged by v1: the K/V lane's three FAILs hidden behind an undecided greedy."""
    gates = {"greedy": {"verdict": "INCONCLUSIVE", "reasons": ["the engine is not deterministic at this config"]},
             "kl": {"verdict": "FAIL", "reasons": ["KL mean 0.072 > 0.05 nats over 28 tokens"]},
             "speed": {"verdict": "FAIL", "reasons": ["C1 decode_tok_s: -15%"]}}
    return {"status": "complete", "window": "w", "restore": {"incumbent": "daily", "proved": True},
            "candidates": {"kv-q4": {"control": "base", "gates": gates, "promotion_gates": ["greedy", "kl", "speed"],
                                     "promotion_rule": True, "overall": "INCONCLUSIVE"},
                           "same": {"control": "base", "promotion_gates": ["greedy"], "promotion_rule": True,
                                    "gates": {"greedy": {"verdict": "PASS", "reasons": []}}, "overall": "PASS"}}}


def test_an_older_summary_is_read_by_todays_rule_and_says_so() -> None:
    read = read_with_current_rule(v1_summary())
    lane = read["candidates"]["kv-q4"]
    assert lane["overall"] == "FAIL" and lane["overall_as_judged"] == "INCONCLUSIVE"
    assert "overall_as_judged" not in read["candidates"]["same"]
    assert read["verdict_rule_note"] == (f"judged by campaign.verdicts/v1, read with {VERDICT_RULE} (a valid FAIL "
                                         "decides over an undecided gate): kv-q4 INCONCLUSIVE -> FAIL")
    # the decision a person reads names the gate that lost, whichever rule the bundle was judged by
    (kv, _) = decisions(read)
    assert kv.decision == "REFUSED" and kv.gate == "kl"


def test_a_summary_judged_by_todays_rule_is_left_as_it_is() -> None:
    summary = v1_summary() | {"verdict_rule": VERDICT_RULE}
    assert read_with_current_rule(copy.deepcopy(summary)) == summary
