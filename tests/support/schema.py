"""A schema default changed in this process, as a newer version of the tool would ship it."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from types import ModuleType
from typing import Any, Iterator

import pydantic

__all__ = ["patched_default", "spec_modules"]


def spec_modules() -> list[ModuleType]:
    """The modules a contract's models are defined in: contracts' own and each gate kind's (its spec and rule)."""
    import campaign.gates.registry  # noqa: F401 (every kind registered, so GATE_SPECS is whole)
    from campaign.contracts import gatespecs, model, resolve, schema

    own = [model, gatespecs, schema, resolve]
    return own + [module for module in dict.fromkeys(sys.modules[spec.__module__]
                                                     for spec in gatespecs.GATE_SPECS.values()) if module not in own]


def _contract_models() -> list[type[pydantic.BaseModel]]:
    return [value for module in spec_modules() for value in vars(module).values()
            if isinstance(value, type) and issubclass(value, pydantic.BaseModel) and value.__module__ == module.__name__]


def _rebuild() -> None:
    # a model's validator is compiled into each model that holds it: rebuild every contract model, as many
    # times as models nest (a gate's rule sits four deep under Contract), so the new default reaches Contract
    models = _contract_models()
    for _ in range(5):
        for cls in models:
            cls.model_rebuild(force=True)


@contextmanager
def patched_default(model: type[pydantic.BaseModel], field: str, value: Any) -> Iterator[None]:
    info = model.model_fields[field]
    before = info.default
    info.default = value
    _rebuild()
    try:
        yield
    finally:
        info.default = before
        _rebuild()
