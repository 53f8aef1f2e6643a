"""Lane files pinned by sha256: a slot map as a candidate's one axis, checked at load, freeze and run,
referenced from args and env as ${file:NAME}, compared by digest (not by where it lies on this box)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from campaign.contracts.freeze import check_frozen, freeze
from campaign.contracts.load import load_contract
from campaign.contracts.resolve import axis_difference
from campaign.errors import AxisError, ContractError, FrozenChanged
from campaign.lanes.session import resolve_refs
from campaign.signing import init_keys, load_signing_key, load_trusted
from tests.support.contracts import MODEL, MODEL_SHA256, write_contract


def _slot_maps(directory: Path) -> tuple[str, str]:
    (directory / "slots").mkdir(exist_ok=True)
    digests = []
    for name, slots in (("slots-a.json", [4, 4, 6]), ("slots-b.json", [5, 5, 4])):
        data = f"{slots}\n".encode()
        (directory / "slots" / name).write_bytes(data)
        digests.append(hashlib.sha256(data).hexdigest())
    return digests[0], digests[1]


def _contract(directory: Path, *, axis: str = "[files.slotmap]", runtime: str = "process",
              candidate_sha: str | None = None, env_ref: str = "slotmap") -> Path:
    sha_a, sha_b = _slot_maps(directory)
    image = "" if runtime == "process" else f"\n          image: img@sha256:{'0' * 64}"
    return write_contract(directory, f"""\
        contract: t-files
        version: 1
        lane_defaults:
          runtime: {runtime}
          engine: llamacpp
          executable: {"llama-server" if runtime == "process" else "/app/llama-server"}{image}
          port: 18001
          model: {{path: {MODEL}, sha256: {MODEL_SHA256}}}
          args: [--ctx-size, "512"]
          env: {{SLOT_CACHE_PER_LAYER: "${{file:{env_ref}}}"}}
          files:
            - {{name: slotmap, path: slots/slots-a.json, sha256: {sha_a}}}
        lanes:
          - name: base
            role: control
          - name: wide
            role: candidate
            axis: {axis}
            set:
              files:
                - {{name: slotmap, path: slots/slots-b.json, sha256: {candidate_sha or sha_b}}}
        """)


def test_a_slot_map_is_a_candidates_one_axis_compared_by_digest(tmp_path: Path) -> None:
    loaded = load_contract(_contract(tmp_path))
    base, wide = loaded.lanes["base"], loaded.lanes["wide"]
    difference = axis_difference(base, wide)
    assert set(difference) == {"files.slotmap"}  # the env var names it the same way in both lanes
    assert difference["files.slotmap"][1] == "sha256:" + hashlib.sha256(b"[5, 5, 4]\n").hexdigest()
    assert Path(wide.files[0].path) == tmp_path / "slots" / "slots-b.json"  # absolute: a process reads it there


def test_an_undeclared_file_change_is_an_axis_error(tmp_path: Path) -> None:
    with pytest.raises(AxisError, match=r"changed but not declared: files\.slotmap"):
        load_contract(_contract(tmp_path, axis="[args.ctx-size]"))


def test_file_refs_become_the_path_the_engine_reads(tmp_path: Path) -> None:
    process = load_contract(_contract(tmp_path)).lanes["wide"]
    assert resolve_refs(process).env["SLOT_CACHE_PER_LAYER"] == str(tmp_path / "slots" / "slots-b.json")
    docker = load_contract(_contract(tmp_path, runtime="docker")).lanes["wide"]
    assert resolve_refs(docker).env["SLOT_CACHE_PER_LAYER"] == "/campaign/files/slotmap"


def test_a_reference_to_no_file_names_the_lane(tmp_path: Path) -> None:
    with pytest.raises(ContractError, match=r"\$\{file:slots\} names no file of lane 'base'"):
        load_contract(_contract(tmp_path, env_ref="slots"))


def test_a_missing_file_names_its_field(tmp_path: Path) -> None:
    path = _contract(tmp_path)
    (tmp_path / "slots" / "slots-b.json").unlink()
    with pytest.raises(ContractError, match=r"lanes\[1\]\.set\.files\[0\]\.path: file not found") as caught:
        load_contract(path)
    assert caught.value.line is not None


def test_a_wrong_pin_is_refused_at_freeze_and_a_changed_file_at_run(tmp_path: Path) -> None:
    init_keys()
    with pytest.raises(ContractError, match=r"files\[0\]\.sha256: slots/slots-b\.json has sha256 [0-9a-f]{64}, "
                                            r"not the pinned aaaa"):
        freeze(load_contract(_contract(tmp_path, candidate_sha="a" * 64)), load_signing_key())
    (tmp_path / "ok").mkdir()
    path = _contract(tmp_path / "ok")
    record, _ = freeze(load_contract(path), load_signing_key())
    (path.parent / "slots" / "slots-b.json").write_bytes(b"[9, 9, 9]\n")
    with pytest.raises((FrozenChanged, ContractError), match=r"slots/slots-b\.json"):
        check_frozen(load_contract(path), record, load_trusted())


def test_a_file_outside_the_contracts_folder_is_refused(tmp_path: Path) -> None:
    """A contract from someone else must not make the runner copy /etc/shadow into a bundle it publishes."""
    (tmp_path / "c").mkdir()
    path = _contract(tmp_path / "c")
    outside = tmp_path / "elsewhere.json"
    outside.write_bytes(b"[5, 5, 4]\n")
    path.write_text(path.read_text().replace("path: slots/slots-b.json", f"path: {outside}"))
    with pytest.raises(ContractError, match=r"lanes\[1\]\.set\.files\[0\]\.path: .* is outside the contract's folder"):
        load_contract(path)
    assert load_contract(path, allow_paths=[tmp_path]).lanes["wide"].files[0].path == str(outside)


def test_a_reference_inside_a_longer_value_is_refused(tmp_path: Path) -> None:
    """`${file:slotmap}.lora` would make the engine read a file next to the pinned one that nobody pinned."""
    path = _contract(tmp_path)
    path.write_text(path.read_text().replace('"${file:slotmap}"', '"${file:slotmap}.lora"'))
    with pytest.raises(ContractError, match=r"must be a whole value"):
        load_contract(path)
    path.write_text(path.read_text().replace('"${file:slotmap}.lora"', '"${file:slotmap}"').replace(
        'args: [--ctx-size, "512"]', 'args: [--ctx-size, "512", "--slot-map=${file:slotmap}"]'))
    assert resolve_refs(load_contract(path).lanes["wide"]).args[-1] == f"--slot-map={tmp_path}/slots/slots-b.json"
