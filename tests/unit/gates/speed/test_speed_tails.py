"""Latency tails in the speed gate (ttft/itl/e2e at p50-p99): pooled per prompt class in each boot, compared
boot by boot like decode tok/s, judged by a not-worse bar, and refused when the contract's sizes cannot give a
percentile its samples. The records are constructed (tests/support/speedrecords), so the tail is exact; real
engines are in tests/integration/speed."""

from __future__ import annotations

from pathlib import Path

import pytest

from campaign.errors import ContractError
from campaign.gates.common.streams import StreamFacts, analyze_stream
from campaign.gates.result import Verdict
from tests.support.speedrecords import load_gates, rates, request, speed_contract, write_visit

LANES = """\
- {name: base, role: control}
- name: cand
  role: candidate
  axis: [args.parallel]
  set: {args: {--parallel: "1"}}
"""
LEVEL = 25  # 2 reps x 25 requests per class and boot: the 50 samples a p90 needs
NOT_WORSE = "{metric: ttft_p90_s, min_mean_change: -0.10, ci_lower_above: -0.10, futility: none}"


def _gate(tmp_path: Path, rule: str = NOT_WORSE, level: int = LEVEL, pairs: int = 3):
    loaded, gates = load_gates(tmp_path, speed_contract(LANES, f"""\
        - kind: speed
          input: p
          concurrency: [{level}]
          max_tokens: 16
          reps: 2
          max_boot_pairs: {pairs}
          rule: {rule}
        """))
    return gates[0], loaded.lanes["cand"], loaded.lanes["base"]


def _ttft(boot_scale: float, tail_every: int = 0):
    """Each request's TTFT: 0.20-0.29 s by position, times the boot's luck; every ``tail_every``-th request
    of a rep waits 1.5 s (a queue), the constructed tail."""
    def ttft(rep: int, position: int) -> float:
        if tail_every and position % tail_every == tail_every - 1:
            return 1.5
        return (0.20 + 0.01 * (position % 10)) * boot_scale
    return ttft


def _boots(gate, control_scales: list[float], candidate_scales: list[float], tail_every: int = 0) -> None:
    for j, scale in enumerate(control_scales):
        write_visit(gate, "base" if j == 0 else f"base@rerun{j}", rates(), levels=(LEVEL,), ttft=_ttft(scale))
    for j, scale in enumerate(candidate_scales):
        write_visit(gate, "cand" if j == 0 else f"cand@rerun{j}", rates(), levels=(LEVEL,),
                    ttft=_ttft(scale, tail_every))


def test_a_constructed_ttft_tail_fails_a_not_worse_bar(tmp_path: Path) -> None:
    gate, cand, ctrl = _gate(tmp_path)
    _boots(gate, [1.0, 1.01, 0.99], [1.0, 1.005], tail_every=5)  # a fifth of the requests queue: p90 5x worse
    result = gate.judge(cand, ctrl)
    assert result.verdict is Verdict.FAIL, result.reasons
    assert result.reasons[0].startswith(f"C{LEVEL} ttft_p90_s: -")
    rows = result.details["levels"][str(LEVEL)]["prompts"]
    assert {row["class"] for row in rows} == {"prose", "code"}
    assert all(row["control"] == pytest.approx(0.29, abs=0.01) and row["candidate"] == 1.5 for row in rows)
    assert result.metrics[f"C{LEVEL}.control.ttft_p90_s"].value == pytest.approx(0.29, abs=0.01)
    # every boot's tails are reported whatever is judged; a p99 needs 500 samples, these boots have 50 a class
    tails = result.details["levels"][str(LEVEL)]["tails"]["candidate"]["prose"]
    assert tails["ttft"]["p90"] == 1.5 and tails["ttft"]["p99"] is None
    assert tails["itl"]["p99"] == pytest.approx(0.02, rel=0.2)  # 50 requests x 15 gaps


def test_an_unchanged_tail_never_fails_the_bar_and_passes_once_the_boots_agree(tmp_path: Path) -> None:
    gate, cand, ctrl = _gate(tmp_path)
    _boots(gate, [1.0, 1.01, 0.99], [1.005, 0.995])  # the control again, boot luck within 1%
    result = gate.judge(cand, ctrl)
    assert result.verdict is Verdict.PASS, result.reasons
    # the change is about zero, and its CI's low end clears the -10% floor: that is what passed
    est = result.details["levels"][str(LEVEL)]["estimate"]
    assert abs(est["change"]) < 0.02 and est["low"] > -0.10, est
    assert result.reasons[0].startswith(f"C{LEVEL} ttft_p90_s: ")


def test_an_undecided_tail_says_its_ci_rests_on_the_boots_and_is_not_simulated(tmp_path: Path) -> None:
    gate, cand, ctrl = _gate(tmp_path)
    _boots(gate, [1.0, 1.12, 0.92], [1.1, 0.93])  # boot luck of 10%: no decision either way
    result = gate.judge(cand, ctrl)
    assert result.verdict is Verdict.INCONCLUSIVE, result.reasons
    assert "a latency tail pooled per class: its CI rests on the boots' scatter alone" in result.reasons[0]
    assert result.details["levels"][str(LEVEL)]["power"] is None


@pytest.mark.parametrize("metric, level, needed", [("ttft_p99_s", LEVEL, 500), ("ttft_p90_s", 2, 50),
                                                   ("e2e_p95_s", LEVEL, 100)])
def test_a_tail_the_contracts_sizes_cannot_give_its_samples_is_refused(tmp_path: Path, metric: str, level: int,
                                                                       needed: int) -> None:
    with pytest.raises(ContractError) as caught:
        _gate(tmp_path, rule=f"{{metric: {metric}}}", level=level)
    message = str(caught.value)
    assert "gates[0].rule.metric" in message or "gates.0.rule.metric" in message, message
    assert f"{metric} needs {needed} samples per class and boot" in message


def test_itl_samples_are_every_gap_between_chunks_and_fit_a_p99_with_few_requests(tmp_path: Path) -> None:
    # 2 reps x 3 prompts x 15 gaps = 90 per class: enough for p90 (50), not p99 (500)
    _gate(tmp_path / "ok", rule="{metric: itl_p90_s}", level=1)
    with pytest.raises(ContractError, match="itl_p99_s needs 500 samples"):
        _gate(tmp_path / "no", rule="{metric: itl_p99_s}", level=1)
    stats, problem = analyze_stream(request("p1", "prose", 1, 0, 0, 0, rate=50.0, ttft=0.3), 16,
                                    StreamFacts(token_counter="timings.predicted_n"))
    assert problem is None and stats is not None
    assert len(stats.itl_s) == 15 and all(gap == pytest.approx(0.02) for gap in stats.itl_s)
    assert stats.ttft_s == pytest.approx(0.3)
