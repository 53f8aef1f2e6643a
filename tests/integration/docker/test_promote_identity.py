"""Promotion keeps the daily where its users call it. A keyed container daily started by hand (`docker run`):
on a bridge network behind `-p 127.0.0.1:PORT:8000`, its key in LLAMA_API_KEY; or on the host network with
`--api-key`. Its lanes are measured on the host network at another port (a bridge lane needs the engine's
default bridge, which the test engine runs without: scripts/docker-up.sh; the daily's bridge is a network
the test makes), keyed the other way, from `${env:...}`. After `promote`, the daily's
endpoint (with the daily's key) answers from the candidate's flags (its context size, read back from
/props) and the container keeps the daily's name, network, published ports and restart policy; after
`rollback`, from the old daily, the same container. The key is in no bundle, rollback record or ledger."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from tests.support.cli import campaign, keys_and_freeze
from tests.support.contracts import candidate, contract_yaml, control, free_port, write_contract
from tests.support.daily import disarm_windows, n_ctx
from tests.support.docker import (
    ENGINE_DIR,
    MODELS_DIR,
    docker,
    docker_defaults,
    inspect,
    need_docker,
    need_engine_files,
    session_label,
)

pytestmark = pytest.mark.integration

KEY = "sk-daily-" + uuid.uuid4().hex[:16]
KEY_VAR = "CAMPAIGN_T_DAILY_KEY"
ARGS = ["--ctx-size", "2048", "--threads", "2", "--parallel", "1", "--seed", "0", "--no-webui"]


def start_daily(name: str, image: str, network: str, port: int) -> None:
    """The daily as its user starts it: a bridge network with a published port and the key in the engine's
    variable, or the host network with the key on the command line."""
    where = (["--network", name, "-p", f"127.0.0.1:{port}:8000"] if network == "bridge" else ["--network", "host"])
    listen = ["--host", "0.0.0.0", "--port", "8000"] if network == "bridge" else ["--host", "127.0.0.1",
                                                                                  "--port", str(port)]
    key = ["-e", f"LLAMA_API_KEY={KEY}"] if network == "bridge" else []
    started = docker("run", "-d", "--name", name, *session_label(), *where, "--restart", "unless-stopped", *key,
                     "-v", f"{ENGINE_DIR}:/opt/llama-server:ro", "-v", f"{MODELS_DIR}:/models:ro", image,
                     "/opt/llama-server/bin/llama-server", "-m", "/models/SmolLM2-135M-Instruct.Q4_1.gguf", *listen,
                     *ARGS, *([] if network == "bridge" else ["--api-key", KEY]))
    assert started.returncode == 0, started.stderr
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and n_ctx(port, KEY) != 2048:
        time.sleep(0.5)
    assert n_ctx(port, KEY) == 2048, docker("logs", name).stderr[-2000:]


def keyed_contract(root: Path, image: str, name: str, daily_network: str, daily_port: int, lane_port: int) -> Path:
    # the lanes at their own port, keyed the other way than the daily
    reference = "${env:" + KEY_VAR + "}"
    if daily_network == "bridge":
        defaults = docker_defaults(image, lane_port, args=ARGS, network="host", env={"LLAMA_API_KEY": reference})
    else:
        defaults = docker_defaults(image, lane_port, args=[*ARGS, "--api-key", reference], network="host")
    body = contract_yaml(
        "t-identity", defaults=defaults,
        lanes=[control(), candidate("small", ["args.ctx-size"], args={"--ctx-size": "1024"})],
        inputs={"p": {"file": "prompts/p.jsonl"}}, requires=["greedy"],
        gates=[{"kind": "greedy", "input": "p", "repeats": 2, "max_tokens": 8, "rule": {"self_identical": "1/1"}}],
        incumbent={"runtime": "docker", "container": name, "endpoint": f"http://127.0.0.1:{daily_port}",
                   "api_key_env": KEY_VAR},
        failsafe={"deadline": "10m", "heartbeat_grace": "30s"})
    return write_contract(root, body, prompts=[("capital", "What is the capital of France?")])


@pytest.fixture
def keyed_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    need_docker()
    need_engine_files()
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv(KEY_VAR, KEY)
    names: list[str] = []
    yield names
    disarm_windows(tmp_path / "state")
    for name in names:
        leftover = docker("ps", "-aq", "--filter", f"name={name}").stdout.split()  # the daily and any kept aside
        if leftover:
            docker("rm", "-f", *leftover)
        docker("network", "rm", name)  # the bridge daily's network, where there is one


@pytest.mark.parametrize("network", ["bridge", "host"])
def test_a_promoted_container_daily_answers_where_the_daily_did_and_rollback_brings_the_old_one(
        keyed_env: list[str], tmp_path: Path, network: str) -> None:
    image = need_docker()
    name, daily_port, lane_port = f"campaign-test-ident-{uuid.uuid4().hex[:8]}", free_port(), free_port()
    keyed_env.append(name)
    if network == "bridge":
        assert docker("network", "create", name).returncode == 0
    start_daily(name, image, network, daily_port)
    before = inspect(name)
    contract = keyed_contract(tmp_path, image, name, network, daily_port, lane_port)
    validated = campaign("validate", str(contract))
    assert validated.returncode == 0, validated.stderr
    assert f"warning: lane small is measured at 127.0.0.1:{lane_port}" in validated.stderr
    assert f"promoted, small runs as container {name} with the daily's name, network, published ports" in \
        validated.stderr
    keys_and_freeze(contract)
    ran = campaign("run", str(contract), "--out", str(tmp_path / "runs"))
    assert ran.returncode == 0, ran.stdout + ran.stderr
    bundle = next((tmp_path / "runs").iterdir())

    dry = campaign("promote", str(bundle), "--candidate", "small", "--dry-run")
    assert dry.returncode == 0 and "would promote small" in dry.stdout, dry.stdout + dry.stderr
    assert f"answering at http://127.0.0.1:{daily_port}" in dry.stdout and KEY not in dry.stdout
    promoted = campaign("promote", str(bundle), "--candidate", "small")
    assert promoted.returncode == 0, promoted.stdout + promoted.stderr
    daily = inspect(name)
    assert daily["Id"] != before["Id"] and "1024" in daily["Config"]["Cmd"]
    for same in ("NetworkMode", "PortBindings", "RestartPolicy"):
        assert daily["HostConfig"][same] == before["HostConfig"][same], same
    listen = ["--host", "0.0.0.0", "--port", "8000"] if network == "bridge" else ["--host", "127.0.0.1", "--port",
                                                                                  str(daily_port)]
    cmd = daily["Config"]["Cmd"]
    assert cmd[cmd.index("--host"):cmd.index("--host") + 4] == listen  # the daily's, not the lane's
    assert n_ctx(daily_port, KEY) == 1024 and n_ctx(daily_port, None) is None  # the new flags, behind the daily's key
    assert n_ctx(lane_port, KEY) is None  # nothing left on the lane's port

    rolled = campaign("rollback")
    assert rolled.returncode == 0, rolled.stdout + rolled.stderr
    back = inspect(name)
    assert back["Id"] == before["Id"] and back["HostConfig"]["RestartPolicy"]["Name"] == "unless-stopped"
    assert n_ctx(daily_port, KEY) == 2048
    state = tmp_path / "state" / "campaign"
    kept = [*bundle.rglob("*"), *state.glob("rollback/*.json"), state / "ledger.jsonl"]
    assert all(KEY not in path.read_text(errors="replace") for path in kept if path.is_file())
    assert "${env:" + KEY_VAR + "}" in (state / "rollback" / "1.json").read_text()  # a reference, never the key
