"""Which lanes a window boots, in what order, and which gates each boot runs.

The fixed part first: every lane once in contract order (controls precede their candidates), then each
compared control again as often as a gate asks (``control_reruns``), so drift across the window is
measured and the control scores the candidates' outputs. Then boot pairs while a gate that pairs boots
(speed) says a comparison is still open: candidate@k, then control@k+1, so each candidate boot sits
between two control boots. What is open is decided from the raw records only, so a resumed window
makes the same visits again.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from campaign.contracts.load import LoadedContract
from campaign.contracts.resolve import EffectiveLane
from campaign.gates.base import PAIRS_STOPPED, Gate, LiveGate, Visit, live_gates, screens

__all__ = ["first_visits", "fixed_reruns", "gates_for_visit", "most_steps", "next_pair", "pair_past_budget",
           "planned_pair", "step_seconds", "PAIRS_STOPPED"]


# Besides the daily's own readiness budget, what the end of a window takes before the daily serves: the
# lanes' stop, the restore's proof, the judge does not count (it runs after the restore).
RESTORE_MARGIN_S = 30.0

Planned = list[tuple[Visit, list[LiveGate]]]


def gates_for_visit(gates: list[LiveGate], visit: Visit) -> list[LiveGate]:
    """The gates a visit of the fixed part runs: every gate on a lane's first boot, on a re-boot of the
    control only those that asked for it."""
    return [g for g in gates if g.control_reruns >= visit.index]


def first_visits(loaded: LoadedContract, gates: list[LiveGate]) -> Planned:
    visits = [Visit(lane) for lane in loaded.lanes.values()]
    for index in range(1, fixed_reruns(gates) + 1):
        visits += [Visit(lane, index) for lane in _compared(loaded)]
    return [(visit, gates_for_visit(gates, visit)) for visit in visits]


def next_pair(loaded: LoadedContract, gates: list[LiveGate], pairs_done: int) -> Planned:
    """After ``pairs_done`` pairs: each candidate some pairing gate still needs, then its control once."""
    return _pair(loaded, gates, pairs_done, lambda g, candidate, control: g.wants_pair(candidate, control, pairs_done))


def planned_pair(loaded: LoadedContract, gates: list[LiveGate], pairs_done: int) -> Planned:
    """The pair after ``pairs_done`` if every gate that may still ask for one does: a plan's most."""
    return _pair(loaded, gates, pairs_done, lambda g, candidate, control: g.max_boot_pairs > pairs_done)


def _pair(loaded: LoadedContract, gates: list[LiveGate], pairs_done: int,
          wants: Callable[[LiveGate, EffectiveLane, EffectiveLane], bool]) -> Planned:
    if pairs_done < fixed_reruns(gates):
        return []  # the fixed part's control re-boots are not yet behind us (a gate asked for more than 1)
    planned: Planned = []
    controls: dict[str, list[LiveGate]] = {}
    for candidate in loaded.candidates():
        control = loaded.lanes[candidate.control or ""]
        wanting = [g for g in gates if wants(g, candidate, control)]
        if wanting:
            planned.append((Visit(candidate, pairs_done), wanting))
            into = controls.setdefault(control.name, [])
            into += [g for g in wanting if g not in into]
    planned += [(Visit(loaded.lanes[name], pairs_done + 1), wanting) for name, wanting in controls.items()]
    return planned


def most_steps(loaded: LoadedContract, gates: Sequence[Gate], *, boots: bool = True) -> int:
    """Gate runs (and boots) if every pairing gate goes to its last pair: the progress line's total. A
    screen runs once per candidate, before any boot."""
    live, per_visit = live_gates(gates), 1 if boots else 0
    steps = len(screens(gates)) * len(loaded.candidates())
    steps += sum(per_visit + len(g) for _, g in first_visits(loaded, live))
    pairing = [g for g in live if g.max_boot_pairs > 1]
    extra = max((g.max_boot_pairs for g in pairing), default=1) - fixed_reruns(live)
    if pairing and extra > 0:
        steps += extra * (len(loaded.candidates()) + len(_compared(loaded))) * (per_visit + len(pairing))
    return steps


def fixed_reruns(gates: list[LiveGate]) -> int:
    """The control re-boots of the fixed part: the first boot pair when a gate pairs boots."""
    return max((gate.control_reruns for gate in gates), default=0)


def _compared(loaded: LoadedContract) -> list[EffectiveLane]:
    return [lane for lane in loaded.controls() if any(c.control == lane.name for c in loaded.candidates())]


def pair_past_budget(*, seconds_left: float, pair_estimate_s: float, restore_s: float,
                     restore_why: str = "") -> str | None:
    """Why the next pair does not fit before the failsafe deadline (the window's time budget), or None.
    A pair is estimated by what its lanes' last boots took; the daily's restore (its reserve, see
    ``window/plan.py``) must fit after it, or the failsafe would restore the daily while lanes still run."""
    needed = pair_estimate_s + restore_s + RESTORE_MARGIN_S
    if needed <= seconds_left:
        return None
    why = f": {restore_why}" if restore_why else ""
    return (f"the window's time budget: the next pair (~{pair_estimate_s:.0f}s, as its lanes' last boots took) and "
            f"the daily's restore (~{restore_s + RESTORE_MARGIN_S:.0f}s{why}) need {needed:.0f}s, and "
            f"{max(seconds_left, 0):.0f}s are left before the failsafe deadline")


def step_seconds(records: list[dict[str, Any]]) -> dict[tuple[str, str, str | None], float]:
    """(step, lane, gate) -> seconds its latest run took, from a journal's intent and done records; the
    lane without its visit suffix (``base@rerun2`` counts as ``base``)."""
    began: dict[tuple[str, str, str | None], float] = {}
    took: dict[tuple[str, str, str | None], float] = {}
    for record in records:
        if record.get("step") not in ("boot", "gate") or not record.get("lane"):
            continue
        key = (record["step"], str(record["lane"]).split("@")[0], record.get("gate"))
        if record.get("event") == "intent":
            began[key] = float(record["t"])
        elif record.get("event") == "done" and key in began:
            took[key] = float(record["t"]) - began.pop(key)
    return took
