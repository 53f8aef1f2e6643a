"""A window's screens: every offline screen once per candidate, before anything is stopped or booted; a
candidate whose screens do not all PASS is never booted, and the live part of the contract is what is left."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from campaign.contracts.load import LoadedContract
from campaign.fsutil import JsonlAppender
from campaign.gates.base import Screen
from campaign.gates.result import Verdict
from campaign.window.context import Window, say, set_aside
from campaign.window.judge import SCREENED_OUT, LaneOutcome, judge_one

__all__ = ["live_part", "run_screens"]


async def run_screens(w: Window, screen_gates: list[Screen], journal: Any,
                      lanes: dict[str, LaneOutcome]) -> set[str]:
    """Every screen once per candidate, before anything is stopped or booted. A candidate whose screens do
    not all PASS stays out of the live window; returns those candidates."""
    out: set[str] = set()
    for candidate in w.loaded.candidates():
        control = w.loaded.lanes[candidate.control or ""]
        for gate in screen_gates:
            if (gate.gate_id, candidate.name) not in w.finished_gates:
                raw = gate.ctx.raw_path(gate.gate_id, candidate.name)
                if raw.exists():
                    set_aside(raw)  # a screen cut short: redone whole
                journal.intent("gate", gate=gate.gate_id, lane=candidate.name)
                with JsonlAppender(raw) as sink:
                    await asyncio.to_thread(gate.screen, candidate, control, sink)
                journal.done("gate", gate=gate.gate_id, lane=candidate.name)
            result = judge_one(w.bundle, gate, candidate, control)  # a judge's bug: INCONCLUSIVE, not a crash
            if result.verdict is not Verdict.PASS and candidate.name not in out:
                out.add(candidate.name)
                lanes[candidate.name] = LaneOutcome(status=SCREENED_OUT, cause=f"screen {gate.gate_id}: "
                                                    f"{result.verdict.value}", message="; ".join(result.reasons[:2]))
                say(w, f"{candidate.name}: not worth a live window ({lanes[candidate.name].cause})")
    return out


def live_part(loaded: LoadedContract, screened_out: set[str]) -> LoadedContract | None:
    """The contract's lanes that still go live: candidates no screen kept out and the controls they
    compare with. None when no candidate is left: the window ends at its screens."""
    if not screened_out:
        return loaded
    candidates = [lane for lane in loaded.candidates() if lane.name not in screened_out]
    if not candidates:
        return None
    used = {lane.control for lane in candidates}
    lanes = {name: lane for name, lane in loaded.lanes.items()
             if (lane.role == "candidate" and name not in screened_out) or name in used}
    return dataclasses.replace(loaded, lanes=lanes)
