"""A gate result's headline (campaign.presentation.headline): one line of at most 100 characters that opens
with the verdict and says the sentence that decided it, whatever the reasons hold."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from campaign.presentation import HEADLINE_CHARS, fit, headline

# teacher_forced's shape: its instrument's notes on checks it passed come first, the rule's sentences after
NOTES = ["instrument: lane base gave back 44/44 greedy tokens at rank 1, max drift 0.5357 nats, mean 0.0666 "
         "(tolerance 1.0: the scoring path, drift measured on this engine and device, capped by max_site_delta)",
         "instrument: lane fa-off gave back 44/44 greedy tokens at rank 1, max drift 0.6467 nats"]


def test_a_fail_is_the_rule_not_met_never_the_instruments_notes() -> None:
    result = {"verdict": "FAIL", "reasons": [*NOTES, "site |delta logprob| max 0.2411 <= 1.0 nats over 2 sites",
                                             "noninferiority max |delta| 1.296220 > 1.0 nats over 25 tokens"]}
    assert headline(result) == "FAIL noninferiority max |delta| 1.296220 > 1.0 nats over 25 tokens"
    passed = {**result, "verdict": "PASS", "reasons": [*NOTES, "site |delta logprob| max 0.2411 <= 1.0 nats"]}
    assert headline(passed) == "PASS site |delta logprob| max 0.2411 <= 1.0 nats"


def test_a_fail_is_never_a_sentence_that_was_met() -> None:
    screen = {"verdict": "FAIL", "reasons": ["p99_ms 12.3 < 50: holds", "hit_rate 0.4 >= 0.6: does not hold"]}
    assert headline(screen) == "FAIL hit_rate 0.4 >= 0.6: does not hold"
    needle = {"verdict": "FAIL", "reasons": ["candidate passed rungs up to 8192 tokens (4/4 rungs); required 8192: met",
                                             "control reached 16384 tokens: candidate is below it"]}
    assert headline(needle) == "FAIL control reached 16384 tokens: candidate is below it"


def test_an_undecided_gate_says_the_rule_it_could_not_judge_not_a_check_that_passed() -> None:
    result = {"verdict": "INCONCLUSIVE", "reasons": [
        *NOTES, "site |delta logprob| max 0.2411 <= 1.0 nats over 2 sites",
        "cross-server |delta| max: the bound 0.001 nats is below what the instrument resolves on this device"]}
    assert headline(result).startswith("INCONCLUSIVE cross-server |delta| max: the bound 0.001 nats is below")
    greedy = {"verdict": "INCONCLUSIVE", "reasons": ["self_identical 8/8 >= required 8/8",
                                                     "the engine is not deterministic at this config"]}
    assert headline(greedy) == "INCONCLUSIVE the engine is not deterministic at this config"


def test_an_undecided_instrument_says_what_went_wrong_and_a_carried_headline_is_kept() -> None:
    result = {"verdict": "INCONCLUSIVE", "reasons": ["instrument: the speed numbers cannot be judged",
                                                     "C4: the control moved +72.2% from one of its boots to the next"]}
    assert headline(result) == "INCONCLUSIVE instrument: C4: the control moved +72.2% from one of its boots to the next"
    assert headline({**result, "headline": "INCONCLUSIVE C1 +8.8% [-29.0%, +67.0%], 4 pairs; bar +5%"}) == (
        "INCONCLUSIVE C1 +8.8% [-29.0%, +67.0%], 4 pairs; bar +5%")
    assert headline({"verdict": "PASS"}) == "PASS without a stated reason"
    # a headline that says another verdict than the result holds (a result edited by hand) is not its own
    edited = {"verdict": "FAIL", "reasons": ["edited"], "headline": "PASS self_identical 2/2 >= required 2/2"}
    assert headline(edited) == "FAIL edited"


def test_a_long_reason_is_cut_at_a_word_with_an_ellipsis() -> None:
    words = "C1 decode_tok_s: +44.7% [98.3% CI +31.4%, +59.5%] after 2 boot pair(s), look 1 of 3 (drift taken out)"
    cut = fit(f"PASS {words} {words}")
    assert len(cut) <= HEADLINE_CHARS and cut.endswith("…") and cut[:-1] == cut[:-1].rstrip()
    assert f"PASS {words} {words}".startswith(cut[:-1])


@given(st.lists(st.text(max_size=400), max_size=6), st.sampled_from(["PASS", "FAIL", "INCONCLUSIVE", "VOID"]),
       st.one_of(st.none(), st.text(max_size=300)))
def test_any_result_gives_one_short_line(reasons: list[str], verdict: str, carried: str | None) -> None:
    line = headline({"verdict": verdict, "reasons": reasons, "headline": carried})
    assert 0 < len(line) <= HEADLINE_CHARS and "\n" not in line and "\r" not in line
