"""Freezing: a signed record of the contract and its files; any later change is refused by name."""

from __future__ import annotations

from pathlib import Path

import pytest

from campaign.contracts.freeze import check_frozen, freeze
from campaign.contracts.load import load_contract
from campaign.errors import FrozenChanged
from campaign.signing import init_keys, load_signing_key, load_trusted
from tests.support.contracts import demo_like, write_contract


@pytest.fixture
def frozen(tmp_path: Path) -> Path:
    init_keys()
    path = write_contract(tmp_path, demo_like(18000))
    record, created = freeze(load_contract(path), load_signing_key())
    assert created and record == tmp_path / "c.freeze.json"
    return path


def test_record_holds_hashes_and_verifies(frozen: Path) -> None:
    record = check_frozen(load_contract(frozen), frozen.with_name("c.freeze.json"), load_trusted())
    assert set(record["files"]) == {"prompts/p.jsonl"}
    assert record["canonical_sha256"] == load_contract(frozen).canonical_sha256
    assert record["signature"]["keyid"] == load_signing_key().keyid


def test_freezing_twice_keeps_the_first_record(frozen: Path) -> None:
    record_path = frozen.with_name("c.freeze.json")
    before = record_path.read_bytes()
    _, created = freeze(load_contract(frozen), load_signing_key())
    assert not created and record_path.read_bytes() == before


def test_changed_contract_field_is_named(frozen: Path) -> None:
    frozen.write_text(frozen.read_text().replace("max_tokens: 24", "max_tokens: 32"))
    with pytest.raises(FrozenChanged, match=r"changed since freezing .*contract fields gates\[greedy\]\.max_tokens"):
        check_frozen(load_contract(frozen), frozen.with_name("c.freeze.json"), load_trusted())


def test_changed_prompt_file_is_named(frozen: Path) -> None:
    prompts = frozen.parent / "prompts" / "p.jsonl"
    prompts.write_text(prompts.read_text().replace("France", "Spain"))
    with pytest.raises(FrozenChanged, match=r"file prompts/p\.jsonl \(sha256"):
        check_frozen(load_contract(frozen), frozen.with_name("c.freeze.json"), load_trusted())


def test_comment_edit_is_still_a_change(frozen: Path) -> None:
    frozen.write_text("# edited after freezing\n" + frozen.read_text())
    with pytest.raises(FrozenChanged, match="contract file bytes"):
        check_frozen(load_contract(frozen), frozen.with_name("c.freeze.json"), load_trusted())


def test_refreezing_changed_contract_is_refused(frozen: Path) -> None:
    frozen.write_text(frozen.read_text().replace("max_tokens: 24", "max_tokens: 32"))
    with pytest.raises(FrozenChanged, match="already frozen with other content"):
        freeze(load_contract(frozen), load_signing_key())


def test_tampered_record_fails_signature(frozen: Path) -> None:
    record_path = frozen.with_name("c.freeze.json")
    record_path.write_text(record_path.read_text().replace('"frozen_at": "', '"frozen_at": "1'))
    with pytest.raises(FrozenChanged, match="signature is invalid or by an untrusted key"):
        check_frozen(load_contract(frozen), record_path, load_trusted())


def test_pinned_input_digest_must_match_at_freeze(tmp_path: Path) -> None:
    init_keys()
    path = write_contract(tmp_path, demo_like(18000).replace("{file: prompts/p.jsonl}",
                                                             "{file: prompts/p.jsonl, sha256: '" + "0" * 64 + "'}"))
    from campaign.errors import ContractError

    with pytest.raises(ContractError, match="not the pinned"):
        freeze(load_contract(path), load_signing_key())
    assert not (tmp_path / "c.freeze.json").exists()
