"""A lane's launch identity across one window's boots: the snapshot each boot records (redacted, the first
one never replaced), and a resume refused when a lane's executable or image is no longer what made the
first records, checked before anything is touched (found without starting the lane)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from campaign.contracts.hashing import sha256_file
from campaign.contracts.load import LoadedContract
from campaign.contracts.resolve import EffectiveLane
from campaign.errors import InputError
from campaign.fsutil import atomic_write_json, load_json_strict
from campaign.gates.records import VisitKey
from campaign.lanes.redact import redactor_for
from campaign.lanes.session import launch_command, resolve_refs

__all__ = ["first_inspect", "lane_redacted", "record_inspect", "refuse_a_mixed_resume", "refuse_another_launch"]

# What a lane's boot records about the bits it ran; a resume must find the same.
_IDENTITY = {"executable_sha256": "executable sha256", "image_id": "image id"}


def lane_redacted(snapshot: dict[str, Any], lane: EffectiveLane) -> dict[str, Any]:
    """No secret reaches the bundle: undeclared env values and credential arguments become keyed digests,
    token-shaped strings are cut (rules in campaign.lanes.redact; what boot_lane applies to each snapshot)."""
    return redactor_for(lane).snapshot(snapshot)


def record_inspect(bundle: Path, lane: EffectiveLane, lane_dir: Path, snapshot: dict[str, Any], *,
                   resumed: bool) -> None:
    """The first boot's snapshot is the one the window measured with (the one-axis check and promotion read
    it) and is never replaced; a resumed boot's goes beside it as inspect.resume<N>.json, once proven to
    run the same executable and image."""
    target = lane_dir / "inspect.json"
    if resumed:
        first = first_inspect(bundle, lane.name)
        if first is not None:
            refuse_another_launch(bundle, lane, first, snapshot)
        n = 1
        while target.exists():
            target, n = lane_dir / f"inspect.resume{n}.json", n + 1
    atomic_write_json(target, snapshot)


def first_inspect(bundle: Path, lane: str) -> tuple[Path, dict[str, Any]] | None:
    """The snapshot of the lane's earliest recorded boot (its first visit, else its earliest re-run)."""
    found = sorted(bundle.glob(f"lanes/{lane}@rerun*/inspect.json"), key=lambda p: VisitKey.parse(p.parent.name))
    for path in [bundle / "lanes" / lane / "inspect.json", *found]:
        if path.exists():
            return path, load_json_strict(path)
    return None


def refuse_another_launch(bundle: Path, lane: EffectiveLane, first: tuple[Path, dict[str, Any]],
                          now: dict[str, Any]) -> None:
    path, recorded = first
    for key, what in _IDENTITY.items():
        if recorded.get(key) is not None and now.get(key) != recorded[key]:
            raise InputError(f"{path}: refusing to resume window {bundle.name}: lane {lane.name}'s {what} is now "
                             f"{str(now.get(key))[:23]}, the window started with {str(recorded[key])[:23]}; "
                             "start a new window")


def refuse_a_mixed_resume(bundle: Path, loaded: LoadedContract, model_paths: dict[str, str]) -> None:
    """A resumed window adds records to its first start's: refused when a lane's executable or image is no
    longer what made them (the tool's source is checked first, by the caller), or one signed bundle would hold
    two experiments as one. Checked before anything is touched, so the daily stays as the interruption left it."""
    for lane in loaded.lanes.values():
        first = first_inspect(bundle, lane.name)
        if first is not None:
            refuse_another_launch(bundle, lane, first, _launch_identity(lane, model_paths[lane.name]))


def _launch_identity(lane: EffectiveLane, model_path: str) -> dict[str, Any]:
    """What boot_lane will record as the lane's executable sha256 and image id, found without starting it."""
    from campaign.lanes.engines.registry import adapter_for

    _argv, executable = launch_command(resolve_refs(lane), adapter_for(lane.engine), model_path)
    identity: dict[str, Any] = {"executable_sha256": sha256_file(executable) if executable is not None else None}
    if lane.runtime == "docker":
        from campaign.lanes.runtimes.docker import resolve_image
        from campaign.lanes.runtimes.dockerhost import client_for

        identity["image_id"] = resolve_image(client_for(lane.docker_host), lane.image or "",
                                             where=f"lane {lane.name}: ")["Id"]
    return lane_redacted(identity, lane)  # recorded snapshots went through the redactor: compare like with like
