"""The candidate as the new daily: its launch rebuilt from the verified bundle exactly as the window measured
it (the launched argv with each redacted credential put back from the lane's own ``${env:NAME}``, its
declared env on the same base, its binary unchanged) under the daily's serving identity (``identity``: its
--host and --port, pidfile, GPUs, CPUs), and the smoke that proves it serves as measured."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import httpx
from pydantic import ValidationError

from campaign.contracts.hashing import sha256_file
from campaign.contracts.resolve import EffectiveLane
from campaign.contracts.secretrefs import REF
from campaign.daily import incumbent
from campaign.errors import InputError, RunError
from campaign.fsutil import load_json_strict, read_jsonl
from campaign.gates.records import greedy_replays
from campaign.lanes.command import engine_argv, resolve_refs
from campaign.lanes.runtimes.gpus import visible_devices
from campaign.lanes.runtimes.process import BASE_ENV_KEYS
from campaign.lanes.session import files_unchanged
from campaign.promotion.identity import axis_names, listen_positions, map_listen

__all__ = ["candidate_launch", "measured_lane", "smoke_candidate", "unredacted_argv"]


def measured_lane(copy: Path, candidate: str) -> tuple[dict[str, Any], EffectiveLane]:
    """The candidate's ``inspect.json`` and its lane as the window ran it, from the verified copy."""
    inspect = load_json_strict(copy / "lanes" / candidate / "inspect.json")
    spec = load_json_strict(copy / "lanes" / candidate / "spec.json")
    if not isinstance(inspect, dict) or not isinstance(inspect.get("launched_argv"), list) or not inspect["launched_argv"]:
        raise InputError(f"lanes/{candidate}/inspect.json: no launched_argv list: not a snapshot this version reads")
    try:
        return inspect, EffectiveLane.model_validate(spec)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise InputError(f"lanes/{candidate}/spec.json: {'.'.join(map(str, first['loc']))}: {first['msg']}: "
                         "not a lane this version reads") from exc


# what of a process daily's environment says which GPUs it uses: the daily's own, unless the axis is gpus
_GPU_ENV = ("CUDA_DEVICE_ORDER", "CUDA_VISIBLE_DEVICES")


def candidate_launch(copy: Path, candidate: str, daily: dict[str, Any]) -> dict[str, Any]:
    """The candidate as measured (its launched argv, its declared env on the same base, its binary) with
    the daily's serving identity (``identity``): its --host and --port, its pidfile, GPUs and CPUs."""
    inspect, measured = measured_lane(copy, candidate)
    template = engine_argv(inspect["launched_argv"][0], measured, "<model>")
    argv = unredacted_argv(inspect["launched_argv"], measured, candidate, template)
    argv = map_listen(argv, listen_positions(template, measured, measured.host), daily["argv"])
    if sha256_file(Path(argv[0])) != inspect.get("executable_sha256"):
        raise RunError(f"{argv[0]} changed since the window measured it; refusing to promote a different binary")
    files_unchanged(measured)
    # the declared env, its ${env:NAME} references resolved now, as every launch resolves them
    lane = resolve_refs(measured)
    env = {k: os.environ[k] for k in BASE_ENV_KEYS if k in os.environ} | dict(lane.env)
    axis = axis_names(measured)
    if "gpus" in axis:
        visible = visible_devices(measured.gpus, f"candidate ({candidate})")
        env |= {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": visible} if visible is not None else {}
    else:
        env |= {k: daily["env"][k] for k in _GPU_ENV if k in (daily.get("env") or {})}
    return {"runtime": "process", "argv": argv, "env": env, "cwd": os.getcwd(), "exe": argv[0],
            "exe_sha256": inspect["executable_sha256"], "pidfile": daily["pidfile"],
            # pinned as the daily was, unless the pinning is what the candidate changed (None: unpinned)
            "cpus": inspect.get("launched_cpus") if "cpus" in axis else daily.get("cpus"),
            **{k: daily.get(k) for k in incumbent.SETTINGS}}


def unredacted_argv(launched: list[str], lane: EffectiveLane, candidate: str, template: list[str]) -> list[str]:
    """The measured command line with each redacted credential put back from the lane's own
    ``${env:NAME}`` reference (resolved now). Redaction is token for token, so the lane's command built
    again (``template``) lines up with it; a credential the contract wrote literally is not recoverable,
    and refused."""
    if len(template) != len(launched):
        raise RunError(f"lane {candidate}: its measured command line does not line up with its spec; "
                       "refusing to promote a command that cannot be rebuilt exactly")
    argv = []
    for measured, written in zip(launched, template, strict=True):
        if "<redacted" in measured:
            if not REF.search(written):
                raise RunError(f"lane {candidate}: a credential in its command line was written literally and "
                               "is redacted in the bundle; use ${env:NAME} for it")
            argv.append(resolve_refs(lane.model_copy(update={"args": [written], "env": {}})).args[0])
        else:
            argv.append(measured)
    return argv


def smoke_candidate(copy: Path, candidate: str, launch: dict[str, Any]) -> dict[str, Any]:
    """Proof completion, then the candidate's measured greedy replies must come back byte-identical."""
    proof = incumbent.prove(launch)
    # the daily's users' key, as the proof sends it: the promoted daily must take the key they call it with
    key = os.environ.get(launch["api_key_env"]) if launch.get("api_key_env") else None
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    replayed, mismatches = 0, []
    for raw in sorted((copy / "raw").glob(f"*/{candidate}.jsonl")):
        for replay in greedy_replays(read_jsonl(raw), limit=4):
            with httpx.Client(base_url=launch["endpoint"], headers=headers, timeout=120.0) as client:
                response = client.post(replay.path, json=replay.request).json()
            replayed += 1
            if response["choices"][0]["message"]["content"] != replay.reply:
                mismatches.append(replay.prompt)
    return {"proof": proof, "greedy_replayed": replayed, "greedy_mismatches": mismatches,
            "ok": not mismatches}
