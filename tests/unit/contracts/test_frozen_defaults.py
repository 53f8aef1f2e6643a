"""Frozen means frozen: what a contract leaves out is frozen as the freezing tool resolved it, and a tool with
other defaults refuses to judge it by them unless told to, naming each field with both values."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from campaign.contracts.freeze import ToolDefaultsChanged, check_frozen, freeze
from campaign.contracts.hashing import canonical_json, canonical_sha256
from campaign.contracts.load import load_contract
from campaign.fsutil import atomic_write_json, load_json_strict
from campaign.gates.greedy import GreedySpec
from campaign.signing import init_keys, load_signing_key, load_trusted
from tests.support.contracts import demo_like, write_contract
from tests.support.schema import patched_default, spec_modules


def _frozen_without(tmp_path: Path, line: str) -> Path:
    """demo_like without ``line`` (so the tool's default fills that field), frozen by this tool."""
    init_keys()
    body = textwrap.dedent(demo_like(18000))
    assert line in body
    path = write_contract(tmp_path, body.replace(line, ""))
    freeze(load_contract(path), load_signing_key())
    return path


@pytest.fixture
def frozen(tmp_path: Path) -> Path:
    """demo_like without max_tokens: the greedy gate takes the schema's default (64)."""
    return _frozen_without(tmp_path, "    max_tokens: 24\n")


def _record(path: Path) -> Path:
    return path.with_name("c.freeze.json")


def test_the_record_holds_the_effective_contract_with_every_default(frozen: Path) -> None:
    record = load_json_strict(_record(frozen))
    assert record["effective"]["gates"][0]["max_tokens"] == 64  # not written: the default, as resolved then
    assert "max_tokens" not in record["canonical"]["gates"][0]
    assert record["effective_sha256"] == canonical_sha256(record["effective"])
    assert check_frozen(load_contract(frozen), _record(frozen), load_trusted()) == record


def test_a_changed_default_is_refused_naming_the_field_and_both_values(frozen: Path) -> None:
    with patched_default(GreedySpec, "max_tokens", 32):
        with pytest.raises(ToolDefaultsChanged) as refused:
            check_frozen(load_contract(frozen), _record(frozen), load_trusted())
        accepted = check_frozen(load_contract(frozen), _record(frozen), load_trusted(), accept_tool_defaults=True)
    text = str(refused.value)
    assert "gates[greedy].max_tokens: frozen 64, this tool 32" in text
    assert "freeze it as a new version" in text and "--accept-tool-defaults" in text
    assert accepted["accepted_tool_defaults"] == ["gates[greedy].max_tokens: frozen 64, this tool 32"]
    # what the file says did not change, so its hash did not: only the rules resolved from it did
    assert load_contract(frozen).canonical_sha256 == load_json_strict(_record(frozen))["canonical_sha256"]


def test_a_default_the_contract_sets_itself_is_not_a_change(tmp_path: Path) -> None:
    init_keys()
    path = write_contract(tmp_path, demo_like(18000))  # max_tokens: 24, written
    freeze(load_contract(path), load_signing_key())
    with patched_default(GreedySpec, "max_tokens", 32):
        record = check_frozen(load_contract(path), _record(path), load_trusted())
    assert "accepted_tool_defaults" not in record


def test_a_record_from_before_effective_contracts_is_refused_unless_accepted(frozen: Path) -> None:
    record = load_json_strict(_record(frozen))
    old = {k: v for k, v in record.items() if k not in ("effective", "effective_sha256", "signature")}
    old["tool_version"] = "0.9.0"
    key = load_signing_key()
    atomic_write_json(_record(frozen), {**old, "signature": {"keyid": key.keyid, "sig": key.sign(canonical_json(old))}})
    with pytest.raises(ToolDefaultsChanged, match=r"tool 0\.9\.0\) holds no effective contract"):
        check_frozen(load_contract(frozen), _record(frozen), load_trusted())
    accepted = check_frozen(load_contract(frozen), _record(frozen), load_trusted(), accept_tool_defaults=True)
    assert len(accepted["accepted_tool_defaults"]) == 1


def test_a_default_a_lane_takes_from_the_tool_is_frozen_too(tmp_path: Path) -> None:
    """No lane_defaults nor `set` gives readiness: every lane takes the tool's, and a new budget is a change."""
    from campaign.contracts.schema import ReadinessSpec

    path = _frozen_without(tmp_path, "  readiness: {budget: 120s}\n")
    frozen_budget = ReadinessSpec.model_fields["budget"].default
    with patched_default(ReadinessSpec, "budget", frozen_budget + 60):
        with pytest.raises(ToolDefaultsChanged, match=rf"lane_tool_defaults\.readiness\.budget: frozen "
                                                      rf"{frozen_budget:g}(\.0)?, this tool {frozen_budget + 60:g}"):
            check_frozen(load_contract(path), _record(path), load_trusted())


def test_the_frozen_rules_apply_to_a_contract_whose_checks_read_what_was_written(tmp_path: Path) -> None:
    """A failsafe with backend `watchdog` refuses engine-only fields *written*: the frozen rules fill the
    fields the file left out without making them written, so its bundle is judged again by them."""
    from campaign.contracts.effective import with_rules

    init_keys()
    body = textwrap.dedent(demo_like(18000)).replace("    max_tokens: 24\n", "") + textwrap.dedent("""\
        incumbent:
          runtime: process
          endpoint: http://127.0.0.1:18000
          pidfile: daily.pid
          lane: base
        failsafe:
          backend: watchdog
          deadline: 10m
        """)
    path = write_contract(tmp_path, body)
    freeze(load_contract(path), load_signing_key())
    rules = load_json_strict(_record(path))["effective"]
    with patched_default(GreedySpec, "max_tokens", 32):
        loaded = load_contract(path)
        judged = with_rules(loaded, rules, _record(path))
    assert loaded.contract.gates[0].max_tokens == 32 and judged.contract.gates[0].max_tokens == 64
    assert judged.contract.failsafe.backend == "watchdog"
    assert judged.canonical_sha256 == loaded.canonical_sha256  # what was written is unchanged


def test_a_field_added_since_that_is_off_by_default_is_no_change() -> None:
    from campaign.contracts.freeze import tool_default_changes

    frozen = {"gates": [{"kind": "speed", "rule": {"max_spread": 0.1}}]}
    added_off = {"gates": [{"kind": "speed", "rule": {"max_spread": 0.1, "new_limit": None}}], "new_list": []}
    added_on = {"gates": [{"kind": "speed", "rule": {"max_spread": 0.1, "new_limit": 0.5}}]}
    assert tool_default_changes(frozen, added_off) == []
    assert tool_default_changes(frozen, added_on) == ["gates[speed].rule.new_limit: frozen (no such field), this tool 0.5"]


def test_a_field_added_since_at_the_default_that_does_what_the_tool_did_is_no_change() -> None:
    """teacher_forced's `instrument` (generation: the only check there was) and a lane's `aa` (false)."""
    from campaign.contracts.freeze import tool_default_changes

    frozen = {"gates": [{"kind": "teacher_forced", "rule": {"max_site_delta": 1.0}}], "lanes": [{"name": "spec"}]}
    as_before = {"gates": [{"kind": "teacher_forced", "rule": {"max_site_delta": 1.0, "instrument": "generation"}}],
                 "lanes": [{"name": "spec", "aa": False}]}
    assert tool_default_changes(frozen, as_before) == []
    moved = {"gates": [{"kind": "teacher_forced", "rule": {"max_site_delta": 1.0, "instrument": "scoring"}}],
             "lanes": [{"name": "spec", "aa": True}]}
    assert tool_default_changes(frozen, moved) == [
        'gates[teacher_forced].rule.instrument: frozen (no such field), this tool "scoring"',
        "lanes[spec].aa: frozen (no such field), this tool true"]


def test_speed_rules_added_since_judge_a_recorded_contract_as_its_tool_did(tmp_path: Path) -> None:
    """0.3.0 shares the FAIL side over levels (Holm), stops pairing by conditional power and waits for a busy host
    to quiet before a re-run. Rules recorded before have none of these fields: run names them as changed defaults, and a bundle is judged again by what its
    tool did (each level at the full rate, the reach test), not by this tool's defaults; also where the gate's
    whole rule was left to defaults (rebuilt from the record)."""
    from campaign.contracts.effective import effective_contract, with_rules
    from campaign.contracts.freeze import tool_default_changes
    from tests.support.speedrecords import load_gates, speed_contract

    written = "{kind: speed, input: p, rule: {max_spread: 0.2}}"
    for gate in (written, "{kind: speed, input: p}"):
        loaded, _ = load_gates(tmp_path / str(len(gate)), speed_contract("- {name: base, role: control}", f"- {gate}"))
        current = effective_contract(loaded)
        rules = json.loads(json.dumps(current))
        for name in ("fail_levels", "futility", "min_conditional_power", "host_quiet_wait_s"):
            rules["gates"][0]["rule"].pop(name)
        rule = with_rules(loaded, rules, tmp_path / "record").contract.gates[0].rule
        assert (rule.fail_levels, rule.futility, rule.min_conditional_power, rule.host_quiet_wait_s) == (
            "each", "reach", 0.05, 0.0)
        assert loaded.contract.gates[0].rule.futility == "conditional_power"  # the loaded contract untouched
        assert tool_default_changes(rules, current) == [
            'gates[speed].rule.fail_levels: frozen (no such field), this tool "holm"',
            'gates[speed].rule.futility: frozen (no such field), this tool "conditional_power"',
            "gates[speed].rule.host_quiet_wait_s: frozen (no such field), this tool 30.0"]


def test_each_field_added_since_names_one_field_wherever_a_contract_model_has_it() -> None:
    """ADDED_AS_BEFORE is keyed by a field's bare name (a recorded rule lacking it is judged with that value):
    another field of the same name, of another meaning, would take this one's old value. Each name is one
    field: the same type in every model that has it (a lane and its resolved form), the old value valid there."""
    import inspect

    from pydantic import BaseModel

    from campaign.contracts import model
    from campaign.contracts.effective import ADDED_AS_BEFORE

    models = {cls for module in spec_modules() if module is not model
              for _, cls in inspect.getmembers(module, inspect.isclass)
              if issubclass(cls, BaseModel) and cls.__module__ == module.__name__}
    from pydantic import TypeAdapter

    for name, before in ADDED_AS_BEFORE.items():
        fields = [cls.model_fields[name] for cls in models if name in cls.model_fields]
        assert fields, name
        assert len({repr(field.annotation) for field in fields}) == 1, (name, [f.annotation for f in fields])
        for field in fields:
            TypeAdapter(field.annotation).validate_python(before)
