"""The speed judge on hand-written raw records: the fit over interleaved boots and the frozen bar, the
looks and when they stop, VOID rows and boots that do not count, control jumps, and the instrument
checks. The judge reads only the bundle, so its rules can be pinned without an engine (engine-backed
runs are in tests/integration/speed/)."""

from __future__ import annotations

from pathlib import Path

import pytest

from campaign.contracts.load import load_contract
from campaign.fsutil import JsonlAppender
from campaign.gates.result import Verdict
from campaign.gates.speed.rows import spread
from tests.support.contracts import write_contract
from tests.support.speedrecords import TOKENS, load_gates, rates, speed_contract, write_boots, write_visit


LANES = """\
- {name: base, role: control}
- name: cand
  role: candidate
  axis: [args.spec-type]
  set: {args: {--spec-type: ngram-simple}}
"""


def contract_body(rule: str = "{}", levels: str = "[1, 2]", pairs: int = 3) -> str:
    return speed_contract(LANES, f"""\
        - kind: speed
          input: p
          concurrency: {levels}
          max_tokens: {TOKENS}
          reps: 2
          max_boot_pairs: {pairs}
          rule: {rule}
        """)


def make_gate(tmp_path: Path, rule: str = "{}", pairs: int = 3):
    loaded, gates = load_gates(tmp_path, contract_body(rule, pairs=pairs))
    return gates[0], loaded.lanes["cand"], loaded.lanes["base"]


def test_spread_is_max_minus_min_over_mean() -> None:
    assert spread([135.0, 700.0, 700.0]) == pytest.approx(1.104, abs=1e-3)  # the seeds' "110%+"
    assert spread([100.0]) is None


def test_a_real_speedup_passes_at_the_first_look_and_asks_for_no_more_boots(tmp_path: Path) -> None:
    gate, cand, ctrl = make_gate(tmp_path)
    write_boots(gate, [rates(), rates(1.01), rates(0.995)], [rates(1.10, wobble=0.01), rates(1.11, wobble=-0.01)])
    result = gate.judge(cand, ctrl)
    assert result.verdict is Verdict.PASS, result.reasons
    assert result.metrics["C1.wins"].value == 6 and result.metrics["C1.wins"].denominator == 6
    assert result.metrics["C1.mean_change"].value == pytest.approx(0.105, abs=0.01)
    assert 0 < result.metrics["C1.ci_low"].value < 0.10 < result.metrics["C1.ci_high"].value
    assert result.metrics["C1.boot_pairs"].value == 2 and result.metrics["C1.ci_low"].denominator == 5
    assert result.details["schedule"]["stopped_at_pairs"] == 2 and result.details["schedule"]["looks"] == 1
    assert "look 1 of 2" in result.reasons[0] and "97.50% CI" in result.reasons[0]  # Bonferroni over 2 looks
    assert result.metrics["C2.candidate_rerun1.per_user_tok_s"].unit == "tok/s per user"
    assert not gate.wants_pair(cand, ctrl, 2)  # decided: the window boots no third pair
    assert gate.wants_pair(cand, ctrl, 1)  # one pair leaves the boots' scatter unmeasured
    first = result.details["levels"]["1"]["prompts"][0]
    assert first["control_rerun1"] == pytest.approx(50.5) and first["change"] > 0.05
    table = gate.bundle_tables()["throughput.csv"]
    assert len(table) == 5 * 2 * 2 * 2  # visits x levels x classes x reps
    assert {row["source"] for row in table} == {"raw/speed/base.jsonl", "raw/speed/base@rerun1.jsonl",
                                                "raw/speed/base@rerun2.jsonl", "raw/speed/cand.jsonl",
                                                "raw/speed/cand@rerun1.jsonl"}


def test_identical_lanes_under_boot_luck_never_pass_and_say_what_could_be_detected(tmp_path: Path) -> None:
    """The run that opened the boot-noise work: an identical lane measured +8% over prompts (8/8 wins)
    while the control's own boots differed by 4%. Every prompt of one boot shares its luck."""
    # futility off: every pair the contract allows is booted
    gate, cand, ctrl = make_gate(tmp_path, rule="{futility: none}")
    write_boots(gate, [rates(1.02, wobble=0.004), rates(0.98), rates(1.01), rates(0.97)],
                [rates(1.08, wobble=0.004), rates(0.96), rates(1.03)])
    for pairs in (1, 2):
        assert gate.wants_pair(cand, ctrl, pairs)
    assert not gate.wants_pair(cand, ctrl, 3)  # max_boot_pairs
    result = gate.judge(cand, ctrl)
    assert result.verdict is Verdict.INCONCLUSIVE, result.reasons
    assert result.metrics["C1.ci_low"].value < 0 < result.metrics["C1.ci_high"].value
    assert result.details["schedule"]["looks"] == 2 and result.details["schedule"]["stopped_at_pairs"] is None
    # what the rule would do at this noise, simulated: the bar's pass rate, the change passed in 80%, the pairs
    assert "this rule with up to 3 boot pairs passes a true +5% (the bar) in " in result.reasons[0]
    assert "in 80% (simulated, 1000 windows)" in result.reasons[0]
    power = result.details["levels"]["1"]["power"]
    assert power["passed_with_80"] > 0.05 and result.metrics["C1.detectable_change"].value == pytest.approx(
        power["passed_with_80"], abs=1e-5)
    assert 0 <= power["at_bar"]["pass_rate"] <= 1 and power["unchanged"]["pass_rate"] < 0.05
    # the first candidate boot alone, against the old design's control baseline, looked like a win
    looks = result.details["levels"]["1"]["looks"]
    assert [look["pairs"] for look in looks] == [2, 3] and all(look["verdict"] is None for look in looks)


def test_a_small_change_confidently_under_the_bar_fails_early(tmp_path: Path) -> None:
    gate, cand, ctrl = make_gate(tmp_path)
    write_boots(gate, [rates(), rates(1.001), rates(0.999)], [rates(1.02), rates(1.021)])
    result = gate.judge(cand, ctrl)
    assert result.verdict is Verdict.FAIL, result.reasons
    assert result.metrics["C1.ci_high"].value < 0.05 and result.metrics["C1.ci_low"].value > 0
    assert "even the CI's high end is below +5%" in result.reasons[0]
    assert not gate.wants_pair(cand, ctrl, 2)


def test_a_change_that_varies_by_prompt_beyond_any_pairs_reach_stops_pairing(tmp_path: Path) -> None:
    """n-gram speculation on the demo: a prompt that repeats its input gets faster, the others slower;
    after two pairs the spread over prompts alone keeps the bar and zero inside the CI, so pairs three
    and four would have been booted for nothing."""
    gate, cand, ctrl = make_gate(tmp_path, pairs=4)
    mixed = [1.3, 0.75, 1.3, 0.75, 1.3, 0.75]

    def candidate(scale: float) -> dict[str, float]:
        return {pid: value * factor for (pid, value), factor in zip(rates(scale).items(), mixed)}

    write_boots(gate, [rates(), rates(1.01), rates(0.99)], [candidate(1.0), candidate(1.01)])
    assert not gate.wants_pair(cand, ctrl, 2)
    result = gate.judge(cand, ctrl)
    assert result.verdict is Verdict.INCONCLUSIVE, result.reasons
    assert "no more boot pairs after pair 2: the remaining pairs would decide in 0% of this window's simulated " \
           "continuations (under min_conditional_power 5%)" in result.reasons[0]
    assert "is out of reach (80% of windows) within 20 boot pairs at this noise: more prompts" in result.reasons[0]
    # the rule of tools before 0.3 (a frozen contract of that time reads as it): the same stop, its own words
    gate, cand, ctrl = make_gate(tmp_path / "reach", rule="{futility: reach}", pairs=4)
    write_boots(gate, [rates(), rates(1.01), rates(0.99)], [candidate(1.0), candidate(1.01)])
    assert not gate.wants_pair(cand, ctrl, 2)
    assert "however small the boot-to-boot noise got" in gate.judge(cand, ctrl).reasons[0]


def test_conditional_power_keeps_pairing_a_change_more_pairs_can_decide(tmp_path: Path) -> None:
    """A +12% change measured through boot luck: undecided after two pairs, likely decided by more."""
    gate, cand, ctrl = make_gate(tmp_path, pairs=6)
    write_boots(gate, [rates(), rates(1.06), rates(0.95)], [rates(1.12), rates(1.10)])
    result = gate.judge(cand, ctrl)
    assert result.verdict is Verdict.INCONCLUSIVE and result.details["schedule"]["stopped_at_pairs"] is None
    assert gate.wants_pair(cand, ctrl, 2)


def test_a_fail_at_one_of_two_levels_stands_only_at_its_share(tmp_path: Path) -> None:
    """A change just under the bar at both levels: each level alone would FAIL it; sharing the FAIL side over
    the two (Holm) needs more than one level's own evidence."""
    boots_ = ([rates(), rates(1.004), rates(0.996)], [rates(1.020, wobble=0.004), rates(1.024, wobble=-0.004)])
    alone, cand, ctrl = make_gate(tmp_path / "each", rule="{fail_levels: each, futility: none}")
    write_boots(alone, *boots_)
    shared, _, _ = make_gate(tmp_path / "holm", rule="{futility: none}")
    write_boots(shared, *boots_)
    first, second = alone.judge(cand, ctrl), shared.judge(cand, ctrl)
    assert first.verdict is Verdict.FAIL, first.reasons
    assert second.verdict is Verdict.INCONCLUSIVE, second.reasons
    assert "undecided (Holm over 2 judged levels, p " in second.reasons[0]
