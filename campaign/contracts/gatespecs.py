"""What every gate spec shares: its base model (``kind``, ``id``, ``input``), what a whole-contract check
reads, and the table of every kind's spec.

A kind's spec lives in the kind's own module under ``gates/``, beside its gate class (``@register``). contracts/
imports no gate, so the table is filled from above: ``gates.registry`` imports every gate module and hands the
specs to ``contracts.schema.complete_gate_kinds``; a contract can be read only after that.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from pydantic import Field

from campaign.contracts.model import NAME_PATTERN, StrictModel

__all__ = ["BUNDLE_COPY", "GATE_SPECS", "SINCE_0_3", "GateSpecBase", "LoadedContract"]

# Validation context key: a bundle's contract copy is being read to judge it again. Its value is a list that
# collects how each field an older schema had was read in today's terms (``load_contract(bundle_copy=True)``).
BUNDLE_COPY = "bundle_copy"

SINCE_0_3: dict[str, Any] = {"since": "0.3.0"}  # the reference's "since" column


class LoadedContract(Protocol):
    """What a whole-contract check reads (``contracts.load.LoadedContract`` is one)."""

    @property
    def contract(self) -> Any: ...

    @property
    def lanes(self) -> dict[str, Any]: ...

    def error(self, location: tuple[Any, ...], message: str) -> Exception: ...

    def resolve(self, relative: str) -> Path: ...


class GateSpecBase(StrictModel):
    """What every gate spec has: its kind, an id (default: the kind) and the input set it reads, if any."""

    kind: str
    id: str | None = Field(None, pattern=NAME_PATTERN, description="Gate id; defaults to the kind.")
    input: str | None = Field(None, description="Name of the input set the gate reads.")

    @property
    def gate_id(self) -> str:
        return self.id or self.kind

    def check_contract(self, loaded: LoadedContract, index: int, check_files: bool) -> None:
        """Checks that need the whole contract (lanes, input files); raise ``loaded.error(...)``."""


# Gate kinds to their specs, in the order the registry found them; filled by ``schema.complete_gate_kinds``.
GATE_SPECS: dict[str, type[GateSpecBase]] = {}
