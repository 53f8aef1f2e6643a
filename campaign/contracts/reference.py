"""The contract reference (docs/contract.md), generated from the schema: every field with its type, unit,
default, meaning and the tool version it arrived in. The schema is the one source; the page is rendered from
it, and a test keeps the committed page equal to what this renders."""

from __future__ import annotations

import json
import types
import typing
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from campaign import __version__
from campaign.contracts.units import parse_duration, parse_size

__all__ = ["FIRST_VERSION", "contract_reference", "field_rows"]

# Every field in the schema today shipped in this version, unless its json_schema_extra names a later one
# ({"since": "0.2.0"}) or its model arrived later (a ``SINCE`` class attribute: every field of the model is that
# version's unless it names its own). tests/unit/contracts/test_field_versions.py checks each label against the
# fields each release had (tests/fixtures/contract-fields.json), so a new field left unlabelled fails there.
FIRST_VERSION = "0.1.0"

_UNITS: dict[object, str] = {parse_duration: "seconds (write 30s, 10m, 2h)", parse_size: "bytes (write 16MiB, 2GiB)"}


def _unit(metadata: list[Any]) -> str | None:
    for item in metadata:
        unit = _UNITS.get(getattr(item, "func", None))
        if unit:
            return unit
    return None


def _type(annotation: Any, found: list[type[BaseModel]]) -> tuple[str, str | None]:
    """(type as a reader writes it, unit); nested models are named and queued in ``found``."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        inner, *metadata = typing.get_args(annotation)
        shown, unit = _type(inner, found)
        return shown, _unit(metadata) or unit
    if origin in (typing.Union, types.UnionType):
        parts = [_type(arg, found) for arg in typing.get_args(annotation) if arg is not type(None)]
        nullable = " or null" if type(None) in typing.get_args(annotation) else ""
        return " or ".join(dict.fromkeys(p[0] for p in parts)) + nullable, next((p[1] for p in parts if p[1]), None)
    if origin is typing.Literal:
        return " or ".join(json.dumps(arg) for arg in typing.get_args(annotation)), None
    if origin in (list, tuple):
        inner = [_type(arg, found) for arg in typing.get_args(annotation) if arg is not Ellipsis]
        return f"list of {inner[0][0] if inner else 'any'}", inner[0][1] if inner else None
    if origin is dict:
        _key, value = typing.get_args(annotation) or (str, Any)
        shown, unit = _type(value, found)
        return f"map of {shown}", unit
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        if annotation not in found:
            found.append(annotation)
        return f"[{annotation.__name__}](#{annotation.__name__.lower()})", None
    names = {str: "string", int: "integer", float: "number", bool: "boolean", Any: "any"}
    return names.get(annotation, getattr(annotation, "__name__", str(annotation))), None


def _default(info: Any) -> str:
    if info.default is PydanticUndefined and info.default_factory is None:
        return "required"
    value = info.default_factory() if info.default_factory is not None else info.default
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json", exclude_unset=True)
    return f"`{json.dumps(value, default=str)}`"


def field_rows(model: type[BaseModel], found: list[type[BaseModel]]) -> list[dict[str, str]]:
    rows = []
    for name, info in model.model_fields.items():
        shown, unit = _type(info.annotation, found)
        unit = _unit(info.metadata) or unit
        extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
        rows.append({"field": info.alias or name, "type": shown, "unit": unit or "", "default": _default(info),
                     "description": " ".join((info.description or "").split()),
                     "since": str(extra.get("since", getattr(model, "SINCE", FIRST_VERSION)))})
    return rows


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def contract_reference() -> str:
    from campaign.contracts.gatespecs import GATE_SPECS
    from campaign.contracts.schema import Contract

    found: list[type[BaseModel]] = [Contract, *GATE_SPECS.values()]
    lines = ["# Contract reference", "",
             f"Generated from the schema of campaign {__version__} by `campaign schema --reference`; do not edit.",
             "Every field, its type and unit, its default (what a contract that leaves it out is judged by) and",
             "the tool version it arrived in. A frozen contract keeps the defaults of the tool that froze it",
             "(the freeze record's effective contract): a later tool with other defaults refuses to run it",
             "unless told `--accept-tool-defaults`, which the bundle records.", ""]
    done: set[type[BaseModel]] = set()
    while len(done) < len(found):
        model = next(m for m in found if m not in done)
        done.add(model)
        doc = " ".join((model.__doc__ or "").split()) if model.__doc__ and "BaseModel" not in model.__doc__ else ""
        lines += [f"## {model.__name__}", ""] + ([doc, ""] if doc else [])
        lines += ["| field | type | unit | default | since | meaning |", "|---|---|---|---|---|---|"]
        for row in field_rows(model, found):
            lines.append("| " + " | ".join(_cell(row[k]) for k in ("field", "type", "unit", "default", "since",
                                                                     "description")) + " |")
        lines.append("")
    return "\n".join(lines)
