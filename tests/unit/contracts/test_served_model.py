"""The served model (a lane's `model:`) is checked by validate and freeze as the other pinned models are
(issue #51): a device, a FIFO, a socket, a symlink loop, a dangling link, or a folder pinned as a file is
refused at its own line, in one line, exit 2; what is not there yet is the run's pre-flight's; a lane on
another box's engine serves that box's path, so nothing of it is looked at here."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from campaign.contracts.load import load_contract
from campaign.errors import ContractError
from tests.support.cli import campaign
from tests.support.contracts import MODEL, write_contract
from tests.support.specialfiles import SPECIAL_KINDS, make_special

PIN = "0" * 64
CONTRACT = """\
contract: t-served
version: 1
lane_defaults:
  runtime: {runtime}
  engine: {engine}
  {where_defaults}
  port: 18123
  model: {{path: {defaults_path}{pin}}}
lanes:
  - name: a
    role: control
  - name: b
    role: candidate
    axis: [model.path]
    set:
      model: {{path: {candidate_path}{pin}}}
inputs:
  p: {{file: prompts/p.jsonl}}
"""


def contract(folder: Path, *, defaults_path: str = str(MODEL), candidate_path: str = str(MODEL),
             runtime: str = "process", pin: str = f", sha256: '{PIN}'", engine: str = "llamacpp") -> Path:
    if candidate_path == defaults_path:  # the same file, spelled otherwise: the candidate's one axis is model.path
        head, _, name = candidate_path.rpartition("/")
        candidate_path = f"{head}/./{name}" if head else f"./{name}"
    where = "executable: llama-server" if runtime == "process" else \
        "image: campaign-test-base@sha256:" + "1" * 64 + "\n  docker_host: tcp://gpu-box.example:2376"
    return write_contract(folder, CONTRACT.format(runtime=runtime, engine=engine, where_defaults=where,
                                                  defaults_path=defaults_path,
                                                  candidate_path=candidate_path, pin=pin))


@pytest.mark.parametrize("kind", SPECIAL_KINDS)
def test_validate_refuses_a_served_model_that_is_no_model_at_its_line(tmp_path: Path, kind: str) -> None:
    words = make_special(kind, tmp_path / "m.gguf")
    path = contract(tmp_path, defaults_path="m.gguf")
    done = campaign("validate", str(path))
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert f"{path.name}:8: lane_defaults.model.path: " in done.stderr and words in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_a_lane_of_its_own_model_is_refused_at_its_set(tmp_path: Path) -> None:
    make_special("fifo", tmp_path / "m.gguf")
    with pytest.raises(ContractError, match=r"lanes\[1\]\.set\.model\.path: 'm.gguf': model is a FIFO"):
        load_contract(contract(tmp_path, candidate_path="m.gguf"))


def test_a_folder_is_a_served_model_when_unpinned_or_pinned_by_manifest_and_a_file_is_not_a_manifests(
        tmp_path: Path) -> None:
    (tmp_path / "hf").mkdir()
    load_contract(contract(tmp_path, defaults_path="hf", candidate_path="hf", pin="", engine="vllm"))  # no pin
    (tmp_path / "hf.sha256").write_text("")
    with pytest.raises(ContractError, match="'m.gguf' is not a directory"):
        (tmp_path / "m.gguf").write_bytes(b"GGUF")
        load_contract(contract(tmp_path, defaults_path="m.gguf", candidate_path="m.gguf",
                               pin=", sha256_manifest: hf.sha256"))


def test_a_model_not_there_yet_is_the_preflights_and_another_boxs_path_is_not_looked_at(tmp_path: Path) -> None:
    load_contract(contract(tmp_path, defaults_path="fetched-later.gguf", candidate_path="fetched-later.gguf"))
    make_special("fifo", tmp_path / "m.gguf")  # here a FIFO; on the GPU box, whatever that box has at this path
    load_contract(contract(tmp_path, defaults_path="m.gguf", candidate_path="m.gguf", runtime="docker"))


@pytest.mark.parametrize("engine, model, pin, form", [
    ("llamacpp", "hf", ", sha256_manifest: hf.sha256", "a model folder"),  # pinned as a folder: llama-server's?
    ("vllm", "m.gguf", f", sha256: '{PIN}'", "a model file"),  # a GGUF pinned for vLLM
    ("vllm", "m.gguf", "", "a model file"),  # unpinned: the path says it is a file
    ("llamacpp", "hf", "", "a model folder"),
])
def test_a_model_of_a_form_its_engine_does_not_serve_is_refused_at_its_line(
        tmp_path: Path, engine: str, model: str, pin: str, form: str) -> None:
    """Before the window, not at the boot after the daily went down: each engine's adapter says which forms
    it serves (``facts.model_forms``)."""
    (tmp_path / "hf").mkdir()
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    path = contract(tmp_path, defaults_path=model, candidate_path=model, pin=pin, engine=engine)
    with pytest.raises(ContractError) as refused:
        load_contract(path, check_files=not pin)  # a pin says the form without reading the path
    said = str(refused.value)
    assert "lane_defaults.model.path: " in said and f"is {form}" in said and f"engine {engine} serves" in said, said
    other = "vllm" if engine == "llamacpp" else "llamacpp"
    load_contract(contract(tmp_path, defaults_path=model, candidate_path=model, pin=pin, engine=other),
                  check_files=not pin)


@given(kind=st.sampled_from(SPECIAL_KINDS), place=st.sampled_from(["defaults", "candidate", "both"]),
       pinned=st.booleans())
@settings(max_examples=24, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_any_special_kind_in_any_place_is_refused_whatever_the_pin(tmp_path_factory: pytest.TempPathFactory,
                                                                     kind: str, place: str, pinned: bool) -> None:
    folder = tmp_path_factory.mktemp("served")
    words = make_special(kind, folder / "m.gguf")
    if kind == "folder" and not pinned:  # a folder model (vLLM's), but these lanes are llama-server's
        words = "is a model folder (Hugging Face's layout, pinned by sha256_manifest); engine llamacpp serves a model file"
    paths = {"defaults_path": "m.gguf" if place != "candidate" else str(MODEL),
             "candidate_path": "m.gguf" if place != "defaults" else str(MODEL)}
    path = contract(folder, **paths, pin=f", sha256: '{PIN}'" if pinned else "")
    if not words:
        load_contract(path)
        return
    with pytest.raises(ContractError) as refused:
        load_contract(path)
    field = "lane_defaults.model.path" if place != "candidate" else "lanes[1].set.model.path"
    assert f"{field}: " in str(refused.value) and words in str(refused.value), str(refused.value)
