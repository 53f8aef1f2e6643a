"""Docker for tests: the engine `scripts/docker-up.sh` starts and the image `scripts/docker-test-image.sh`
builds. Without them a docker test is skipped, unless CAMPAIGN_REQUIRE_DOCKER=1 (set by .ci/run): then it
fails, so CI can never pass by skipping what it was meant to prove."""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from campaign.daily.state import process_start_time
from tests.support.contracts import MODEL, MODEL_SHA256, REPO

TEST_IMAGE = os.environ.get("CAMPAIGN_TEST_IMAGE", "campaign-test-base:2")
CACHE = Path(os.environ.get("CAMPAIGN_CACHE", Path.home() / ".cache" / "campaign"))
# the build `make test` put on PATH, and the cached model behind the repo's models/ link
LLAMA_SERVER = Path(os.path.realpath(shutil.which("llama-server") or next(
    iter(sorted(CACHE.glob("engines/llama-server-0.3.36-*/bin/llama-server"))), CACHE / "engines" / "missing")))
ENGINE_DIR = LLAMA_SERVER.parent.parent
MODELS_DIR = Path(os.path.realpath(MODEL)).parent
EXAMPLE_ENGINE_DIR = "/root/.cache/campaign/engines/llama-server-0.3.36"
ZERO_DIGEST = "sha256:" + "0" * 64
# A daily a test starts by hand (`docker run --restart unless-stopped`, as the field does) carries the test
# session's pid and start time: a session killed before its teardown leaves a daily that every dockerd start
# brings back, and the next session removes it (sweep_dead_sessions) instead of leaving it to a person.
SESSION_LABEL = "campaign-test.session"


def session_label() -> list[str]:
    """`docker run` options that mark a container as this test session's."""
    return ["--label", f"{SESSION_LABEL}={os.getpid()}-{process_start_time(os.getpid())}"]


def sweep_dead_sessions() -> list[str]:
    """Remove the containers of test sessions that no longer run (by the label's pid and start time); their
    names. A live session's, another terminal's included, stay."""
    listed = docker("ps", "-a", "--filter", f"label={SESSION_LABEL}", "--format",
                    f'{{{{.Names}}}} {{{{.Label "{SESSION_LABEL}"}}}}')
    dead = []
    for line in listed.stdout.splitlines():
        name, _, session = line.partition(" ")
        pid, _, start = session.partition("-")
        if not (pid.isdigit() and str(process_start_time(int(pid))) == start):
            dead.append(name)
    if dead:
        docker("rm", "-f", *dead)
    return dead


@functools.cache
def _sweep_once() -> None:
    sweep_dead_sessions()


def need_docker() -> str:
    """The test image's id; skips (or fails, under CAMPAIGN_REQUIRE_DOCKER=1) without an engine or image."""
    problem = None
    try:
        import docker

        client = docker.from_env(version="1.41", timeout=20)
        client.ping()
        try:
            image = client.images.get(TEST_IMAGE).id
            _sweep_once()
            return image
        except docker.errors.ImageNotFound:
            problem = f"test image {TEST_IMAGE} missing: run scripts/docker-test-image.sh"
    except Exception as exc:  # no SDK, no engine, no permission: all mean "no docker here"
        problem = f"no Docker engine reachable ({type(exc).__name__}: {exc}): run scripts/docker-up.sh"
    if os.environ.get("CAMPAIGN_REQUIRE_DOCKER") == "1":
        pytest.fail(f"CAMPAIGN_REQUIRE_DOCKER=1 but {problem}")
    pytest.skip(problem)


def need_engine_files() -> None:
    if not LLAMA_SERVER.is_file() or not (MODELS_DIR / "SmolLM2-135M-Instruct.Q4_1.gguf").is_file():
        pytest.fail(f"{LLAMA_SERVER} or the model under {MODELS_DIR} missing: run `make engine model`")


def docker_defaults(image: str, port: int, *, args: list[str], budget: str = "120s",
                    executable: str = "/opt/llama-server/bin/llama-server", mounts: tuple[dict[str, Any], ...] = (),
                    **fields: Any) -> dict[str, Any]:
    """lane_defaults of a docker lane of ``image`` serving the small model with this machine's
    llama-server, both bind-mounted; ``mounts`` adds more, ``fields`` the rest (env, files, shm_size)."""
    return {"runtime": "docker", "engine": "llamacpp", "image": image, "executable": executable,
            "mounts": [{"host": ENGINE_DIR, "container": "/opt/llama-server"},
                       {"host": MODELS_DIR, "container": "/models"}, *mounts],
            "port": port, "model": {"path": MODELS_DIR / "SmolLM2-135M-Instruct.Q4_1.gguf", "sha256": MODEL_SHA256},
            "args": args, "readiness": {"budget": budget}, **fields}


def pinned_demo_docker(directory: Path, image_id: str, port: int | None = None) -> Path:
    """examples/demo-docker.yaml with this machine's image id and cache put in, as `make demo-docker` does
    (and a free port, so a test never meets another server on the demo's)."""
    text = (REPO / "examples" / "demo-docker.yaml").read_text()
    if port is not None:
        text = text.replace("port: 18441", f"port: {port}")
    text = re.sub(ZERO_DIGEST, image_id, text).replace(EXAMPLE_ENGINE_DIR, str(ENGINE_DIR))
    text = text.replace("/root/.cache/campaign/models", str(MODELS_DIR))
    # inputs live in the contract's own folder tree (a contract may not read outside it): copied beside it
    text = text.replace("../models/", f"{REPO}/models/").replace("../examples/", "")
    shutil.copytree(REPO / "examples" / "prompts", directory / "prompts", dirs_exist_ok=True)
    path = directory / "demo-docker.yaml"
    path.write_text(text)
    return path


def leftovers(window: str | None = None) -> list[dict]:
    from campaign.lanes.runtimes.docker import find_leftovers
    from campaign.lanes.runtimes.dockerhost import client_for

    return find_leftovers(client_for(None), window=window)


def restartable_dockerd() -> int:
    """The pid of the dockerd that scripts/docker-up.sh started, which a test may stop and start again;
    skips when the engine is someone else's (a system service is not the tests' to restart)."""
    pidfile = CACHE / "docker" / "dockerd.pid"
    try:
        pid = int(pidfile.read_text().split()[0])
        ours = b"dockerd" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError, IndexError):
        ours = False
    if not ours:
        pytest.skip("the Docker engine was not started by scripts/docker-up.sh: not restarting someone's engine")
    return pid


def stop_dockerd(pid: int) -> None:
    """Stop the engine as `systemctl stop docker` would (SIGTERM: its containers are stopped with it)."""
    import signal
    import time

    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 90
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not Path(f"/proc/{pid}").exists(), f"dockerd pid {pid} did not stop within 90s"


def start_dockerd() -> None:
    import subprocess

    started = subprocess.run([str(REPO / "scripts" / "docker-up.sh")], capture_output=True, text=True, timeout=300)
    assert started.returncode == 0, started.stderr[-2000:]


def docker(*args: str) -> subprocess.CompletedProcess[str]:
    """The docker CLI on the test engine, its output captured (a test reads what it says)."""
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=120)


def inspect(name: str) -> dict | None:
    """``docker container inspect`` of one container; None when there is none of that name."""
    done = docker("container", "inspect", name)
    return json.loads(done.stdout)[0] if done.returncode == 0 else None
