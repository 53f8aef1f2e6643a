"""The window's visit plan: every lane once, the control's second boot, then pairs (candidate@k, then
the control) while a speed gate's comparison is open; decided from the raw records, so a resumed
window plans the same visits."""

from __future__ import annotations

from pathlib import Path

from campaign.window.schedule import first_visits, most_steps, next_pair
from tests.support.speedrecords import load_gates, rates, speed_contract, write_visit

BODY = speed_contract("""\
    - {name: base, role: control}
    - name: fast
      role: candidate
      axis: [args.threads]
      set: {args: {--threads: "2"}}
    - name: twin
      role: candidate
      axis: [args.seed]
      set: {args: {--seed: "1"}}
    """, """\
    - {kind: greedy, input: p, repeats: 2, rule: {self_identical: "6/6"}}
    - {kind: speed, input: p, concurrency: [1, 2], max_tokens: 16, reps: 2, max_boot_pairs: 3, rule: {futility: none}}
    """, name="t-schedule")


def plan(tmp_path: Path):
    return load_gates(tmp_path, BODY)


def keys(planned) -> list[tuple[str, list[str]]]:
    return [(str(visit.key), [g.gate_id for g in gates]) for visit, gates in planned]


def test_pairs_continue_only_for_comparisons_still_open(tmp_path: Path) -> None:
    loaded, gates = plan(tmp_path)
    speed = gates[1]
    assert keys(first_visits(loaded, gates)) == [("base", ["greedy", "speed"]), ("fast", ["greedy", "speed"]),
                                                 ("twin", ["greedy", "speed"]), ("base@rerun1", ["speed"])]
    for key, values in (("base", rates()), ("fast", rates(1.3)), ("twin", rates(1.02)), ("base@rerun1", rates(0.99))):
        write_visit(speed, key, values)
    # one pair decides nothing: both candidates again, then the control once for both
    assert keys(next_pair(loaded, gates, 1)) == [("fast@rerun1", ["speed"]), ("twin@rerun1", ["speed"]),
                                                 ("base@rerun2", ["speed"])]
    for key, values in (("fast@rerun1", rates(1.31)), ("twin@rerun1", rates(0.97)), ("base@rerun2", rates(1.01))):
        write_visit(speed, key, values)
    # fast is decided (PASS); the twin is not: only it is booted again
    assert keys(next_pair(loaded, gates, 2)) == [("twin@rerun2", ["speed"]), ("base@rerun3", ["speed"])]
    for key, values in (("twin@rerun2", rates(1.03)), ("base@rerun3", rates(1.0))):
        write_visit(speed, key, values)
    assert next_pair(loaded, gates, 3) == []  # max_boot_pairs
    # the progress total if every pair is needed: 4 first visits (8 gate runs), then 2 pairs x 3 boots
    assert most_steps(loaded, gates) == 4 + 7 + 2 * 3 * 2
    assert most_steps(loaded, gates, boots=False) == 7 + 2 * 3


def test_a_candidate_without_records_is_not_booted_again(tmp_path: Path) -> None:
    loaded, gates = plan(tmp_path)
    speed = gates[1]
    for key, values in (("base", rates()), ("twin", rates(1.02)), ("base@rerun1", rates(0.99))):
        write_visit(speed, key, values)  # fast's first boot failed: nothing to bracket
    assert keys(next_pair(loaded, gates, 1)) == [("twin@rerun1", ["speed"]), ("base@rerun2", ["speed"])]


def test_a_pair_that_would_end_past_the_restore_point_is_not_booted() -> None:
    from campaign.window.schedule import RESTORE_MARGIN_S, pair_past_budget

    room = 100.0 + 60.0 + RESTORE_MARGIN_S  # a pair of 100 s, a daily that needs 60 s to serve again
    assert pair_past_budget(seconds_left=room, pair_estimate_s=100.0, restore_s=60.0) is None
    late = pair_past_budget(seconds_left=room - 1, pair_estimate_s=100.0, restore_s=60.0)
    assert late is not None and "time budget" in late and "before the failsafe deadline" in late
    assert "0s are left" in (pair_past_budget(seconds_left=-5.0, pair_estimate_s=1.0, restore_s=1.0) or "")


def test_a_pair_is_estimated_from_the_latest_boot_and_gate_runs_of_its_lanes() -> None:
    from campaign.window.schedule import step_seconds

    journal = [{"t": 0.0, "event": "intent", "step": "boot", "lane": "base"},
               {"t": 2.0, "event": "done", "step": "boot", "lane": "base"},
               {"t": 2.0, "event": "intent", "step": "gate", "lane": "base", "gate": "task"},
               {"t": 60.0, "event": "done", "step": "gate", "lane": "base", "gate": "task"},
               {"t": 60.0, "event": "intent", "step": "gate", "lane": "base", "gate": "speed"},
               {"t": 80.0, "event": "done", "step": "gate", "lane": "base", "gate": "speed"},
               {"t": 90.0, "event": "intent", "step": "boot", "lane": "base@rerun1"},
               {"t": 93.0, "event": "done", "step": "boot", "lane": "base@rerun1"},
               {"t": 93.0, "event": "intent", "step": "gate", "lane": "base@rerun1", "gate": "speed"},
               {"t": 95.0, "event": "failed", "step": "gate", "lane": "base@rerun1", "gate": "speed"}]
    took = step_seconds(journal)
    # a pair visit runs only the pairing gate: the task gate's minute of the first visit is not in its cost
    assert took[("boot", "base", None)] == 3.0 and took[("gate", "base", "speed")] == 20.0
    assert took[("gate", "base", "task")] == 58.0  # known, and asked for only if a pair runs that gate
