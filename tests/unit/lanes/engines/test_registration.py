"""Each engine kind's adapter registers itself beside its class (``@register``, by its ``name``, with its own
``facts``): the registry lists no kind, a kind is registered once, and the contract schema accepts exactly the
registered kinds, each checked against its adapter's facts."""

from __future__ import annotations

import typing

import pytest

from campaign.contracts.engines import ENGINES, EngineFacts
from campaign.contracts.schema import LaneFields
from campaign.lanes.engines.base import EngineAdapter, register
from campaign.lanes.engines.registry import ADAPTERS


def test_every_registered_adapter_is_a_kind_the_contract_accepts_with_its_own_facts() -> None:
    accepted = typing.get_args(typing.get_args(LaneFields.model_fields["engine"].annotation)[0])
    assert set(ADAPTERS) == set(ENGINES) == set(accepted)
    assert all(adapter.name == kind and adapter.__module__.startswith("campaign.lanes.engines.")
               and ENGINES[kind] is vars(adapter)["facts"] for kind, adapter in ADAPTERS.items())


def test_an_adapter_without_its_kind_or_its_own_facts_or_of_a_kind_taken_is_refused() -> None:
    facts = EngineFacts(context_options=("--ctx",), model_forms=("file",), build_hint="make engine")
    with pytest.raises(TypeError, match="declares its engine kind"):
        register(type("Nameless", (EngineAdapter,), {"facts": facts}))
    with pytest.raises(TypeError, match="declares its engine kind"):
        register(type("Factless", (EngineAdapter,), {"name": "tgi"}))
    with pytest.raises(TypeError, match="declares its engine kind"):  # a subclass inherits no kind's facts
        register(type("Borrower", (ADAPTERS["vllm"],), {"name": "tgi"}))
    with pytest.raises(TypeError, match="registered twice"):
        register(type("VllmAgain", (ADAPTERS["vllm"],), {"name": "vllm", "facts": facts}))
    assert "tgi" not in ADAPTERS and "tgi" not in ENGINES


@pytest.mark.parametrize("kind", sorted(ADAPTERS))
def test_every_engine_kind_declares_its_model_forms_and_its_own_boot_words_are_causes_the_log_knows(
        kind: str) -> None:
    """The contract checks a lane's model against its form; a failed boot names a cause that has a hint or a
    shared pattern, never a word nobody reads."""
    from campaign.lanes import bootlog

    facts = ADAPTERS[kind].facts
    assert facts.model_forms and set(facts.model_forms) <= {"file", "directory"}
    known = {cause for cause, _ in bootlog._CAUSES} | set(bootlog.HINTS)
    assert all(cause in known and pattern.pattern for cause, pattern in facts.boot_failures), facts.boot_failures
