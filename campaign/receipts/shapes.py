"""The shapes the report reads from a bundle's SUMMARY.json and gate results, checked before rendering.

A bundle can be validly signed and still not be the shape this version renders (an older or newer tool, or
a hand-made one): every container the templates and the decision walk into is checked to be the container
they expect, so an unexpected shape is one line naming the file and the field, never a jinja traceback.
Scalars are left as they are (the templates print any value); unknown fields are kept. What is rendered
is the checked model dumped back, with each missing container filled in empty.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from campaign.errors import InputError

__all__ = ["checked_gate", "checked_summary"]


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


class _Summary(_Open):
    contract: dict[str, Any] | None = {}
    duration: dict[str, Any] | None = None
    restore: dict[str, Any] | None = None
    lanes: dict[str, _Lane] = {}
    candidates: dict[str, _Candidate] = {}
    warnings: list[Any] = []


class _Estimate(_Open):  # a speed level's estimate: the summary formats these as percentages
    change: float
    confidence: float
    low: float
    high: float


class _Level(_Open):
    estimate: _Estimate | None = None
    prompts: list[dict[str, Any]] | None = None


class _SpeedDetails(_Open):
    levels: dict[str, _Level] = {}


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


def checked_summary(raw: Any, path: Path) -> dict[str, Any]:
    return _checked(_Summary, raw, path)


def checked_gate(raw: Any, path: Path) -> dict[str, Any]:
    gate = _checked(_GateResult, raw, path)
    if gate.get("kind") == "speed":
        _checked(_SpeedDetails, gate["details"], path, under="details")
    return gate


def _checked(model: type[_Open], raw: Any, path: Path, *, under: str = "") -> dict[str, Any]:
    try:
        return model.model_validate(raw).model_dump()
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(p) for p in (under, *error["loc"]) if p != "") or "(top)"
        words = _WORDS.get(error["type"], error["msg"])
        raise InputError(f"{path}: {where}: {words}; not a shape this version renders") from None


_WORDS = {"model_type": "should be a JSON object", "dict_type": "should be a JSON object",
          "list_type": "should be a JSON list", "string_type": "should be a string",
          "float_type": "should be a number", "missing": "missing"}
