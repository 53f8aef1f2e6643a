"""Pre-flight checks that need no engine: model identity by sha256 manifest, secret references set."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from campaign.contracts.load import load_contract
from campaign.errors import PreflightError
from campaign.window.preflight import preflight
from tests.support.contracts import free_port, write_contract

CONTRACT = """\
    contract: t-manifest
    version: 1
    lane_defaults:
      runtime: process
      engine: vllm
      executable: sh
      port: {port}
      model: {{path: model-dir, sha256_manifest: model.sha256}}
      {extra}
    lanes:
      - name: a
        role: control
    inputs:
      p: {{file: prompts/p.jsonl}}
    """


def _model_dir(tmp_path: Path) -> Path:
    model = tmp_path / "model-dir"
    (model / "sub").mkdir(parents=True)
    files = {"config.json": b'{"layers": 2}', "sub/weights-00001.bin": b"\x00" * 4096, "tokenizer.json": b"{}"}
    lines = []
    for name, data in files.items():
        (model / name).write_bytes(data)
        lines.append(f"{hashlib.sha256(data).hexdigest()}  {name}\n")
    (tmp_path / "model.sha256").write_text("".join(lines))
    return model


def test_model_manifest_is_checked_file_by_file(tmp_path: Path) -> None:
    model = _model_dir(tmp_path)
    path = write_contract(tmp_path, CONTRACT.format(port=free_port(), extra=""))
    loaded = load_contract(path)
    assert "model.sha256" in loaded.referenced_files()  # frozen with the contract
    assert preflight(loaded)["a"] == str(model.resolve())
    (model / "sub" / "weights-00001.bin").write_bytes(b"\x00" * 4095 + b"\x01")  # one flipped byte
    with pytest.raises(PreflightError, match=r"lane a: 1/3 model files differ from model.sha256, "
                                             r"e.g. sub/weights-00001.bin"):
        preflight(loaded)


def test_unset_secret_reference_is_refused_before_anything_starts(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    _model_dir(tmp_path)
    path = write_contract(tmp_path, CONTRACT.format(port=free_port(), extra='env: {HF_TOKEN: "${env:T_UNSET_HF}"}'))
    monkeypatch.delenv("T_UNSET_HF", raising=False)
    with pytest.raises(PreflightError, match=r"lane a: the contract references \$\{env:T_UNSET_HF\}"):
        preflight(load_contract(path))
    monkeypatch.setenv("T_UNSET_HF", "hf_" + "x" * 20)
    assert preflight(load_contract(path))


def test_cpus_this_runner_cannot_use_are_refused_before_anything_starts(tmp_path: Path) -> None:
    _model_dir(tmp_path)
    beyond = max(__import__("os").sched_getaffinity(0)) + 1
    path = write_contract(tmp_path, CONTRACT.format(port=free_port(), extra=f'cpus: "0,{beyond}"'))
    with pytest.raises(PreflightError, match=rf"lane a: cpus 0,{beyond} include {beyond}, which this runner cannot use"):
        preflight(load_contract(path))
