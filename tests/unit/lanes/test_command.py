"""The engine argv, pinned token for token on every path that builds it: a lane's launch (process, docker on
the host network and on a bridge, with an executable and with the image's ENTRYPOINT, vLLM with a drafter),
the daily started by hand from its lane (a docker-runtime lane's daily command stays the process shape: host
model path, the lane's own host), and promotion's rebuild of a measured command with its credential put
back. One builder makes them all (``campaign.lanes.command``); these lists are what each produced before."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from campaign.contracts.load import load_contract
from campaign.contracts.resolve import EffectiveLane
from campaign.daily.daily import daily_command
from campaign.errors import RunError
from campaign.lanes.command import engine_argv
from campaign.lanes.engines.registry import adapter_for
from campaign.lanes.session import launch_command
from campaign.promotion.candidate import unredacted_argv

DIGEST = "sha256:" + "ab" * 32
DRAFTER = json.dumps({"model": "/models/draft", "num_speculative_tokens": 3})


def executable(tmp_path: Path, name: str = "llama-server") -> str:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return str(path)


def lane(**changes: object) -> EffectiveLane:
    fields: dict[str, object] = {"name": "l", "role": "control", "runtime": "process", "engine": "llamacpp",
                                 "port": 18000, "model": {"path": "/m/model.gguf"},
                                 "args": ["--threads", "2", "--spec-type", "ngram-simple"]}
    fields.update(changes)
    return EffectiveLane.model_validate(fields)


def docker_lane(**changes: object) -> EffectiveLane:
    return lane(runtime="docker", image=DIGEST, executable="/opt/srv/bin/server",
                mounts=[{"host": "/srv/models", "container": "/models"}], **changes)


def launched(built: EffectiveLane, model: str) -> list[str]:
    return launch_command(built, adapter_for(built.engine), model)[0]


def test_a_process_lane(tmp_path: Path) -> None:
    exe = executable(tmp_path)
    assert launched(lane(executable=exe, model={"path": "/m/model.gguf", "served_name": "small"}), "/m/model.gguf") == [
        exe, "-m", "/m/model.gguf", "--host", "127.0.0.1", "--port", "18000", "--alias", "small",
        "--threads", "2", "--spec-type", "ngram-simple"]


def test_a_docker_lane_on_the_host_network_with_its_executable() -> None:
    built = docker_lane(network="host")
    argv, host_file = launch_command(built, adapter_for("llamacpp"), "/srv/models/model.gguf")
    assert argv == ["/opt/srv/bin/server", "-m", "/models/model.gguf", "--host", "127.0.0.1", "--port", "18000",
                    "--threads", "2", "--spec-type", "ngram-simple"]
    assert host_file is None  # the executable is inside the image, under no mount


def test_a_docker_lane_on_a_bridge_with_the_images_entrypoint() -> None:
    built = lane(runtime="docker", image=DIGEST, network="bridge", mounts=[{"host": "/srv/models", "container": "/models"}])
    assert launched(built, "/srv/models/model.gguf") == [
        "-m", "/models/model.gguf", "--host", "0.0.0.0", "--port", "18000", "--threads", "2", "--spec-type",
        "ngram-simple"]


def test_vllm_with_a_drafter(tmp_path: Path) -> None:
    exe = executable(tmp_path, "python3")
    built = lane(engine="vllm", executable=exe, model={"path": "/m/target", "served_name": "t"},
                 args=["--speculative-config", DRAFTER, "--max-model-len", "2048"])
    assert launched(built, "/m/target") == [
        exe, "-m", "vllm.entrypoints.openai.api_server", "--model", "/m/target", "--served-model-name", "t",
        "--host", "127.0.0.1", "--port", "18000", "--speculative-config", DRAFTER, "--max-model-len", "2048"]


def _daily_contract(tmp_path: Path, lane_fields: str) -> Path:
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    path = tmp_path / "c.yaml"
    path.write_text(f"""\
contract: d
version: 1
lane_defaults:
  engine: llamacpp
  port: 18001
  model: {{path: m.gguf}}
  args: [--api-key, "${{env:CMD_T_KEY}}", --threads, "2"]
{lane_fields}
lanes:
  - {{name: base, role: control}}
incumbent:
  runtime: process
  endpoint: http://127.0.0.1:18001
  pidfile: daily.pid
  lane: base
failsafe: {{deadline: 10m}}
""")
    return path


def test_the_daily_of_a_process_lane(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CMD_T_KEY", "k-1")
    exe = executable(tmp_path)
    loaded = load_contract(_daily_contract(tmp_path, f"  runtime: process\n  executable: {exe}"))
    model = str((tmp_path / "m.gguf").resolve())
    assert daily_command(loaded) == [exe, "-m", model, "--host", "127.0.0.1", "--port", "18001",
                                     "--api-key", "k-1", "--threads", "2"]


def test_the_daily_of_a_docker_lane_keeps_the_process_shape(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`campaign daily start` runs the lane's executable on this host: the host's model path, the lane's host
    as written (no 0.0.0.0 for a bridge), never the container's paths."""
    monkeypatch.setenv("CMD_T_KEY", "k-2")
    exe = executable(tmp_path)
    loaded = load_contract(_daily_contract(tmp_path, f"""\
  runtime: docker
  image: "{DIGEST}"
  network: bridge
  executable: {exe}
  mounts: [{{host: {tmp_path}, container: /models}}]"""))
    model = str((tmp_path / "m.gguf").resolve())
    assert daily_command(loaded) == [exe, "-m", model, "--host", "127.0.0.1", "--port", "18001",
                                     "--api-key", "k-2", "--threads", "2"]


def test_promotion_rebuilds_the_measured_command_with_its_credential(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CMD_T_KEY", "k-3")
    built = lane(executable="llama-server", args=["--api-key", "${env:CMD_T_KEY}", "--threads", "2"])
    measured = ["/usr/bin/llama-server", "-m", "/m/model.gguf", "--host", "127.0.0.1", "--port", "18000",
                "--api-key", "<redacted hmac:00ff>", "--threads", "2"]
    template = engine_argv(measured[0], built, "<model>")
    assert unredacted_argv(measured, built, "l", template) == [
        "/usr/bin/llama-server", "-m", "/m/model.gguf", "--host", "127.0.0.1", "--port", "18000",
        "--api-key", "k-3", "--threads", "2"]
    with pytest.raises(RunError, match="does not line up"):
        unredacted_argv(measured[:-1], built, "l", template)


def test_engine_argv_is_the_one_builder() -> None:
    """An adapter's server arguments are put behind an executable in one place only: a second builder could
    drift from the first, and promotion requires the measured command token for token."""
    package = Path(__file__).resolve().parents[3] / "campaign"
    callers = sorted(str(path.relative_to(package)) for path in package.rglob("*.py")
                     if ".server_args(" in path.read_text(encoding="utf-8"))
    assert callers == ["lanes/command.py"]
