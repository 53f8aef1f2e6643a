"""Gate kinds to gate classes: the one place a gate kind meets its implementation.

A test keeps this in step with ``contracts.gatespecs.GATE_SPECS`` (every spec kind has a class here).
"""

from __future__ import annotations

from campaign.contracts.gatespecs import GateSpecBase
from campaign.gates.base import Gate, GateContext
from campaign.gates.greedy import GreedyGate
from campaign.gates.kl import KlGate
from campaign.gates.length import LengthGate
from campaign.gates.needle.gate import NeedleGate
from campaign.gates.ruler import RulerGate
from campaign.gates.screen.gate import ScreenGate
from campaign.gates.speed.gate import SpeedGate
from campaign.gates.structured import StructuredGate
from campaign.gates.task.gate import TaskGate
from campaign.gates.teacher_forced import TeacherForcedGate
from campaign.gates.tools import ToolsGate

__all__ = ["GATES", "gate_for"]

GATES: dict[str, type[Gate]] = {
    "greedy": GreedyGate,
    "task": TaskGate,
    "needle": NeedleGate,
    "teacher_forced": TeacherForcedGate,
    "kl": KlGate,
    "structured": StructuredGate,
    "tools": ToolsGate,
    "ruler": RulerGate,
    "speed": SpeedGate,
    "screen": ScreenGate,
    "length": LengthGate,
}


def gate_for(spec: GateSpecBase, ctx: GateContext) -> Gate:
    return GATES[spec.kind](spec, ctx)
