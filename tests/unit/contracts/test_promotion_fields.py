"""Promotion fields that were removed (accepted and hashed, never read) are refused with the reason, not
silently kept and not as a bare "unknown field"."""

from __future__ import annotations

from pathlib import Path

import pytest

from campaign.contracts.load import load_contract
from campaign.contracts.schema import PromotionRule
from campaign.errors import ContractError
from tests.support.cli import campaign
from tests.support.contracts import EXAMPLES, demo_like, write_contract

REMOVED = {
    "keep_previous_as_rollback": ("true", "promote always keeps the previous daily for rollback"),
    "smoke_after_promotion": ("{kind: greedy, input: p}", "promote always runs its own smoke"),
}


def _with(field: str) -> str:
    value = REMOVED[field][0]
    return demo_like(18000).replace("requires: [greedy]", f"requires: [greedy]\n          {field}: {value}")


@pytest.mark.parametrize("field", sorted(REMOVED))
def test_removed_field_is_refused_with_the_reason(tmp_path: Path, field: str) -> None:
    with pytest.raises(ContractError) as info:
        load_contract(write_contract(tmp_path, _with(field)))
    error = info.value
    assert error.field == "promotion" and error.line == 28
    assert f"promotion.{field} was removed from the contract schema: {REMOVED[field][1]}" in error.message
    assert "unknown field" not in error.message


def test_both_removed_fields_are_named_in_one_error(tmp_path: Path) -> None:
    body = _with("keep_previous_as_rollback").replace(
        "keep_previous_as_rollback: true", "keep_previous_as_rollback: false\n          smoke_after_promotion: {}")
    with pytest.raises(ContractError) as info:
        load_contract(write_contract(tmp_path, body))
    assert "promotion.smoke_after_promotion was removed" in info.value.message
    assert "promotion.keep_previous_as_rollback was removed" in info.value.message
    assert "\n" not in str(info.value)


def test_the_fields_are_gone_from_the_schema() -> None:
    assert set(PromotionRule.model_fields) == {"requires", "daily_name"}
    assert PromotionRule.model_validate({"requires": ["greedy"]}).requires == ["greedy"]


@pytest.mark.parametrize("field", sorted(REMOVED))
def test_cli_validate_prints_one_line_and_exits_2(tmp_path: Path, field: str) -> None:
    done = campaign("validate", str(write_contract(tmp_path, _with(field))))
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert "c.yaml:28: promotion:" in lines[0] and f"promotion.{field} was removed" in lines[0]


def test_no_example_still_uses_them() -> None:
    for example in EXAMPLES.glob("*.yaml"):
        text = example.read_text()
        assert not any(field in text for field in REMOVED), example
