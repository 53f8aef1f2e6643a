"""A contract written by someone else cannot make the runner read outside its folder, name a file with an
input's name, or carry a credential anywhere in it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from campaign.contracts.load import load_contract
from campaign.errors import ContractError

BASE = """\
contract: h
version: 1
lane_defaults: {runtime: process, engine: llamacpp, executable: llama-server, port: 18999, model: {path: /m.gguf}}
lanes:
  - {name: base, role: control}
"""


def write(tmp_path: Path, extra: str, name: str = "c.yaml") -> Path:
    (tmp_path / "p.jsonl").write_text('{"id": "a", "prompt": "x"}\n')
    path = tmp_path / name
    path.write_text(BASE + extra)
    return path


def refused(path: Path, *match: str, allow: list[str] = ()) -> None:
    args = [a for root in allow for a in ("--allow-path", root)]
    done = subprocess.run([sys.executable, "-m", "campaign.cli", "validate", str(path), *args], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    for text in match:
        assert text in done.stderr, done.stderr


@pytest.mark.parametrize("where", ["/etc/hostname", "../../../../../../etc/hostname"])
def test_an_input_outside_the_contract_folder_is_refused_unless_allowed(tmp_path: Path, where: str) -> None:
    path = write(tmp_path, f"inputs:\n  leak: {{file: {where}}}\n")
    refused(path, f"{path}:7: inputs.leak.file", "outside the contract's folder", "--allow-path")
    assert load_contract(path, allow_paths=[Path("/etc")]).referenced_files()["" + where].name == "hostname"


def test_a_link_inside_that_points_outside_is_refused(tmp_path: Path) -> None:
    (tmp_path / "innocent.jsonl").symlink_to("/etc/hostname")
    refused(write(tmp_path, "inputs:\n  leak: {file: innocent.jsonl}\n"), "outside the contract's folder")


@pytest.mark.parametrize("name", ["/abs/path/NAME", "../../../../NAME", "a/b"])
def test_input_names_are_identifiers_not_paths(tmp_path: Path, name: str) -> None:
    refused(write(tmp_path, f"inputs:\n  {name}: {{file: p.jsonl}}\n"), "is not an identifier")


@pytest.mark.parametrize("extra,field", [
    ('description: "uses hf_abcdefghijklmnopqrstu"\n', "description"),
    ("request_defaults: {api_key: sk-abcdefghijklmnopqrstuv}\n", "request_defaults.api_key"),
    ("request_defaults: {api_key: short}\n", "request_defaults.api_key"),
    ('host: {docker: "tcp://user:ghp_abcdefghijklmnopqrstuvwx@127.0.0.1:2376"}\n', "host.docker"),
])
def test_credential_shapes_anywhere_are_refused(tmp_path: Path, extra: str, field: str) -> None:
    refused(write(tmp_path, extra), f":6: {field}:", "${env:NAME}")


def test_a_token_in_a_model_path_and_a_short_literal_key_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(BASE.replace("/m.gguf", "/models/hf_abcdefghijklmnopqrstu/m.gguf"))
    refused(path, "lane_defaults.model.path")
    path.write_text(BASE.replace("model: {path: /m.gguf}", "model: {path: /m.gguf}, args: [--api-key, abc123]"))
    with pytest.raises(ContractError, match="--api-key takes a credential"):
        load_contract(path)


def test_a_variable_name_is_not_a_credential(tmp_path: Path) -> None:
    path = write(tmp_path, "incumbent: {endpoint: 'http://127.0.0.1:1', pidfile: d.pid, api_key_env: DAILY_KEY}\n"
                           "failsafe: {deadline: 10m}\n")
    assert load_contract(path).contract.incumbent.api_key_env == "DAILY_KEY"
