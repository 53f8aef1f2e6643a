"""The runtime one-axis check on hand-written container snapshots (pure logic; real containers' snapshots
are checked in tests/lanes/test_docker_runtime.py and by the docker windows)."""

from __future__ import annotations

import copy
from pathlib import Path

from campaign.contracts.resolve import EffectiveLane
from campaign.fsutil import atomic_write_json
from campaign.window.inspectdiff import runtime_axis_difference

IMAGE_A, IMAGE_B = "sha256:" + "a" * 64, "sha256:" + "b" * 64


def snapshot(image: str = IMAGE_A, shm: int = 64 << 20, env: dict | None = None, flag: str = "1") -> dict:
    argv = ["/srv", "-m", "/models/m", "--k", flag]
    mounts = [{"source": "/host/models", "destination": "/models", "read_only": True, "type": "bind"}]
    launched = {"image_id": image, "mounts": copy.deepcopy(mounts), "shm_size": shm, "device_requests": [],
                "network_mode": "host", "port_bindings": {}}
    return {"runtime": "docker", "docker_host": "unix:///var/run/docker.sock", "image_id": image,
            "argv": argv, "env": {"PATH": "/bin", **(env or {})}, "launched_argv": list(argv),
            "launched_env": {}, "mounts": mounts, "shm_size": shm, "device_requests": [],
            "network_mode": "host", "port_bindings": {}, "launched": launched, "executable_sha256": None}


def lanes() -> tuple[EffectiveLane, EffectiveLane]:
    base = {"runtime": "docker", "engine": "llamacpp", "image": IMAGE_A, "port": 1, "model": {"path": "/m"}}
    return (EffectiveLane.model_validate({**base, "name": "c", "role": "control"}),
            EffectiveLane.model_validate({**base, "name": "d", "role": "candidate", "control": "c"}))


def check(tmp_path: Path, a: dict, b: dict, declared: set[str]) -> str:
    control, candidate = lanes()
    atomic_write_json(tmp_path / "lanes" / "c" / "inspect.json", a)
    atomic_write_json(tmp_path / "lanes" / "d" / "inspect.json", b)
    return runtime_axis_difference(tmp_path, control, candidate, declared)


def test_declared_argument_only(tmp_path: Path) -> None:
    assert check(tmp_path, snapshot(), snapshot(flag="4"), {"args.k"}) == ""


def test_shm_changed_behind_the_launch_is_caught(tmp_path: Path) -> None:
    altered = snapshot(flag="4")
    altered["shm_size"] = 1 << 30  # the engine reports a /dev/shm the launch did not ask for
    assert check(tmp_path, snapshot(), altered, {"args.k"}) == "ran with undeclared differences shm_size"


def test_mount_made_writable_is_caught(tmp_path: Path) -> None:
    altered = snapshot(flag="4")
    altered["mounts"][0]["read_only"] = False
    assert "mounts./models" in check(tmp_path, snapshot(), altered, {"args.k"})


def test_image_env_belongs_to_a_declared_image_change(tmp_path: Path) -> None:
    new = snapshot(image=IMAGE_B, env={"VLLM_USE_V1": "0"})
    assert check(tmp_path, snapshot(), new, {"image"}) == ""
    verdict = check(tmp_path, snapshot(), new, {"args.k"})
    assert "image" in verdict and "env.VLLM_USE_V1" in verdict


def with_slot_map(snap: dict, host: str, pinned: str, seen: str, *, process: bool = False) -> dict:
    """A lane that read a slot map: by its own host path (process) or at one mount path (container)."""
    snap = copy.deepcopy(snap)
    path = host if process else "/campaign/files/slotmap"
    snap["files"] = {"slotmap": {"path": path, "pinned_sha256": pinned, "sha256": seen}}
    for key in ("argv", "launched_argv"):
        snap[key] = [*snap[key], "--slot-map", path]
    if not process:
        mount = {"source": host, "destination": path, "read_only": True, "type": "bind"}
        snap["mounts"] = [*snap["mounts"], mount]
        snap["launched"]["mounts"] = [*snap["launched"]["mounts"], dict(mount)]
    return snap


def test_a_slot_map_axis_differs_only_in_its_digest(tmp_path: Path) -> None:
    a = with_slot_map(snapshot(), "/recipe/slots-7360.json", "a" * 64, "a" * 64)
    b = with_slot_map(snapshot(), "/recipe/slots-5792.json", "b" * 64, "b" * 64)
    assert check(tmp_path, a, b, {"files.slotmap"}) == ""  # the mount's host path is not the difference
    assert check(tmp_path, a, b, {"args.k"}) == "ran with undeclared differences files.slotmap"


def test_process_lanes_name_their_own_paths_without_an_argument_difference(tmp_path: Path) -> None:
    a = with_slot_map(snapshot(), "/recipe/slots-7360.json", "a" * 64, "a" * 64, process=True)
    b = with_slot_map(snapshot(), "/recipe/slots-5792.json", "b" * 64, "b" * 64, process=True)
    assert check(tmp_path, a, b, {"files.slotmap"}) == ""


def test_a_file_read_back_as_the_controls_makes_the_declared_difference_absent(tmp_path: Path) -> None:
    """The comparison is of what each lane read back, not of the pins. A read-back that differs from its own
    pin is the boot's check to fail (tests/unit/lanes/test_lane_files.py); here it still differs from the
    control, as declared."""
    a = with_slot_map(snapshot(), "/recipe/slots-7360.json", "a" * 64, "a" * 64)
    b = with_slot_map(snapshot(), "/recipe/slots-5792.json", "b" * 64, "c" * 64)  # swapped under the mount
    same = with_slot_map(snapshot(), "/recipe/slots-5792.json", "b" * 64, "a" * 64)
    assert check(tmp_path, a, b, {"files.slotmap"}) == ""
    assert check(tmp_path, a, same, {"files.slotmap"}) == "declared differences absent from what ran files.slotmap"



def _with_draft(digest: str, read_back: str | None = None, *, host: str = "/host/a") -> dict:
    """A container snapshot whose vLLM drafter is a pinned model mounted at /campaign/models/draft."""
    shot = snapshot()
    config = '{"model":"/campaign/models/draft","num_speculative_tokens":3}'
    for key in ("argv", "launched_argv"):
        shot[key] = [*shot[key], "--speculative-config", config]
    mount = {"source": host, "destination": "/campaign/models/draft", "read_only": True, "type": "bind"}
    shot["mounts"].append(mount)
    shot["launched"]["mounts"].append(dict(mount))
    shot["models"] = {"draft": {"path": "/campaign/models/draft", "kind": "directory", "pinned_sha256": digest,
                                "sha256": read_back or digest}}
    return shot


def test_a_drafter_is_compared_by_the_digest_read_back_not_its_host_path(tmp_path: Path) -> None:
    a, b = "1" * 64, "2" * 64
    assert check(tmp_path, _with_draft(a), _with_draft(b, host="/host/b"), {"models.draft"}) == ""
    # the same drafter bytes from another folder: no axis at all
    assert check(tmp_path, _with_draft(a), _with_draft(a, host="/host/b"), {"args.k"}) == ""
    assert check(tmp_path, _with_draft(a), _with_draft(b), {"args.k"}) == \
        "ran with undeclared differences models.draft"
    # what ran was not the pinned drafter: the read-back digest is another one
    assert "declared differences absent from what ran models.draft" in \
        check(tmp_path, _with_draft(a), _with_draft(b, read_back=a), {"models.draft"})
