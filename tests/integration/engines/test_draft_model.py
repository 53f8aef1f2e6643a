"""A pinned drafter on a real llama-server (issue #33): `--model-draft ${model:draft}` with the draft pinned
under `models:`, frozen by its digest, the engine loading it (its boot log says so) and its digest read back
inside the running lane: a process (through /proc/<pid>/root) and a container (streamed out of it, with a
pinned directory beside it). Another drafter alone is a valid one-axis candidate. The small GGUF drafts for
itself (llama.cpp needs a drafter of the same vocabulary)."""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from campaign.contracts.freeze import check_frozen, freeze
from campaign.contracts.load import load_contract
from campaign.contracts.manifest import render_manifest, tree_digests
from campaign.contracts.resolve import EffectiveLane, axis_difference
from campaign.fsutil import JsonlAppender
from campaign.lanes.session import boot_lane
from campaign.signing import init_keys, load_signing_key, load_trusted
from tests.support.contracts import (
    MODEL,
    MODEL_SHA256,
    candidate,
    contract_yaml,
    control,
    free_port,
    process_defaults,
    write_contract,
)
from tests.support.docker import MODELS_DIR, docker_defaults, need_docker, need_engine_files

pytestmark = pytest.mark.integration

ARGS = ["--threads", "2", "--ctx-size", "512", "--parallel", "1", "--no-webui", "--model-draft", "${model:draft}"]
LOADS_THE_DRAFT = {"require": ["loading draft model"]}


def _boot(lane: EffectiveLane, model_path: Path, tmp_path: Path) -> tuple[dict[str, Any], str]:
    """Boot one lane (readiness and its proof completion), then stop it: its inspect snapshot and boot log."""
    async def go() -> dict[str, Any]:
        with JsonlAppender(tmp_path / f"{lane.name}-warm.jsonl") as sink:
            run = await boot_lane(lane, model_path=str(model_path), log_path=tmp_path / f"{lane.name}.log",
                                  warm_sink=sink, labels={"campaign.window": f"draft-{os.getpid()}"})
            await run.stop()
            return run.inspect

    inspect = asyncio.run(go())
    return inspect, (tmp_path / f"{lane.name}.log").read_text(errors="replace")


def test_a_pinned_drafter_is_read_back_in_a_process_lane_and_another_is_one_axis(tmp_path: Path) -> None:
    # the drafter a copy of the served model at its own path: the lane must hand the engine that path, and
    # read back that file, not the served model's
    drafter = tmp_path / "draft.gguf"
    shutil.copyfile(MODEL, drafter)
    other = tmp_path / "other-draft.gguf"  # another drafter's bytes: only frozen and compared, never booted
    other.write_bytes(MODEL.read_bytes() + b"\0")
    other_sha = hashlib.sha256(other.read_bytes()).hexdigest()
    path = write_contract(tmp_path, contract_yaml(
        "t-draft", defaults=process_defaults(free_port(), args=ARGS, boot_log=LOADS_THE_DRAFT,
                                             models={"draft": {"path": drafter, "sha256": MODEL_SHA256}}),
        lanes=[control(), candidate("other", ["models.draft"], models={"draft": {"path": other, "sha256": other_sha}})],
        inputs={"p": {"file": "prompts/p.jsonl"}},
        gates=[{"kind": "greedy", "input": "p", "repeats": 2, "max_tokens": 8, "rule": {"self_identical": "3/3"}}]))
    loaded = load_contract(path)
    assert axis_difference(loaded.lanes["base"], loaded.lanes["other"]) == {
        "models.draft": (f"sha256:{MODEL_SHA256}", f"sha256:{other_sha}")}
    init_keys()
    record, _ = freeze(loaded, load_signing_key())
    check_frozen(load_contract(path), record, load_trusted())  # hashed again at run
    inspect, log = _boot(loaded.lanes["base"], MODEL, tmp_path)
    assert inspect["models"] == {"draft": {"path": str(drafter), "kind": "file", "pinned_sha256": MODEL_SHA256,
                                           "sha256": MODEL_SHA256}}
    assert inspect["argv"][inspect["argv"].index("--model-draft") + 1] == str(drafter)  # what the kernel says ran
    assert f"loading draft model '{drafter}'" in log


def test_a_container_reads_its_drafter_and_a_pinned_directory_where_they_are_mounted(tmp_path: Path) -> None:
    image = need_docker()
    need_engine_files()
    tokenizer = tmp_path / "tokenizer"  # a small real directory: the model's Hugging Face tokenizer files
    tokenizer.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(MODELS_DIR / "smollm2-135m-hf" / name, tokenizer / name)
    (tmp_path / "tokenizer.sha256").write_text(render_manifest(tree_digests(tokenizer)))
    listing = hashlib.sha256((tmp_path / "tokenizer.sha256").read_bytes()).hexdigest()
    draft = MODELS_DIR / "SmolLM2-135M-Instruct.Q4_1.gguf"
    path = write_contract(tmp_path, contract_yaml(
        "t-draft-docker", defaults=docker_defaults(
            image, free_port(), args=ARGS, boot_log=LOADS_THE_DRAFT,
            models={"draft": {"path": draft, "sha256": MODEL_SHA256},
                    "tokenizer": {"path": "tokenizer", "sha256_manifest": "tokenizer.sha256", "sha256": listing}}),
        lanes=[control()], inputs={"p": {"file": "prompts/p.jsonl"}},
        gates=[{"kind": "greedy", "input": "p", "repeats": 2, "max_tokens": 8, "rule": {"self_identical": "3/3"}}]))
    lane = load_contract(path).lanes["base"]
    inspect, log = _boot(lane, draft, tmp_path)
    assert inspect["models"]["draft"] == {"path": "/campaign/models/draft", "kind": "file",
                                          "pinned_sha256": MODEL_SHA256, "sha256": MODEL_SHA256}
    assert inspect["models"]["tokenizer"] == {"path": "/campaign/models/tokenizer", "kind": "directory",
                                              "pinned_sha256": listing, "sha256": listing, "files": 2,
                                              "tree_sha256": listing}
    mounted = {m["destination"]: m for m in inspect["mounts"]}
    assert mounted["/campaign/models/draft"]["read_only"] and mounted["/campaign/models/tokenizer"]["read_only"]
    assert "loading draft model '/campaign/models/draft'" in log
