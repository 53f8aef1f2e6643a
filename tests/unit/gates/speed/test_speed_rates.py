"""Rate levels, goodput and the knee in the speed gate: the arrival schedule (the same for every lane and
rep, from the contract's seed), late sends voiding a rep, a request meeting an SLO, the paired change in the
good share, and where throughput stops growing with the load. The records are constructed
(tests/support/speedrecords); a real llama-server serves the rates in tests/integration/speed."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from campaign.errors import ContractError
from campaign.gates.common.streams import StreamStats
from campaign.gates.speed.arrivals import schedule
from campaign.gates.speed.latency import BootGoodput, highest_meeting, is_good, knee, paired_share_change
from campaign.gates.speed.spec import Arrival, Slo
from tests.support.speedrecords import load_gates, rates, speed_contract, write_visit

LANES = """\
- {name: base, role: control}
- name: cand
  role: candidate
  axis: [args.parallel]
  set: {args: {--parallel: "1"}}
"""


def _gate(tmp_path: Path, extra: str = "", rule: str = "{}"):
    _, gates = load_gates(tmp_path, speed_contract(LANES, f"""\
        - kind: speed
          input: p
          concurrency: []
          rates: [2, 8]
          max_tokens: 16
          reps: 2
          max_boot_pairs: 2
          {extra}
          rule: {rule}
        """))
    return gates[0]


def test_a_poisson_schedule_is_the_seeds_alone_and_keeps_its_rate() -> None:
    first, again = schedule(Arrival(seed=7), "2rps", "prose", 4000), schedule(Arrival(seed=7), "2rps", "prose", 4000)
    assert first == again and first[0] == 0.0
    assert first != schedule(Arrival(seed=8), "2rps", "prose", 4000)
    assert first != schedule(Arrival(seed=7), "2rps", "code", 4000)
    gaps = [b - a for a, b in zip(first, first[1:], strict=False)]
    assert statistics.fmean(gaps) == pytest.approx(0.5, rel=0.05)  # 1 / rate
    assert statistics.stdev(gaps) == pytest.approx(0.5, rel=0.1)  # exponential: as wide as its mean
    assert schedule(Arrival(process="constant"), "4rps", "prose", 3) == [0.0, 0.25, 0.5]


def test_rate_levels_are_named_and_judged_by_key(tmp_path: Path) -> None:
    gate = _gate(tmp_path, rule="{levels: [8rps]}")
    assert gate.spec.loads == ["2rps", "8rps"] and gate.spec.rule.levels == ["8rps"]
    with pytest.raises(ContractError, match=r"rule.levels \['3rps'\] are not in concurrency \[\] or rates"):
        _gate(tmp_path / "b", rule="{levels: [3rps]}")
    with pytest.raises(ContractError, match="an slo needs at least one of"):
        _gate(tmp_path / "c", extra="slo: {min_good_share: 0.9}")
    # 2 reps x 3 prompts a class: a p90 needs 50 samples a class and boot, and says what the rate level gives
    with pytest.raises(ContractError, match=r"class 'prose' at 2rps gives 6 \(reps 2 x 3 requests\)"):
        _gate(tmp_path / "d", rule="{metric: ttft_p90_s}")


def test_a_rep_whose_client_sent_late_is_void_and_says_by_how_much(tmp_path: Path) -> None:
    gate = _gate(tmp_path)
    write_visit(gate, "base", rates(), levels=("2rps", "8rps"), late=lambda rep, pos: 0.05 if pos == 0 else 0.0)
    view = gate.view("base")
    row = view.rows[("8rps", "prose")][0]
    assert row.status == "VOID"
    assert row.reasons == ["the client could not keep the 8rps schedule: 1 of 3 sends in rep 0 went out more "
                           "than 10 ms late (up to 50 ms; limit 5%)"]
    assert [rep["late_sends"] for rep in row.rep_rows] == [1, 1]
    on_time = _gate(tmp_path / "ok")
    write_visit(on_time, "base", rates(), levels=("2rps", "8rps"), late=lambda rep, pos: 0.009)
    assert on_time.view("base").rows[("8rps", "prose")][0].valid


def _stats(ttft: float, decode: float | None, elapsed: float) -> StreamStats:
    return StreamStats(tokens=16, ttft_s=ttft, decode_tok_s=decode, effective_tok_s=16 / elapsed, elapsed_s=elapsed,
                       token_source="usage", text="x", prompt_tokens=None, finish_reason="length")


def test_a_request_is_good_when_it_meets_every_bound_given() -> None:
    slo = Slo(ttft_s=0.5, tpot_s=0.05)
    assert is_good(_stats(0.5, 20.0, 9.0), slo)  # TTFT at the bound, 50 ms a token; no bound on the whole time
    assert not is_good(_stats(0.51, 20.0, 1.0), slo)
    assert not is_good(_stats(0.1, 19.0, 1.0), slo)  # 52.6 ms a token
    assert is_good(_stats(0.1, None, 0.2), slo)  # one token: no time per output token
    assert not is_good(_stats(0.1, 100.0, 2.0), Slo(e2e_s=1.0))


def test_the_good_share_is_paired_boot_by_boot_and_the_highest_level_within_it_found() -> None:
    boots = [BootGoodput("control", 0, False, 10, 10, 5.0), BootGoodput("candidate", 1, True, 10, 7, 5.0),
             BootGoodput("control_rerun1", 2, False, 10, 9, 5.0), BootGoodput("candidate_rerun1", 3, True, 10, 6, 5.0),
             BootGoodput("control_rerun2", 4, False, 10, 9, 5.0)]
    change = paired_share_change(boots, 0.95)
    assert change["pairs"] == 2 and change["change"] == pytest.approx(((0.7 - 0.95) + (0.6 - 0.9)) / 2)
    low, high = change["ci"]
    assert low < change["change"] < high
    assert paired_share_change(boots[:2], 0.95) is None  # a candidate boot needs a control on both sides
    met = {1: True, 4: True, 16: False, 32: True, "1rps": True, "4rps": False}
    assert highest_meeting([1, 4, 16, 32, "1rps", "4rps"], met) == {"concurrency": 4, "rate": "1rps"}


def test_the_knee_is_where_more_load_stops_buying_throughput() -> None:
    levels = [1, 2, 4, 8]
    # 100 -> 190 (x2 load, 90% of the proportional gain), -> 250 (32%): the knee is C2
    assert knee(levels, {1: 100.0, 2: 190.0, 4: 250.0, 8: 260.0}, None)["concurrency"]["level"] == 2
    assert knee(levels, {1: 100.0, 2: 200.0, 4: 400.0, 8: 790.0}, None)["concurrency"]["level"] is None
    # still growing, but the SLO breaks at C8: the knee is the last level within it
    assert knee(levels, {1: 100.0, 2: 200.0, 4: 400.0, 8: 790.0}, {1: True, 2: True, 4: True, 8: False}
                )["concurrency"]["level"] == 4
    assert knee(["1rps", "2rps"], {"1rps": 10.0, "2rps": 11.0}, None)["rate"]["level"] == "1rps"
    assert knee([4], {4: 10.0}, None) == {}


def test_goodput_and_the_knee_are_reported_per_lane_and_plotted(tmp_path: Path) -> None:
    from campaign.gates.speed.gate import SpeedGate

    gate = _gate(tmp_path, extra="slo: {ttft_s: 1.0, min_good_share: 0.9}")
    for j in range(3):
        write_visit(gate, "base" if j == 0 else f"base@rerun{j}", rates(), levels=("2rps", "8rps"))
    for j in range(2):  # one request in three of the candidate's waits 1.5 s for its first token
        write_visit(gate, "cand" if j == 0 else f"cand@rerun{j}", rates(), levels=("2rps", "8rps"),
                    ttft=lambda rep, pos: 1.5 if pos == 2 else 0.2)
    result = gate.judge(gate.ctx.contract.lanes["cand"], gate.ctx.contract.lanes["base"])
    fast = result.details["levels"]["8rps"]["goodput"]
    assert fast["control"]["share"] == 1.0 and fast["control"]["meets_slo"]
    assert fast["candidate"]["share"] == pytest.approx(2 / 3, abs=1e-4) and not fast["candidate"]["meets_slo"]
    assert fast["candidate"]["requests"] == 2 * 2 * 6  # two boots x two reps x six prompts
    assert fast["paired_change"]["change"] == pytest.approx(-1 / 3, abs=1e-4) and fast["paired_change"]["pairs"] == 2
    assert result.metrics["8rps.candidate.good_share"].value == pytest.approx(2 / 3, abs=1e-4)
    assert result.details["slo"]["highest_within"] == {"control": {"rate": "8rps"}, "candidate": {"rate": None}}
    assert set(result.details["knee"]) == {"control", "candidate"}
    titles = [plot.title for plot in SpeedGate.present(gate.spec.rule, result.model_dump(mode="json")).plots]
    assert any(title.startswith("Each lane against the load (rate") for title in titles), titles
