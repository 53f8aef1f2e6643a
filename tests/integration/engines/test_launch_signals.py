"""Launch failures by signal name their cause. A real engine will not die by SIGILL, SIGSEGV or SIGBUS on
demand, so the executable here is a stand-in that kills itself with that signal (or exits 127, as a
missing binary or shared library does), and the lane goes through the window's real launch path: the
process runtime, and the docker runtime against the real engine and test image. One window test shows
the verdict: INCONCLUSIVE, not a finding, and "code -4" never reaches the user."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from campaign.contracts.resolve import EffectiveLane
from campaign.errors import LaunchError
from campaign.fsutil import JsonlAppender
from campaign.lanes.bootlog import HINTS, classify_failure, describe_exit
from campaign.lanes.session import boot_lane
from tests.support.contracts import MODEL, demo_like, free_port, write_contract

STAND_INS = {
    # a child shell dies by the signal and the launcher passes its status on (128 + N), as a shell
    # wrapper around an engine does; inside a container the launcher is PID 1, which the kernel never
    # kills with a signal sent from inside
    "illegal_instruction": ('sh -c \'kill -ILL $$\'; exit $?', "SIGILL"),
    "segfault": ('sh -c \'kill -SEGV $$\'; exit $?', "SIGSEGV"),
    "shm_too_small": ('sh -c \'kill -BUS $$\'; exit $?', "SIGBUS"),
    "missing_executable": ('exec /opt/no/such/llama-server "$@"', "status 127"),
}
DIRECT = {  # the engine process itself dies by the signal (a process lane's Popen sees -N)
    "illegal_instruction": ("kill -ILL $$", "SIGILL"),
    "segfault": ("kill -SEGV $$", "SIGSEGV"),
    "shm_too_small": ("kill -BUS $$", "SIGBUS"),
    "missing_executable": ('exec /opt/no/such/llama-server "$@"', "status 127"),
}


def stand_in(directory: Path, name: str, body: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.sh"
    path.write_text(f"#!/bin/sh\necho 'llama threadpool init'\n{body}\n")
    path.chmod(0o755)
    return path


def boot(lane: EffectiveLane, model: str, tmp_path: Path) -> LaunchError:
    async def go() -> None:
        with JsonlAppender(tmp_path / "warm.jsonl") as sink:
            run = await boot_lane(lane, model_path=model, log_path=tmp_path / "boot.log", warm_sink=sink,
                                  labels={"campaign.window": f"signals-{os.getpid()}"})
            await run.stop()

    with pytest.raises(LaunchError) as info:
        asyncio.run(go())
    return info.value


@pytest.mark.parametrize("cause", sorted(DIRECT))
def test_process_lane_death_by_signal_is_named(cause: str, tmp_path: Path) -> None:
    body, named = DIRECT[cause]
    exe = stand_in(tmp_path / "bin", cause, body)
    lane = EffectiveLane.model_validate({"name": "sig", "role": "control", "runtime": "process",
                                         "engine": "llamacpp", "executable": str(exe), "port": free_port(),
                                         "model": {"path": str(MODEL)}, "readiness": {"budget": 30}})
    error = boot(lane, str(MODEL), tmp_path)
    assert error.cause == cause
    assert named in str(error) and HINTS[cause] in str(error)
    assert "code -" not in str(error)


@pytest.mark.integration
@pytest.mark.parametrize("cause", sorted(STAND_INS))
def test_docker_lane_death_by_signal_is_named(cause: str, tmp_path: Path) -> None:
    from tests.support.docker import need_docker

    image = need_docker()
    body, named = STAND_INS[cause]
    stand_in(tmp_path / "bin", cause, body)
    lane = EffectiveLane.model_validate({
        "name": "sig", "role": "control", "runtime": "docker", "engine": "llamacpp", "image": image,
        "executable": f"/standin/{cause}.sh", "port": free_port(), "model": {"path": str(MODEL.resolve())},
        "readiness": {"budget": 60},
        "mounts": [{"host": str(tmp_path / "bin"), "container": "/standin"},
                   {"host": str(MODEL.resolve().parent), "container": "/models"}]})
    error = boot(lane, str(MODEL.resolve()), tmp_path)
    assert error.cause == cause, str(error)
    assert named in str(error) and HINTS[cause] in str(error)
    assert "code 132" not in str(error)


def test_exit_codes_are_described_by_signal_name() -> None:
    assert describe_exit(-4) == describe_exit(132) == "died by SIGILL"
    assert describe_exit(1) == "exited with status 1"
    assert classify_failure("", -9, oom_killed=True) == "oom_killed"
    assert classify_failure("", 137) == "killed"
    # the signal outranks whatever the engine printed before it died
    assert classify_failure("error loading model", -4) == "illegal_instruction"


@pytest.mark.integration
def test_window_with_a_sigill_candidate_is_inconclusive_with_the_cause(tmp_path: Path, llama_server: str) -> None:
    from tests.support.cli import campaign, keys_and_freeze

    exe = stand_in(tmp_path / "bin", "sigill", DIRECT["illegal_instruction"][0])
    body = demo_like(free_port()).replace(
        "axis: [args.spec-type, args.spec-draft-n-max]", "axis: [executable]").replace(
        'args: {--spec-type: ngram-simple, --spec-draft-n-max: "4"}', f"executable: {exe}")
    contract = write_contract(tmp_path, body)
    keys_and_freeze(contract)
    ran = campaign("run", str(contract), "--out", str(tmp_path / "runs"))
    assert ran.returncode == 3, ran.stdout + ran.stderr  # completed, nothing promotable
    bundle = next((tmp_path / "runs").iterdir())
    summary = json.loads((bundle / "SUMMARY.json").read_text())
    assert summary["lanes"]["spec"]["status"] == "launch_failed"
    assert summary["lanes"]["spec"]["cause"] == "illegal_instruction"
    assert summary["candidates"]["spec"]["gates"]["greedy"]["verdict"] == "INCONCLUSIVE"
    failure = (bundle / "lanes" / "spec" / "launch_failure.txt").read_text()
    assert "died by SIGILL" in failure and "make engine" in failure
    assert "code -4" not in ran.stdout + ran.stderr + failure
