"""The new daily container's create config: the candidate as measured (image, command, env, mounts, shm)
under the daily's serving identity (name, labels, network, published ports, restart policy, GPUs, and its
--host and --port in the command); a redacted value comes back only from a ${env:NAME} reference."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from campaign.errors import RunError
from campaign.promotion.promotecontainer import candidate_container

EXE = "/opt/llama-server/bin/llama-server"
GPU = [{"Driver": "nvidia", "DeviceIDs": ["1"], "Capabilities": [["gpu"]]}]
# a daily started by hand: `docker run -p 30006:8000 --restart unless-stopped --gpus device=1 ...`
DAILY = {"container": "glm-daily", "argv": [EXE, "-m", "/models/m.gguf", "--host", "0.0.0.0", "--port", "8000"],
         "config": {"Labels": {"team": "serving", "campaign.window": "w-old"}, "ExposedPorts": {"8000/tcp": {}}},
         "host_config": {"NetworkMode": "bridge", "PortBindings": {"8000/tcp": [{"HostPort": "30006"}]},
                         "RestartPolicy": {"Name": "unless-stopped"}, "ShmSize": 1 << 30, "DeviceRequests": GPU,
                         "Binds": ["/srv/old:/old:ro"], "IpcMode": "host"}}


def write_lane(root: Path, inspect: dict, *, env: dict | None = None, args: list | None = None,
               network: str = "host", axis: list | None = None) -> Path:
    lane = root / "lanes" / "cand"
    lane.mkdir(parents=True)
    (lane / "inspect.json").write_text(json.dumps(inspect))
    spec = {"name": "cand", "role": "candidate", "control": "base", "runtime": "docker", "engine": "llamacpp",
            "executable": EXE, "image": "sha256:" + "1" * 64, "port": 18442, "network": network,
            "host": "127.0.0.1", "model": {"path": "/models/m.gguf"}, "env": env or {},
            "args": args if args is not None else ["--spec-type", "ngram-simple"],
            "axis": axis or ["args.spec-type"]}
    (lane / "spec.json").write_text(json.dumps(spec))
    return root


# measured on the host network at the lane's port 18442
CMD = ["-m", "/models/m.gguf", "--host", "127.0.0.1", "--port", "18442", "--spec-type", "ngram-simple"]
MEASURED = {"runtime": "docker", "image_id": "sha256:" + "1" * 64, "entrypoint": [EXE], "cmd": CMD,
            "launched_argv": [EXE, *CMD], "launched_env": {"TMPDIR": "/tmp/lane"}, "shm_size": 64 << 20,
            "device_requests": [], "tmpfs": {"/tmp/lane": ""}, "network_mode": "host", "port_bindings": {},
            "mounts": [{"source": "/srv/engine", "destination": "/opt/llama-server", "read_only": True,
                        "type": "bind"}]}


def test_the_new_daily_is_the_measured_container_under_the_dailys_serving_identity(tmp_path: Path) -> None:
    made = candidate_container(write_lane(tmp_path, MEASURED), "cand", DAILY, "w-new")
    config, host = made["config"], made["host_config"]
    assert config["Image"] == MEASURED["image_id"] and config["Entrypoint"] == [EXE]
    # the axis as measured; the lane's --host and --port are the daily's again
    assert config["Cmd"] == ["-m", "/models/m.gguf", "--host", "0.0.0.0", "--port", "8000",
                             "--spec-type", "ngram-simple"]
    assert config["Env"] == ["TMPDIR=/tmp/lane"]
    assert config["Labels"] == {"team": "serving", "campaign.promoted_from": "w-new/cand"}
    assert config["ExposedPorts"] == {"8000/tcp": {}}
    assert host["NetworkMode"] == "bridge" and host["PortBindings"] == {"8000/tcp": [{"HostPort": "30006"}]}
    assert host["RestartPolicy"] == {"Name": "unless-stopped"} and host["IpcMode"] == "host"
    assert host["DeviceRequests"] == GPU  # the GPU the daily held, not the lane's none
    assert host["Binds"] == ["/srv/engine:/opt/llama-server:ro"] and host["ShmSize"] == 64 << 20
    assert host["Tmpfs"] == {"/tmp/lane": ""}


def test_a_bridge_lane_onto_a_host_network_daily_that_gave_no_host(tmp_path: Path) -> None:
    bridged = {**MEASURED, "network_mode": "bridge", "cmd": [w.replace("127.0.0.1", "0.0.0.0") for w in CMD],
               "port_bindings": {"18442/tcp": [{"HostIp": "127.0.0.1", "HostPort": "18442"}]}}
    bridged["launched_argv"] = [EXE, *bridged["cmd"]]
    daily = {**DAILY, "argv": [EXE, "-m", "/models/m.gguf", "--port=30007"], "config": {"Labels": {}},
             "host_config": {"NetworkMode": "host", "RestartPolicy": {"Name": "always"}}}
    made = candidate_container(write_lane(tmp_path, bridged, network="bridge"), "cand", daily, None)
    # no --host where the daily gave none: the engine's default, where the daily listens
    assert made["config"]["Cmd"] == ["-m", "/models/m.gguf", "--port", "30007", "--spec-type", "ngram-simple"]
    assert "ExposedPorts" not in made["config"]
    assert made["host_config"]["NetworkMode"] == "host" and not made["host_config"].get("PortBindings")


def test_gpus_on_the_axis_come_from_the_candidate(tmp_path: Path) -> None:
    measured = {**MEASURED, "device_requests": [{**GPU[0], "DeviceIDs": ["2"]}]}
    made = candidate_container(write_lane(tmp_path, measured, axis=["gpus"]), "cand", DAILY, None)
    assert made["host_config"]["DeviceRequests"][0]["DeviceIDs"] == ["2"]


def test_a_redacted_credential_in_the_command_comes_back_from_its_reference(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DAILY_KEY", "sk-" + "k" * 24)
    keyed = {**MEASURED, "cmd": [*CMD, "--api-key", "<redacted hmac:abcd>"]}
    keyed["launched_argv"] = [EXE, *keyed["cmd"]]
    args = ["--spec-type", "ngram-simple", "--api-key", "${env:DAILY_KEY}"]
    made = candidate_container(write_lane(tmp_path / "a", keyed, args=args), "cand", DAILY, None)
    assert made["config"]["Cmd"][-2:] == ["--api-key", "sk-" + "k" * 24]
    literal = ["--spec-type", "ngram-simple", "--api-key", "<redacted hmac:abcd>"]
    with pytest.raises(RunError, match="written literally"):
        candidate_container(write_lane(tmp_path / "b", keyed, args=literal), "cand", DAILY, None)


def test_a_redacted_env_value_comes_back_from_its_reference_or_is_refused(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    measured = {**MEASURED, "launched_env": {"HF_TOKEN": "<redacted hmac:abcd>"}}
    monkeypatch.setenv("DAILY_HF_TOKEN", "hf_" + "x" * 20)
    made = candidate_container(write_lane(tmp_path / "a", measured, env={"HF_TOKEN": "${env:DAILY_HF_TOKEN}"}),
                               "cand", DAILY, None)
    assert made["config"]["Env"] == ["HF_TOKEN=hf_" + "x" * 20]
    # a literal credential: the bundle's spec.json holds it redacted too, so nothing can rebuild it
    with pytest.raises(RunError, match="HF_TOKEN is redacted"):
        candidate_container(write_lane(tmp_path / "b", measured, env={"HF_TOKEN": "<redacted hmac:ffff>"}),
                            "cand", DAILY, None)


def test_a_process_candidate_cannot_become_a_container_daily(tmp_path: Path) -> None:
    with pytest.raises(RunError, match="ran as a process"):
        candidate_container(write_lane(tmp_path, {**MEASURED, "runtime": "process"}), "cand", DAILY, None)
