"""Contract loading: valid contracts resolve; every malformed one is refused with file:line and field."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from campaign.contracts.load import load_contract
from campaign.errors import AxisError, ContractError
from tests.support.contracts import REPO, demo_like, write_contract


def test_demo_contract_resolves_lanes_and_axis() -> None:
    loaded = load_contract(REPO / "examples" / "demo.yaml")
    assert [lane.name for lane in loaded.lanes.values()] == ["baseline", "ngram-k4", "threads-2"]
    candidate = loaded.lanes["ngram-k4"]
    assert candidate.control == "baseline"
    # the depth of ngram-simple is its m-gram, drafted only after an n-gram match no longer than it
    assert candidate.args[-6:] == ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "4",
                                   "--spec-ngram-simple-size-m", "4"]
    assert loaded.lanes["baseline"].args == candidate.args[:-6]
    assert loaded.lanes["baseline"].readiness.budget == 120.0


def test_canonical_hash_ignores_comments_but_not_content(tmp_path: Path) -> None:
    path = write_contract(tmp_path, demo_like(18000))
    first = load_contract(path).canonical_sha256
    path.write_text("# a comment\n" + path.read_text())
    assert load_contract(path).canonical_sha256 == first
    path.write_text(path.read_text().replace("repeats: 2", "repeats: 3"))
    assert load_contract(path).canonical_sha256 != first


def _error(tmp_path: Path, body: str) -> ContractError:
    path = write_contract(tmp_path, body)
    with pytest.raises(ContractError) as info:
        load_contract(path)
    return info.value


def test_unknown_field_names_line_and_field(tmp_path: Path) -> None:
    body = demo_like(18000).replace("          readiness:", "          colour: red\n          readiness:")
    error = _error(tmp_path, body)
    assert error.field == "lane_defaults.colour"
    assert error.message == "unknown field"
    assert error.line == 10
    assert str(error).startswith(f"{tmp_path / 'c.yaml'}:10: lane_defaults.colour:")


def test_wrong_type_in_gate_points_at_gate_field(tmp_path: Path) -> None:
    error = _error(tmp_path, demo_like(18000).replace("repeats: 2", "repeats: many"))
    assert error.field == "gates[0].repeats"
    assert error.line == 24


def test_unknown_gate_kind_is_refused(tmp_path: Path) -> None:
    error = _error(tmp_path, demo_like(18000).replace("kind: greedy", "kind: vibes"))
    assert error.field.startswith("gates[0]")
    assert "vibes" in error.message or "greedy" in error.message


def test_candidate_control_must_exist(tmp_path: Path) -> None:
    body = demo_like(18000).replace("role: candidate", "role: candidate\n            control: nowhere")
    error = _error(tmp_path, body)
    assert error.field == "lanes[1].control" and "nowhere" in error.message
    assert error.line == 16


def test_undeclared_axis_is_refused_with_the_difference(tmp_path: Path) -> None:
    path = write_contract(tmp_path, demo_like(18000, extra_candidate=', --threads: "1"'))
    with pytest.raises(AxisError) as info:
        load_contract(path)
    assert "changed but not declared: args.threads ([\'2\'] -> [\'1\'])" in str(info.value)
    assert ":16: lanes[1].axis" in str(info.value)


def test_declared_but_unchanged_axis_is_refused(tmp_path: Path) -> None:
    body = demo_like(18000).replace("axis: [args.spec-type, args.spec-draft-n-max]",
                                    "axis: [args.spec-type, args.spec-draft-n-max, env.HOOK]")
    path = write_contract(tmp_path, body)
    with pytest.raises(AxisError, match="declared but unchanged: env.HOOK"):
        load_contract(path)


def test_image_must_be_pinned_by_digest(tmp_path: Path) -> None:
    body = demo_like(18000).replace("executable: llama-server", "executable: llama-server\n          image: vllm:latest")
    error = _error(tmp_path, body)
    assert error.field == "lane_defaults.image" and "pinned by digest" in error.message


def test_python_tag_is_refused(tmp_path: Path) -> None:
    error = _error(tmp_path, demo_like(18000).replace("version: 1", "version: !!python/object/apply:os.system [echo]"))
    assert error.line == 2 and "not allowed" in error.message


def test_alias_bomb_is_refused_before_expansion(tmp_path: Path) -> None:
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
        for i in range(9))
    error = _error(tmp_path, bomb)
    assert error.line == 1 and "anchors and aliases" in error.message


def test_oversized_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_text("description: '" + "x" * (50 * 1024 * 1024) + "'\n")
    with pytest.raises(ContractError, match="over the 1048576-byte cap"):
        load_contract(path)


def test_duplicate_key_is_refused(tmp_path: Path) -> None:
    error = _error(tmp_path, demo_like(18000).replace("version: 1", "version: 1\n        version: 2"))
    assert error.line == 3 and "duplicate key 'version'" in error.message


def test_missing_input_file_is_refused(tmp_path: Path) -> None:
    error = _error(tmp_path, demo_like(18000).replace("prompts/p.jsonl", "prompts/nope.jsonl"))
    assert error.field == "inputs.p.file" and "not found" in error.message


def test_cli_prints_one_line_and_exits_2(tmp_path: Path) -> None:
    path = write_contract(tmp_path, demo_like(18000).replace("repeats: 2", "repeats: 1"))
    done = subprocess.run([sys.executable, "-m", "campaign.cli", "validate", str(path)], capture_output=True,
                          text=True)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "c.yaml:24: gates[0].repeats:" in lines[0]


def test_cli_exits_2_on_alias_bomb(tmp_path: Path) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text("a: &a [1]\nb: [*a, *a]\n")
    done = subprocess.run([sys.executable, "-m", "campaign.cli", "validate", str(path)], capture_output=True,
                          text=True)
    assert done.returncode == 2 and "bomb.yaml:1:" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("nest", ["[" * 1000 + "]" * 1000, "{a: " * 1000 + "1" + "}" * 1000])
def test_deep_nesting_is_a_one_line_error_not_a_hang(tmp_path: Path, nest: str) -> None:
    path = tmp_path / "deep.yaml"
    path.write_text(f"contract: x\nversion: 1\nlanes: {nest}\n")
    with pytest.raises(ContractError, match="nested more than 32 levels deep") as info:
        load_contract(path)
    assert info.value.line == 3
    done = subprocess.run([sys.executable, "-m", "campaign.cli", "validate", str(path)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr and len(done.stderr.splitlines()) == 1


def test_yaml_syntax_error_shows_where_the_brace_opened(tmp_path: Path) -> None:
    path = tmp_path / "brace.yaml"
    path.write_text("contract: x\nversion: 1\nlanes:\n  - {name: a, role: control\n  - name: b\n"
                    "    role: candidate\ngates: []\n")
    with pytest.raises(ContractError) as info:
        load_contract(path)
    message = str(info.value)
    assert "near this line: '- name: b'" in message
    assert "flow mapping began at line 4: '- {name: a, role: control'" in message


def test_a_cpuset_that_is_not_one_names_the_line_and_field(tmp_path: Path) -> None:
    body = demo_like(18000).replace('          readiness:', '          cpus: "1-"\n          readiness:')
    error = _error(tmp_path, body)
    assert "lane_defaults.cpus" in str(error) and "'1-' is not a cpuset" in str(error)
    assert str(error).startswith(str(tmp_path / "c.yaml") + ":")


@pytest.mark.parametrize("written,where,nearest", [
    ("          max_tokenz: 3\n", "gates[0].max_tokenz", "max_tokens"),  # in a gate, through its kind's union
    ("          repeat: 3\n", "gates[0].repeat", "repeats"),
    ("          colour: red\n", "gates[0].colour", None),  # nothing close: no guess
])
def test_unknown_field_suggests_the_nearest_known_one(tmp_path: Path, written: str, where: str,
                                                      nearest: str | None) -> None:
    body = demo_like(18000).replace("            max_tokens: 24\n", "            max_tokens: 24\n" + written.replace(
        "          ", "            "))
    error = _error(tmp_path, body)
    assert error.field == where
    assert error.message == ("unknown field" + (f" (did you mean {nearest}?)" if nearest else ""))
    assert "\n" not in str(error)


def test_unknown_field_suggestion_in_a_lane_set_and_the_top_level(tmp_path: Path) -> None:
    body = demo_like(18000).replace("            set:\n", "            set:\n              envv: {A: b}\n")
    assert _error(tmp_path, body).message == "unknown field (did you mean env?)"
    top = demo_like(18000).rstrip(" ")
    assert _error(tmp_path, top + "        promotoin: {requires: [greedy]}\n").message == \
        "unknown field (did you mean promotion?)"
    long_name = "promotio" * 120  # bounded: a long unknown name is compared by its start only
    assert _error(tmp_path, top + f"        {long_name}: 1\n").message == "unknown field"
