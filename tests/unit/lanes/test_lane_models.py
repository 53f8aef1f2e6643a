"""Pinned models read back where the running lane sees them, and checked again before a promotion: a real
process reads through its own /proc/<pid>/root (no engine is needed to read a file; the real engine's read
back is tests/integration/engines/test_draft_model.py); a container mounts each model read-only."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from campaign.contracts.manifest import render_manifest, tree_digests
from campaign.contracts.resolve import EffectiveLane
from campaign.errors import LaunchError, RunError
from campaign.lanes.modelcheck import models_unchanged, read_back_models
from campaign.lanes.runtimes.base import LaunchSpec
from campaign.lanes.runtimes.docker import create_kwargs
from campaign.lanes.runtimes.process import ProcessRuntime


def _lane(models: dict[str, dict[str, str]], runtime: str = "process") -> EffectiveLane:
    return EffectiveLane.model_validate({
        "name": "cand", "role": "candidate", "control": "base", "runtime": runtime, "engine": "llamacpp",
        "executable": "sleep" if runtime == "process" else "/app/srv", "image": f"sha256:{'ab' * 32}", "port": 1,
        "model": {"path": "/m"}, "models": models})


def _directory(tmp_path: Path) -> tuple[Path, Path, str]:
    root = tmp_path / "eagle"
    (root / "sub").mkdir(parents=True)
    (root / "config.json").write_bytes(b"{}\n")
    (root / "sub" / "w.bin").write_bytes(b"weights")
    manifest = tmp_path / "eagle.sha256"
    manifest.write_text(render_manifest(tree_digests(root)))
    return root, manifest, hashlib.sha256(manifest.read_bytes()).hexdigest()


@pytest.fixture
def sleeping(tmp_path: Path):
    lane = ProcessRuntime().start(LaunchSpec(lane="cand", argv=["sleep", "30"], env={}, log_path=tmp_path / "log"))
    yield lane
    lane.stop(timeout=1.0)


def test_a_file_and_a_directory_are_read_back_and_a_swapped_file_fails_the_lane(tmp_path: Path, sleeping) -> None:
    (tmp_path / "d.gguf").write_bytes(b"draft")
    digest = hashlib.sha256(b"draft").hexdigest()
    root, manifest, pinned = _directory(tmp_path)
    lane = _lane({"draft": {"path": str(tmp_path / "d.gguf"), "sha256": digest},
                  "head": {"path": str(root), "sha256_manifest": str(manifest), "sha256": pinned}})
    found = read_back_models(sleeping, lane)
    assert found["draft"] == {"path": str(tmp_path / "d.gguf"), "pinned_sha256": digest, "kind": "file",
                              "sha256": digest}
    assert found["head"]["sha256"] == pinned and found["head"]["files"] == 2
    assert found["head"]["tree_sha256"] == pinned  # a manifest written by `campaign manifest` is the listing
    (root / "sub" / "w.bin").write_bytes(b"other weights")  # swapped under the running lane
    with pytest.raises(LaunchError, match=r"model head at .*eagle 1 of 2 files differ \(e\.g\. sub/w\.bin\)") as caught:
        read_back_models(sleeping, lane)
    assert caught.value.cause == "file_mismatch"
    (root / "sub" / "w.bin").write_bytes(b"weights")
    (root / "sub" / "extra").write_bytes(b"x")
    with pytest.raises(LaunchError, match=r"1 files are not in the manifest \(e\.g\. sub/extra\)"):
        read_back_models(sleeping, lane)


def test_a_promotion_refuses_a_model_that_changed(tmp_path: Path) -> None:
    root, manifest, pinned = _directory(tmp_path)
    lane = _lane({"head": {"path": str(root), "sha256_manifest": str(manifest), "sha256": pinned}})
    models_unchanged(lane)
    (root / "config.json").write_bytes(b"{ }\n")
    with pytest.raises(RunError, match=r"model head .* changed since the window measured it"):
        models_unchanged(lane)
    manifest.write_text("")
    with pytest.raises(RunError, match=r"manifest .* changed since the contract pinned it"):
        models_unchanged(lane)


def test_a_container_mounts_each_model_read_only_where_the_lane_says(tmp_path: Path) -> None:
    root, manifest, pinned = _directory(tmp_path)
    lane = _lane({"head": {"path": str(root), "sha256_manifest": str(manifest), "sha256": pinned},
                  "draft": {"path": str(manifest), "sha256": pinned, "mount": "/drafts/d"}}, runtime="docker")
    spec = LaunchSpec(lane="cand", argv=["/app/srv"], env={}, log_path=tmp_path / "log")
    mounts = {m["Target"]: m for m in create_kwargs(lane, spec, "sha256:" + "ab" * 32, "n")["mounts"]}
    assert mounts["/campaign/models/head"]["Source"] == str(root) and mounts["/campaign/models/head"]["ReadOnly"]
    assert mounts["/drafts/d"]["Source"] == str(manifest) and mounts["/drafts/d"]["ReadOnly"]
