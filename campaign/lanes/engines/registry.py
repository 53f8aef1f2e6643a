"""Every engine kind's adapter, each registered beside its class (``lanes.engines.base.register``): importing
this module imports every module of the engines package, so ``ADAPTERS`` holds every kind, and hands each kind's
name and facts (declared on its adapter class) to the contract schema. A new kind is its module."""

from __future__ import annotations

import campaign.lanes.engines
from campaign.contracts.kinds import complete_engine_kinds
from campaign.errors import PreflightError
from campaign.kinds import import_every_module
from campaign.lanes.engines.base import ADAPTERS, EngineAdapter

__all__ = ["ADAPTERS", "adapter_for"]

import_every_module(campaign.lanes.engines)  # an adapter module registers its kind as it is imported
complete_engine_kinds({kind: ADAPTERS[kind].facts for kind in sorted(ADAPTERS)})  # sorted: the docs' order


def adapter_for(engine: str) -> EngineAdapter:
    try:
        return ADAPTERS[engine]()
    except KeyError:
        raise PreflightError(f"engine {engine!r} has no adapter yet (available: {', '.join(ADAPTERS)})") from None
