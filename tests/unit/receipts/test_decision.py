"""The report's decision per candidate, from SUMMARY.json alone: the rules `campaign promote` applies to
that file, the one reason that decides, and what would change it."""

from __future__ import annotations

import copy

from campaign.presentation import fit
from campaign.receipts.decision import decisions

PASS = {"verdict": "PASS", "reasons": ["fine"]}
SUMMARY = {"status": "complete", "window": "w1", "restore": {"incumbent": "http://x", "proved": True},
           "candidates": {"spec": {"control": "base", "promotion_gates": ["greedy", "speed"],
                                   "gates": {"greedy": PASS, "speed": PASS,
                                             "tools": {"verdict": "FAIL", "reasons": ["passed 0/2 < required 2/2"]}}}}}


def _with(**changes) -> dict:
    summary = copy.deepcopy(SUMMARY)
    for path, value in changes.items():
        *parents, leaf = path.split("__")
        node = summary
        for key in parents:
            node = node[key]
        node[leaf] = value
    return summary


def test_every_required_gate_passing_is_promotable_and_a_failing_extra_is_shown_not_deciding() -> None:
    (d,) = decisions(SUMMARY)
    assert d.decision == "PROMOTABLE" and d.gate is None and "campaign promote" in d.next_step
    assert d.also == ["tools: FAIL"]


def test_a_required_fail_refuses_with_that_gates_reason_before_any_inconclusive() -> None:
    summary = _with(candidates__spec__gates__greedy={"verdict": "INCONCLUSIVE", "reasons": ["instrument: x"]},
                    candidates__spec__gates__speed={"verdict": "FAIL", "reasons": ["C1 change -3% ..."]})
    (d,) = decisions(summary)
    assert (d.decision, d.gate, d.reason) == ("REFUSED", "speed", "FAIL C1 change -3% ...")  # the gate's headline
    assert d.details == ["C1 change -3% ..."]


def test_an_inconclusive_says_the_remedy_its_reason_calls_for() -> None:
    cases = {"instrument: lane base gave back 3/44": "instrument",
             "C1 ...: undecided; +5% needs about 6 boot pairs in all (max_boot_pairs) or a quieter host": "boot pairs",
             "launch failure is not a finding (readiness_timeout)": "launch_failure.txt",
             "C1 ...; the window booted no more pairs after pair 2: the window's time budget: ...": "deadline",
             "C1 ...: undecided; +5% is out of reach while the change varies this much": "more prompts"}
    for reason, remedy in cases.items():
        summary = _with(candidates__spec__gates__speed={"verdict": "INCONCLUSIVE", "reasons": [reason]})
        (d,) = decisions(summary)
        assert d.decision == "INCONCLUSIVE" and d.gate == "speed" and d.reason == fit(f"INCONCLUSIVE {reason}")
        assert d.details == [reason]
        assert remedy in d.next_step, (reason, d.next_step)


def test_an_instrument_heading_is_shown_with_the_problem_under_it() -> None:
    reasons = ["instrument: the speed numbers cannot be judged", "C1: the control moved +28.7% (limit 25%)"]
    (d,) = decisions(_with(candidates__spec__gates__speed={"verdict": "INCONCLUSIVE", "reasons": reasons}))
    assert d.reason == "INCONCLUSIVE instrument: C1: the control moved +28.7% (limit 25%)" and d.details == reasons
    assert "instrument" in d.next_step


def test_window_level_facts_decide_before_any_gate() -> None:
    (unfinished,) = decisions(_with(status="interrupted"))
    assert unfinished.decision == "INCONCLUSIVE" and "campaign resume w1" in unfinished.next_step
    (unproven,) = decisions(_with(restore={"incumbent": "http://x", "proved": False, "error": "HTTP 401"}))
    assert unproven.decision == "REFUSED" and "HTTP 401" in unproven.reason
    # without a promotion section the summary lists every gate as required, and says there is no rule
    (no_rule,) = decisions(_with(candidates__spec__promotion_rule=False))
    assert no_rule.decision == "REFUSED" and "promotion.requires" in no_rule.next_step
    (no_daily,) = decisions(_with(restore={"incumbent": None}))
    assert no_daily.decision == "REFUSED" and "no incumbent" in no_daily.reason
    (missing,) = decisions(_with(candidates__spec__promotion_gates=["greedy", "needle"]))
    assert missing.decision == "INCONCLUSIVE" and missing.gate == "needle"


BUSY = ("C1: after 1 boot pair(s), too few boots count at this level (1 boot(s) not counted at C1: control_rerun1 "
        "(base@rerun1) row C1/prose stayed VOID after 3 attempt(s): other processes used 50% of the host's CPUs during "
        "rep 0 (limit 25%): another tenant on the host); the comparison needs 2 pairs ...; the window booted no more "
        "pairs after pair 1: the window's time budget: the next pair ...")


def test_a_busy_host_is_the_first_step_before_any_deadline_advice() -> None:
    (d,) = decisions(_with(candidates__spec__gates__speed={"verdict": "INCONCLUSIVE", "reasons": [BUSY]}))
    assert d.next_step.startswith("other processes used 50% of the CPUs: run on a quiet host or pin lanes (cpus:); "
                                  "then a longer failsafe deadline"), d.next_step
    # the busy host of another level than the one shown still comes first
    later = {"verdict": "INCONCLUSIVE", "reasons": ["C1 ...: undecided; +5% needs about 6 boot pairs in all "
                                                    "(max_boot_pairs) or a quieter host", BUSY.replace("C1", "C2")]}
    (d,) = decisions(_with(candidates__spec__gates__speed=later))
    assert d.next_step.startswith("other processes used 50% of the CPUs") and "more boot pairs" in d.next_step
    # a quiet host: the deadline advice alone
    quiet = BUSY.replace("other processes used 50% of the host's CPUs", "spread 31% over reps")
    (d,) = decisions(_with(candidates__spec__gates__speed={"verdict": "INCONCLUSIVE", "reasons": [quiet]}))
    assert d.next_step.startswith("a longer failsafe deadline"), d.next_step


def _gate(gate: str, *headlines: tuple[str, object, str]) -> dict:
    return {"gate": gate, "candidate": "spec",
            "presentation": {"headlines": [{"label": label, "value": value, "unit": unit, "denominator": None}
                                           for label, value, unit in headlines]}}


GATES = [_gate("greedy", ("self_identical", 2, "prompts")),
         _gate("speed", ("C1", "+12.0% [97.5% CI +4.1%, +20.3%]", "decode_tok_s, 3 pairs, 7 boots, 6 prompts")),
         _gate("tools")]


def test_the_figure_is_the_deciding_gates_headlines_else_every_required_gates() -> None:
    (d,) = decisions(SUMMARY, GATES)
    assert d.figure == ("greedy self_identical 2 prompts; speed C1 +12.0% [97.5% CI +4.1%, +20.3%] decode_tok_s, "
                        "3 pairs, 7 boots, 6 prompts")
    (d,) = decisions(_with(candidates__spec__gates__speed={"verdict": "INCONCLUSIVE", "reasons": [BUSY]}), GATES)
    assert d.figure.startswith("speed C1 +12.0% [97.5% CI") and "greedy" not in d.figure
    (d,) = decisions(_with(restore={"incumbent": None}), GATES)  # measured only: what it measured is the point
    assert d.decision == "REFUSED" and d.figure.startswith("greedy self_identical 2 prompts; speed C1")
    (d,) = decisions(_with(status="interrupted"), GATES)
    assert d.figure == ""  # an unfinished window: no figure stands for it
    assert decisions(SUMMARY)[0].figure == ""  # SUMMARY.json alone carries no headlines
