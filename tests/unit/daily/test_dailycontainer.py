"""The pure parts of a container daily: the `docker run` line shown to a person (every serving fact, no
env value), mounts compared as a recreated container has them again, the env digest, and what the restore's
proof compares."""

from __future__ import annotations

import pytest

from campaign.daily.dailycontainer import _differences, _mounts, describe, env_digest

GPU_DAILY = {"container": "glm-daily", "config": {"Cmd": ["serve", "--port", "30006"]},
             "env": {"HF_TOKEN": "hf_secret_value_123"}, "image_id": "sha256:ab", "restart_policy": {"Name": "always"},
             "host_config": {"NetworkMode": "host", "ShmSize": 1024, "IpcMode": "host",
                             "DeviceRequests": [{"Driver": "nvidia", "Count": -1, "Capabilities": [["gpu"]]}],
                             "Ulimits": [{"Name": "memlock", "Soft": -1, "Hard": -1}], "Binds": ["/m:/models:ro"]}}


def test_the_run_line_carries_gpus_ipc_ulimits_and_no_env_value() -> None:
    line = describe(GPU_DAILY)
    assert line == ("docker run -d --name glm-daily --network host -v /m:/models:ro --shm-size 1024 --ipc host "
                    "--gpus all --ulimit memlock=-1:-1 --restart always -e HF_TOKEN sha256:ab serve --port 30006")
    assert "hf_secret_value_123" not in line
    two = {**GPU_DAILY, "host_config": {**GPU_DAILY["host_config"], "DeviceRequests": [{"DeviceIDs": ["0", "1"]}]}}
    assert "--gpus device=0,1" in describe(two)


def test_an_anonymous_volume_counts_by_destination_so_a_recreated_daily_still_matches() -> None:
    first = {"Mounts": [{"Type": "volume", "Name": "a" * 64, "Source": "/var/lib/docker/volumes/a/_data",
                         "Destination": "/data", "RW": True},
                        {"Type": "bind", "Source": "/srv/models", "Destination": "/models", "RW": False}]}
    again = {"Mounts": [{"Type": "bind", "Source": "/srv/models", "Destination": "/models", "RW": False},
                        {"Type": "volume", "Name": "b" * 64, "Source": "/var/lib/docker/volumes/b/_data",
                         "Destination": "/data", "RW": True}]}
    assert _mounts(first) == _mounts(again)
    moved = {"Mounts": [{"Type": "bind", "Source": "/srv/other", "Destination": "/models", "RW": False}]}
    assert _mounts(moved) != _mounts({"Mounts": first["Mounts"][1:]})
    named = {"Mounts": [{"Type": "volume", "Name": "cache", "Source": "/x", "Destination": "/c", "RW": True}]}
    assert _mounts(named) != _mounts({"Mounts": [{**named["Mounts"][0], "Name": "other"}]})


def test_the_env_digest_ignores_order_and_sees_a_changed_value() -> None:
    assert env_digest(["A=1", "B=2"]) == env_digest(["B=2", "A=1"])
    assert env_digest(["A=1", "B=2"]) != env_digest(["A=1", "B=3"])


def _attrs_of(snap: dict) -> dict:
    """The engine's inspect of a container that is exactly the snapshot's daily."""
    env = [f"{k}={v}" for k, v in snap["env"].items()]
    return {"Image": snap["image_id"], "Config": {**snap["config"], "Env": env}, "HostConfig": snap["host_config"],
            "Mounts": []}


@pytest.mark.parametrize(("changed", "key", "value"), [
    ("shm size", "ShmSize", 64 * 2**20), ("ipc mode", "IpcMode", "private"), ("network", "NetworkMode", "bridge"),
    ("published ports", "PortBindings", {"30006/tcp": [{"HostIp": "", "HostPort": "30007"}]}),
    ("devices", "DeviceRequests", [{"DeviceIDs": ["1"]}])])
def test_the_proof_names_each_serving_fact_that_differs_from_the_snapshot(changed: str, key: str, value: object) -> None:
    snap = {**GPU_DAILY, "env_sha256": env_digest([f"{k}={v}" for k, v in GPU_DAILY["env"].items()]), "mounts": []}
    attrs = _attrs_of(snap)
    assert _differences(snap, attrs) == []
    attrs["HostConfig"] = {**attrs["HostConfig"], key: value}
    assert _differences(snap, attrs) == [changed]
