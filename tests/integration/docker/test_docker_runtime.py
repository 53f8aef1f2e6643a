"""The docker runtime against the real engine and the local test image: image pinning, what a container
is created with as docker reads it back, log streaming with redaction, stop with timeout, keep/remove and
leftover cleanup, and real launch failures the engine itself produces. The containers run the image's own
/bin/sh: these tests are about the runtime, not an LLM engine (tests/window/test_docker_window.py runs
llama-server in containers)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from campaign.contracts.resolve import EffectiveLane
from campaign.errors import LaunchError, PreflightError
from campaign.fsutil import atomic_write_json
from campaign.lanes.redact import MARK, redactor_for
from campaign.lanes.runtimes.base import LaunchSpec
from campaign.lanes.runtimes.docker import DockerRuntime, find_leftovers, resolve_image
from campaign.lanes.runtimes.dockerhost import client_for
from campaign.window.inspectdiff import runtime_axis_difference
from tests.support.docker import need_docker

pytestmark = pytest.mark.integration
SECRET = "hf_" + "S3cr3tT0kenForTheRuntimeTest42"


@pytest.fixture(scope="module")
def image_id() -> str:
    return need_docker()


def make_lane(image: str, tmp_path: Path, **changes: object) -> EffectiveLane:
    (tmp_path / "ro").mkdir(exist_ok=True)
    (tmp_path / "rw").mkdir(exist_ok=True)
    data = {"name": "rt", "role": "control", "runtime": "docker", "engine": "llamacpp", "image": image,
            "executable": "/bin/sh", "port": 18000, "model": {"path": "/m.gguf"}, "shm_size": 32 << 20,
            "env": {"HF_TOKEN": "${env:CAMPAIGN_RT_SECRET}", "MODE": "test"},
            "mounts": [{"host": str(tmp_path / "ro"), "container": "/data"},
                       {"host": str(tmp_path / "rw"), "container": "/out", "read_only": False}]}
    data.update(changes)
    return EffectiveLane.model_validate(data)


def launch(lane: EffectiveLane, tmp_path: Path, script: str, window: str, extra_env: dict | None = None,
           name: str = "rt") -> object:
    spec = LaunchSpec(lane=name, argv=["/bin/sh", "-c", script, "launcher", "--api-key", SECRET],
                      env={"HF_TOKEN": SECRET, "MODE": "test", **(extra_env or {})},
                      log_path=tmp_path / name / "boot.log",
                      labels={"campaign.window": window, "campaign.contract": "0" * 64})
    return DockerRuntime(lane).start(spec)


def wait_for(path: Path, text: str, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        content = path.read_text() if path.exists() else ""
        if text in content:
            return content
        time.sleep(0.2)
    raise AssertionError(f"{text!r} never appeared in {path}: {content!r}")


def test_pinned_image_is_resolved_or_refused(image_id: str) -> None:
    client = client_for(None)
    assert resolve_image(client, image_id)["Id"] == image_id
    # an imported image has no registry digest: name@<its id> is accepted, for tagged local images only
    assert resolve_image(client, f"campaign-test-base@{image_id}")["Id"] == image_id
    wrong = "sha256:" + "e" * 64
    with pytest.raises(PreflightError, match="no registry pull is attempted"):
        resolve_image(client, wrong)
    with pytest.raises(PreflightError, match=r"local images named campaign-test-base: campaign-test-base:2 = sha256"):
        resolve_image(client, f"campaign-test-base@{wrong}")


def test_container_runs_as_declared_read_back_and_redacted(image_id: str, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CAMPAIGN_RT_SECRET", SECRET)
    lane = make_lane(image_id, tmp_path)
    window = f"rt-{time.time_ns()}"
    script = ('echo "argv: $*"; echo "token: $HF_TOKEN"; touch /data/x 2>&1 || true; touch /out/x && echo wrote; '
              'df -k /dev/shm | tail -1; echo ready-marker; sleep 60')
    running = launch(lane, tmp_path, script, window)
    try:
        log = wait_for(tmp_path / "rt" / "boot.log", "ready-marker")
        assert running.alive() and running.exit_code() is None
        raw = running.inspect()
    finally:
        started = time.monotonic()
        code = running.stop(timeout=2)  # sh as PID 1 ignores SIGTERM: docker must escalate to SIGKILL
        stop_seconds = time.monotonic() - started
    assert code == 137 and stop_seconds < 30
    # the engine read back what the lane declared
    assert raw["image_id"] == image_id and raw["argv"][:2] == ["/bin/sh", "-c"]
    assert {m["destination"]: m["read_only"] for m in raw["mounts"]} == {"/data": True, "/out": False}
    assert raw["shm_size"] == 32 << 20 and raw["network_mode"] == "host"
    assert raw["restart_policy"]["Name"] == "no" and raw["device_requests"] == []
    assert raw["labels"]["campaign.window"] == window and raw["labels"]["campaign.lane"] == "rt"
    assert raw["env"]["HF_TOKEN"] == SECRET and raw["launched"]["image_id"] == image_id
    assert "Read-only file system" in log and "wrote" in log and (tmp_path / "rw" / "x").exists()
    assert " 32768 " in log  # /dev/shm inside is the declared 32 MiB
    # what the bundle would get: no secret anywhere, the echoes visibly cut
    assert SECRET not in log and f"token: {MARK}" in log and f"--api-key {MARK}" in log
    redacted = redactor_for(lane).snapshot(raw)
    assert SECRET not in repr(redacted)
    assert redacted["env"]["MODE"] == "test" and redacted["env"]["HF_TOKEN"].startswith("<redacted hmac:")
    assert find_leftovers(client_for(None), window=window) == []  # stop: remove


def test_kept_container_is_found_by_label_and_cleaned_up(image_id: str, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CAMPAIGN_RT_SECRET", SECRET)
    window = f"keep-{time.time_ns()}"
    running = launch(make_lane(image_id, tmp_path, stop="keep"), tmp_path, "exit 3", window)
    deadline = time.monotonic() + 60
    while running.alive() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert running.exit_code() == 3
    running.stop(timeout=1)
    (left,) = find_leftovers(client_for(None), window=window)
    assert left["lane"] == "rt" and left["status"] == "exited" and left["contract"] == "0" * 64
    listed = subprocess.run([sys.executable, "-m", "campaign.cli", "cleanup", "--window", window, "--remove"],
                            capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0 and "removed 1" in listed.stdout, listed.stdout + listed.stderr
    assert find_leftovers(client_for(None), window=window) == []


@pytest.mark.parametrize("changes,cause", [({"gpus": "all", "executable": "/bin/true"}, "gpu_unavailable"),
                                           ({"executable": "/opt/not/there"}, "cannot_execute")])
def test_engine_refusals_are_classified_launch_failures(image_id: str, tmp_path: Path, changes: dict, cause: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Real refusals by this engine: it has no GPU runtime for a device request, and no such executable."""
    monkeypatch.setenv("CAMPAIGN_RT_SECRET", SECRET)
    window = f"refused-{time.time_ns()}"
    lane = make_lane(image_id, tmp_path, **changes)
    spec = LaunchSpec(lane="rt", argv=[lane.executable or "", "x"], env={}, log_path=tmp_path / "boot.log",
                      labels={"campaign.window": window})
    with pytest.raises(LaunchError) as info:
        DockerRuntime(lane).start(spec)
    assert info.value.cause == cause
    assert "start failed" in (tmp_path / "boot.log").read_text()
    assert find_leftovers(client_for(None), window=window) == []


def test_undeclared_env_difference_between_lanes_is_caught(image_id: str, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Two real containers; the candidate's launch carries a variable its contract never set (as a buggy
    launcher or a hook would inject). The declared axis is an argument; the inspect diff must name the env."""
    monkeypatch.setenv("CAMPAIGN_RT_SECRET", SECRET)
    bundle, window = tmp_path / "bundle", f"axis-{time.time_ns()}"
    control = make_lane(image_id, tmp_path, name="ctl")
    candidate = make_lane(image_id, tmp_path, name="cand", role="candidate", control="ctl", axis=["args.k"])
    snapshots = {}
    for lane, extra, flag in ((control, {}, "1"), (candidate, {"GGML_SNEAKY": "1"}, "4")):
        spec = LaunchSpec(lane=lane.name, argv=["/bin/sh", "-c", "sleep 60", "x", "--k", flag],
                          env={"MODE": "test", **extra}, log_path=tmp_path / lane.name / "boot.log",
                          labels={"campaign.window": window})
        running = DockerRuntime(lane).start(spec)
        try:
            snapshots[lane.name] = redactor_for(lane).snapshot(running.inspect())
        finally:
            running.stop(timeout=1)
    for name, snapshot in snapshots.items():
        atomic_write_json(bundle / "lanes" / name / "inspect.json", snapshot)
    verdict = runtime_axis_difference(bundle, control, candidate, {"args.k"})
    assert "ran with undeclared differences env.GGML_SNEAKY" in verdict
    # the same two snapshots with the variable declared on the axis: nothing to report
    assert runtime_axis_difference(bundle, control, candidate, {"args.k", "env.GGML_SNEAKY"}) == ""


def test_image_gone_at_launch_is_a_missing_image_launch_failure(image_id: str, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Pre-flight saw the image; if it is gone when the lane starts (removed by someone in between), the
    lane is a classified launch failure, not a crash of the window."""
    monkeypatch.setenv("CAMPAIGN_RT_SECRET", SECRET)
    lane = make_lane("sha256:" + "d" * 64, tmp_path)
    spec = LaunchSpec(lane="rt", argv=["/bin/sh", "-c", "true"], env={}, log_path=tmp_path / "boot.log",
                      labels={"campaign.window": f"gone-{time.time_ns()}"})
    with pytest.raises(LaunchError) as info:
        DockerRuntime(lane).start(spec)
    assert info.value.cause == "missing_image" and "no registry pull is attempted" in str(info.value)
