"""A daily that is a container started by hand with `docker run`, as in the field: a window stops it (never
removes it) behind the watchdog failsafe, restores that same container with proof, brings its restart
policy back, recreates it from the snapshot when someone removed it mid-window, and comes back after the
runner is SIGKILLed at journal steps. The lanes are real llama-server processes on the daily's port."""

from __future__ import annotations

import json
import signal
import stat
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from campaign.daily.state import WindowState
from campaign.fsutil import read_jsonl
from tests.support.cli import assert_exit_as_decided, campaign, keys_and_freeze
from tests.support.contracts import demo_like, free_port, write_contract
from tests.support.daily import (
    disarm_windows,
    first_record_of_each_kind,
    kill_runner_and_watchdogs,
    runner_past_the_daily_stop,
    serves,
)
from tests.support.docker import ENGINE_DIR, MODELS_DIR, docker, inspect, need_docker, need_engine_files, session_label

pytestmark = pytest.mark.integration

SECRET = "hf_" + "Zq8" * 8  # a token-shaped value in the daily's environment: it must never reach a bundle


@pytest.fixture
def container_daily(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, llama_server: str):
    """A llama-server daily container, started with one documented `docker run` command."""
    image = need_docker()
    need_engine_files()
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    port, name = free_port(), f"campaign-test-daily-{uuid.uuid4().hex[:8]}"
    started = docker("run", "-d", "--name", name, *session_label(), "--network", "host", "--restart", "unless-stopped",
                     "--shm-size", "96m", "-v", f"{ENGINE_DIR}:/opt/llama-server:ro", "-v", f"{MODELS_DIR}:/models:ro",
                     "-e", f"HF_TOKEN={SECRET}", image, "/opt/llama-server/bin/llama-server",
                     "-m", "/models/SmolLM2-135M-Instruct.Q4_1.gguf", "--host", "127.0.0.1", "--port", str(port),
                     "--ctx-size", "2048", "--threads", "2", "--parallel", "1", "--seed", "0", "--no-webui")
    assert started.returncode == 0, started.stderr
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not serves(port):
        time.sleep(0.5)
    assert serves(port), docker("logs", name).stderr[-2000:]
    body = textwrap.dedent(demo_like(port, max_tokens=8, rule='"2/2"')) + textwrap.dedent(f"""\
        incumbent:
          runtime: docker
          container: {name}
          endpoint: http://127.0.0.1:{port}
        failsafe:
          deadline: 10m
          heartbeat_grace: 30s
        """)
    contract = write_contract(tmp_path, body, prompts=[("capital", "What is the capital of France?"),
                                                       ("sea", "Describe the sea.")])
    keys_and_freeze(contract)
    yield {"root": tmp_path, "contract": contract, "port": port, "name": name,
           "id": inspect(name)["Id"], "image": image}
    disarm_windows(tmp_path / "state")
    leftover = docker("ps", "-aq", "--filter", f"name={name}").stdout.split()  # the daily and any kept aside
    if leftover:
        docker("rm", "-f", *leftover)


def _bundle(out: Path) -> Path:
    return next(path for path in out.iterdir() if path.is_dir())


def test_window_stops_the_daily_container_and_starts_that_same_container_with_proof(container_daily: dict) -> None:
    # doctor first: the container on the host network is what holds the endpoint's port, and it answers
    port = container_daily["port"]
    doctor = campaign("doctor", str(container_daily["contract"]), "--no-smoke").stdout
    assert f"ok    daily runs: container {container_daily['name']} ({container_daily['id'][:12]})" in doctor, doctor
    assert f"ok    daily listens on :{port}: host network, port {port} held by the daily container" in doctor, doctor
    assert f"ok    daily answers a completion: http://127.0.0.1:{port} in " in doctor, doctor
    assert "ok    failsafe can restart the daily: its engine answers and holds its image; restart policy " \
           "unless-stopped" in doctor, doctor
    ran = campaign("run", str(container_daily["contract"]), "--out", str(container_daily["root"] / "runs"))
    assert ran.returncode in (0, 3), ran.stdout + ran.stderr  # completed: promotable or not
    bundle = _bundle(container_daily["root"] / "runs")
    assert_exit_as_decided(ran, bundle)
    summary = json.loads((bundle / "SUMMARY.json").read_text())
    assert summary["restore"]["proved"] is True and summary["restore"]["action"] == "started"
    after = inspect(container_daily["name"])
    assert after["Id"] == container_daily["id"] and after["State"]["Running"]
    assert after["HostConfig"]["RestartPolicy"]["Name"] == "unless-stopped"  # put back after the window
    assert serves(container_daily["port"])
    records = read_jsonl(bundle / "journal.jsonl")
    stop = next(r for r in records if r["step"] == "incumbent.stop" and r["event"] == "done")
    assert stop["pid"] == container_daily["id"]  # stopped, and the same container started again
    restore = json.loads((bundle / "incumbent" / "restore.json").read_text())
    assert restore["proof"]["image_id_matches"] and restore["proof"]["completion"]["status"] == 200
    # the engine's own create config is in the snapshot; the daily's secret is in neither the bundle ...
    snapshot = json.loads((bundle / "incumbent" / "snapshot.json").read_text())
    assert snapshot["image_id"] == container_daily["image"] and snapshot["host_config"]["NetworkMode"] == "host"
    assert all(SECRET not in path.read_text(errors="replace") for path in bundle.rglob("*") if path.is_file())
    # ... nor in the private state file once the window is over (only its owner could read it, and the daily's
    # environment there now names the variable, not its value)
    (state_file,) = (container_daily["root"] / "state").glob("campaign/windows/*/state.json")
    assert SECRET not in state_file.read_text() and stat.S_IMODE(state_file.stat().st_mode) == 0o600
    kept = json.loads(state_file.read_text())["incumbent"]
    assert kept["env"]["HF_TOKEN"] == "${env:HF_TOKEN}" and "HF_TOKEN=${env:HF_TOKEN}" in kept["config"]["Env"]
    status = json.loads(campaign("status", "--json").stdout)
    assert status[0]["daily"].startswith("running"), status  # known as the daily by its references
    assert campaign("verify", str(bundle)).returncode == 0
    shown = campaign("daily", "show", str(container_daily["contract"]))
    assert shown.returncode == 0, shown.stderr
    assert f"daily container {container_daily['name']}: running" in shown.stdout
    # started with `docker run`, not by the tool: `daily stop` refuses it in one line, unless --force
    refused = campaign("daily", "stop", str(container_daily["contract"]))
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert "started by hand (`docker run`)" in refused.stderr and inspect(container_daily["name"])["State"]["Running"]
    forced = campaign("daily", "stop", str(container_daily["contract"]), "--force")
    assert forced.returncode == 0 and f"daily container {container_daily['name']} stopped" in forced.stdout, \
        forced.stdout + forced.stderr
    assert not inspect(container_daily["name"])["State"]["Running"] and not serves(container_daily["port"])
    assert "--restart unless-stopped" in shown.stdout and "-e HF_TOKEN" in shown.stdout
    assert SECRET not in shown.stdout + shown.stderr  # the variable's name, never its value


def test_a_daily_removed_mid_window_is_recreated_from_its_snapshot(container_daily: dict) -> None:
    out = container_daily["root"] / "runs"
    runner = subprocess.Popen([sys.executable, "-m", "campaign.cli", "run", str(container_daily["contract"]),
                               "--out", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    stopped = False
    while time.monotonic() < deadline and not stopped:
        journals = list(out.glob("*/journal.jsonl"))
        stopped = bool(journals) and any(r["step"] == "incumbent.stop" and r["event"] == "done"
                                         for r in read_jsonl(journals[0]))
        time.sleep(0.1)
    assert stopped, "the window never stopped the daily"
    assert docker("rm", container_daily["name"]).returncode == 0  # someone cleans up "stopped containers"
    assert runner.wait(timeout=600) in (0, 3), runner.stderr.read()  # completed: promotable or not
    bundle = _bundle(out)
    summary = json.loads((bundle / "SUMMARY.json").read_text())
    assert summary["restore"]["proved"] is True and summary["restore"]["action"] == "recreated"
    after = inspect(container_daily["name"])
    assert after["Id"] != container_daily["id"] and after["Image"] == container_daily["image"]
    assert after["HostConfig"]["RestartPolicy"]["Name"] == "unless-stopped" and after["State"]["Running"]
    assert f"HF_TOKEN={SECRET}" in after["Config"]["Env"]  # recreated with the daily's own environment
    assert after["HostConfig"]["ShmSize"] == 96 * 2**20 and after["HostConfig"]["NetworkMode"] == "host"
    proof = json.loads((bundle / "incumbent" / "restore.json").read_text())["proof"]
    assert proof["network_ports_shm_ipc_match"] and proof["container_id"] == after["Id"]
    assert serves(container_daily["port"])


def test_runner_killed_at_each_journal_step_the_daily_container_comes_back(container_daily: dict) -> None:
    # each state a dead runner can leave a container daily in: untouched, failsafe armed, being stopped
    # (restart policy held at no), stopped, a lane container being created, serving, removed, and the
    # first step after the restore. The runner's other steps are the same for any daily: test_unattended
    # kills at each of them for a process daily.
    probe = container_daily["root"] / "probe"
    ran = campaign("run", str(container_daily["contract"]), "--out", str(probe))
    assert ran.returncode in (0, 3), ran.stderr  # completed: promotable or not
    every = first_record_of_each_kind(_bundle(probe) / "journal.jsonl")
    states = {("start", "done"), ("failsafe.arm", "done"), ("incumbent.stop", "intent"), ("incumbent.stop", "done"),
              ("boot", "intent"), ("boot", "done"), ("stop", "done")}
    kinds = {k: step for k, step in every if step in states}
    last_lane_step = max(kinds)
    first_after, step_after = next((k, step) for k, step in every if k > last_lane_step)
    kinds[first_after] = step_after
    assert set(kinds.values()) == states | {step_after}
    for k, step in kinds.items():
        out = container_daily["root"] / f"runs-{k}"
        killed = campaign("run", str(container_daily["contract"]), "--out", str(out),
                          env={"CAMPAIGN_FAULT_KILL_AFTER_RECORD": str(k)})
        assert killed.returncode == -signal.SIGKILL, (k, killed.stderr)
        state = WindowState.load(_bundle(out).name)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and (state.armed or (state.incumbent_stopped and not state.restored)):
            time.sleep(0.2)
            state = state.reload()
        assert not state.armed, f"failsafe still armed after kill at record {k} ({step})"
        after = inspect(container_daily["name"])
        assert after["Id"] == container_daily["id"] and after["State"]["Running"], (k, step)
        assert after["HostConfig"]["RestartPolicy"]["Name"] == "unless-stopped", (k, step)
        assert serves(container_daily["port"]), f"daily not serving after kill at record {k} ({step})"
        records = read_jsonl(_bundle(out) / "journal.jsonl")
        stops = [i for i, r in enumerate(records) if r["step"] == "incumbent.stop"]
        if stops:  # the daily was touched: a proven restore is recorded after that, by runner or failsafe
            assert any(r["step"] == "incumbent.restore" and r["event"] == "done" and r.get("proof")
                       for r in records[stops[-1]:]), (k, step)


@pytest.mark.parametrize("problem", ["missing", "other-engine"])
def test_a_daily_that_is_not_there_is_refused_before_anything_is_touched(container_daily: dict, problem: str) -> None:
    text = container_daily["contract"].read_text()
    if problem == "missing":
        text = text.replace(f"container: {container_daily['name']}", "container: no-such-daily-container")
    else:  # the daily runs here, but the contract says it runs on an engine that does not answer
        text = text.replace(f"container: {container_daily['name']}",
                            f"container: {container_daily['name']}\n  docker_host: tcp://127.0.0.1:9")
    path = container_daily["root"] / f"{problem}.yaml"
    path.write_text(text.replace("version: 1", "version: 2"))
    assert campaign("freeze", str(path)).returncode == 0
    ran = campaign("run", str(path), "--out", str(container_daily["root"] / "runs"))
    assert ran.returncode == 1, ran.stdout + ran.stderr  # a pre-flight refusal, as for a process daily not running
    assert "Traceback" not in ran.stderr and len(ran.stderr.strip().splitlines()) == 1, ran.stderr
    assert ("does not exist on docker engine" if problem == "missing" else "tcp://127.0.0.1:9") in ran.stderr
    after = inspect(container_daily["name"])
    assert after["Id"] == container_daily["id"] and after["State"]["Running"]  # untouched
    assert not list((container_daily["root"] / "runs").glob("*/journal.jsonl"))  # refused before a window began


def test_promote_a_candidate_container_to_daily_then_roll_back_to_the_same_container(
        container_daily: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.support.docker import pinned_demo_docker

    root, name = container_daily["root"], container_daily["name"]
    (root / "lanes").mkdir()
    lanes = pinned_demo_docker(root / "lanes", container_daily["image"], container_daily["port"])
    contract = lanes.with_name("docker-lanes.yaml")
    # the demo's greedy gate at 8 tokens, not 48: a promotable candidate is what this test needs, and each
    # token of the window's 64 replies costs it here
    contract.write_text(lanes.read_text().replace("max_tokens: 48", "max_tokens: 8") + textwrap.dedent(f"""\
        incumbent:
          runtime: docker
          container: {name}
          endpoint: http://127.0.0.1:{container_daily['port']}
        failsafe:
          deadline: 10m
          heartbeat_grace: 30s
        """))
    assert campaign("freeze", str(contract)).returncode == 0
    ran = campaign("run", str(contract), "--out", str(root / "runs"))
    assert ran.returncode == 0, ran.stdout + ran.stderr  # ngram-k4 is promoted below: the window found it promotable
    bundle = _bundle(root / "runs")
    measured = json.loads((bundle / "lanes" / "ngram-k4" / "inspect.json").read_text())

    # the runner's shell holds the daily's token, as the shell that started the daily did: the rollback
    # record refers to it (${env:HF_TOKEN}) and never holds it
    monkeypatch.setenv("HF_TOKEN", SECRET)
    promoted = campaign("promote", str(bundle), "--candidate", "ngram-k4")
    assert promoted.returncode == 0, promoted.stdout + promoted.stderr
    kept_launch = (root / "state" / "campaign" / "rollback" / "2.json").read_text()
    assert SECRET not in kept_launch and "HF_TOKEN=${env:HF_TOKEN}" in kept_launch
    daily = inspect(name)
    assert daily["Id"] != container_daily["id"] and daily["State"]["Running"]
    # the measured container, byte for byte, under the daily's name and restart policy
    assert daily["Image"] == measured["image_id"] and daily["Config"]["Cmd"] == measured["cmd"]
    assert daily["HostConfig"]["RestartPolicy"]["Name"] == "unless-stopped"
    kept = [c for c in json.loads(docker("container", "inspect", *docker("ps", "-aq", "--filter",
                                                                          f"name={name}-rollback-").stdout.split()).stdout)]
    assert len(kept) == 1 and kept[0]["Id"] == container_daily["id"] and not kept[0]["State"]["Running"]
    assert serves(container_daily["port"])
    ledger = json.loads(campaign("ledger", "--json").stdout)
    assert ledger[-1]["daily"]["container_id"] == daily["Id"] and ledger[-1]["previous"]["container_id"] == \
        container_daily["id"] and ledger[-1]["smoke"]["ok"] is True

    rolled = campaign("rollback")
    assert rolled.returncode == 0, rolled.stdout + rolled.stderr
    back = inspect(name)
    assert back["Id"] == container_daily["id"] and back["State"]["Running"]  # the same container as before
    assert back["HostConfig"]["RestartPolicy"]["Name"] == "unless-stopped"
    undone = inspect(f"{name}-undone-2")  # ledger: 1 promote-begun, 2 promote, 3 rollback
    assert undone["Id"] == daily["Id"] and not undone["State"]["Running"]  # kept, stopped
    assert serves(container_daily["port"])
    docker("rm", "-f", f"{name}-undone-2")

    # a promotion SIGKILLed at each of its steps: the next `campaign rollback` puts that same daily back
    # (killed before anything was touched, at promote.begun, is the process daily's test: nothing is
    # container-specific there)
    for point, action in (("promote.renamed", "started"), ("promote.swapped", "started")):
        killed = campaign("promote", str(bundle), "--candidate", "ngram-k4", env={"CAMPAIGN_FAULT_KILL_AT": point})
        assert killed.returncode == -9, (point, killed.stdout + killed.stderr)
        rolled = campaign("rollback")
        assert rolled.returncode == 0, (point, rolled.stdout + rolled.stderr)
        entry = json.loads(campaign("ledger", "--json").stdout)[-1]
        assert entry["kind"] == "rollback" and entry["action"] == action, (point, entry)
        back = inspect(name)
        assert back["Id"] == container_daily["id"] and back["State"]["Running"], point
        assert back["HostConfig"]["RestartPolicy"]["Name"] == "unless-stopped", point
        assert serves(container_daily["port"]), point
    docker("rm", "-f", f"{name}-undone-6")  # the candidate that took the name at the last point (entry 6)

    # promoted again, and someone prunes the stopped container kept for the rollback: it is recreated from
    # the snapshot the ledger keeps, under the daily's name, with the daily's own environment
    again = campaign("promote", str(bundle), "--candidate", "ngram-k4")
    assert again.returncode == 0, again.stdout + again.stderr
    (kept_id,) = docker("ps", "-aq", "--no-trunc", "--filter", f"name={name}-rollback-").stdout.split()
    assert kept_id == container_daily["id"] and docker("rm", kept_id).returncode == 0
    rolled = campaign("rollback")
    assert rolled.returncode == 0, rolled.stdout + rolled.stderr
    back = inspect(name)
    assert back["Id"] != container_daily["id"] and back["State"]["Running"]
    assert back["Image"] == container_daily["image"] and f"HF_TOKEN={SECRET}" in back["Config"]["Env"]
    assert back["HostConfig"]["RestartPolicy"]["Name"] == "unless-stopped"
    entry = json.loads(campaign("ledger", "--json").stdout)[-1]
    assert entry["kind"] == "rollback" and entry["action"] == "recreated"
    assert entry["daily"]["container_id"] == back["Id"] and entry["proof"]["network_ports_shm_ipc_match"]
    assert serves(container_daily["port"])
    docker("rm", "-f", f"{name}-undone-9")


def test_a_daily_still_serving_with_its_policy_held_at_no_gets_its_policy_back(container_daily: dict) -> None:
    # a runner killed after it held the restart policy at `no` and before the stop: the daily still
    # serves, restore finds it serving, and must still give it its own policy back
    from campaign.daily import dailycontainer

    snap = dailycontainer.snapshot(container_daily["name"], None, {"stop_timeout": 5})
    assert docker("update", "--restart", "no", container_daily["name"]).returncode == 0
    assert inspect(container_daily["name"])["HostConfig"]["RestartPolicy"]["Name"] == "no"
    dailycontainer.ensure_restart_policy(snap)
    after = inspect(container_daily["name"])
    assert after["HostConfig"]["RestartPolicy"]["Name"] == "unless-stopped" and after["State"]["Running"]
    assert snap["docker_host"]["url"].startswith("unix://")  # written down for a restore in another environment


def test_runner_and_both_watchdogs_killed_the_next_command_brings_the_container_back(container_daily: dict) -> None:
    runner, window = runner_past_the_daily_stop(container_daily["contract"], container_daily["root"] / "runs")
    state = WindowState.load(window)
    kill_runner_and_watchdogs(runner, state)
    assert not inspect(container_daily["name"])["State"]["Running"]  # down, and nobody left to bring it back
    status = campaign("status")  # any command: it finds the orphaned window first
    assert "the runner and both watchdogs are gone; the daily was restored" in status.stderr, status.stderr
    after = inspect(container_daily["name"])
    assert after["Id"] == container_daily["id"] and after["State"]["Running"]
    assert after["HostConfig"]["RestartPolicy"]["Name"] == "unless-stopped"
    assert serves(container_daily["port"]) and not state.reload().armed


def test_the_docker_engine_down_at_the_restore_the_watchdog_brings_the_daily_back_once_it_returns(
        container_daily: dict) -> None:
    """The engine stopped and started again mid-window (as `systemctl restart docker` would, without
    systemd): the runner's own restore cannot reach it and fails; the failsafe stays armed, and once the
    engine is back the watchdog starts that same container with proof. The daily's policy is `always`, which
    an engine restart would obey: held at `no` for the window, it must not come back by itself."""
    from tests.support.docker import restartable_dockerd, start_dockerd, stop_dockerd

    dockerd = restartable_dockerd()
    root, name, port = container_daily["root"], container_daily["name"], container_daily["port"]
    assert docker("update", "--restart", "always", name).returncode == 0
    contract = root / "c-engine.yaml"  # a short heartbeat grace: the watchdog acts soon after the runner ends
    contract.write_text(container_daily["contract"].read_text().replace("heartbeat_grace: 30s", "heartbeat_grace: 3s")
                        .replace("version: 1", "version: 2"))
    assert campaign("freeze", str(contract)).returncode == 0
    runner, window = runner_past_the_daily_stop(contract, root / "runs")
    try:
        stop_dockerd(dockerd)
        assert runner.wait(timeout=600) != 0  # its restore found no engine
        state = WindowState.load(window)
        assert state.armed and not state.restored and not serves(port)
    finally:
        start_dockerd()
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and not serves(port):
        time.sleep(0.5)
    assert serves(port), "the watchdog did not bring the daily back after the engine returned"
    after = inspect(name)
    assert after["Id"] == container_daily["id"] and after["State"]["Running"]
    assert after["HostConfig"]["RestartPolicy"]["Name"] == "always"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and WindowState.load(window).armed:
        time.sleep(0.2)
    records = read_jsonl(_bundle(root / "runs") / "journal.jsonl")
    restores = [r for r in records if r["step"] == "incumbent.restore" and r.get("event") in ("done", "failed")]
    assert restores[0]["by"] == "runner" and restores[0]["event"] == "failed"
    assert restores[-1]["event"] == "done" and restores[-1]["by"] != "runner" and restores[-1]["proof"]["completion"]
    # started by the failsafe: had its policy still been `always`, the engine would have started it on its way
    # up, and the failsafe would have found it "already serving"
    assert restores[-1]["action"] == "started", restores[-1]


def test_every_process_of_the_window_killed_the_engines_watchdog_brings_the_daily_back_by_the_deadline(
        container_daily: dict) -> None:
    """Lanes and daily containers on this machine's engine, failsafe `auto`: the deadline is kept by a watchdog
    container there (restart policy always), outside the runner's process tree. The runner is SIGKILLed once
    the daily is down, and so is the watchdog's own process (the engine starts it again); nobody types a
    command: the daily serves again by the deadline plus a few seconds of restore. The heartbeat grace is
    longer than the deadline, so the deadline is what fires."""
    from tests.support.docker import pinned_demo_docker

    python_home = Path(sys.base_prefix)  # the test image carries python's libraries; its binary is mounted
    root, name, port = container_daily["root"], container_daily["name"], container_daily["port"]
    (root / "lanes").mkdir()
    contract = pinned_demo_docker(root / "lanes", container_daily["image"], port)
    contract.write_text(contract.read_text() + textwrap.dedent(f"""\
        incumbent:
          runtime: docker
          container: {name}
          endpoint: http://127.0.0.1:{port}
        failsafe:
          deadline: 15s
          heartbeat_grace: 5m
          python: {python_home / 'bin' / 'python3'}
          mounts: [{{host: {python_home}, container: {python_home}}}]
        """))
    assert campaign("freeze", str(contract)).returncode == 0
    runner, window = runner_past_the_daily_stop(contract, root / "runs")
    try:
        state = WindowState.load(window)
        assert state.failsafe_backend == "engine" and state.failsafe_container
        assert state.failsafe_supervisor and "watchdog container" in state.failsafe_supervisor
        runner.kill()  # SIGKILL, and the watchdog's process too: nothing of the window is left running
        runner.wait()
        watchdog_pid = inspect(state.failsafe_container)["State"]["Pid"]
        subprocess.run(["kill", "-9", str(watchdog_pid)], check=True)
        assert not serves(port)
        while time.time() < state.deadline_wall + 20 and not serves(port):
            time.sleep(0.5)
        served_at = time.time()
        assert serves(port), "the engine's watchdog did not bring the daily back"
        assert served_at <= state.deadline_wall + 20, served_at - state.deadline_wall
        watchdog = inspect(state.failsafe_container)
        assert watchdog["RestartCount"] >= 1  # the engine started the killed watchdog again; it kept the deadline
        said = ""
        while time.time() < served_at + 10 and "restored:" not in said:  # it checks the daily answers each second
            said = docker("logs", state.failsafe_container).stdout
            time.sleep(0.5)
        assert said.count("armed: window") == 2  # armed, killed, started again by the engine: armed again
        assert "restoring the daily: the deadline passed" in said and "restored: the daily answers" in said, said
        after = inspect(name)
        assert after["Id"] == container_daily["id"] and after["HostConfig"]["RestartPolicy"]["Name"] == "unless-stopped"
        records = read_jsonl(_bundle(root / "runs") / "journal.jsonl")
        armed = next(r for r in records if r["step"] == "failsafe.arm" and r["event"] == "done")
        assert armed["backend"] == "engine" and "watchdog container" in armed["supervisor"]
        assert "warning" not in armed
        # past the deadline, the periodic check (or any command) proves the daily and ends the arming here;
        # the watchdog container goes with it
        checked = campaign("failsafe", "check")
        assert checked.returncode == 0, checked.stdout + checked.stderr
        assert f"window {window}: deadline passed; the daily was restored" in checked.stdout
        assert not state.reload().armed and state.reload().restored
        assert inspect(state.failsafe_container) is None
    finally:
        docker("rm", "-f", *docker("ps", "-aq", "--filter", f"label=campaign.window={window}").stdout.split())


def test_auto_falls_back_to_the_pair_when_the_daily_image_has_no_python_and_says_so(container_daily: dict) -> None:
    """Lanes and daily containers on this engine, `auto`, no python configured: the engine's watchdog cannot run
    in the daily's image (the test image has no python of its own), so the window falls back to the runner-side
    failsafe, on the console and in the journal, and warns that nothing outside the runner keeps the deadline."""
    from tests.support.docker import pinned_demo_docker

    root, name, port = container_daily["root"], container_daily["name"], container_daily["port"]
    (root / "lanes").mkdir()
    contract = pinned_demo_docker(root / "lanes", container_daily["image"], port)
    contract.write_text(contract.read_text() + textwrap.dedent(f"""\
        incumbent: {{runtime: docker, container: {name}, endpoint: "http://127.0.0.1:{port}"}}
        failsafe: {{deadline: 10m}}
        """))
    assert campaign("freeze", str(contract)).returncode == 0
    out = root / "runs"
    with open(root / "console.txt", "w") as console:
        runner = subprocess.Popen([sys.executable, "-m", "campaign.cli", "run", str(contract), "--out", str(out)],
                                  stdout=console, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (list(out.glob("*/journal.jsonl")) and any(
                r["step"] == "incumbent.stop" and r["event"] == "done" for r in read_jsonl(_bundle(out) / "journal.jsonl"))):
            time.sleep(0.1)
        runner.send_signal(signal.SIGINT)  # stopped in order: the daily restored, the window ended
        assert runner.wait(timeout=300) != 0
    records = read_jsonl(_bundle(out) / "journal.jsonl")
    failed = next(r for r in records if r["step"] == "failsafe.dry_run" and r["event"] == "failed")
    assert failed["backend"] == "engine" and failed["fallback"] in ("systemd", "watchdog")
    assert "python3" in failed["error"]  # the engine said it cannot run the python the image lacks
    armed = next(r for r in records if r["step"] == "failsafe.arm" and r["event"] == "done")
    assert armed["backend"] == failed["fallback"]
    shown = (root / "console.txt").read_text()
    assert "falling back to the" in shown and "failsafe armed (" in shown
    if armed["backend"] == "watchdog":  # no systemd here: the pair, and nothing outside it yet
        assert armed["supervisor"] == "none" and "campaign failsafe install" in armed["warning"]
        assert "warning: no supervisor outside the runner's process tree" in shown
    assert serves(port) and inspect(name)["Id"] == container_daily["id"]
    assert docker("ps", "-aq", "--filter", "label=campaign.failsafe").stdout.strip() == ""  # the dry run's is gone
