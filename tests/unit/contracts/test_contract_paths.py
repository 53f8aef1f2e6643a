"""Every path a contract names (the served model, another pinned model, a lane file, an input set, a
screen's script) goes through one opener (``fsutil.open_regular``): whatever kind of not-a-file stands at any
of them, validate or freeze refuses it at that path's own line and field, in words that say what it is."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from campaign.contracts.freeze import freeze_record
from campaign.contracts.load import load_contract
from campaign.errors import ContractError
from tests.support.specialfiles import SPECIAL_KINDS, make_special

BODY = """\
contract: t-paths
version: 1
lane_defaults:
  runtime: process
  engine: llamacpp
  executable: llama-server
  port: 18124
  args: [--model-draft, "${{model:draft}}"]
  model: {{path: {served}, sha256: '{served_sha}'}}
  models:
    draft: {{path: {draft}, sha256: '{draft_sha}'}}
  files: [{{name: map, path: {map}, sha256: '{map_sha}'}}]
lanes:
  - {{name: a, role: control}}
inputs:
  p: {{file: {prompts}}}
gates:
  - {{kind: greedy, input: p, rule: {{self_identical: '1/1'}}}}
"""
# each place: (its key in BODY, the field a refusal names, its line)
PLACES = {"served": ("lane_defaults.model.path", 9), "draft": ("lane_defaults.models.draft.path", 11),
          "map": ("lane_defaults.files[0].path", 12), "prompts": ("inputs.p.file", 16)}
# what each kind is called, wherever it stands
WORDS = {"device": ("device", "kernel file system"), "fifo": "FIFO", "socket": "socket", "folder": "directory", "loop": "symlink loop",
         "dangling": "a symlink to nothing"}


def contract(folder: Path, bad: str | None = None, kind: str | None = None) -> tuple[Path, str]:
    fields: dict[str, str] = {}
    for place in PLACES:
        name = {"prompts": "p.jsonl"}.get(place, f"{place}.bin")
        data = b'{"id": "a", "prompt": "x"}\n' if place == "prompts" else place.encode()
        fields[place], fields[f"{place}_sha"] = name, hashlib.sha256(data).hexdigest()
        if place == bad:
            words = make_special(kind or "", folder / name)
        else:
            (folder / name).write_bytes(data)
    body = BODY.format(**{k: v for k, v in fields.items() if k != "prompts_sha"})
    path = folder / "c.yaml"
    path.write_text(body)
    return path, words if bad else ""


def test_the_contract_with_every_place_a_regular_file_freezes(tmp_path: Path) -> None:
    path, _ = contract(tmp_path)
    assert set(freeze_record(load_contract(path))["files"]) >= {"map.bin", "p.jsonl"}


@given(kind=st.sampled_from(SPECIAL_KINDS), place=st.sampled_from(sorted(PLACES)))
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_any_kind_of_not_a_file_at_any_place_is_refused_at_its_line(tmp_path_factory: pytest.TempPathFactory,
                                                                     kind: str, place: str) -> None:
    folder = tmp_path_factory.mktemp("paths")
    path, _ = contract(folder, place, kind)
    with pytest.raises(ContractError) as refused:
        freeze_record(load_contract(path, allow_paths=[Path("/dev")]))  # trusted: the refusal is by kind
    field, line = PLACES[place]
    said = str(refused.value)
    assert f"c.yaml:{line}: {field}: " in said, said
    words = WORDS[kind]
    assert any(w in said for w in ((words,) if isinstance(words, str) else words)), said
    assert "\n" not in said
