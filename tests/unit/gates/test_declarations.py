"""Each gate kind declares, on the class it registers (``@register``, beside it), what the rest of the tool reads
of it: its contract spec (the one kind the class judges), what its FAIL or PASS claims against the control (the
A/A check), what the report shows of it, and how many requests `campaign plan` counts for it. A kind that left
one to a default would be silent where it matters: an A/A check blind to its claims, a plan that counts a
multi-turn episode as one request. The spec's "since" is checked with the contract's other fields
(tests/unit/contracts/test_field_versions.py)."""

from __future__ import annotations

import typing

import pytest

from campaign.contracts.gatespecs import GATE_SPECS
from campaign.gates.base import Gate, LiveGate, register
from campaign.gates.registry import GATES


def missing_declarations(cls: type[Gate]) -> list[str]:
    own = vars(cls)
    missing = [] if "fail_claims" in own or "aa_claims" in own else ["fail_claims (or aa_claims)"]
    missing += [] if "present" in own else ["present"]
    if issubclass(cls, LiveGate) and "planned_requests" not in own:
        missing.append("planned_requests")
    return missing


@pytest.mark.parametrize("kind", sorted(GATES))
def test_every_kind_declares_what_the_tool_reads_of_it(kind: str) -> None:
    cls = GATES[kind]
    spec = typing.get_type_hints(cls)["spec"]
    assert GATE_SPECS[kind] is spec and typing.get_args(spec.model_fields["kind"].annotation) == (kind,)
    assert cls.__module__.startswith("campaign.gates.")
    assert missing_declarations(cls) == []
    # the kind lives in one place: its spec in its gate's module, or in its gate's own package (gates/speed/)
    home = cls.__module__ if cls.__module__.count(".") == 2 else cls.__module__.rsplit(".", 1)[0]
    assert spec.__module__ == home or spec.__module__.startswith(home + "."), (spec.__module__, cls.__module__)


def test_a_kind_that_leaves_a_declaration_to_the_default_is_named() -> None:
    class Silent(LiveGate):  # what a new kind looks like before it says anything of itself
        async def collect(self, run, sink, visit) -> None:  # noqa: ANN001 - never called
            raise AssertionError

        def judge(self, candidate, control):  # noqa: ANN001, ANN201 - never called
            raise AssertionError

    assert missing_declarations(Silent) == ["fail_claims (or aa_claims)", "present", "planned_requests"]


def test_a_kind_is_registered_once_and_only_by_a_class_that_names_its_spec() -> None:
    with pytest.raises(TypeError, match="registered twice"):
        register(type("GreedyAgain", (GATES["greedy"],), {}))
    with pytest.raises(TypeError, match="annotates `spec`"):
        register(type("NoSpec", (Gate,), {}))
    assert {kind for kind in GATES} == {typing.get_args(s.model_fields["kind"].annotation)[0] for s in GATE_SPECS.values()}
