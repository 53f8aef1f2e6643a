"""Every gate kind, each registered beside its class (``gates.base.register``): importing this module imports
every module of the gates package, so ``GATES`` holds every kind, and a new kind is its module (and its spec).

A test keeps this in step with ``contracts.gatespecs.GATE_SPECS`` (every spec kind has a class here), and
tests/unit/gates/test_declarations.py checks each kind declares what the window, the plan and the report read.
"""

from __future__ import annotations

import campaign.gates
from campaign.contracts.gatespecs import GateSpecBase
from campaign.gates.base import GATES, Gate, GateContext
from campaign.kinds import import_every_module

__all__ = ["GATES", "gate_for"]

import_every_module(campaign.gates)  # a gate module registers its kind as it is imported


def gate_for(spec: GateSpecBase, ctx: GateContext) -> Gate:
    return GATES[spec.kind](spec, ctx)
