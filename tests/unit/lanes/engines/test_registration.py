"""Each engine kind's adapter registers itself beside its class (``@register``, by its ``name``): the registry
lists no kind, and a kind is registered once, by an adapter of a kind the contract knows."""

from __future__ import annotations

import pytest

from campaign.contracts.engines import ENGINES
from campaign.lanes.engines.base import EngineAdapter, register
from campaign.lanes.engines.registry import ADAPTERS


def test_every_engine_kind_the_contract_knows_has_its_adapter_registered() -> None:
    assert set(ADAPTERS) == set(ENGINES)
    assert all(adapter.name == kind and adapter.__module__.startswith("campaign.lanes.engines.")
               for kind, adapter in ADAPTERS.items())


def test_an_adapter_of_no_known_kind_or_of_a_kind_taken_is_refused() -> None:
    with pytest.raises(TypeError, match="names its engine kind"):
        register(type("Nameless", (EngineAdapter,), {}))
    with pytest.raises(TypeError, match="names its engine kind"):
        register(type("Stranger", (EngineAdapter,), {"name": "tgi"}))
    with pytest.raises(TypeError, match="registered twice"):
        register(type("VllmAgain", (ADAPTERS["vllm"],), {"name": "vllm"}))
