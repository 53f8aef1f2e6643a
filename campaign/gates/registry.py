"""Every gate kind, each registered beside its class (``gates.base.register``): importing this module imports
every module of the gates package, so ``GATES`` holds every kind, and hands each kind's spec (the class its gate
annotates ``spec`` with, defined in the same module) to the contract schema. A new kind is its module.

Read a contract only after this module is imported: until then the schema knows no gate kind.
tests/unit/gates/test_declarations.py checks each kind declares what the window, the plan and the report read.
"""

from __future__ import annotations

from typing import get_type_hints

import campaign.gates
from campaign.contracts.gatespecs import GateSpecBase
from campaign.contracts.kinds import complete_gate_kinds
from campaign.gates.base import GATES, Gate, GateContext
from campaign.kinds import import_every_module

__all__ = ["GATES", "gate_for"]

import_every_module(campaign.gates)  # a gate module registers its kind as it is imported
complete_gate_kinds([get_type_hints(GATES[kind])["spec"] for kind in sorted(GATES)])  # sorted: the docs' order


def gate_for(spec: GateSpecBase, ctx: GateContext) -> Gate:
    return GATES[spec.kind](spec, ctx)
