"""A lane's pinned models (``models:``) read back where its running engine sees them, and checked again
before promotion starts a daily on them.

A file is hashed as the lane sees it (through a process's root, or streamed out of its container); a
directory is walked there, every file hashed and compared with its manifest (no file missing, changed or
unlisted). What does not match fails the lane: what ran is not what the contract froze.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from campaign.contracts.hashing import sha256_bytes, sha256_file
from campaign.contracts.manifest import ManifestError, manifest_problems, read_manifest, render_manifest, tree_digests
from campaign.contracts.resolve import EffectiveLane
from campaign.errors import LaunchError, RunError
from campaign.fsutil import UnreadableFile
from campaign.lanes.runtimes.base import RunningLane

__all__ = ["model_problem", "models_unchanged", "read_back_models"]


def _pinned_listing(lane: EffectiveLane, role: str) -> dict[str, str]:
    """A directory's manifest as pinned: its bytes still hash to the pin."""
    model = lane.models[role]
    manifest = Path(model.sha256_manifest or "")
    if sha256_file(manifest, what="model manifest") != model.sha256:
        raise RunError(f"lane {lane.name}: model {role}'s manifest {manifest} changed since the contract pinned it")
    return read_manifest(manifest)


def read_back_models(running: RunningLane, lane: EffectiveLane) -> dict[str, dict[str, Any]]:
    """Each model's digest read back where the running engine sees it: ``{role: {path, kind, pinned_sha256,
    sha256}}`` (a directory adds ``files`` and ``tree_sha256``, the digest of its listing as read back; its
    ``sha256`` is the manifest's, which the files read back match exactly)."""
    found: dict[str, dict[str, Any]] = {}
    for role, model in lane.models.items():
        seen_at = lane.model_seen_at(role)
        try:
            if not model.is_directory:
                digest = running.file_sha256(seen_at)
                entry: dict[str, Any] = {"kind": "file", "sha256": digest}
                problem = "" if digest == model.sha256 else f"has sha256 {digest}, not the pinned {model.sha256}"
            else:
                pinned, tree = _pinned_listing(lane, role), running.tree_sha256s(seen_at)
                problem = manifest_problems(pinned, tree)
                entry = {"kind": "directory", "sha256": model.sha256, "files": len(tree),
                         "tree_sha256": sha256_bytes(render_manifest(tree).encode())}
        except Exception as exc:  # an engine that cannot hand the model out: the lane cannot be proven
            raise LaunchError(f"lane {lane.name}: cannot read model {role} back at {seen_at}: {exc}",
                              cause="file_mismatch") from exc
        if problem:
            raise LaunchError(f"lane {lane.name}: model {role} at {seen_at} {problem}", cause="file_mismatch")
        found[role] = {"path": seen_at, "pinned_sha256": model.sha256, **entry}
    return found


def model_problem(lane: EffectiveLane, role: str) -> str:
    """What is wrong with the model of ``role`` on this machine against its pin, or "": a file's digest, a
    directory's files against its manifest. UnreadableFile or ManifestError when it cannot be read."""
    model = lane.models[role]
    if model.is_directory:
        return manifest_problems(_pinned_listing(lane, role), tree_digests(Path(model.path)))
    digest = sha256_file(Path(model.path), what="model")
    return "" if digest == model.sha256 else f"sha256 {digest[:12]}..., pinned {model.sha256[:12]}..."


def models_unchanged(lane: EffectiveLane) -> None:
    """Each model still holds the bytes the window measured: RunError naming the first that moved or changed."""
    for role, model in lane.models.items():
        try:
            problem = model_problem(lane, role)
        except (UnreadableFile, ManifestError, RunError) as exc:
            raise RunError(f"lane {lane.name}: model {role} ({model.path}) is unreadable: {exc}; the daily would "
                           "read something else") from exc
        if problem:
            raise RunError(f"lane {lane.name}: model {role} ({model.path}) changed since the window measured it "
                           f"({problem}); refusing to promote")
