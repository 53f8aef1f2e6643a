"""`campaign plan`: a window's steps in order, how long each takes, and whether the window fits its failsafe
deadline, before anything is stopped. Pure functions over the contract and what earlier windows of its family
measured (``window/timings.py``); the window reuses the same reserve and the same refusal, so a plan and a
run never disagree.

A step's seconds are measured when earlier bundles of the family timed it (the median over those that did,
so one window slowed by a busy host does not make the next plan; a gate's time scaled by its request count
now against then), else estimated from the contract's sizes with the
assumed rates below, which the plan names. The deadline covers the daily's take-down, the visits and its
restore: the minimum plan (the fixed visits, the first boot pair) is what ``run`` refuses on; each further
pair is booted only while it and the restore reserve fit what is left, as the window decides it."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from campaign.contracts.load import LoadedContract
from campaign.contracts.model import StrictModel
from campaign.gates.base import Gate, GateContext, LiveGate, Visit, live_gates, screens
from campaign.gates.registry import gate_for
from campaign.window.schedule import (
    RESTORE_MARGIN_S,
    Planned,
    first_visits,
    fixed_reruns,
    pair_past_budget,
    planned_pair,
)
from campaign.window.timings import Measured, family_bundles, measured

__all__ = ["ASSUMED_BOOT_S", "ASSUMED_REQUEST_S", "ASSUMED_TOKENS_PER_S", "RESTORE_FLOOR_S", "RESTORE_TIMES",
           "PlanStep", "RestoreReserve", "WindowPlan", "plan_gates", "plan_window", "refuse_unfit",
           "request_counts", "restore_reserve"]

# The restore reserve: the daily's measured start-to-ready times this margin, never under the floor (a
# restore also stops the lanes and proves a completion), never over the daily's readiness budget.
RESTORE_TIMES = 3.0
RESTORE_FLOOR_S = 10.0
# With nothing measured: a boot and its warmup, each request's own cost (prefill, HTTP) plus its tokens at
# a modest decode rate, the daily's snapshot, failsafe arming and stop, a lane's stop, a screen, the judge.
ASSUMED_BOOT_S = 20.0
ASSUMED_REQUEST_S = 0.5
ASSUMED_TOKENS_PER_S = 20.0
ASSUMED_TAKEDOWN_S = 5.0
ASSUMED_STOP_S = 1.0
ASSUMED_SCREEN_S = 5.0
ASSUMED_AFTER_S = 2.0

Source = Literal["measured", "sizes"]


class PlanStep(StrictModel):
    phase: Literal["before", "take-down", "visit", "pair", "restore", "after"] = Field(
        description="before: copies and screens, before the daily is touched; take-down: the daily stopped "
                    "behind the armed failsafe; visit: the fixed visits; pair: a further boot pair, booted "
                    "only while a comparison is open; restore; after: disarm, judge, sign.")
    what: str = Field(description="The step in words.")
    lane: str | None = Field(None, description="The visit (lane, or lane@rerunN).")
    gate: str | None = Field(None, description="The gate run.")
    requests: int | None = Field(None, description="Requests the gate sends on this visit.")
    bound_s: float | None = Field(None, description="A boot's readiness budget: past it, a launch failure.")
    pair: int | None = Field(None, description="Which boot pair a pair step belongs to (2, 3, ...).")
    seconds: float = Field(description="Estimated seconds.")
    source: Source = Field(description="measured: an earlier window of this family timed it; sizes: estimated "
                                       "from the contract's sizes and the assumed rates.")


class RestoreReserve(StrictModel):
    seconds: float = Field(description="What a window keeps before its deadline for the daily's restore.")
    measured_s: float | None = Field(None, description="The daily's start-to-ready time it is sized by.")
    times: float = Field(description="The margin the measured time is multiplied by.")
    floor_s: float = Field(description="The least reserve.")
    budget_s: float = Field(description="The daily's readiness budget: the most reserve, and the reserve when "
                                        "nothing was measured.")
    source: str = Field(description="Where the measured time came from, in words.")


class WindowPlan(StrictModel):
    contract: str
    version: int
    canonical_sha256: str
    steps: list[PlanStep] = Field(description="In order; pair steps only if every comparison stays open.")
    pairs_at_least: int = Field(description="Boot pairs of the fixed part (a window may stop there).")
    pairs_at_most: int = Field(description="The most boot pairs any gate may ask for.")
    pairs_fit: int | None = Field(None, description="Boot pairs that fit the deadline with the restore reserve.")
    minimum_s: float = Field(description="The whole window, start to end, with the fewest pairs.")
    maximum_s: float = Field(description="The whole window with every pair.")
    deadline_s: float | None = Field(None, description="failsafe.deadline.")
    deadline_minimum_s: float | None = Field(None, description="What the deadline must hold at least: take-down, "
                                                               "fixed visits, the restore (estimated).")
    deadline_maximum_s: float | None = Field(None, description="Take-down, every pair, and the restore reserve.")
    fits_minimum: bool | None = Field(None, description="False: the minimum does not fit the deadline.")
    measured_minimum_s: float | None = Field(None, description="The minimum's steps an earlier window measured.")
    refused: bool = Field(False, description="`campaign run` refuses the window: its measured steps alone do not "
                                             "fit the deadline (never on the assumed rates alone).")
    fits_maximum: bool | None = None
    reserve: RestoreReserve | None = None
    history: list[str] = Field(default_factory=list, description="Earlier bundles of the family read, newest first.")
    assumptions: list[str] = Field(default_factory=list, description="The rates a sizes estimate assumed.")
    promotion: str | None = Field(None, description="What a promoted daily will be (filled by promotion).")


def plan_gates(loaded: LoadedContract) -> list[Gate]:
    """The contract's gates over its own input files (a window's read the bundle's frozen copies)."""
    paths = {name: loaded.resolve(spec.file) for name, spec in loaded.contract.inputs.items()}
    ctx = GateContext(bundle=loaded.base_dir, contract=loaded, input_paths=paths)
    return [gate_for(spec, ctx) for spec in loaded.contract.gates]


def plan_window(loaded: LoadedContract, out_dir: Path, *, exclude: Path | None = None) -> WindowPlan:
    """The plan of ``loaded``'s next window, from its sizes and the family's bundles under ``out_dir``."""
    bundles = family_bundles(out_dir, loaded.contract.contract, exclude=exclude)
    history = [measured(b) for b in bundles]
    gates = plan_gates(loaded)
    live = live_gates(gates)
    steps = _before_steps(loaded, gates, history)
    fixed = first_visits(loaded, live)
    steps += [s for visit, visit_gates in fixed for s in _visit_steps(visit, visit_gates, history, "visit", None)]
    # the fixed part holds the first pair when a gate re-boots the control; pairs 2.. while one is open
    at_least, most = fixed_reruns(live), max((g.max_boot_pairs for g in live), default=1)
    for pair in range(2, most + 1):
        steps += [s for visit, visit_gates in planned_pair(loaded, live, pair - 1)
                  for s in _visit_steps(visit, visit_gates, history, "pair", pair)]
    steps += _end_steps(loaded, history)
    return _checked(loaded, steps, history, at_least, max(at_least, max((s.pair or 0 for s in steps), default=0)))


def request_counts(planned: Planned) -> dict[str, dict[str, int]]:
    """gate -> visit (``lane``, or ``lane@rerun`` for its later boots) -> requests: what the window's plan
    record keeps, so a later plan scales this window's gate times by its own sizes."""
    counts: dict[str, dict[str, int]] = {}
    for visit, gates in planned:
        for gate in gates:
            counts.setdefault(gate.gate_id, {})[visit.lane.name + ("@rerun" if visit.index else "")] = \
                gate.planned_requests(visit)
    return counts


def _median(values: list[float | None]) -> float | None:
    """The middle of what was measured (None: nothing was)."""
    found = [v for v in values if v is not None]
    return statistics.median(found) if found else None


def _before_steps(loaded: LoadedContract, gates: list[Gate], history: list[Measured]) -> list[PlanStep]:
    steps = [_step("before", "copy the contract, its inputs and the tool's source into the bundle",
                   _median([m.before for m in history]), 0.0)]
    for candidate in loaded.candidates():
        for gate in screens(gates):
            took = _median([m.gates.get((candidate.name, False, gate.gate_id)) for m in history])
            steps.append(_step("before", f"screen {gate.gate_id} of {candidate.name} (offline, before the daily "
                               "is touched)", took, ASSUMED_SCREEN_S, lane=candidate.name, gate=gate.gate_id))
    if loaded.contract.incumbent is not None:
        steps.append(_step("take-down", "take the daily down behind the failsafe (snapshot, dry run, arm, stop)",
                           _median([m.takedown for m in history]), ASSUMED_TAKEDOWN_S))
    return steps


def _visit_steps(visit: Visit, gates: list[LiveGate], history: list[Measured], phase: Any,
                 pair: int | None) -> list[PlanStep]:
    lane, rerun = visit.lane, visit.index > 0
    key = str(visit.key)
    budget = lane.readiness.budget
    steps = [_step(phase, f"boot {key} and warm it up", _median([m.boots.get(lane.name) for m in history]),
                   min(ASSUMED_BOOT_S, budget),
                   lane=key, bound_s=budget, pair=pair)]
    for gate in gates:
        requests = gate.planned_requests(visit)
        sized = requests * (ASSUMED_REQUEST_S + int(getattr(gate.spec, "max_tokens", 0) or 0) / ASSUMED_TOKENS_PER_S)
        steps.append(_step(phase, f"gate {gate.gate_id} on {key}: {requests} requests",
                           _median([_gate_seconds(m, lane.name, rerun, gate.gate_id, requests) for m in history]),
                           sized,
                           lane=key, gate=gate.gate_id, requests=requests, pair=pair))
    steps.append(_step(phase, f"stop {key}", _median([m.stops.get(lane.name) for m in history]), ASSUMED_STOP_S,
                       lane=key, pair=pair))
    return steps


def _gate_seconds(one: Measured, lane: str, rerun: bool, gate: str, requests: int) -> float | None:
    """A gate's measured time on such a visit, scaled by its requests now against then (when that window
    recorded its count; else as measured). A later boot never measured (the window stopped its pairs): the
    lane's first boot stands in, per request."""
    for same in (rerun, not rerun):
        took = one.gates.get((lane, same, gate))
        if took is not None:
            then = one.requests.get(gate, {}).get(f"{lane}@rerun" if same else lane)
            return took * requests / then if then else took
    return None


def _end_steps(loaded: LoadedContract, history: list[Measured]) -> list[PlanStep]:
    steps: list[PlanStep] = []
    spec = loaded.contract.incumbent
    if spec is not None:
        took = _median([m.restore for m in history])  # the reserve takes the slowest; the estimate the middle
        if took is None:
            took, _why = _daily_ready(loaded, history)
        steps.append(_step("restore", "restore the daily and prove it", took,
                           min(ASSUMED_BOOT_S, spec.readiness.budget), bound_s=spec.readiness.budget))
    steps.append(_step("after", "disarm the failsafe, judge, sign", _median([m.after for m in history]),
                       ASSUMED_AFTER_S))
    return steps


def _daily_ready(loaded: LoadedContract, history: list[Measured]) -> tuple[float | None, str]:
    """The daily's start-to-ready time: the newest restores measured (the slowest of them), else the boots of
    the lane the daily runs (``incumbent.lane``), in the family's bundles; (None, ...) when none."""
    restores = [(m.restore, m.bundle) for m in history if m.restore is not None]
    if restores:
        took, bundle = max(restores)
        return took, f"the slowest of the last {len(restores)} restores measured ({Path(bundle).name})"
    spec = loaded.contract.incumbent
    name = spec.lane if spec is not None else None
    boots = [(m.boots[name], m.bundle) for m in history if name and name in m.boots]
    if boots:
        took, bundle = max(boots)
        return took, f"the boots of lane {name}, which the daily runs ({Path(bundle).name})"
    return None, "nothing measured"


def restore_reserve(loaded: LoadedContract, out_dir: Path, *, exclude: Path | None = None,
                    history: list[Measured] | None = None) -> RestoreReserve | None:
    """What a window keeps for the daily's restore: its measured start-to-ready time x RESTORE_TIMES, at
    least RESTORE_FLOOR_S, at most its readiness budget; the budget when nothing was measured."""
    spec = loaded.contract.incumbent
    if spec is None:
        return None
    if history is None:
        history = [measured(b) for b in family_bundles(out_dir, loaded.contract.contract, exclude=exclude)]
    took, why = _daily_ready(loaded, history)
    budget = spec.readiness.budget
    seconds = budget if took is None else min(budget, max(RESTORE_FLOOR_S, RESTORE_TIMES * took))
    return RestoreReserve(seconds=seconds, measured_s=took, times=RESTORE_TIMES, floor_s=RESTORE_FLOOR_S,
                          budget_s=budget, source=why if took is not None else
                          "nothing measured: the daily's readiness budget")


def _step(phase: Any, what: str, took: float | None, sized: float, **fields: Any) -> PlanStep:
    return PlanStep(phase=phase, what=what, seconds=round(took if took is not None else sized, 3),
                    source="measured" if took is not None else "sizes", **fields)


def _checked(loaded: LoadedContract, steps: list[PlanStep], history: list[Measured], at_least: int,
             most: int) -> WindowPlan:
    """The totals, and the deadline's check: the minimum with the restore as estimated, each further pair
    only while it and the reserve fit, as the window decides."""
    fixed = sum(s.seconds for s in steps if s.phase != "pair")
    in_deadline = sum(s.seconds for s in steps if s.phase in ("take-down", "visit", "restore"))
    pairs = {p: sum(s.seconds for s in steps if s.pair == p) for p in range(at_least + 1, most + 1)}
    failsafe, reserve = loaded.contract.failsafe, restore_reserve(loaded, Path(), history=history)
    plan: dict[str, Any] = {
        "contract": loaded.contract.contract, "version": loaded.contract.version,
        "canonical_sha256": loaded.canonical_sha256, "steps": steps, "pairs_at_least": at_least,
        "pairs_at_most": most, "minimum_s": round(fixed, 1), "maximum_s": round(fixed + sum(pairs.values()), 1),
        "reserve": reserve, "history": [Path(m.bundle).name for m in history],
        "assumptions": _assumptions(steps)}
    if failsafe is not None and loaded.contract.incumbent is not None and reserve is not None:
        restore = sum(s.seconds for s in steps if s.phase == "restore")
        used = in_deadline - restore  # the take-down and the fixed visits
        fit = 0
        for pair in sorted(pairs):
            if pair_past_budget(seconds_left=failsafe.deadline - used, pair_estimate_s=pairs[pair],
                                restore_s=reserve.seconds) is not None:  # as the window decides it
                break
            used, fit = used + pairs[pair], fit + 1
        most_used = in_deadline - restore + sum(pairs.values()) + reserve.seconds + RESTORE_MARGIN_S
        # refused on what earlier windows of this family measured, never on the assumed rates alone: a guess
        # of 20 tok/s would refuse a GPU window of many prompts that runs in minutes
        measured_minimum = sum(s.seconds for s in steps
                               if s.phase in ("take-down", "visit", "restore") and s.source == "measured")
        plan.update(measured_minimum_s=round(measured_minimum, 1), refused=measured_minimum > failsafe.deadline)
        plan.update(deadline_s=failsafe.deadline, deadline_minimum_s=round(in_deadline, 1),
                    deadline_maximum_s=round(most_used, 1), fits_minimum=in_deadline <= failsafe.deadline,
                    fits_maximum=most_used <= failsafe.deadline, pairs_fit=at_least + fit)
    return WindowPlan(**plan)


def _assumptions(steps: list[PlanStep]) -> list[str]:
    if all(s.source == "measured" for s in steps):
        return []
    return [f"steps from sizes assume: a boot and its warmup {ASSUMED_BOOT_S:g}s (at most the lane's readiness "
            f"budget), a request {ASSUMED_REQUEST_S:g}s plus its max_tokens at {ASSUMED_TOKENS_PER_S:g} tok/s, "
            f"the daily's take-down {ASSUMED_TAKEDOWN_S:g}s, a lane's stop {ASSUMED_STOP_S:g}s, a screen "
            f"{ASSUMED_SCREEN_S:g}s, disarm/judge/sign {ASSUMED_AFTER_S:g}s: a window of this family measures them"]


def refuse_unfit(loaded: LoadedContract, out_dir: Path) -> WindowPlan | None:
    """Before anything stops: a window whose minimum plan cannot fit its failsafe deadline is refused (a
    located contract error on ``failsafe.deadline``, exit code 2)."""
    if loaded.contract.incumbent is None or loaded.contract.failsafe is None:
        return None
    plan = plan_window(loaded, out_dir)
    if plan.refused:
        raise loaded.error(("failsafe", "deadline"), f"{plan.deadline_s:g}s cannot hold even the minimum plan "
                           f"(~{plan.measured_minimum_s:.0f}s measured by earlier windows: the daily's take-down, "
                           "the fixed visits and its restore; `campaign plan` shows each step): the daily was not "
                           "stopped")
    return plan
