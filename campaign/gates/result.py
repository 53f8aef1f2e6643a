"""Verdicts and results: every number carries its unit and denominator."""

from __future__ import annotations

from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from campaign.presentation import Presentation

__all__ = ["GateResult", "Metric", "Presentation", "Verdict", "worst"]


class Verdict(str, Enum):
    PASS = "PASS"
    FAIL = "FAIL"
    INCONCLUSIVE = "INCONCLUSIVE"  # could not measure validly: launch failure, broken instrument, interrupted
    VOID = "VOID"  # discarded by a frozen validity rule; re-run, INCONCLUSIVE if it stays void


def worst(verdicts: list[Verdict]) -> Verdict:
    """A set of verdicts is PASS only if all pass; INCONCLUSIVE outranks FAIL (nothing valid was measured)."""
    order = [Verdict.INCONCLUSIVE, Verdict.VOID, Verdict.FAIL, Verdict.PASS]
    for verdict in order:
        if verdict in verdicts:
            return Verdict.INCONCLUSIVE if verdict is Verdict.VOID else verdict
    return Verdict.INCONCLUSIVE


class Metric(BaseModel):
    model_config = ConfigDict(extra="forbid")

    value: float | int | None = Field(description="The number; None when it could not be measured.")
    unit: str = Field(description="What it counts or measures, e.g. 'prompts', 'tok/s', 'nats'.")
    denominator: int | None = Field(None, description="Out of how many (a count metric's n).")
    note: str | None = None


class GateResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_: str = Field("campaign.gate-result/v1", alias="schema")
    gate: str
    kind: str
    candidate: str
    control: str
    verdict: Verdict
    reasons: list[str] = Field(default_factory=list, description="Why this verdict, in sentences.")
    rule: dict[str, Any] = Field(default_factory=dict, description="The frozen rule that was applied.")
    metrics: dict[str, Metric] = Field(default_factory=dict)
    details: dict[str, Any] = Field(default_factory=dict, description="Per-item evidence.")
    caveats: list[str] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list,
                                description="Loud findings every reader must see, e.g. an axis that may be inert.")
    presentation: Presentation | None = Field(
        None, description="Headlines and plot data the gate built from its judging (None: a result written "
                          "before results carried them; the report derives them from the rest).")

    def dump(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)
