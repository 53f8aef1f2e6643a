"""A model path that is /dev/zero, a FIFO, a folder pinned as a file, a symlink loop or missing: `campaign
doctor` gives one failed line naming the path and what it is, and the run's pre-flight one PreflightError,
each at once (never a hash of /dev/zero forever, never an open that waits for a FIFO's writer)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from campaign.contracts.load import load_contract
from campaign.errors import PreflightError
from campaign.window.doctor import _models, model_check
from campaign.window.preflight import preflight
from tests.support.contracts import free_port, write_contract
from tests.support.specialfiles import REFUSAL, make_special

PIN = "0" * 64
CONTRACT = """\
    contract: t-hostile-model
    version: 1
    lane_defaults:
      runtime: process
      engine: llamacpp
      executable: sh
      port: {port}
      model: {{path: model.gguf{pin}}}
    lanes:
      - name: a
        role: control
    inputs:
      p: {{file: prompts/p.jsonl}}
    """


# what the doctor's failed line and the run's preflight say of each: the contract's words for a device and a FIFO
WORDS = {
    "device": REFUSAL["device"],
    "fifo": REFUSAL["fifo"],
    "folder": "is a folder, but model.sha256 pins a single file",
    "loop": "symlink loop",
    "missing": "no such model",
}
KINDS = list(WORDS)


@pytest.mark.parametrize("kind", KINDS)
def test_doctor_gives_one_failed_line_naming_the_model_path(tmp_path: Path, kind: str) -> None:
    # validate refuses such a path (tests/unit/contracts/test_served_model.py): here it became one afterwards
    loaded = load_contract(write_contract(tmp_path, CONTRACT.format(port=free_port(), pin=f", sha256: '{PIN}'")))
    words = make_special(kind, tmp_path / "model.gguf", WORDS)
    started = time.monotonic()
    (check,) = _models(loaded)
    assert time.monotonic() - started < 2
    assert not check.ok and check.name == "model model.gguf"
    assert str(tmp_path / "model.gguf") in check.detail and words in check.detail, check.detail
    assert "\n" not in check.line() and "Traceback" not in check.line()


@pytest.mark.parametrize("kind", KINDS)
def test_run_preflight_refuses_the_model_path_in_one_line(tmp_path: Path, kind: str) -> None:
    # validate refuses such a path (tests/unit/contracts/test_served_model.py): here it became one afterwards
    loaded = load_contract(write_contract(tmp_path, CONTRACT.format(port=free_port(), pin=f", sha256: '{PIN}'")))
    words = make_special(kind, tmp_path / "model.gguf", WORDS)
    started = time.monotonic()
    with pytest.raises(PreflightError) as caught:
        preflight(loaded)
    assert time.monotonic() - started < 2
    assert str(caught.value).startswith("lane a: ") and words in str(caught.value), str(caught.value)
    assert str(tmp_path / "model.gguf") in str(caught.value)


def test_an_unpinned_device_or_fifo_is_refused_too(tmp_path: Path) -> None:
    """Without a pin nothing is hashed, but an engine started on /dev/zero or a FIFO would hang its boot."""
    loaded = load_contract(write_contract(tmp_path, CONTRACT.format(port=free_port(), pin="")))
    lane = loaded.lanes["a"]
    for kind in ("device", "fifo"):
        path = tmp_path / f"{kind}.gguf"
        words = make_special(kind, path, WORDS)
        check = model_check(lane, path)
        assert not check.ok and words in check.detail


def test_an_unpinned_folder_or_file_is_present(tmp_path: Path) -> None:
    loaded = load_contract(write_contract(tmp_path, CONTRACT.format(port=free_port(), pin="")))
    lane = loaded.lanes["a"]
    (tmp_path / "dir").mkdir()
    (tmp_path / "file.gguf").write_bytes(b"GGUF")
    assert model_check(lane, tmp_path / "dir").detail == "present (a folder, no pin)"
    assert model_check(lane, tmp_path / "file.gguf").detail == "present (a file, no pin)"


def test_a_pinned_file_is_hashed(tmp_path: Path) -> None:
    import hashlib

    (tmp_path / "model.gguf").write_bytes(b"GGUF weights")
    pin = hashlib.sha256(b"GGUF weights").hexdigest()
    loaded = load_contract(write_contract(tmp_path, CONTRACT.format(port=free_port(), pin=f", sha256: '{pin}'")))
    (check,) = _models(loaded)
    assert check.ok and check.detail == "sha256 matches the pin"
    assert preflight(loaded)["a"] == str((tmp_path / "model.gguf").resolve())


def test_doctor_does_not_start_an_engine_on_an_unusable_model(tmp_path: Path) -> None:
    """An engine started on a FIFO would wait for a writer until its readiness budget ran out."""
    from campaign.window.doctor import _engines

    loaded = load_contract(write_contract(tmp_path, CONTRACT.format(port=free_port(), pin="")))
    make_special("fifo", tmp_path / "model.gguf")
    (check,) = _engines(loaded, smoke=True)
    assert not check.ok and "not started: its model is not usable" in check.detail


def test_doctor_checks_every_pinned_model_not_only_the_served_one(tmp_path: Path) -> None:
    """A drafter pinned beside the served model gets its own line: its digest against its pin, once for the
    lanes that share it; changed, or turned into a FIFO, the line fails naming it."""
    import hashlib

    (tmp_path / "model.gguf").write_bytes(b"served")
    (tmp_path / "draft.gguf").write_bytes(b"draft-a")
    body = CONTRACT.format(port=free_port(), pin=f", sha256: '{hashlib.sha256(b'served').hexdigest()}'").replace(
        "      model: {path: model.gguf",
        f"      args: [--model-draft, \"${{model:draft}}\"]\n      models: {{draft: {{path: draft.gguf, sha256: "
        f"'{hashlib.sha256(b'draft-a').hexdigest()}'}}}}\n      model: {{path: model.gguf")
    loaded = load_contract(write_contract(tmp_path, body))
    served, draft = _models(loaded)
    assert served.ok and draft.ok and draft.name == f"model draft {tmp_path / 'draft.gguf'}", draft.line()
    (tmp_path / "draft.gguf").write_bytes(b"draft-b")
    served, draft = _models(loaded)
    assert served.ok and not draft.ok and "pinned" in draft.detail and "models.draft" in draft.line(), draft.line()
    (tmp_path / "draft.gguf").unlink()
    os.mkfifo(tmp_path / "draft.gguf")
    started = time.monotonic()
    draft = _models(loaded)[1]
    assert not draft.ok and "FIFO" in draft.detail and time.monotonic() - started < 2, draft.line()
