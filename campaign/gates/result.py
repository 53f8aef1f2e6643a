"""Verdicts and results: every number carries its unit and denominator."""

from __future__ import annotations

from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

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
    deciding_reason: str | None = Field(
        None, description="The one of `reasons` that decided the verdict, recorded by the rule that reached it "
                          "(the first rule whose verdict is the result's), or the finding that overruled it. None: "
                          "no rule reached it (an instrument that could not measure, a judge error) or a result "
                          "written before results recorded it; then campaign.presentation.deciding_reason reads it "
                          "from the reasons.")
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

    # each rule's verdict with the sentence it wrote, in the order the rules weighed (``weigh``)
    _weighed: list[tuple[Verdict, str]] = PrivateAttr(default_factory=list)

    def weigh(self, verdict: Verdict, reason: str) -> Verdict:
        """One rule's outcome: its sentence joins the reasons, and is what decided the result if the result
        ends with this verdict and no rule before it reached the same (``settle``)."""
        self.reasons.append(reason)
        self._weighed.append((verdict, reason))
        return verdict

    def overrule(self, verdict: Verdict, reason: str) -> None:
        """A finding that takes away the verdict the rules reached (a FAIL the instrument cannot stand
        behind): the verdict becomes ``verdict`` and ``reason``, opening the reasons, is what decided it."""
        self.verdict = verdict
        self.reasons.insert(0, reason)
        self._weighed.insert(0, (verdict, reason))

    def settle(self) -> None:
        """Record the deciding reason of the verdict as it now stands (the judge calls it once the verdict is
        final): the first weighed rule that reached it, if its sentence is still among the reasons."""
        self.deciding_reason = next((reason for verdict, reason in self._weighed
                                     if verdict is self.verdict and reason in self.reasons), None)

    def dump(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)
