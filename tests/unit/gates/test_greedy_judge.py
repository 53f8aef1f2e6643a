"""The greedy judge on hand-written raw records: it reads only the bundle, so its rules can be
pinned without an engine. (Engine-backed greedy runs are in tests/window.)"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from campaign.gates.greedy import MARGIN_P, sign_test_p
from campaign.gates.result import Verdict
from tests.support.greedyrecords import greedy_gate


def test_identical_repeats_pass_and_cross_identity_is_counted(tmp_path: Path) -> None:
    base = {"capital": ["Paris.", "Paris."], "haiku": ["Waves.", "Waves."], "fib": ["def f", "def f"]}
    spec = {"capital": ["Paris.", "Paris."], "haiku": ["Tides.", "Tides."], "fib": ["def f", "def f"]}
    gate, cand, ctrl = greedy_gate(tmp_path, {"base": base, "spec": spec})
    result = gate.judge(cand, ctrl)
    assert result.verdict is Verdict.PASS
    assert result.metrics["self_identical"].value == 3
    assert result.metrics["cross_identical"].value == 2
    assert result.details["prompts"][1]["first_divergence_char"] == 0


def test_a_candidate_that_diverges_where_a_deterministic_control_does_not_fails(tmp_path: Path) -> None:
    base = {f"p{i}": [f"Reply {i}.", f"Reply {i}."] for i in range(8)}
    spec = {f"p{i}": [f"Reply {i}.", f"Reply {i}!"] for i in range(7)} | {"p7": ["Reply 7.", "Reply 7."]}
    gate, cand, ctrl = greedy_gate(tmp_path, {"base": base, "spec": spec}, rule='"8/8"')
    result = gate.judge(cand, ctrl)
    assert result.verdict is Verdict.FAIL
    assert result.reasons[0].startswith("self_identical 1/8 < required 8/8; the control's own is 8/8")
    assert result.details["paired"]["self_identical"] | {"sign_test_p": None} == {
        "candidate": 1, "control": 8, "of": 8, "worse": 7, "better": 0, "sign_test_p": None, "fail_at_p": MARGIN_P}


def test_a_miss_within_the_controls_own_variation_is_inconclusive_not_fail(tmp_path: Path) -> None:
    """Two prompts apart on eight is what two equally deterministic lanes give now and then."""
    base = {f"p{i}": [f"Reply {i}.", f"Reply {i}."] for i in range(8)}
    spec = {**base, "p0": ["Reply 0.", "Reply 0!"], "p1": ["Reply 1.", "Reply 1!"]}
    gate, cand, ctrl = greedy_gate(tmp_path, {"base": base, "spec": spec}, rule='"8/8"')
    result = gate.judge(cand, ctrl)
    assert result.verdict is Verdict.INCONCLUSIVE
    assert "self_identical 6/8 < required 8/8, but the control's own is 8/8" in result.reasons[0]
    assert "within the engine's own variation" in result.reasons[0] and "more prompts" in result.reasons[0]


def test_an_engine_that_is_not_deterministic_cannot_fail_an_a_a(tmp_path: Path) -> None:
    """The H200's case: the control itself is self-identical on 3 of 8 under --parallel; the same config
    again (an A/A) on 4 of 8 is not the candidate's doing."""
    drift = {i: [f"Reply {i}.", f"Reply {i}!"] for i in range(8)}
    steady = {i: [f"Reply {i}.", f"Reply {i}."] for i in range(8)}
    base = {f"p{i}": (steady if i in (0, 1, 2) else drift)[i] for i in range(8)}
    same_again = {f"p{i}": (steady if i in (2, 3, 4, 5) else drift)[i] for i in range(8)}
    gate, cand, ctrl = greedy_gate(tmp_path, {"base": base, "spec": same_again}, rule='"8/8"')
    result = gate.judge(cand, ctrl)
    assert result.verdict is Verdict.INCONCLUSIVE
    assert result.reasons[0].startswith("the engine is not deterministic at this config (control self-identical "
                                        "3/8): greedy identity cannot separate the candidate")
    assert "use teacher_forced margins" in result.reasons[0]
    assert any("the candidate is judged against that" in c for c in result.caveats)


def test_cross_identity_is_weighed_against_the_controls_own_repeats(tmp_path: Path) -> None:
    base = {f"p{i}": [f"Reply {i}.", f"Reply {i}."] for i in range(8)}
    spec = {f"p{i}": [f"Other {i}.", f"Other {i}."] for i in range(8)}
    contract_rule = '"8/8", cross_identical: "8/8"'
    gate, cand, ctrl = greedy_gate(tmp_path, {"base": base, "spec": spec}, rule=contract_rule)
    result = gate.judge(cand, ctrl)
    assert result.verdict is Verdict.FAIL  # the control repeats itself on every prompt; the candidate never matches it
    assert any(r.startswith("cross_identical 0/8 < required 8/8; the control's own is 8/8") for r in result.reasons)


@pytest.mark.parametrize(("worse", "better", "p"), [(0, 0, 1.0), (1, 0, 0.5), (3, 0, 0.125), (7, 0, 1 / 128),
                                                    (6, 1, 8 / 128), (2, 2, 11 / 16)])
def test_the_sign_test_is_the_exact_binomial_tail(worse: int, better: int, p: float) -> None:
    assert sign_test_p(worse, better) == pytest.approx(p)


def test_an_a_a_fails_at_most_at_the_margin_for_any_number_of_discordant_prompts() -> None:
    """Under the null (the two lanes exchangeable: each discordant prompt as likely to go either way), the
    chance of a FAIL is the mass of the worse-counts whose p is at most MARGIN_P: never above it."""
    for discordant in range(0, 121):
        failing = [k for k in range(discordant + 1) if sign_test_p(k, discordant - k) <= MARGIN_P]
        assert sum(math.comb(discordant, k) for k in failing) / 2 ** discordant <= MARGIN_P, discordant
        assert failing == list(range(failing[0], discordant + 1)) if failing else discordant < 7


def test_a_lane_that_answers_nothing_cannot_pass(tmp_path: Path) -> None:
    base = {"capital": ["Paris.", "Paris."], "haiku": ["Waves.", "Waves."], "fib": ["def f", "def f"]}
    spec = {"capital": ["", ""], "haiku": ["", ""], "fib": ["", ""]}
    gate, cand, ctrl = greedy_gate(tmp_path, {"base": base, "spec": spec})
    result = gate.judge(cand, ctrl)
    assert result.verdict is Verdict.INCONCLUSIVE
    assert "empty reply" in " ".join(result.reasons)


def test_the_same_reply_to_every_prompt_is_an_instrument_failure(tmp_path: Path) -> None:
    base = {"capital": ["Paris.", "Paris."], "haiku": ["Waves.", "Waves."], "fib": ["def f", "def f"]}
    spec = {pid: ["OK", "OK"] for pid in base}
    gate, cand, ctrl = greedy_gate(tmp_path, {"base": base, "spec": spec})
    result = gate.judge(cand, ctrl)
    assert result.verdict is Verdict.INCONCLUSIVE
    assert "same reply to all 3 prompts" in result.reasons[0]


def test_missing_records_are_inconclusive(tmp_path: Path) -> None:
    base = {"capital": ["Paris.", "Paris."], "haiku": ["Waves.", "Waves."], "fib": ["def f", "def f"]}
    spec = {"capital": ["Paris.", "Paris."], "haiku": ["Waves."]}
    gate, cand, ctrl = greedy_gate(tmp_path, {"base": base, "spec": spec})
    result = gate.judge(cand, ctrl)
    assert result.verdict is Verdict.INCONCLUSIVE
    assert any("no valid reply for repeats [1]" in r for r in result.reasons)


def test_a_reply_built_on_a_cached_prompt_can_blame_no_one(tmp_path: Path) -> None:
    """Repeats the engine answered from its prompt cache (an older bundle's, or an engine that ignored
    cache_prompt: false) ran other kernels: a miss may be the cache's, so it is no FAIL; identity despite it holds."""
    base = {f"p{i}": [f"Reply {i}.", f"Reply {i}."] for i in range(8)}
    spec = {f"p{i}": [f"Reply {i}.", f"Reply {i}!"] for i in range(7)} | {"p7": ["Reply 7.", "Reply 7."]}
    gate, cand, ctrl = greedy_gate(tmp_path, {"base": base, "spec": spec}, rule='"8/8"', cached=6)
    result = gate.judge(cand, ctrl)
    assert result.verdict is Verdict.INCONCLUSIVE
    assert result.reasons[0] == ("instrument: replies were built on a cached prompt (base 8, spec 8), so a difference "
                                 "may be the cache's, not the candidate's")
    (tmp_path / "same").mkdir()
    same, cand, ctrl = greedy_gate(tmp_path / "same", {"base": base, "spec": base}, rule='"8/8"', cached=6)
    passed = same.judge(cand, ctrl)
    assert passed.verdict is Verdict.PASS and any("cached prompt" in c for c in passed.caveats)
