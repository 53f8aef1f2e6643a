"""Docker lanes without an engine: what a container is created with, path mapping, remote engine clients,
launch-failure classification. (The same objects against a real engine: tests/lanes/test_docker_runtime.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from campaign.contracts.load import load_contract
from campaign.contracts.resolve import EffectiveLane
from campaign.contracts.schema import DockerHost
from campaign.errors import ContractError, PreflightError
from campaign.lanes.bootlog import classify_failure
from campaign.lanes.runtimes.base import LaunchSpec
from campaign.lanes.runtimes.docker import LABEL_LANE, container_path, create_kwargs, device_requests, host_path
from campaign.lanes.runtimes.dockerhost import API_VERSION, client_kwargs, is_local, ssh_command
from tests.support.contracts import write_contract

DIGEST = "sha256:" + "ab" * 32


def lane(**changes: object) -> EffectiveLane:
    base = {"name": "l", "role": "control", "runtime": "docker", "engine": "llamacpp", "image": DIGEST,
            "executable": "/opt/srv/bin/server", "port": 18000, "model": {"path": "/m/model.gguf"},
            "mounts": [{"host": "/srv/models", "container": "/models"},
                       {"host": "/srv/scratch", "container": "/scratch", "read_only": False}]}
    base.update(changes)
    return EffectiveLane.model_validate(base)


def spec(tmp_path: Path) -> LaunchSpec:
    return LaunchSpec(lane="l", argv=["/opt/srv/bin/server", "-m", "/models/model.gguf", "--port", "18000"],
                      env={"A": "1"}, log_path=tmp_path / "boot.log",
                      labels={"campaign.window": "w1", "campaign.contract": "c" * 64})


def test_create_kwargs_carry_the_lane_exactly(tmp_path: Path) -> None:
    kwargs = create_kwargs(lane(shm_size=1 << 30, cpus="2,3"), spec(tmp_path), DIGEST, "campaign-l-x")
    assert kwargs["image"] == DIGEST and kwargs["name"] == "campaign-l-x"
    assert kwargs["cpuset_cpus"] == "2-3"  # the canonical spelling
    assert kwargs["entrypoint"] == ["/opt/srv/bin/server"]
    assert kwargs["command"] == ["-m", "/models/model.gguf", "--port", "18000"]
    assert kwargs["environment"] == {"A": "1"}
    assert kwargs["labels"] == {"campaign.window": "w1", "campaign.contract": "c" * 64, LABEL_LANE: "l"}
    mounts = {m["Target"]: m for m in kwargs["mounts"]}
    assert mounts["/models"]["ReadOnly"] is True and mounts["/scratch"]["ReadOnly"] is False
    assert all(m["Type"] == "bind" for m in mounts.values())
    assert kwargs["shm_size"] == 1 << 30
    assert kwargs["network_mode"] == "host" and "ports" not in kwargs
    assert kwargs["restart_policy"] == {"Name": "no"}
    assert kwargs["device_requests"] == []


def test_image_entrypoint_when_no_executable_and_bridge_ports(tmp_path: Path) -> None:
    kwargs = create_kwargs(lane(executable=None, network="bridge"), spec(tmp_path), DIGEST, "n")
    assert "entrypoint" not in kwargs and kwargs["command"][0] == "/opt/srv/bin/server"
    assert kwargs["ports"] == {"18000/tcp": ("127.0.0.1", 18000)} and "network_mode" not in kwargs


@pytest.mark.parametrize("gpus,expected", [
    ("all", {"Count": -1, "DeviceIDs": [], "Capabilities": [["gpu"]]}),
    (2, {"Count": 2, "DeviceIDs": [], "Capabilities": [["gpu"]]}),
    ("0,1", {"Count": 0, "DeviceIDs": ["0", "1"], "Capabilities": [["gpu"]]}),
    ("device=GPU-3f2a", {"Count": 0, "DeviceIDs": ["GPU-3f2a"], "Capabilities": [["gpu"]]}),
])
def test_gpu_device_requests_are_formed(gpus: object, expected: dict) -> None:
    """No GPU here: this checks the request docker would get; tests/lanes/test_docker_runtime.py shows the
    engine refusing it, classified as gpu_unavailable."""
    (request,) = device_requests(gpus)  # type: ignore[arg-type]
    assert {k: request[k] for k in expected} == expected
    assert device_requests(None) == [] and device_requests(0) == []


def test_model_and_binary_paths_map_through_mounts(tmp_path: Path) -> None:
    (tmp_path / "models" / "sub").mkdir(parents=True)
    (tmp_path / "models" / "sub" / "m.gguf").write_bytes(b"x")
    (tmp_path / "engine" / "bin").mkdir(parents=True)
    (tmp_path / "engine" / "bin" / "server").write_bytes(b"y")
    link = tmp_path / "link.gguf"
    link.symlink_to(tmp_path / "models" / "sub" / "m.gguf")
    the_lane = lane(mounts=[{"host": str(tmp_path / "models"), "container": "/models"},
                            {"host": str(tmp_path / "engine"), "container": "/opt/srv"}])
    assert container_path(the_lane, str(tmp_path / "models" / "sub" / "m.gguf")) == "/models/sub/m.gguf"
    assert container_path(the_lane, str(link)) == "/models/sub/m.gguf"  # a local symlink is followed
    assert container_path(the_lane, str(tmp_path / "elsewhere.gguf")) is None
    assert host_path(the_lane, "/opt/srv/bin/server") == tmp_path / "engine" / "bin" / "server"
    assert host_path(the_lane, "/usr/bin/server") is None


def _pem(tmp_path: Path) -> dict[str, str]:
    paths = {}
    for name in ("ca", "cert", "key"):
        (tmp_path / f"{name}.pem").write_text("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n")
        paths[name] = str(tmp_path / f"{name}.pem")
    return paths


def test_remote_engine_clients_are_constructed_without_connecting(tmp_path: Path) -> None:
    """No remote engine exists here: these build real docker.DockerClient objects for tcp+TLS and ssh and
    check what they would use; nothing is sent (the API version is pinned, so no negotiation)."""
    import docker

    pem = _pem(tmp_path)
    tcp = DockerHost.model_validate({"url": "tcp://box.invalid:2376",
                                     "tls": {"ca_cert": pem["ca"], "client_cert": pem["cert"],
                                             "client_key": pem["key"]}})
    kwargs = client_kwargs(tcp)
    assert kwargs["version"] == API_VERSION and isinstance(kwargs["tls"], docker.tls.TLSConfig)
    assert kwargs["tls"].cert == (pem["cert"], pem["key"]) and kwargs["tls"].verify is True and kwargs["tls"].ca_cert == pem["ca"]
    client = docker.DockerClient(**kwargs)
    assert client.api.base_url == "https://box.invalid:2376"
    key, known = tmp_path / "id", tmp_path / "known_hosts"
    key.write_text("k"), known.write_text("h")
    ssh = DockerHost.model_validate({"url": "ssh://ops@box.invalid:2222", "socket": "/run/d.sock",
                                     "ssh": {"identity_file": str(key), "known_hosts": str(known)}})
    line = ssh_command(ssh, "/tmp/l.sock")
    assert line[:2] == ["ssh", "-N"] and "BatchMode=yes" in line and line[-2:] == ["--", "box.invalid"]
    assert ["-p", "2222"] == line[line.index("-p"):line.index("-p") + 2] and ["-l", "ops"] == line[line.index("-l"):line.index("-l") + 2]
    assert line[line.index("-i") + 1] == str(key) and f"UserKnownHostsFile={known}" in line
    assert "StrictHostKeyChecking=yes" in line and line[line.index("-L") + 1] == "/tmp/l.sock:/run/d.sock"
    with pytest.raises(PreflightError, match="ssh file .* not found"):
        ssh_command(DockerHost.model_validate({"url": "ssh://b", "ssh": {"identity_file": "/no/key"}}), "/tmp/x")
    unix = docker.DockerClient(**client_kwargs(DockerHost(url="unix:///var/run/docker.sock")))
    assert unix.api.base_url.startswith("http+docker://")
    assert is_local(DockerHost(url="unix:///x.sock")) and not is_local(tcp) and not is_local(DockerHost(url="ssh://b"))
    with pytest.raises(PreflightError, match="both tls client_cert and client_key"):
        client_kwargs(DockerHost.model_validate({"url": "tcp://b:2376", "tls": {"client_cert": pem["cert"]}}))
    with pytest.raises(ValueError, match="tcp:// engines only"):
        DockerHost.model_validate({"url": "ssh://b", "tls": {"ca_cert": pem["ca"]}})
    with pytest.raises(ValueError, match="ssh:// engines only"):
        DockerHost.model_validate({"url": "tcp://b:2376", "ssh": {"known_hosts": "/x"}})


DOCKER_CONTRACT = """\
    contract: t-remote
    version: 1
    {host}
    lane_defaults:
      runtime: docker
      engine: llamacpp
      image: {digest}
      executable: /srv
      port: 18000
      model: {{path: /m.gguf}}
    lanes:
      - name: a
        role: control
      - name: b
        role: candidate
        axis: [{axis}]
        set: {set}
    """


def _docker_contract(tmp_path: Path, host: str, set_: str, axis: str) -> Path:
    return write_contract(tmp_path, DOCKER_CONTRACT.format(host=host, digest=DIGEST, set=set_, axis=axis))


def test_contract_host_applies_to_docker_lanes_and_a_lane_may_name_its_own(tmp_path: Path) -> None:
    path = _docker_contract(tmp_path, "host: {docker: 'tcp://box1.invalid:2376', tls_ca_cert: /etc/ca.pem}",
                            "{docker_host: 'ssh://ops@box2.invalid'}", "docker_host")
    loaded = load_contract(path)
    a, b = loaded.lanes["a"], loaded.lanes["b"]
    assert a.docker_host == DockerHost.model_validate({"url": "tcp://box1.invalid:2376",
                                                       "tls": {"ca_cert": "/etc/ca.pem"}})
    assert b.docker_host == DockerHost(url="ssh://ops@box2.invalid")


def test_another_box_is_an_axis_and_bad_hosts_are_refused(tmp_path: Path) -> None:
    from campaign.errors import AxisError

    path = _docker_contract(tmp_path, "", "{docker_host: 'tcp://box2.invalid:2376', shm_size: 1g}", "shm_size")
    with pytest.raises(AxisError, match="docker_host"):
        load_contract(path)
    path = _docker_contract(tmp_path, "host: {docker: 'tcp://b:1', colour: red}", "{shm_size: 1g}", "shm_size")
    with pytest.raises(ContractError, match=r"host: unknown key\(s\) colour"):
        load_contract(path)
    path = _docker_contract(tmp_path, "host: {docker: 'http://b:1'}", "{shm_size: 1g}", "shm_size")
    with pytest.raises(ContractError, match="host"):
        load_contract(path)


@pytest.mark.parametrize("log,code,facts,cause", [
    ("", 137, {"oom_killed": True}, "oom_killed"),
    ("cp: error writing '/dev/shm/model.gguf': No space left on device", 1, {}, "shm_too_small"),
    ("", 135, {}, "shm_too_small"),
    ("error: invalid argument: --no-such-flag", 1, {}, "bad_argument"),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate", 1, {}, "gpu_out_of_memory"),
    ("", 137, {}, "killed"),
    ("", None, {}, "readiness_timeout"),
    ("Error response from daemon: could not select device driver \"\" with capabilities: [[gpu]]", None,
     {"started": False}, "gpu_unavailable"),
    ("OCI runtime create failed: exec: \"/nope\": stat /nope: no such file or directory", None,
     {"started": False}, "cannot_execute"),
])
def test_launch_failure_classification(log: str, code: int | None, facts: dict, cause: str) -> None:
    assert classify_failure(log, code, **facts) == cause


def test_unreachable_engine_is_a_preflight_refusal() -> None:
    from campaign.lanes.runtimes.docker import check_lane

    with pytest.raises(PreflightError, match=r"lane l: docker engine tcp://127.0.0.1:1 unreachable"):
        check_lane(lane(docker_host={"url": "tcp://127.0.0.1:1"}), "/srv/models/model.gguf")


def test_demo_docker_contract_is_valid_and_pins_a_placeholder() -> None:
    from tests.support.contracts import REPO

    loaded = load_contract(REPO / "examples" / "demo-docker.yaml")
    base, candidate = loaded.lanes["baseline"], loaded.lanes["ngram-k4"]
    assert base.runtime == candidate.runtime == "docker" and base.image == "sha256:" + "0" * 64
    assert all(m.read_only for m in base.mounts) and base.shm_size == 64 << 20 and base.stop == "remove"
    assert base.args == candidate.args[:-6]  # the same one axis as examples/demo.yaml
    assert candidate.options["--spec-ngram-simple-size-m"] == "4"


def test_an_unreachable_engine_is_said_in_words_a_person_can_act_on() -> None:
    from campaign.lanes.runtimes.dockererrors import why as why_unreachable

    assert "not signed by the given ca_cert" in why_unreachable(Exception(
        "SSLError(SSLCertVerificationError(1, '[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed')"))
    assert "refused our TLS client certificate" in why_unreachable(Exception("[SSL: TLSV1_ALERT_UNKNOWN_CA] unknown ca"))
    assert "wants TLS" in why_unreachable(Exception('400 Client Error: "Client sent an HTTP request to an HTTPS server."'))
    assert "connection refused" in why_unreachable(ConnectionError("[Errno 111] Connection refused"))
    assert why_unreachable(ValueError("odd")) == "ValueError: odd"


def test_the_box_clock_is_read_from_the_engine() -> None:
    from campaign.failsafe.enginefailsafe import _box_clock

    class Client:
        def info(self) -> dict:
            return {"SystemTime": "2026-12-01T12:00:00.123456789Z"}

    assert _box_clock(Client()) == pytest.approx(1796126400.123456)
