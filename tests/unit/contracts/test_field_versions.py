"""The reference's "since" column (docs/contract.md) says the release each contract field arrived in, checked
against the fields each release's own schema had (tests/fixtures/contract-fields.json, made by
scripts/contract-fields.py at the release's commit). A field added without a label would read "since 0.1.0"
(the reference's default) and tell a user an older tool reads it: that fails here. At a release, add its
fields to the fixture."""

from __future__ import annotations

import json
import re

from campaign.contracts.reference import contract_reference
from tests.support.contracts import REPO

_RECORDED = json.loads((REPO / "tests" / "fixtures" / "contract-fields.json").read_text(encoding="utf-8"))
RELEASES = {version: set(_RECORDED[version]["fields"])  # oldest first: a field's first release is the one it arrived in
            for version in sorted((v for v in _RECORDED if not v.startswith("_")),
                                  key=lambda v: tuple(int(part) for part in v.split(".")))}


def _labels(reference: str) -> dict[str, str]:
    """``Model.field`` -> its "since" cell, from the rendered reference."""
    labels, model = {}, None
    for line in reference.splitlines():
        if heading := re.match(r"^## (\w+)$", line):
            model = heading.group(1)
        elif model and line.startswith("| ") and not line.startswith(("| field ", "|---")):
            cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]]
            labels[f"{model}.{cells[0]}"] = cells[4]
    return labels


def mislabelled(labels: dict[str, str], releases: dict[str, set[str]]) -> list[str]:
    problems = []
    for field, since in sorted(labels.items()):
        first = next((version for version, fields in releases.items() if field in fields), None)
        if first is not None and since != first:
            problems.append(f"{field}: labelled since {since}, but it arrived in {first}")
        elif first is None and since in releases:
            problems.append(f"{field}: labelled since {since}, a release that did not have it: give it "
                            "json_schema_extra={'since': '<the next version>'} (or its model a SINCE)")
    return problems


def test_every_field_says_the_release_it_arrived_in() -> None:
    labels = _labels(contract_reference())
    assert len(labels) >= len(RELEASES["0.3.0"])  # the parse found the tables
    assert mislabelled(labels, RELEASES) == []


def test_the_check_catches_a_new_field_left_at_the_default_label_and_a_wrong_one() -> None:
    releases = {"0.1.0": {"Lane.name"}, "0.3.0": {"Lane.name", "Lane.aa"}}
    assert mislabelled({"Lane.name": "0.1.0", "Lane.aa": "0.3.0", "Lane.new": "0.4.0"}, releases) == []
    problems = mislabelled({"Lane.name": "0.1.0", "Lane.aa": "0.1.0", "Lane.new": "0.1.0"}, releases)
    assert [p.split(":")[0] for p in problems] == ["Lane.aa", "Lane.new"]
