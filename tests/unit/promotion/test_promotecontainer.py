"""The new daily container's create config is the candidate as measured, under the daily's name, labels,
published ports and restart policy; a redacted value comes back only from a ${env:NAME} reference."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from campaign.errors import RunError
from campaign.promotion.promotecontainer import candidate_container

DAILY = {"container": "glm-daily", "config": {"Labels": {"team": "serving", "campaign.window": "w-old"},
                                              "ExposedPorts": {"30006/tcp": {}}},
         "host_config": {"NetworkMode": "bridge", "PortBindings": {"30006/tcp": [{"HostPort": "30006"}]},
                         "RestartPolicy": {"Name": "unless-stopped"}, "ShmSize": 1 << 30,
                         "Binds": ["/srv/old:/old:ro"], "IpcMode": "host"}}


def write_lane(root: Path, inspect: dict, env: dict | None = None) -> Path:
    lane = root / "lanes" / "cand"
    lane.mkdir(parents=True)
    (lane / "inspect.json").write_text(json.dumps(inspect))
    spec = {"name": "cand", "role": "candidate", "control": "base", "runtime": "docker", "engine": "llamacpp",
            "image": "sha256:" + "1" * 64, "port": 30006, "model": {"path": "/models/m.gguf"}, "env": env or {}}
    (lane / "spec.json").write_text(json.dumps(spec))
    return root


MEASURED = {"runtime": "docker", "image_id": "sha256:" + "1" * 64, "entrypoint": None,
            "cmd": ["/opt/llama-server/bin/llama-server", "-m", "/models/m.gguf", "--spec-type", "ngram-simple"],
            "launched_env": {"TMPDIR": "/tmp/lane"}, "shm_size": 64 << 20, "device_requests": [],
            "tmpfs": {"/tmp/lane": ""}, "network_mode": "host",
            "mounts": [{"source": "/srv/engine", "destination": "/opt/llama-server", "read_only": True,
                        "type": "bind"}]}


def test_the_new_daily_is_the_measured_container_under_the_dailys_name_and_policy(tmp_path: Path) -> None:
    made = candidate_container(write_lane(tmp_path, MEASURED), "cand", DAILY, "w-new")
    config, host = made["config"], made["host_config"]
    assert config["Image"] == MEASURED["image_id"] and config["Cmd"] == MEASURED["cmd"]
    assert "Entrypoint" not in config and config["Env"] == ["TMPDIR=/tmp/lane"]
    assert config["Labels"] == {"team": "serving", "campaign.promoted_from": "w-new/cand"}
    assert config["ExposedPorts"] == {"30006/tcp": {}}
    assert host["RestartPolicy"] == {"Name": "unless-stopped"} and host["IpcMode"] == "host"
    assert host["PortBindings"] is None  # measured on the host network: it publishes nothing
    assert host["Binds"] == ["/srv/engine:/opt/llama-server:ro"] and host["ShmSize"] == 64 << 20
    assert host["NetworkMode"] == "host" and host["Tmpfs"] == {"/tmp/lane": ""}


def test_a_candidate_measured_behind_published_ports_keeps_them(tmp_path: Path) -> None:
    bridged = {**MEASURED, "network_mode": "bridge", "port_bindings": {"8000/tcp": [{"HostPort": "30006"}]}}
    made = candidate_container(write_lane(tmp_path, bridged), "cand", DAILY, None)
    assert made["host_config"]["PortBindings"] == {"8000/tcp": [{"HostPort": "30006"}]}
    assert made["config"]["ExposedPorts"] == {"8000/tcp": {}} and made["host_config"]["NetworkMode"] == "bridge"


def test_a_command_with_a_redacted_credential_is_refused(tmp_path: Path) -> None:
    cut = {**MEASURED, "cmd": [*MEASURED["cmd"], "--api-key", "<redacted hmac:abcd>"]}
    with pytest.raises(RunError, match="redacted credential"):
        candidate_container(write_lane(tmp_path, cut), "cand", DAILY, None)


def test_a_redacted_env_value_comes_back_from_its_reference_or_is_refused(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    measured = {**MEASURED, "launched_env": {"HF_TOKEN": "<redacted hmac:abcd>"}}
    monkeypatch.setenv("DAILY_HF_TOKEN", "hf_" + "x" * 20)
    made = candidate_container(write_lane(tmp_path / "a", measured, {"HF_TOKEN": "${env:DAILY_HF_TOKEN}"}),
                               "cand", DAILY, None)
    assert made["config"]["Env"] == ["HF_TOKEN=hf_" + "x" * 20]
    # a literal credential: the bundle's spec.json holds it redacted too, so nothing can rebuild it
    with pytest.raises(RunError, match="HF_TOKEN is redacted"):
        candidate_container(write_lane(tmp_path / "b", measured, {"HF_TOKEN": "<redacted hmac:ffff>"}),
                            "cand", DAILY, None)


def test_a_process_candidate_cannot_become_a_container_daily(tmp_path: Path) -> None:
    with pytest.raises(RunError, match="ran as a process"):
        candidate_container(write_lane(tmp_path, {**MEASURED, "runtime": "process"}), "cand", DAILY, None)
