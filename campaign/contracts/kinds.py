"""The contract schema made whole: every gate kind's spec and every engine kind's name and facts.

A kind lives in its own module above contracts/ (a gate's spec beside its gate class under ``gates/``, an engine's
facts on its adapter under ``lanes/engines/``), and contracts/ imports none of them. So the schema leaves two names
open, ``GateSpec`` (the union of the specs, chosen by ``kind``) and ``EngineKind`` (the Literal of engine names),
and the two registries fill them once they have imported every kind: ``lanes.engines.registry`` calls
``complete_engine_kinds``, ``gates.registry`` calls ``complete_gate_kinds``. Until both ran, a contract is not
read: ``require_kinds`` says so plainly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal, Union, get_args

from pydantic import BaseModel, Field

from campaign.contracts import resolve, schema
from campaign.contracts.engines import ENGINES, EngineFacts
from campaign.contracts.gatespecs import GATE_SPECS, GateSpecBase
from campaign.contracts.model import StrictModel

__all__ = ["complete_engine_kinds", "complete_gate_kinds", "require_kinds"]


def complete_gate_kinds(specs: Sequence[type[GateSpecBase]]) -> None:
    """The contract's ``gates`` become the union of these specs, chosen by ``kind``."""
    GATE_SPECS.clear()
    GATE_SPECS.update((get_args(spec.model_fields["kind"].annotation)[0], spec) for spec in specs)
    # set as the module's own name, so that any later rebuild (a test patching a default) finds it too
    union: Any = Annotated[Union[tuple(specs)], Field(discriminator="kind")]
    vars(schema)["GateSpec"] = union
    _rebuild_open_models()


def complete_engine_kinds(facts: Mapping[str, EngineFacts]) -> None:
    """A lane's ``engine`` accepts exactly these kinds, each checked against its facts."""
    ENGINES.clear()
    ENGINES.update(facts)
    kind: Any = Literal[tuple(facts)]
    for module in (schema, resolve):
        vars(module)["EngineKind"] = kind
    _rebuild_open_models()


def require_kinds() -> None:
    """A bug, said plainly: a process that reads a contract without importing the registries would otherwise
    fail with pydantic's "not fully defined"."""
    if not GATE_SPECS or not ENGINES:
        raise RuntimeError("the contract schema knows no gate or engine kind yet: import campaign.gates.registry "
                           "before reading a contract")


def _rebuild_open_models() -> None:
    # each model that holds an open name (and each that holds one of those) is rebuilt, as deep as models nest;
    # one still open after this waits for the other registry
    models = _all_subclasses(StrictModel)
    for _ in range(len(models)):
        open_models = [model for model in models if not model.__pydantic_complete__]
        if not [model for model in open_models if model.model_rebuild(force=True, raise_errors=False)]:
            return


def _all_subclasses(base: type[BaseModel]) -> list[type[BaseModel]]:
    found, todo = [], [base]
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo += cls.__subclasses__()
    return found
