"""The shapes the report reads from a bundle's SUMMARY.json and gate results, checked before rendering.

A bundle can be validly signed and still not be the shape this version renders (an older or newer tool, or
a hand-made one): every container the templates and the decision walk into is checked to be the container
they expect, so an unexpected shape is one line naming the file and the field, never a jinja traceback.
Scalars are left as they are (the templates print any value); unknown fields are kept. What is rendered
is the checked model dumped back, with each missing container filled in empty.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from pydantic import BaseModel, ConfigDict, ValidationError

from campaign.errors import InputError
from campaign.presentation import Presentation
from campaign.receipts.decision import read_with_current_rule

__all__ = ["Fill", "checked_gate", "checked_presentation", "checked_summary"]

# What derives a presentation for a result written before results carried one (the gates' own builders,
# passed down by the layer that knows them); it raises pydantic's ValidationError on evidence of a shape
# it cannot read.
Fill = Callable[[dict[str, Any]], Presentation | None]


class _Open(BaseModel):
    # strict: a number written as a string is not made a number; extra fields are kept and rendered as read
    model_config = ConfigDict(strict=True, extra="allow")


class _Metric(_Open):
    value: Any = None
    unit: Any = None
    denominator: Any = None
    note: Any = None


class _GateVerdict(_Open):  # one candidate's verdict on one gate, as SUMMARY.json holds it
    verdict: Any = None
    reasons: list[Any] = []


class _Candidate(_Open):
    control: Any = None
    gates: dict[str, _GateVerdict] = {}
    promotion_gates: list[str] = []
    overall: Any = None
    screened_out: dict[str, Any] | None = None


class _Lane(_Open):
    status: Any = None
    cause: Any = None
    boot_seconds: dict[str, Any] | None = None
    engine_version: dict[str, Any] | None = None


class _AaCheck(_Open):  # the A/A lanes' false decisions (judge.aa_check)
    lanes: list[Any] = []
    false_decisions: list[dict[str, Any]] = []


class _Summary(_Open):
    contract: dict[str, Any] | None = {}
    aa_check: _AaCheck | None = None
    duration: dict[str, Any] | None = None
    restore: dict[str, Any] | None = None
    lanes: dict[str, _Lane] = {}
    candidates: dict[str, _Candidate] = {}
    warnings: list[Any] = []
    findings: list[dict[str, Any]] = []  # the window's instrument findings (judge.window_findings)


class _GateResult(_Open):
    gate: str
    kind: Any = None
    candidate: Any = None
    control: Any = None
    verdict: Any = None
    reasons: list[Any] = []
    caveats: list[Any] = []
    rule: dict[str, Any] = {}
    metrics: dict[str, _Metric] = {}
    details: dict[str, Any] = {}
    presentation: dict[str, Any] | None = None


def checked_summary(raw: Any, path: Path) -> dict[str, Any]:
    """The summary, checked, with its overall verdicts read by today's rule (an older bundle's say so)."""
    return read_with_current_rule(_checked(_Summary, raw, path))


def checked_gate(raw: Any, path: Path) -> dict[str, Any]:
    return _checked(_GateResult, raw, path)


def checked_presentation(gate: dict[str, Any], path: Path, fill: Fill | None = None) -> dict[str, Any]:
    """The headlines and plot data the result carries, checked; for a result written before results carried
    them, what ``fill`` derives from the rest of it (nothing without one)."""
    raw = gate.get("presentation")
    if raw is None and fill is not None:
        try:
            derived = fill(gate)
        except ValidationError as exc:
            raise _one_line(exc, path, "") from None
        raw = derived.model_dump(mode="json") if derived is not None else None
    return _checked(Presentation, raw or {}, path, under="presentation")


def _checked(model: type[BaseModel], raw: Any, path: Path, *, under: str = "") -> dict[str, Any]:
    try:
        return model.model_validate(raw).model_dump()
    except ValidationError as exc:
        raise _one_line(exc, path, under) from None


def _one_line(exc: ValidationError, path: Path, under: str) -> InputError:
    error = exc.errors()[0]
    where = ".".join(str(p) for p in (under, *error["loc"]) if p != "") or "(top)"
    words = _WORDS.get(error["type"], error["msg"])
    return InputError(f"{path}: {where}: {words}; not a shape this version renders")


_WORDS = {"model_type": "should be a JSON object", "dict_type": "should be a JSON object",
          "list_type": "should be a JSON list", "string_type": "should be a string",
          "float_type": "should be a number", "missing": "missing", "extra_forbidden": "not a field of it",
          "literal_error": "not one of the values it may take", "int_type": "should be an integer"}
