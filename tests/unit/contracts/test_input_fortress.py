"""Issue #30, the contract's part: every file a contract names is read bounded and refused by what it is;
every range, count, size and duration has a bound named in the error; numbers are numbers (not YAML
booleans) and finite; names that differ only in case, bad env names, NUL bytes and lone surrogates are
refused. Each refusal is a ContractError naming the file, the line and the field; none hangs or costs
memory (a device, a FIFO, a 4e9-CPU range), and every pattern run on contract text is linear."""

from __future__ import annotations

import hashlib
import os
import re
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from campaign.contracts import model as contract_model
from campaign.contracts import resolve
from campaign.contracts.freeze import freeze_record
from campaign.contracts.load import load_contract
from campaign.contracts.model import StrictModel, parse_fraction
from campaign.contracts.units import parse_cpuset, parse_duration, parse_size
from campaign.contracts.yamlsafe import MAX_NUMBER_CHARS, load_located
from campaign.errors import ContractError
from campaign.gates.screen.gate import parse_clause
from tests.support.schema import spec_modules

BASE = """\
contract: f
version: 1
lane_defaults: {runtime: process, engine: llamacpp, executable: llama-server, port: 18999, model: {path: /m.gguf}}
lanes:
  - {name: base, role: control}
"""
# line 6 is the first line of whatever a test appends
GREEDY = "  - {kind: greedy, input: p, rule: {self_identical: '3/3'}}\n"


def write(tmp_path: Path, extra: str = "", base: str = BASE) -> Path:
    (tmp_path / "p.jsonl").write_text('{"id": "a", "prompt": "x"}\n')
    path = tmp_path / "c.yaml"
    path.write_text(base + extra)
    return path


def refused(path: Path, **kwargs: Any) -> ContractError:
    with pytest.raises(ContractError) as info:
        load_contract(path, **kwargs)
    error = info.value
    assert error.file is not None and "Traceback" not in str(error)
    assert "\n" not in str(error) and str(error).encode("utf-8")  # one line, printable as UTF-8
    return error


def located(error: ContractError, line: int, field: str, *words: str) -> None:
    assert (error.line, error.field) == (line, field), str(error)
    for word in words:
        assert word in error.message, str(error)


# the contract itself: opened once, a regular file, read bounded


def test_a_device_as_the_contract_is_refused_without_reading_it() -> None:
    start = time.monotonic()
    with pytest.raises(ContractError, match="cannot read: contract is a device, not a regular file"):
        load_contract("/dev/zero")
    assert time.monotonic() - start < 1


def test_a_fifo_as_the_contract_is_refused_not_waited_on(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "c.yaml")  # nobody writes to it: an open that blocked would hang here
    with pytest.raises(ContractError, match="contract is a FIFO"):
        load_contract(tmp_path / "c.yaml")


@pytest.mark.parametrize("make,words", [
    (lambda p: p.mkdir(), "contract is a directory, not a regular file"),
    (lambda p: p.symlink_to(p), "contract path is a symlink loop"),
])
def test_a_contract_path_that_is_no_file_says_what_it_is(tmp_path: Path, make: Any, words: str) -> None:
    make(tmp_path / "c.yaml")
    with pytest.raises(ContractError, match=words):
        load_contract(tmp_path / "c.yaml")


def test_a_nul_byte_in_the_contract_path_is_one_error(tmp_path: Path) -> None:
    with pytest.raises(ContractError, match="NUL byte"):
        load_contract(str(tmp_path / "c\x00.yaml"))


def test_the_contract_is_parsed_once_and_its_bytes_hashed_from_that_read(tmp_path: Path) -> None:
    path = write(tmp_path)
    document = load_located(path)
    assert document.text == path.read_text() and document.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()


# files the contract names: each refused by what it is, at the line that names it


@pytest.mark.parametrize("make,words", [
    (os.mkfifo, "input file is a FIFO (named pipe), not a regular file"),
    (os.mkdir, "input file is a directory, not a regular file"),
    (lambda p: os.symlink(p, p), "input file path is a symlink loop"),
    (lambda p: None, "file not found: "),
])
def test_an_input_that_is_not_a_regular_file_says_what_it_is(tmp_path: Path, make: Any, words: str) -> None:
    path = write(tmp_path, "inputs:\n  p: {file: odd.jsonl}\n")
    make(str(tmp_path / "odd.jsonl"))
    located(refused(path), 7, "inputs.p.file", words)


def test_a_nul_byte_in_an_input_path_is_located(tmp_path: Path) -> None:
    located(refused(write(tmp_path, 'inputs:\n  p: {file: "a\\0b.jsonl"}\n')), 7, "inputs.p.file", "NUL byte")


@pytest.mark.parametrize("target,words", [
    ("/proc/self/environ", "kernel file system"),
    ("/dev/zero", "is a device"),
])
def test_kernel_files_are_refused_whatever_allow_path_says(tmp_path: Path, target: str, words: str) -> None:
    path = write(tmp_path, f"inputs:\n  p: {{file: {target}}}\n")
    located(refused(path, allow_paths=[Path("/")]), 7, "inputs.p.file", words)


def test_an_input_over_the_cap_is_refused_without_reading_it(tmp_path: Path) -> None:
    path = write(tmp_path, "inputs:\n  p: {file: big.jsonl}\n")
    with open(tmp_path / "big.jsonl", "wb") as handle:  # sparse: no disk, no time
        handle.truncate((128 << 20) + 1)
    located(refused(path), 7, "inputs.p.file", "over the 134,217,728-byte cap")


def test_a_lane_file_that_is_a_fifo_is_located(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "map")
    path = write(tmp_path, "", BASE.replace("model: {path: /m.gguf}}", "model: {path: /m.gguf}, files: "
                                            f"[{{name: map, path: map, sha256: '{'0' * 64}'}}]}}"))
    located(refused(path), 3, "lane_defaults.files[0].path", "'map': file is a FIFO")


def test_freeze_refuses_a_file_that_became_a_fifo_after_load(tmp_path: Path) -> None:
    path = write(tmp_path, "inputs:\n  p: {file: p.jsonl}\n")
    loaded = load_contract(path)
    (tmp_path / "p.jsonl").unlink()
    os.mkfifo(tmp_path / "p.jsonl")
    with pytest.raises(ContractError) as info:
        freeze_record(loaded)
    located(info.value, 7, "inputs.p.file", "FIFO")


# ranges, counts, sizes and durations: bounded, checked before anything is expanded


def test_a_huge_cpu_range_is_refused_before_it_is_expanded(tmp_path: Path) -> None:
    start = time.monotonic()
    path = write(tmp_path, "", BASE.replace("port: 18999", 'port: 18999, cpus: "0-4000000000"'))
    located(refused(path), 3, "lane_defaults.cpus", "CPU 4000000000 is past CPU 8191")
    with pytest.raises(ValueError, match="past CPU"):
        parse_cpuset("0-" + "9" * 100_000)
    assert time.monotonic() - start < 1


def test_a_cpu_past_this_machine_is_left_to_preflight(tmp_path: Path) -> None:
    """A contract is often validated on one machine and run on another: CPUs that exist on the runner are
    checked by preflight (lanes.hostcpu), before anything starts; validation bounds them only."""
    path = write(tmp_path, "", BASE.replace("port: 18999", 'port: 18999, cpus: "0-8191"'))
    assert load_contract(path).lanes["base"].cpus == "0-8191"


@pytest.mark.parametrize("extra,line,field,words", [
    ("failsafe: {deadline: 99999999999999999999999h}\n", 6, "failsafe.deadline", "over the 168h maximum"),
    ("failsafe: {deadline: 0.0000001ms}\n", 6, "failsafe.deadline", "0.0000001ms is under the 1ms minimum"),
    ("failsafe: {deadline: '1" + "0" * 400 + "s'}\n", 6, "failsafe.deadline", "over the 168h maximum"),
    ("failsafe: {deadline: 1" + "0" * 400 + "}\n", 6, "failsafe.deadline", "a number of 401 characters"),
])
def test_durations_are_bounded_and_the_bound_is_named(tmp_path: Path, extra: str, line: int, field: str,
                                                      words: str) -> None:
    located(refused(write(tmp_path, extra)), line, field, words)


def test_a_readiness_budget_too_short_to_mean_anything_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "", BASE.replace("port: 18999", "port: 18999, readiness: {budget: 0.0000001ms}"))
    located(refused(path), 3, "lane_defaults.readiness.budget", "0.0000001ms is under the 1ms minimum")


def test_a_poll_interval_that_would_spin_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "", BASE.replace("port: 18999", "port: 18999, readiness: {poll_interval: 1ms}"))
    located(refused(path), 3, "lane_defaults.readiness.poll_interval", "1ms is under the 10ms minimum")


@pytest.mark.parametrize("setting,field,words", [
    ('shm_size: "99999999t"', "lane_defaults.shm_size", "16 TiB"),
    ("shm_size: " + "9" * 400 + "g", "lane_defaults.shm_size", "16 TiB"),
    ("port: 0", "lane_defaults.port", "greater than or equal to 1"),
    ("context: 99999999999", "lane_defaults.context", "less than or equal to 16777216"),
    ("gpus: 5000", "lane_defaults.gpus", "less than or equal to 1024"),
])
def test_lane_numbers_are_bounded(tmp_path: Path, setting: str, field: str, words: str) -> None:
    path = write(tmp_path, "", BASE.replace("port: 18999", "port: 18999, " + setting).replace(
        "port: 18999, port: 0", "port: 0"))
    located(refused(path), 3, field, words)


@pytest.mark.parametrize("gate,field,words", [
    ("{kind: task, arithmetic: {count: 5, seed: 99999999999}, rule: {max_loss_upper: 0.5}}", "gates[0].arithmetic.seed",
     "less than or equal to 4294967295"),
    ("{kind: greedy, input: p, rule: {self_identical: '1/99999999'}}", "gates[0].rule.self_identical",
     "n is at most 1,000,000"),
    ("{kind: needle, rungs: [" + ", ".join(["128"] * 65) + "]}", "gates[0].rungs", "at most 64 items"),
    ("{kind: speed, input: p, rule: {max_errors: 99999999}}", "gates[0].rule.max_errors", "less than or equal"),
])
def test_gate_counts_are_bounded(tmp_path: Path, gate: str, field: str, words: str) -> None:
    path = write(tmp_path, f"inputs:\n  p: {{file: p.jsonl}}\ngates:\n  - {gate}\n")
    located(refused(path, check_files=False), 9, field, words)


def test_version_is_bounded(tmp_path: Path) -> None:
    located(refused(write(tmp_path, "", BASE.replace("version: 1", "version: 99999999999999999999"))), 2,
            "version", "less than or equal to 2147483647")


# numbers are numbers: a YAML 1.1 boolean is refused where one belongs


@pytest.mark.parametrize("base_change,extra,line,field", [
    (("port: 18999", "port: yes"), "", 3, "lane_defaults.port"),
    (("version: 1", "version: true"), "", 2, "version"),
    (("version: 1", "version: 1\nschema_version: on"), "", 3, "schema_version"),
    (("port: 18999", "port: 18999, gpus: yes"), "", 3, "lane_defaults.gpus"),
    (None, "inputs:\n  p: {file: p.jsonl}\ngates:\n  - {kind: greedy, input: p, max_tokens: yes, rule: "
           "{self_identical: '3/3'}}\n", 9, "gates[0].max_tokens"),
    (None, "inputs:\n  p: {file: p.jsonl}\ngates:\n  - {kind: speed, input: p, concurrency: [1, yes]}\n", 9,
     "gates[0].concurrency[1]"),
    (None, "inputs:\n  p: {file: p.jsonl}\ngates:\n  - {kind: task, input: p, temperature: off, rule: "
           "{max_loss_upper: 0.5}}\n", 9, "gates[0].temperature"),
])
def test_a_boolean_is_not_a_number(tmp_path: Path, base_change: Any, extra: str, line: int, field: str) -> None:
    base = BASE.replace(*base_change) if base_change else BASE
    located(refused(write(tmp_path, extra, base), check_files=False), line, field,
            "is a boolean where a number belongs")


def test_args_still_take_yaml_scalars_as_their_words(tmp_path: Path) -> None:
    path = write(tmp_path, "", BASE.replace("port: 18999", "port: 18999, args: [--flag, yes, --n, 4]"))
    assert load_contract(path).lanes["base"].args == ["--flag", "true", "--n", "4"]


# the schema's own modules and each gate kind's (its spec and rules)
SPEC_MODULES = {module.__name__ for module in spec_modules() if module not in (contract_model, resolve)}


def _models() -> list[type[BaseModel]]:
    found, todo = [], [StrictModel]
    while todo:
        model = todo.pop()
        todo += model.__subclasses__()
        if model.__module__ in SPEC_MODULES:
            found.append(model)
    return found


def test_every_number_field_of_the_schema_refuses_a_boolean() -> None:
    """The class, not the cases: any int or float field anywhere in the schema, now or added later."""
    checked = 0
    for model in _models():
        for name, field in model.model_fields.items():
            annotation = str(field.annotation)
            if not re.search(r"\b(int|float)\b", annotation) or "bool" in annotation:
                continue
            value: Any = [True] if annotation.startswith("list") else True
            with pytest.raises(ValidationError) as info:
                model.model_validate({name: value})
            assert any(e["type"] in ("boolean_number", "value_error") and e["loc"][0] == name
                       for e in info.value.errors()), (model.__name__, name, info.value.errors())
            checked += 1
    assert checked > 40


# finite numbers only: the canonical form would write them all as null


@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf", ".NaN", "1.0e+400"])
def test_non_finite_numbers_are_refused_anywhere(tmp_path: Path, value: str) -> None:
    path = write(tmp_path, f"request_defaults: {{temperature: {value}}}\n")
    located(refused(path), 6, "request_defaults.temperature", "not a finite number")


def test_a_non_finite_key_or_list_item_is_located(tmp_path: Path) -> None:
    located(refused(write(tmp_path, "request_defaults: {stop: [a, .inf]}\n")), 6, "request_defaults.stop[1]")
    located(refused(write(tmp_path, "request_defaults:\n  .nan: x\n")), 7, "request_defaults", "a key")


@pytest.mark.parametrize("scalar,words", [
    ("1" + ":1" * 200_000, f"more than {MAX_NUMBER_CHARS}"),  # sexagesimal: quadratic to convert
    ("2001-13-45", "is not a valid timestamp"),
    ("!!bool maybe", "is not a valid bool"),
    ("!!timestamp soon", "is not a valid timestamp"),
])
def test_scalars_that_cannot_be_their_type_are_located(tmp_path: Path, scalar: str, words: str) -> None:
    start = time.monotonic()
    located(refused(write(tmp_path, f"description: x\nrequest_defaults: {{v: {scalar}}}\n")), 7,
            "request_defaults.v", words)
    assert time.monotonic() - start < 1


# names: case collisions (bundle paths on case-insensitive file systems), env variable names


@pytest.mark.parametrize("extra,line,field,words", [
    ("  - {name: Base, role: candidate, axis: [port], set: {port: 19000}}\n", 6, "lanes[1].name",
     "lane 'Base' differs from lane 'base' (line 5) only in case"),
    ("inputs:\n  Greedy: {file: p.jsonl}\n  greedy: {file: p.jsonl}\n", 8, "inputs.greedy",
     "input set 'greedy' differs from input set 'Greedy'"),
    ("inputs:\n  p: {file: p.jsonl}\ngates:\n  - {kind: greedy, id: G, input: p, rule: {self_identical: '3/3'}}\n"
     "  - {kind: greedy, id: g, input: p, rule: {self_identical: '3/3'}}\n", 10, "gates[1].id",
     "gate id 'g' differs from gate id 'G'"),
])
def test_names_that_differ_only_in_case_are_refused(tmp_path: Path, extra: str, line: int, field: str,
                                                    words: str) -> None:
    located(refused(write(tmp_path, extra)), line, field, words)


def test_lane_file_names_that_differ_only_in_case_are_refused(tmp_path: Path) -> None:
    files = f"[{{name: Map, path: a, sha256: '{'0' * 64}'}}, {{name: map, path: b, sha256: '{'0' * 64}'}}]"
    path = write(tmp_path, "", BASE.replace("model: {path: /m.gguf}}", f"model: {{path: /m.gguf}}, files: {files}}}"))
    located(refused(path, check_files=False), 3, "lane_defaults.files", "'Map' and 'map' differ only in case")


def test_a_lane_file_that_differs_from_a_default_only_in_case_is_refused_after_merging(tmp_path: Path) -> None:
    pin = f"sha256: '{'0' * 64}'"
    path = write(tmp_path, f"  - {{name: c, role: candidate, axis: [files.Map], set: {{files: [{{name: Map, path: b, "
                           f"{pin}}}]}}}}\n", BASE.replace("model: {path: /m.gguf}}", "model: {path: /m.gguf}, "
                                                           f"files: [{{name: map, path: a, {pin}}}]}}"))
    error = refused(path, check_files=False)
    assert error.line == 6 and "'map' and 'Map' differ only in case" in error.message, str(error)


@pytest.mark.parametrize("name", ['"A=B"', '""', '"A\\nB"', "1X", "A.B", '"A\\0B"'])
def test_bad_env_names_are_refused(tmp_path: Path, name: str) -> None:
    path = write(tmp_path, "", BASE.replace("port: 18999", f"port: 18999, env: {{{name}: x}}"))
    error = refused(path)
    assert error.line == 3 and error.field == "lane_defaults.env", str(error)
    assert "not an environment variable name" in error.message or "NUL byte" in error.message


def test_a_bad_env_name_in_a_candidate_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, '  - {name: c, role: candidate, axis: ["env.A=B"], set: {env: {"A=B": x}}}\n')
    located(refused(path), 6, "lanes[1].set.env", "not an environment variable name")


# text that no file, argument or hash can carry


@pytest.mark.parametrize("text,words", [
    ('"\\ud800"', "lone UTF-16 surrogate ('\\ud800')"),
    ('"\\udfff tail"', "lone UTF-16 surrogate"),
    ('"a\\x00b"', "NUL byte"),
])
def test_nul_bytes_and_lone_surrogates_are_refused_where_they_are(tmp_path: Path, text: str, words: str) -> None:
    located(refused(write(tmp_path, f"description: {text}\n")), 6, "description", words)


def test_a_control_character_in_the_text_is_located(tmp_path: Path) -> None:
    error = refused(write(tmp_path, "description: a\x07b\n"))
    assert error.line == 6 and "'\\x07' is not allowed" in error.message


# every pattern run on contract text is linear: a hostile 200 KB value costs milliseconds


@pytest.mark.parametrize("call", [
    lambda: parse_duration("1" + " " * 200_000 + "x"),
    lambda: parse_duration("1." + "1" * 200_000 + "x"),
    lambda: parse_size("1" + " " * 200_000 + "x"),
    lambda: parse_fraction("1" + " " * 200_000 + "/x"),
    lambda: parse_clause("a >= " + "1" * 200_000 + "x"),
    lambda: parse_clause("a" * 200_000 + " " * 200_000),
])
def test_patterns_on_contract_text_are_linear(call: Any) -> None:
    start = time.monotonic()
    with pytest.raises(ValueError):
        call()
    assert time.monotonic() - start < 0.5


def test_a_lane_file_over_its_cap_is_refused_by_its_size_without_hashing_it(tmp_path: Path) -> None:
    """A lane file is only hashed, never read whole, but hashing 10 GiB costs half a minute: held to
    LANE_FILE_BYTES, refused by the size it says at once (sparse here: no disk, no time)."""
    from campaign.contracts.model import LANE_FILE_BYTES

    with open(tmp_path / "map", "wb") as handle:
        handle.truncate(10 << 30)
    path = write(tmp_path, "", BASE.replace("model: {path: /m.gguf}}", "model: {path: /m.gguf}, files: "
                                            f"[{{name: map, path: map, sha256: '{'0' * 64}'}}]}}"))
    start = time.monotonic()
    with pytest.raises(ContractError) as info:
        freeze_record(load_contract(path))
    located(info.value, 3, "lane_defaults.files[0].path", f"over the {LANE_FILE_BYTES:,}-byte cap")
    assert "10,737,418,240 bytes" in str(info.value) and time.monotonic() - start < 5
