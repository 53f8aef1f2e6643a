"""Verdicts and results: every number carries its unit and denominator."""

from __future__ import annotations

from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from campaign.presentation import Presentation
from campaign.verdicts import VERDICT_RULE, combine_names

__all__ = ["VERDICT_RULE", "GateResult", "Metric", "Presentation", "Verdict", "combine"]


class Verdict(str, Enum):
    PASS = "PASS"
    FAIL = "FAIL"
    INCONCLUSIVE = "INCONCLUSIVE"  # could not measure validly: launch failure, broken instrument, interrupted
    VOID = "VOID"  # discarded by a frozen validity rule; re-run, INCONCLUSIVE if it stays void


def combine(verdicts: list[Verdict]) -> Verdict:
    """Validly measured verdicts, combined by the one rule (``campaign.verdicts``): one FAIL makes the set
    FAIL; else INCONCLUSIVE if any is undecided (VOID included) or the set is empty; else PASS."""
    return Verdict(combine_names(v.value for v in verdicts))


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
    window_finding: str | None = Field(
        None, description="A finding about the window's instrument, not about this candidate (a thinking switch "
                          "the control's template ignores, a gate with nothing to weigh): shown once for the "
                          "window; the result carrying it is never a FAIL.")
    headline: str | None = Field(
        None, description="One line of at most 100 characters: the verdict, the number, the bar, the pairs "
                          "(campaign.presentation.headline): the kind's words (Gate.headline_words) or its deciding reason, "
                          "opened with the final verdict. None: a result written before results carried one.")
    presentation: Presentation | None = Field(
        None, description="Headlines and plot data the gate built from its judging (None: a result written "
                          "before results carried them; the report derives them from the rest).")

    def dump(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)
