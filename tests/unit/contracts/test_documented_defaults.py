"""Documented defaults are the defaults: docs/contract.md is what the schema renders, and every default the
README or docs/ state in prose (`field` ... (default X), or "default `field` X") is the schema's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from campaign.contracts.reference import contract_reference
from campaign.contracts.units import parse_size
from tests.support.schema import spec_modules

ROOT = Path(__file__).resolve().parents[3]
DOCS = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "contract.md")]

# `field` then (default VALUE) in the same clause; or: default `field` VALUE
STATED = [re.compile(r"`(?:[a-z_]+\.)*(?P<field>[a-z_]+)`[^.;()`]{0,80}\(default (?P<value>[^)]{1,20})\)"),
          re.compile(r"default `(?:[a-z_]+\.)*(?P<field>[a-z_]+)` (?P<value>[0-9.]+%?)")]


def _models() -> list[type[BaseModel]]:
    from campaign.contracts import resolve

    return [v for m in spec_modules() if m is not resolve for v in vars(m).values()
            if isinstance(v, type) and issubclass(v, BaseModel) and v.__module__ == m.__name__]


def _schema_defaults(field: str) -> set[object]:
    found = set()
    for model in _models():
        info = model.model_fields.get(field)
        if info is not None and info.default is not PydanticUndefined:
            found.add(info.default)
    return found


def _value(text: str, field: str) -> object:
    text = text.strip()
    if text.endswith("%"):
        return round(float(text[:-1]) / 100, 6)
    if field.endswith("_ms") and text.endswith("ms"):
        return float(text[:-2])
    if re.fullmatch(r"[0-9.]+ ?[KMGT]i?B", text):
        return parse_size(text.replace(" ", ""))
    return float(text) if re.fullmatch(r"[0-9.]+", text) else text


def statements() -> list[tuple[str, str, str]]:
    found = []
    for doc in DOCS:
        text = " ".join(doc.read_text(encoding="utf-8").split())  # a statement may wrap across lines
        for pattern in STATED:
            found += [(doc.name, m["field"], m["value"]) for m in pattern.finditer(text)]
    return found


def test_the_contract_reference_is_what_the_schema_renders() -> None:
    committed = (ROOT / "docs" / "contract.md").read_text(encoding="utf-8")
    assert committed == contract_reference() + "\n", "docs/contract.md is stale: campaign schema --reference > docs/contract.md"


def test_enough_stated_defaults_are_found_to_mean_something() -> None:
    fields = {field for _doc, field, _value in statements()}
    assert {"file_copy_limit", "max_control_drift", "max_client_cpu_share", "max_loop_lag_ms", "max_spread"} <= fields


@pytest.mark.parametrize("doc,field,value", statements())
def test_a_stated_default_is_the_schema_default(doc: str, field: str, value: str) -> None:
    defaults = _schema_defaults(field)
    assert defaults, f"{doc} states a default for `{field}`, which no contract model has"
    stated = _value(value, field)
    assert any(stated == (round(d, 6) if isinstance(d, float) else d) for d in defaults), \
        f"{doc} says `{field}` defaults to {value}; the schema's default is {sorted(map(str, defaults))}"


def test_the_readmes_speed_rule_example_is_the_schemas_defaults() -> None:
    """The speed gate page's example says every rule value in it is the default: one number for each (a 10%
    control-drift limit there once disagreed with the schema's 25%)."""
    import yaml

    from campaign.gates.speed.spec import SpeedRule

    text = (ROOT / "docs" / "speed.md").read_text(encoding="utf-8")
    block = text.split("```yaml", 1)[1].split("```", 1)[0]
    rule = yaml.safe_load(block)[0]["rule"]
    defaults = SpeedRule()
    assert len(rule) >= 10
    assert {k: v for k, v in rule.items() if getattr(defaults, k) != v} == {}
