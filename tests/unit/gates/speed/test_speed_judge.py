"""The speed judge on hand-written raw records: the fit over interleaved boots and the frozen bar, the
looks and when they stop, VOID rows and boots that do not count, control jumps, and the instrument
checks. The judge reads only the bundle, so its rules can be pinned without an engine (engine-backed
runs are in tests/integration/speed/)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from scipy import stats as sps

from campaign.contracts.load import load_contract
from campaign.fsutil import JsonlAppender
from campaign.gates.result import Verdict
from campaign.gates.speed.rows import spread
from tests.support.contracts import write_contract
from tests.support.speedrecords import TOKENS, judge_contract, judge_gate, rates, write_boots, write_visit


def test_spread_is_max_minus_min_over_mean() -> None:
    assert spread([135.0, 700.0, 700.0]) == pytest.approx(1.104, abs=1e-3)  # the seeds' "110%+"
    assert spread([100.0]) is None


def test_a_real_speedup_passes_at_the_first_look_and_asks_for_no_more_boots(tmp_path: Path) -> None:
    gate, cand, ctrl = judge_gate(tmp_path)
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
    gate, cand, ctrl = judge_gate(tmp_path, rule="{futility: none}")
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
    assert "this rule with up to 3 boot pairs passes, at this level, a true +5% (the bar) in " in result.reasons[0]
    assert "in 80% (simulated, 1000 windows, without the futility stop)" in result.reasons[0]
    power = result.details["levels"]["1"]["power"]
    assert power["passed_with_80"] > 0.05 and result.metrics["C1.detectable_change"].value == pytest.approx(
        power["passed_with_80"], abs=1e-5)
    assert 0 <= power["at_bar"]["pass_rate"] <= 1 and power["unchanged"]["pass_rate"] < 0.05
    # the first candidate boot alone, against the old design's control baseline, looked like a win
    looks = result.details["levels"]["1"]["looks"]
    assert [look["pairs"] for look in looks] == [2, 3] and all(look["verdict"] is None for look in looks)


def test_a_small_change_confidently_under_the_bar_fails_early(tmp_path: Path) -> None:
    gate, cand, ctrl = judge_gate(tmp_path)
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
    gate, cand, ctrl = judge_gate(tmp_path, pairs=4)
    mixed = [1.3, 0.75, 1.3, 0.75, 1.3, 0.75]

    def candidate(scale: float) -> dict[str, float]:
        return {pid: value * factor for (pid, value), factor in zip(rates(scale).items(), mixed, strict=True)}

    write_boots(gate, [rates(), rates(1.01), rates(0.99)], [candidate(1.0), candidate(1.01)])
    assert not gate.wants_pair(cand, ctrl, 2)
    result = gate.judge(cand, ctrl)
    assert result.verdict is Verdict.INCONCLUSIVE, result.reasons
    assert "no more boot pairs after pair 2: the remaining pairs would decide in 0% of this window's simulated " \
           "continuations (under min_conditional_power 5%)" in result.reasons[0]
    assert "is out of reach (80% of windows) within 20 boot pairs at this noise: more prompts" in result.reasons[0]
    # the rule of tools before 0.3 (a frozen contract of that time reads as it): the same stop, its own words
    gate, cand, ctrl = judge_gate(tmp_path / "reach", rule="{futility: reach}", pairs=4)
    write_boots(gate, [rates(), rates(1.01), rates(0.99)], [candidate(1.0), candidate(1.01)])
    assert not gate.wants_pair(cand, ctrl, 2)
    assert "however small the boot-to-boot noise got" in gate.judge(cand, ctrl).reasons[0]


def test_a_window_that_ran_every_pair_is_judged_on_all_of_them_never_as_a_futility_stop(tmp_path: Path) -> None:
    """The identical lane under boot luck with the default futility: measured to max_boot_pairs, it is judged
    on every pair (the stop is a live saving, never a reason to drop boots measured) and never said futile."""
    gate, cand, ctrl = judge_gate(tmp_path)
    write_boots(gate, [rates(1.02, wobble=0.004), rates(0.98), rates(1.01), rates(0.97)],
                [rates(1.08, wobble=0.004), rates(0.96), rates(1.03)])
    result = gate.judge(cand, ctrl)
    assert result.verdict is Verdict.INCONCLUSIVE
    assert result.details["schedule"]["looks"] == 2 and "no more boot pairs" not in result.reasons[0]


def test_conditional_power_keeps_pairing_a_change_more_pairs_can_decide(tmp_path: Path) -> None:
    """A +12% change measured through boot luck: undecided after two pairs, likely decided by more."""
    gate, cand, ctrl = judge_gate(tmp_path, pairs=6)
    write_boots(gate, [rates(), rates(1.06), rates(0.95)], [rates(1.12), rates(1.10)])
    result = gate.judge(cand, ctrl)
    assert result.verdict is Verdict.INCONCLUSIVE and result.details["schedule"]["stopped_at_pairs"] is None
    assert gate.wants_pair(cand, ctrl, 2)


def test_a_fail_at_one_of_two_levels_stands_only_at_its_share(tmp_path: Path) -> None:
    """A change just under the bar at both levels: each level alone would FAIL it; sharing the FAIL side over
    the two (Holm) needs more than one level's own evidence."""
    boots_ = ([rates(), rates(1.004), rates(0.996)], [rates(1.020, wobble=0.004), rates(1.024, wobble=-0.004)])
    alone, cand, ctrl = judge_gate(tmp_path / "each", rule="{fail_levels: each, futility: none}")
    write_boots(alone, *boots_)
    shared, _, _ = judge_gate(tmp_path / "holm", rule="{futility: none}")
    write_boots(shared, *boots_)
    first, second = alone.judge(cand, ctrl), shared.judge(cand, ctrl)
    assert first.verdict is Verdict.FAIL, first.reasons
    assert second.verdict is Verdict.INCONCLUSIVE, second.reasons
    assert "undecided (Holm over 2 judged levels, p " in second.reasons[0]


def test_a_steady_drift_across_the_window_is_taken_out(tmp_path: Path) -> None:
    """The host warms up through the window: every boot 2% faster than the one before. The candidate is
    the control's twin; without the drift term its boots (always later than the control's before them)
    would look faster."""
    gate, cand, ctrl = judge_gate(tmp_path, rule="{min_mean_change: 0.01}")
    steps = [rates(1.02 ** position, wobble=0.002 * (-1) ** position) for position in range(7)]
    write_boots(gate, steps[0::2], steps[1::2])
    result = gate.judge(cand, ctrl)
    assert result.metrics["C1.mean_change"].value == pytest.approx(0.0, abs=0.005)
    assert result.verdict is not Verdict.PASS
    assert result.metrics["C1.control_drift"].value == pytest.approx(0.0404, abs=0.002)  # 1.02^2 - 1


def test_a_boot_whose_row_stayed_void_does_not_count_and_the_rest_decide(tmp_path: Path) -> None:
    gate, cand, ctrl = judge_gate(tmp_path)
    write_boots(gate, [rates(), rates(1.01), rates(0.995), rates(1.0)],
                [rates(1.5), rates(1.2), rates(1.21)], always_void=True)
    result = gate.judge(cand, ctrl)
    assert result.verdict is Verdict.PASS, result.reasons
    assert result.details["schedule"]["excluded"].keys() == {"candidate"}
    assert result.details["schedule"]["excluded"]["candidate"].keys() == {"C1", "C2"}
    assert any(c.startswith("boot not counted at C1: candidate (cand) row C1/") and "stayed VOID after 3 attempt(s)"
               in c for c in result.caveats)
    assert result.metrics["C1.mean_change"].value == pytest.approx(0.205, abs=0.01)  # not the void boot's +50%
    assert result.details["schedule"]["stopped_at_pairs"] == 3  # pair 2 had one counted candidate boot


def test_void_rows_rerun_then_count_and_stay_in_the_table(tmp_path: Path) -> None:
    gate, cand, ctrl = judge_gate(tmp_path)
    write_boots(gate, [rates(), rates(), rates()], [rates(1.2), rates(1.2)], void_attempts=1)
    result = gate.judge(cand, ctrl)
    assert result.verdict is Verdict.PASS
    assert result.metrics["candidate.void_attempts"].value == 4  # one per level x class
    table = gate.bundle_tables()["throughput.csv"]
    void = [row for row in table if row["row_status"] == "VOID"]
    assert len(void) == 4 * 2 and all("spread" in row["row_reasons"] for row in void)


def test_cut_streams_void_the_row_and_never_count(tmp_path: Path) -> None:
    gate, cand, ctrl = judge_gate(tmp_path, pairs=2)
    write_boots(gate, [rates(), rates(), rates()], [rates(1.5), rates(1.5)], cut_level=2)
    result = gate.judge(cand, ctrl)
    assert result.verdict is Verdict.INCONCLUSIVE  # at C2 one candidate boot is left: no scatter to weigh
    assert any("error records > limit 0" in c and "without a finish reason" in c for c in result.caveats)
    assert result.reasons[0].endswith(": met")  # C1 counts the boot whose C2 row was cut
    assert result.reasons[1].startswith("C2: ") and "the comparison needs 2 pairs" in result.reasons[1]
    # with a tolerated error the row counts, and the cut stream's tokens are not throughput
    gate, cand, ctrl = judge_gate(tmp_path / "tolerant", rule="{max_errors: 3, max_spread: 5.0}")
    write_visit(gate, "cand", rates(1.5), cut_level=2)
    row = gate.view("cand").chosen((2, "code"))
    assert row.valid and len(row.errors) == 3 and sum(r["output_tokens"] for r in row.rep_rows) == 3 * TOKENS


def test_a_control_that_jumps_between_boots_is_inconclusive(tmp_path: Path) -> None:
    gate, cand, ctrl = judge_gate(tmp_path)
    write_boots(gate, [rates(), rates(1.32), rates(1.32)], [rates(1.5), rates(1.5)])
    result = gate.judge(cand, ctrl)
    assert result.verdict is Verdict.INCONCLUSIVE
    assert any("the control moved +32.0% from one of its boots to the next (limit 25%)" in r for r in result.reasons)
    assert not gate.wants_pair(cand, ctrl, 2)  # more boots cannot mend it


def test_one_pair_is_not_enough_and_asks_for_another(tmp_path: Path) -> None:
    gate, cand, ctrl = judge_gate(tmp_path, rule="{max_control_drift: null}")
    write_boots(gate, [rates(), rates(1.01)], [rates(1.3)])
    result = gate.judge(cand, ctrl)
    assert result.verdict is Verdict.INCONCLUSIVE
    assert "the comparison needs 2 pairs" in result.reasons[0]
    assert gate.wants_pair(cand, ctrl, 1)


def test_a_comparison_cut_short_by_the_windows_time_budget_says_so(tmp_path: Path) -> None:
    from campaign.gates.base import PAIRS_STOPPED

    gate, cand, ctrl = judge_gate(tmp_path, pairs=4)
    write_boots(gate, [rates(), rates(1.01), rates(0.99)], [rates(1.03, wobble=0.04), rates(1.02, wobble=-0.04)])
    undecided = gate.judge(cand, ctrl)
    assert undecided.verdict is Verdict.INCONCLUSIVE and "booted no more pairs" not in undecided.reasons[0]
    with JsonlAppender(gate.ctx.bundle / "journal.jsonl") as journal:
        journal.append({"step": PAIRS_STOPPED, "event": "done", "after_pairs": 2,
                        "reason": "the window's time budget: the next pair ... before the failsafe deadline"})
    result = gate.judge(cand, ctrl)
    assert result.verdict is Verdict.INCONCLUSIVE
    assert "the window booted no more pairs after pair 2: the window's time budget" in result.reasons[0]
    assert result.reasons[0].startswith(undecided.reasons[0])  # the measurement reads as before, then why it ended


def test_min_wins_is_part_of_the_bar(tmp_path: Path) -> None:
    gate, cand, ctrl = judge_gate(tmp_path, rule="{min_wins: '6/6'}")
    mixed = {**rates(1.3), "p1": 49.0}  # one prompt a little slower
    write_boots(gate, [rates(), rates(1.001), rates(0.999), rates()], [mixed, mixed, mixed])
    result = gate.judge(cand, ctrl)
    assert result.verdict is Verdict.INCONCLUSIVE, result.reasons
    assert result.metrics["C1.wins"].value == 5 and "wins >= 6/6" in result.reasons[0]


def test_the_same_reply_to_every_prompt_is_an_instrument_failure(tmp_path: Path) -> None:
    gate, cand, ctrl = judge_gate(tmp_path)
    write_boots(gate, [rates(), rates(), rates()], [rates(2.0), rates(2.0)], text="OK")
    result = gate.judge(cand, ctrl)
    assert result.verdict is Verdict.INCONCLUSIVE
    assert any("same reply to all 6 prompts" in r for r in result.reasons)
    assert not gate.wants_pair(cand, ctrl, 1)


def test_replaced_fields_are_refused_with_what_replaced_them(tmp_path: Path) -> None:
    from campaign.errors import ContractError

    tmp_path.mkdir(parents=True, exist_ok=True)
    body = judge_contract().replace("max_boot_pairs: 3", "control_boots: 3")
    with pytest.raises(ContractError, match=r"control_boots was replaced by max_boot_pairs"):
        load_contract(write_contract(tmp_path, body))


def test_a_bundle_copy_with_replaced_fields_is_read_in_todays_terms_and_says_so(tmp_path: Path) -> None:
    """A bundle's copy (rejudge, promote) of a contract from before boots interleaved: one boot pair, reported
    and never decided, and each replaced field named in ``read_as``; a contract to run is still refused."""
    body = judge_contract().replace("max_boot_pairs: 3", "control_boots: 3\n    resamples: 500")
    loaded = load_contract(write_contract(tmp_path, body), check_files=False, bundle_copy=True)
    (speed,) = loaded.contract.gates
    assert speed.max_boot_pairs == 1
    assert loaded.read_as == ["speed: control_boots: 3 read as max_boot_pairs: 1 (that window booted each candidate "
                              "once; one boot pair is reported, never decided)",
                              "speed: resamples dropped (nothing: the speed CI is fitted over boots, not bootstrapped)"]
    assert load_contract(write_contract(tmp_path, judge_contract()), check_files=False, bundle_copy=True).read_as == []


def test_a_void_row_on_a_level_that_is_only_reported_does_not_block(tmp_path: Path) -> None:
    gate, cand, ctrl = judge_gate(tmp_path, rule="{levels: [1]}")
    write_boots(gate, [rates(), rates(), rates()], [rates(1.2), rates(1.2)], cut_level=2)
    result = gate.judge(cand, ctrl)
    assert result.verdict is Verdict.PASS
    assert any(c.startswith("not judged: candidate (cand) row C2/") for c in result.caveats)
    assert len(result.reasons) == 1


def test_foreign_traffic_in_engine_counters_voids_the_row(tmp_path: Path) -> None:
    gate, cand, ctrl = judge_gate(tmp_path)
    write_visit(gate, "cand", rates())
    records = gate.ctx.raw_records("speed", "cand")
    ours = sum(1 for r in records if r.get("tags", {}).get("level") == 1 and r["tags"]["class"] == "code") * TOKENS
    with JsonlAppender(gate.ctx.raw_path("speed", "cand")) as sink:
        for when, generated in (("before", 100), ("after", 100 + ours + 40)):
            sink.append({"kind": "metrics", "level": 1, "class": "code", "attempt": 0, "when": when, "busy": False,
                         "text": f"llamacpp:tokens_predicted_total {generated}\n"})
    row = gate.view("cand").rows[(1, "code")][0]
    assert row.status == "VOID"
    assert f"generated {ours + 40} tokens during the row, our records account for {ours}" in row.reasons[0]


def test_contract_errors_name_the_line_and_field(tmp_path: Path) -> None:
    from campaign.errors import ContractError

    tmp_path.mkdir(parents=True, exist_ok=True)
    path = write_contract(tmp_path, judge_contract(rule="{levels: [8]}"))
    with pytest.raises(ContractError, match=r"c.yaml:\d+: gates\[0\].*levels \[8\] are not in concurrency"):
        load_contract(path)
    path = write_contract(tmp_path, judge_contract(rule="{min_wins: 'most'}"))
    with pytest.raises(ContractError, match=r"gates\[0\]\.rule\.min_wins: .*not a count rule"):
        load_contract(path)
    path = write_contract(tmp_path, judge_contract(levels="[1, 1]"))
    with pytest.raises(ContractError, match=r"gates\[0\]\.concurrency: .*distinct"):
        load_contract(path)


def _row_with_reps_measuring(where: Path, rule: str, measured: dict, reps: tuple[int, ...] = (0, 1)):
    """The candidate's C1/code row judged after its rep records were given ``measured`` (for ``reps``)."""
    gate, _, _ = judge_gate(where, rule=rule)
    write_visit(gate, "cand", rates())
    records = gate.ctx.raw_records("speed", "cand")
    gate.ctx.raw_path("speed", "cand").unlink()
    with JsonlAppender(gate.ctx.raw_path("speed", "cand")) as sink:
        for record in records:
            if record.get("kind") == "rep" and record["rep"] in reps:
                record.update(measured)
            sink.append(record)
    return gate.view("cand").rows[(1, "code")][0]


def test_a_busy_host_voids_the_row(tmp_path: Path) -> None:
    def busy_visit(rule: str, where: Path):
        # 2 CPUs for ~3 s: lane 1 s, client 0.01 s, others ~1 s
        return _row_with_reps_measuring(where, rule, {"host_cpus": 2, "lane_cpu_s": 1.0, "host_busy_s": 2.01})

    row = busy_visit("{}", tmp_path / "default")
    assert row.valid and row.rep_rows[0]["host_other_share"] == pytest.approx(1.0 / 6.0)  # under 25%
    row = busy_visit("{max_host_busy: 0.1}", tmp_path / "strict")
    assert row.status == "VOID"
    assert "other processes used 17% of the host's CPUs during rep 0 (limit 10%): another tenant" in row.reasons[0]


@pytest.mark.parametrize("measured, rule, reason", [
    ({"client_cpu_s": 2.9}, "{}", "the client was the bottleneck: it used 9"),
    ({"loop_lag_p99_ms": 35.0}, "{}", "the client was the bottleneck: its event loop woke up 35.0 ms late (p99)"),
    ({"loop_lag_p99_ms": 35.0}, "{max_loop_lag_ms: 50}", None),
    ({"client_cpu_s": 2.9}, "{max_client_cpu_share: null}", None),
])
def test_a_client_that_was_the_bottleneck_voids_the_row(tmp_path: Path, measured: dict, rule: str,
                                                         reason: str | None) -> None:
    row = _row_with_reps_measuring(tmp_path, rule, measured, reps=(1,))
    if reason is None:
        assert row.valid, row.reasons
    else:
        assert row.status == "VOID" and any(r.startswith(reason) for r in row.reasons), row.reasons
        assert "rep 1" in next(r for r in row.reasons if r.startswith(reason))


def test_boots_a_busy_host_voided_are_named_as_the_cause_and_the_measured_figure_is_a_headline(tmp_path: Path) -> None:
    """The field's window: one pair before the window's time budget ran out, and the control's second boot
    VOID at every attempt because other processes used half of the host's CPUs. The reason names the busy
    host (not "the caveats say why"), and the headline shows what each lane measured, without a CI."""
    from campaign.gates.base import PAIRS_STOPPED

    gate, cand, ctrl = judge_gate(tmp_path)
    write_boots(gate, [rates()], [rates(1.3)])
    write_visit(gate, "base@rerun1", rates(), always_void=True, host_busy=0.5)
    with JsonlAppender(gate.ctx.bundle / "journal.jsonl") as journal:
        journal.append({"step": PAIRS_STOPPED, "event": "done", "after_pairs": 1,
                        "reason": "the window's time budget: the next pair ... before the failsafe deadline"})
    result = gate.judge(cand, ctrl)
    assert result.verdict is Verdict.INCONCLUSIVE
    assert result.reasons[0].startswith("C1: after 1 boot pair(s), too few boots count at this level (1 boot(s) not "
                                        "counted at C1: control_rerun1 (base@rerun1) row C1/"), result.reasons[0]
    assert "other processes used 50% of the host's CPUs during rep 0 (limit 25%)" in result.reasons[0]
    assert "the window booted no more pairs after pair 1: the window's time budget" in result.reasons[0]
    first = gate.presentation(result).headlines[0]
    assert (first.label, first.unit) == ("C1", "decode_tok_s, candidate vs control, one pair, no CI")
    candidate, control = (float(x) for x in first.value.removesuffix(" tok/s").split(" vs "))
    assert candidate / control == pytest.approx(1.3, rel=0.01)
    assert candidate == pytest.approx(result.metrics["C1.candidate.decode_tok_s"].value, rel=1e-3)


def test_a_decided_change_shows_its_ci_and_the_boot_pairs_it_rests_on(tmp_path: Path) -> None:
    gate, cand, ctrl = judge_gate(tmp_path)
    write_boots(gate, [rates(), rates(1.01), rates(0.995)], [rates(1.10, wobble=0.01), rates(1.11, wobble=-0.01)])
    first = gate.presentation(gate.judge(cand, ctrl)).headlines[0]
    assert first.label == "C1" and "97.5% CI" in str(first.value)
    assert first.unit == "decode_tok_s, 2 pairs, 5 boots, 6 prompts"


def test_an_undecided_change_names_the_boots_a_busy_host_kept_out(tmp_path: Path) -> None:
    gate, cand, ctrl = judge_gate(tmp_path)
    write_boots(gate, [rates(1.02, wobble=0.004), rates(0.98), rates(1.01), rates(0.97)],
                [rates(1.08, wobble=0.004), rates(0.96), rates(1.03)], always_void=True, host_busy=0.5)
    result = gate.judge(cand, ctrl)
    assert result.verdict is Verdict.INCONCLUSIVE and ": undecided; " in result.reasons[0], result.reasons
    assert "; 1 boot(s) not counted at C1: candidate (cand) row C1/prose stayed VOID after 3 attempt(s): other " \
           "processes used 50% of the host's CPUs during rep 0" in result.reasons[0], result.reasons[0]


def test_rows_a_busy_host_voided_and_re_ran_are_named_before_the_time_budget_they_cost(tmp_path: Path) -> None:
    """Every boot counted in the end, but the first candidate boot's rows went VOID once on a busy host and
    were measured again; the window then ran out of time for a third pair. The busy host is the cause to act
    on, and the decision says it before the deadline."""
    from campaign.gates.base import PAIRS_STOPPED
    from campaign.receipts.decision import decisions

    gate, cand, ctrl = judge_gate(tmp_path, pairs=4)
    write_boots(gate, [rates(), rates(1.01), rates(0.99)], [rates(1.03, wobble=0.04), rates(1.02, wobble=-0.04)],
                void_attempts=1, host_busy=0.5)
    with JsonlAppender(gate.ctx.bundle / "journal.jsonl") as journal:
        journal.append({"step": PAIRS_STOPPED, "event": "done", "after_pairs": 2,
                        "reason": "the window's time budget: the next pair ... before the failsafe deadline"})
    result = gate.judge(cand, ctrl)
    assert result.verdict is Verdict.INCONCLUSIVE and not result.details["schedule"]["excluded"]
    assert "; 4 row attempt(s) went VOID: other processes used 50% of the host's CPUs during rep 0" in result.reasons[0]
    summary = {"status": "complete", "restore": {"incumbent": "http://x", "proved": True},
               "candidates": {"cand": {"control": "base", "promotion_gates": ["speed"],
                                       "gates": {"speed": {"verdict": "INCONCLUSIVE", "reasons": result.reasons}}}}}
    (decided,) = decisions(summary)
    assert decided.next_step.startswith("other processes used 50% of the CPUs: run on a quiet host or pin lanes "
                                        "(cpus:); then a longer failsafe deadline"), decided.next_step


def test_a_level_without_an_estimate_still_counts_in_holms_share(tmp_path: Path) -> None:
    """Two judged levels, one with no estimate (its boots did not count): its hypothesis is not rejected
    (p 1) and it stays in Holm's m, so the other level's FAIL needs p under alpha / 2, not alpha."""
    from campaign.gates.speed.sequential import Estimate, Look

    gate, _, _ = judge_gate(tmp_path, rule="{futility: none}")
    alpha = 0.025

    def failing(p: float) -> dict:
        # a one-sided p of "the change is at least the bar (+5%)" of exactly p, with 10 df
        se, df = 0.02, 10.0
        log_change = math.log1p(0.05) + se * float(sps.t.ppf(p, df))
        est = Estimate(change=math.expm1(log_change), low=0.0, high=0.0, log_change=log_change, se=se, se_boot=se,
                       se_prompt=0.0, df=df, confidence=0.95, boots=6, candidate_boots=3, prompts=4, per_prompt={})
        return {"estimate": est, "look": Look("FAIL", "not met: even the CI's high end is below +5%")}

    for p, stands in ((0.02, False), (0.01, True)):  # between alpha / 2 and alpha, then under alpha / 2
        rows = {1: failing(p), 2: {"estimate": None, "look": None}}
        gate._share_fail_side(rows, confidence=1 - 2 * alpha)
        assert (rows[1]["look"].verdict == "FAIL") is stands, rows[1]["look"].reason
        assert "Holm over 2 judged levels" in rows[1]["look"].reason
