"""`campaign plan`'s estimate on constructed contracts and constructed earlier-bundle journals (every timing
written here by hand: nothing depends on this machine's speed), the restore reserve, and the deadline check
`run` refuses on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from campaign.contracts.load import load_contract
from campaign.errors import ContractError
from campaign.window import plan as planning
from campaign.window.plan import plan_window, refuse_unfit, restore_reserve
from tests.support.contracts import candidate, contract_yaml, control, process_defaults, write_contract

NAME = "t-plan"


def contract(tmp_path: Path, *, deadline: str = "30m", daily_budget: str = "600s", pairs: int = 3,
             repeats: int = 2, prompts: int = 3, name: str = NAME) -> Any:
    """Two lanes, greedy (prompts x repeats requests) and a speed gate of up to ``pairs`` boot pairs, a process
    daily behind a failsafe."""
    body = contract_yaml(
        name, defaults=process_defaults(18999, budget="120s"), lanes=[control(), candidate("fast", ["args.threads"],
                                                                                           args={"--threads": "2"})],
        inputs={"p": {"file": "prompts/p.jsonl"}},
        gates=[{"kind": "greedy", "input": "p", "repeats": repeats, "max_tokens": 10,
                "rule": {"self_identical": f"{prompts}/{prompts}"}},
               {"kind": "speed", "input": "p", "concurrency": [1], "max_tokens": 10, "reps": 2,
                "max_boot_pairs": pairs}],
        incumbent={"runtime": "process", "endpoint": "http://127.0.0.1:18999", "pidfile": "daily.pid", "lane": "base",
                   "readiness": {"budget": daily_budget}},
        failsafe={"deadline": deadline})
    rows = [(f"p{i}", f"Say {i}.") for i in range(prompts)]
    return load_contract(write_contract(tmp_path, body, prompts=rows), check_files=False)


def journal(out: Path, window: str, records: list[dict[str, Any]], *, contract_name: str = NAME) -> Path:
    """An earlier bundle's journal: ``records`` are (step, event, t, fields), times given by hand."""
    bundle = out / f"{window}-{contract_name}-v1-0123abcd"
    bundle.mkdir(parents=True)
    lines = [{"t": 0.0, "event": "done", "step": "start", "contract": contract_name, "canonical_sha256": "x"}]
    lines += records
    (bundle / "journal.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return bundle


def span(step: str, start: float, end: float, **fields: Any) -> list[dict[str, Any]]:
    return [{"t": start, "event": "intent", "step": step, **fields}, {"t": end, "event": "done", "step": step, **fields}]


def window_records(*, boot: float = 4.0, greedy: float = 6.0, restore: float = 1.5,
                   requests: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """A whole window: take-down 2 s, three visits (base, fast, base@rerun1), restore, judge; ends complete."""
    records = span("incumbent.snapshot", 1.0, 1.5) + span("incumbent.stop", 2.5, 3.0)
    records.append({"t": 3.0, "event": "done", "step": "plan", "requests": requests or {}})
    t = 3.0
    for visit, gates in (("base", ["greedy", "speed"]), ("fast", ["greedy", "speed"]), ("base@rerun1", ["speed"])):
        records += span("boot", t, t + boot, lane=visit)
        t += boot
        for gate in gates:
            took = greedy if gate == "greedy" else 3.0
            records += span("gate", t, t + took, lane=visit, gate=gate)
            t += took
        records += span("stop", t, t + 0.5, lane=visit)
        t += 0.5
    records.append({"t": t, "event": "done", "step": "incumbent.restore", "action": "started",
                    "proof": {"proved_at": t + restore}})
    t += restore
    records += span("judge", t + 0.2, t + 1.0)
    records.append({"t": t + 1.0, "event": "done", "step": "end", "status": "complete"})
    return records


def test_from_sizes_every_step_is_estimated_and_says_so(tmp_path: Path) -> None:
    loaded = contract(tmp_path)
    plan = plan_window(loaded, tmp_path / "runs")
    assert plan.history == [] and {s.source for s in plan.steps} == {"sizes"} and plan.assumptions
    greedy = [s for s in plan.steps if s.gate == "greedy"]
    assert [s.requests for s in greedy] == [6, 6]  # 3 prompts x 2 repeats, on each lane's first boot
    per_request = planning.ASSUMED_REQUEST_S + 10 / planning.ASSUMED_TOKENS_PER_S
    assert greedy[0].seconds == pytest.approx(6 * per_request)
    boots = [s for s in plan.steps if s.what.startswith("boot")]
    assert boots[0].bound_s == 120.0 and boots[0].seconds == planning.ASSUMED_BOOT_S
    # the fixed part holds the first pair (base, fast, base@rerun1); pairs 2 and 3 only while speed is open
    assert (plan.pairs_at_least, plan.pairs_at_most) == (1, 3)
    assert [s.lane for s in plan.steps if s.pair == 2 and s.what.startswith("boot")] == ["fast@rerun1", "base@rerun2"]
    assert plan.maximum_s > plan.minimum_s == pytest.approx(sum(s.seconds for s in plan.steps if s.pair is None), 0.01)
    # nothing measured: the reserve is the daily's whole readiness budget
    assert plan.reserve is not None and plan.reserve.seconds == 600.0 and plan.reserve.measured_s is None


def test_an_earlier_bundle_of_the_family_times_the_steps(tmp_path: Path) -> None:
    loaded = contract(tmp_path)
    out = tmp_path / "runs"
    journal(out, "20260101T000000Z", window_records())
    journal(out, "20260102T000000Z", window_records(boot=9.0))  # one window slowed by a busy host: the median
    journal(out, "20260103T000000Z", window_records())
    journal(out, "20260104T000000Z", window_records(boot=50.0), contract_name="another")  # not of the family
    plan = plan_window(loaded, out)
    assert plan.history == [f"2026010{day}T000000Z-t-plan-v1-0123abcd" for day in (3, 2, 1)]
    by = {(s.phase, s.lane, s.gate, s.what.split()[0]): s for s in plan.steps}
    assert by[("visit", "base", None, "boot")].seconds == 4.0 and by[("visit", "base", None, "boot")].source == "measured"
    assert by[("visit", "fast", "greedy", "gate")].seconds == 6.0
    assert by[("visit", "base@rerun1", None, "stop")].seconds == 0.5
    assert by[("take-down", None, None, "take")].seconds == 2.0
    assert by[("restore", None, None, "restore")].seconds == 1.5
    assert by[("after", None, None, "disarm")].seconds == pytest.approx(1.0)
    # a pair's candidate boot never measured as a later boot: its first boot's time per request stands in
    assert by[("pair", "fast@rerun1", "speed", "gate")].seconds == 3.0
    assert not plan.assumptions or "sizes" in plan.assumptions[0]
    fixed = 1.0 + 2.0 + 3 * (4.0 + 0.5) + 2 * 6.0 + 3 * 3.0 + 1.5 + 1.0  # before (snapshot at t=1), ..., after
    assert plan.minimum_s == pytest.approx(fixed, abs=0.05)


def test_a_gate_time_is_scaled_by_its_requests_now_against_then(tmp_path: Path) -> None:
    out = tmp_path / "runs"
    journal(out, "20260102T000000Z", window_records(greedy=6.0, requests={"greedy": {"base": 6, "fast": 6}}))
    plan = plan_window(contract(tmp_path, repeats=4), out)  # twice the requests of the measured window
    (greedy,) = [s for s in plan.steps if s.gate == "greedy" and s.lane == "base"]
    assert greedy.requests == 12 and greedy.seconds == pytest.approx(12.0) and greedy.source == "measured"


def test_the_restore_reserve_is_the_measured_restore_times_a_margin_within_floor_and_budget(tmp_path: Path) -> None:
    out = tmp_path / "runs"
    journal(out, "20260101T000000Z", window_records(restore=1.06))
    journal(out, "20260102T000000Z", window_records(restore=0.8))
    reserve = restore_reserve(contract(tmp_path), out)
    assert reserve is not None  # the slowest of the last restores, x3, but never under the floor
    assert reserve.measured_s == pytest.approx(1.06) and reserve.seconds == planning.RESTORE_FLOOR_S
    assert "restores measured" in reserve.source
    journal(out, "20260103T000000Z", window_records(restore=40.0))
    assert restore_reserve(contract(tmp_path), out).seconds == pytest.approx(120.0)  # type: ignore[union-attr]
    slow = restore_reserve(contract(tmp_path, daily_budget="100s"), out)
    assert slow is not None and slow.seconds == 100.0  # capped by the daily's readiness budget


def test_without_restores_the_daily_lanes_boots_size_the_reserve(tmp_path: Path) -> None:
    out = tmp_path / "runs"
    records = [r for r in window_records(boot=7.0) if r["step"] != "incumbent.restore"]
    journal(out, "20260101T000000Z", records)
    reserve = restore_reserve(contract(tmp_path), out)
    assert reserve is not None and reserve.measured_s == 7.0 and reserve.seconds == 21.0
    assert "boots of lane base" in reserve.source


def test_pairs_fit_as_the_window_decides_them(tmp_path: Path) -> None:
    """Each further pair only while it, the reserve and the restore's margin fit what is left."""
    out = tmp_path / "runs"
    journal(out, "20260101T000000Z", window_records(boot=10.0, restore=2.0))
    roomy = plan_window(contract(tmp_path, deadline="30m"), out)
    assert roomy.fits_minimum and roomy.fits_maximum and roomy.pairs_fit == 3
    # take-down 2 + fixed visits 3 x 10.5 + 2 x 6 + 3 x 3 = 54.5; a pair is 2 x (10 + 3 + 0.5) = 27;
    # the reserve 10 (3 x 2 s under the floor) + 30: 54.5 + 27 + 40 = 121.5 <= 125 < 148.5
    tight = plan_window(contract(tmp_path, deadline="125s"), out)
    assert tight.fits_minimum and not tight.fits_maximum and tight.pairs_fit == 2
    assert tight.deadline_minimum_s == pytest.approx(56.5)  # with the restore as measured (2 s)


def test_run_refuses_a_window_whose_minimum_cannot_fit_naming_the_deadline(tmp_path: Path) -> None:
    out = tmp_path / "runs"
    journal(out, "20260101T000000Z", window_records(boot=30.0))
    loaded = contract(tmp_path, deadline="60s")
    with pytest.raises(ContractError) as refused:
        refuse_unfit(loaded, out)
    message = str(refused.value)
    assert refused.value.exit_code == 2 and "failsafe.deadline" in message and "c.yaml:" in message
    assert "minimum plan" in message and "the daily was not stopped" in message and "\n" not in message
    assert refuse_unfit(contract(tmp_path, deadline="10m"), out) is not None


def test_the_assumed_rates_alone_never_refuse_a_window(tmp_path: Path) -> None:
    """No earlier window: the plan says the minimum may not fit, and `run` goes ahead behind the failsafe (a
    guessed 20 tok/s would refuse a GPU window that runs in minutes)."""
    plan = refuse_unfit(contract(tmp_path, deadline="1s"), tmp_path / "runs")
    assert plan is not None and plan.fits_minimum is False and not plan.refused
    assert plan.measured_minimum_s == 0 and {s.source for s in plan.steps} == {"sizes"}


def test_a_journal_torn_or_of_another_contract_is_no_evidence(tmp_path: Path) -> None:
    out = tmp_path / "runs"
    torn = journal(out, "20260101T000000Z", window_records(boot=9.0))
    (torn / "journal.jsonl").write_bytes(b"\x00not json\n{\n")
    journal(out, "20260102T000000Z", window_records(), contract_name="t-plan-other")  # a longer name, not ours
    assert plan_window(contract(tmp_path), out).history == []


def test_the_command_prints_the_steps_the_reserve_and_the_deadline_check(tmp_path: Path) -> None:
    from tests.support.cli import campaign

    loaded, out = contract(tmp_path, deadline="60s"), tmp_path / "runs"
    journal(out, "20260101T000000Z", window_records(boot=30.0, restore=1.06))
    shown = campaign("plan", str(loaded.path), "--out", str(out))
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout
    assert "boot fast and warm it up" in text and "pair 2, only while a comparison is open" in text
    assert "restore reserve: 10s (the slowest of the last 1 restores measured" in text
    assert "does NOT fit: `campaign run` refuses this window" in text
    as_json = json.loads(campaign("plan", str(loaded.path), "--out", str(out), "--json").stdout)
    assert as_json["fits_minimum"] is False and as_json["reserve"]["measured_s"] == pytest.approx(1.06)
    assert as_json["history"] == ["20260101T000000Z-t-plan-v1-0123abcd"]
    # the lanes listen on the daily's port: promoted, a candidate serves where the daily's users call it
    assert "serves where the daily answers now (http://127.0.0.1:18999)" in as_json["promotion"]
    (tmp_path / "moved").mkdir()
    moved = contract(tmp_path / "moved", deadline="60s")
    moved.path.write_text(moved.path.read_text().replace("port: 18999", "port: 18998"))
    shown_moved = campaign("plan", str(moved.path), "--out", str(out))
    assert "promotion: lane fast is measured at" in shown_moved.stdout and "18998" in shown_moved.stdout


def test_timings_of_a_real_window_journal() -> None:
    """The journal of a window a real daily and real lanes ran (a fixture bundle of version 0.1.0)."""
    from campaign.window.timings import measured

    found = measured(Path(__file__).resolve().parents[2] / "fixtures" / "bundles" / "v0.1.0-control-boots" / "bundle")
    assert found.boots["base"] == pytest.approx(0.845, abs=0.01)  # the latest boot of base: its rerun
    assert found.gates[("spec", False, "speed")] == pytest.approx(3.744, abs=0.01)
    assert found.restore == pytest.approx(0.815, abs=0.01) and found.takedown == pytest.approx(2.109, abs=0.01)
    assert found.total == pytest.approx(14.569, abs=0.01)


def test_each_gate_counts_the_requests_it_sends_on_a_visit() -> None:
    """The demo contract's gates on its files: counted from each kind's own shape of sending."""
    from campaign.gates.base import Visit
    from campaign.window.plan import plan_gates
    from tests.support.contracts import EXAMPLES

    loaded = load_contract(EXAMPLES / "demo.yaml", check_files=False)
    base, candidate_lane = loaded.lanes["baseline"], loaded.lanes["ngram-k4"]
    counts = {g.gate_id: g.planned_requests(Visit(base)) for g in plan_gates(loaded) if hasattr(g, "planned_requests")}
    assert counts["greedy"] == 8 * 2  # 8 prompts x 2 repeats
    assert counts["task"] == (4 + 12 + 4) * 1  # 4 HumanEval ids, 12 arithmetic problems, 4 user tasks, 1 repeat
    assert counts["needle"] == 3 * 3  # 3 rungs x 3 variants (first attempts)
    assert counts["teacher_forced"] == 2 * 4 + 2  # each prompt generated and scored, each reference scored
    assert counts["ruler"] == 2 + 1  # 2 probes and the default exercise
    assert counts["thinking-switch"] == 2 + 1 + 2 * 2  # and each probe with the switch on and off
    assert counts["tools"] == 2 * (1 + 1)  # 2 episodes of one call each: the call turn and the answer after it
    # per level and class (2 classes of 2 prompts): a warmup wave of `level` users, then 2 reps of
    # max(prompts, level) requests: C1 (1 + 2 x 2) x 2 + C4 (4 + 2 x 4) x 2
    assert counts["speed"] == 10 + 24
    (tf,) = [g for g in plan_gates(loaded) if g.gate_id == "teacher_forced"]
    assert tf.planned_requests(Visit(candidate_lane)) == 2 * 4 + 2 + 4  # and scores its sites on the control
    assert tf.planned_requests(Visit(base, 1)) == 4 * (1 + 2) + 2  # the rerun: again, both candidates' sites, the references


def test_the_strangers_gpu_contract_is_planned_away_from_its_box() -> None:
    """examples/vllm-drafter.yaml names models on a GPU box that this one lacks: the plan reads its input
    sets (request counts), not its models, and says what the promoted daily will be."""
    from tests.support.cli import campaign
    from tests.support.contracts import EXAMPLES

    shown = campaign("plan", str(EXAMPLES / "vllm-drafter.yaml"), "--json")
    assert shown.returncode == 0, shown.stderr
    plan = json.loads(shown.stdout)
    greedy = [s for s in plan["steps"] if s["gate"] == "greedy"]
    assert greedy and all(s["requests"] and s["requests"] > 0 for s in greedy)
    assert plan["deadline_s"] is not None and plan["promotion"]
