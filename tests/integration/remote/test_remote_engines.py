"""Windows on another box: a second Docker engine in its own network namespace (tests/support/remotebox.py),
reached over TCP with TLS and over SSH, never through 127.0.0.1. The daily is a llama-server container on
that box started by hand with `docker run`; the lanes are containers on the same engine, listening on the
box's address; the model is hashed on the box; the failsafe is a watchdog container on the box's engine.
The runner is killed mid-window and the box brings its own daily back; two windows run at once on two
engines from one command; refused certificates and keys are one-line errors before anything is touched."""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest
import yaml

from campaign.fsutil import read_jsonl
from tests.support.cli import assert_exit_as_decided, campaign
from tests.support.contracts import MODEL_SHA256, free_port, write_contract
from tests.support.docker import ENGINE_DIR, MODELS_DIR, need_docker, need_engine_files
from tests.support.remotebox import (
    BOX_ADDRESS,
    Box,
    box_containers,
    box_down,
    box_emptied,
    box_story,
    box_up,
    engine_back,
    engine_gone,
)

pytestmark = pytest.mark.integration

MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
PYTHON_HOME = Path(sys.base_prefix)  # the test image carries python's libraries; its binary is mounted


@pytest.fixture(scope="module")
def box() -> Box:
    need_docker()
    need_engine_files()
    started = box_up()
    yield started
    box_down()


@pytest.fixture(autouse=True)
def _box_as_new(request: pytest.FixtureRequest) -> None:
    """Each test meets an empty box: one that failed and left its daily, lanes or watchdog fails alone."""
    if "box" in request.fixturenames:
        request.getfixturevalue("box")
        box_emptied()


def serves_at(address: str, port: int) -> bool:
    try:
        answer = httpx.post(f"http://{address}:{port}/v1/chat/completions", timeout=20.0,
                            json={"max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]})
        return answer.status_code == 200 and bool(answer.json()["choices"])
    except httpx.HTTPError:
        return False


def _image(box: Box) -> str:
    return box.docker("image", "inspect", "-f", "{{.Id}}", "campaign-test-base:2").stdout.strip()


def start_daily(box: Box, port: int) -> str:
    """The daily as the field starts it on its box: `docker run` by hand, restart policy unless-stopped."""
    name = f"campaign-test-boxdaily-{uuid.uuid4().hex[:8]}"
    started = box.docker("run", "-d", "--name", name, "--network", "host", "--restart", "unless-stopped",
                         "-v", f"{ENGINE_DIR}:/opt/llama-server:ro", "-v", f"{MODELS_DIR}:/models:ro", _image(box),
                         "/opt/llama-server/bin/llama-server", "-m", f"/models/{MODEL_FILE}", "--host", BOX_ADDRESS,
                         "--port", str(port), "--ctx-size", "2048", "--threads", "2", "--parallel", "1", "--seed", "0",
                         "--no-webui")
    assert started.returncode == 0, started.stderr
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not serves_at(BOX_ADDRESS, port):
        time.sleep(0.5)
    assert serves_at(BOX_ADDRESS, port), box.docker("logs", name).stderr[-1500:]
    return name


def box_contract(root: Path, box: Box, engine: dict, port: int, *, name: str, daily: str | None,
                 grace: str = "60s", deadline: str = "10m", sha256: str = MODEL_SHA256) -> Path:
    """Two llama-server lanes on the box's engine (one axis: n-gram speculation), greedy gate, and the box's
    daily behind the failsafe kept on that box."""
    body = {
        "contract": name, "version": 1,
        "lane_defaults": {
            "runtime": "docker", "engine": "llamacpp", "image": _image(box),
            "executable": "/opt/llama-server/bin/llama-server", "docker_host": engine,
            "mounts": [{"host": str(ENGINE_DIR), "container": "/opt/llama-server"},
                       {"host": str(MODELS_DIR), "container": "/models"}],
            "network": "host", "host": BOX_ADDRESS, "port": port,
            "model": {"path": str(MODELS_DIR / MODEL_FILE), "sha256": sha256},
            "args": ["--ctx-size", "2048", "--threads", "2", "--parallel", "1", "--seed", "0", "--no-webui"],
            "readiness": {"budget": "120s"}, "stop": "remove"},
        "lanes": [{"name": "base", "role": "control"},
                  {"name": "spec", "role": "candidate", "axis": ["args.spec-type", "args.spec-draft-n-max"],
                   "set": {"args": {"--spec-type": "ngram-simple", "--spec-draft-n-max": "4"}}}],
        "inputs": {"p": {"file": "prompts/p.jsonl"}},
        "gates": [{"kind": "greedy", "input": "p", "repeats": 2, "max_tokens": 8, "rule": {"self_identical": "2/2"}}],
        "promotion": {"requires": ["greedy"]},
    }
    if daily is not None:
        body["incumbent"] = {"runtime": "docker", "container": daily, "docker_host": copy.deepcopy(engine),
                             "endpoint": f"http://{BOX_ADDRESS}:{port}"}
        body["failsafe"] = {"deadline": deadline, "heartbeat_grace": grace,
                            "python": str(PYTHON_HOME / "bin" / "python3"),
                            "mounts": [{"host": str(PYTHON_HOME), "container": str(PYTHON_HOME)}]}
    folder = root / name
    folder.mkdir()
    return write_contract(folder, yaml.safe_dump(body, sort_keys=False),
                          prompts=[("capital", "What is the capital of France?"), ("sea", "Describe the sea.")])


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    assert campaign("keys", "init").returncode == 0
    return tmp_path


def runner_once_a_lane_is_up(contract: Path, out: Path, **popen: object) -> subprocess.Popen:
    """`campaign run` in the background, returned once its journal says a lane booted on the box."""
    runner = subprocess.Popen([sys.executable, "-m", "campaign.cli", "run", str(contract), "--out", str(out)],
                              **{"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, **popen})
    deadline = time.monotonic() + 300
    booted = False
    while time.monotonic() < deadline and not booted and runner.poll() is None:
        journals = list(out.glob("*/journal.jsonl"))
        booted = bool(journals) and any(r["step"] == "boot" and r["event"] == "done" for r in read_jsonl(journals[0]))
        time.sleep(0.1)
    assert booted, "the window never booted a lane on the box"
    return runner


def kill_once_a_lane_is_up(contract: Path, out: Path) -> None:
    """`campaign run`, SIGKILLed (with anything it started in its session) once a lane booted."""
    runner = runner_once_a_lane_is_up(contract, out, start_new_session=True)
    os.killpg(runner.pid, signal.SIGKILL)
    runner.wait()


def _campaign_containers(box: Box) -> list[str]:
    """What a window made on the box (lanes, model hashes, watchdogs); the image's own labels aside."""
    return [c["Names"] for c in box_containers(box)
            if any(label in c.get("Labels", "") for label in ("campaign.window=", "campaign.lane=", "campaign.failsafe"))]


def test_a_window_on_the_box_over_tls_hashes_there_keeps_the_deadline_there_and_restores_its_daily(
        box: Box, home: Path) -> None:
    port = free_port()
    daily = start_daily(box, port)
    daily_id = json.loads(box.docker("inspect", daily).stdout)[0]["Id"]
    contract = box_contract(home, box, box.tls_host(), port, name="tls", daily=daily)
    assert campaign("freeze", str(contract)).returncode == 0
    since = str(int(time.time()) - 1)
    ran = campaign("run", str(contract), "--out", str(home / "runs"))
    assert ran.returncode in (0, 3), ran.stdout + ran.stderr  # completed: promotable or not
    bundle = next((home / "runs").iterdir())
    assert_exit_as_decided(ran, bundle)
    assert campaign("verify", str(bundle)).returncode == 0
    # the model was hashed by a container on the box's engine (its events say so), not by the runner
    hashed = box.docker("events", "--since", since, "--until", str(int(time.time()) + 1), "--filter",
                        "label=campaign.purpose=model-hash", "--format", "{{.Action}}").stdout.split()
    assert "start" in hashed and "destroy" in hashed, hashed
    summary = json.loads((bundle / "SUMMARY.json").read_text())
    assert summary["restore"]["proved"] is True and summary["restore"]["action"] == "started"
    assert summary["candidates"]["spec"]["gates"]["greedy"]["verdict"] in ("PASS", "FAIL")  # judged on the box
    records = read_jsonl(bundle / "journal.jsonl")
    armed = next(r for r in records if r["step"] == "failsafe.arm" and r["event"] == "done")
    assert armed["backend"] == "engine"  # auto: the daily's box keeps its own deadline
    dry = next(r for r in records if r["step"] == "failsafe.dry_run" and r["event"] == "done")
    assert f"fired on {box.tls_url}" in dry["result"]
    # the lanes ran in containers on the box, and what ran is recorded with that engine
    inspect = json.loads((bundle / "lanes" / "spec" / "inspect.json").read_text())
    assert inspect["docker_host"] == box.tls_url
    boot_log = (bundle / "lanes" / "spec" / "boot.log").read_text()
    assert "llama_server: initializing" in boot_log and f"{BOX_ADDRESS}:{port}" in boot_log  # streamed from the box
    after = json.loads(box.docker("inspect", daily).stdout)[0]
    assert after["Id"] == daily_id and after["State"]["Running"]
    assert after["HostConfig"]["RestartPolicy"]["Name"] == "unless-stopped"
    assert serves_at(BOX_ADDRESS, port)
    assert _campaign_containers(box) == []  # lanes, the model hash and the watchdog: all gone
    box.docker("rm", "-f", daily)


def test_a_model_that_differs_on_the_box_is_refused_naming_the_box(box: Box, home: Path) -> None:
    contract = box_contract(home, box, box.ssh_host(), free_port(), name="wrongpin", daily=None, sha256="0" * 64)
    assert campaign("freeze", str(contract)).returncode == 0
    ran = campaign("run", str(contract), "--out", str(home / "runs"))
    assert ran.returncode != 0 and "Traceback" not in ran.stderr
    assert len(ran.stderr.strip().splitlines()) == 1, ran.stderr
    assert f"has sha256 {MODEL_SHA256} on {box.ssh_url}, not the pinned {'0' * 64}" in ran.stderr


def test_the_runner_killed_mid_window_the_box_brings_its_daily_back(box: Box, home: Path) -> None:
    port = free_port()
    daily = start_daily(box, port)
    contract = box_contract(home, box, box.tls_host(), port, name="killed", daily=daily, grace="6s")
    assert campaign("freeze", str(contract)).returncode == 0
    kill_once_a_lane_is_up(contract, home / "runs")  # the runner's machine, as far as this window goes, is gone
    killed_at = time.monotonic()
    daily_attrs = lambda: json.loads(box.docker("inspect", daily).stdout)[0]  # noqa: E731
    while time.monotonic() - killed_at < 120 and not (daily_attrs()["State"]["Running"] and serves_at(BOX_ADDRESS, port)):
        time.sleep(0.5)
    assert daily_attrs()["State"]["Running"] and serves_at(BOX_ADDRESS, port), \
        f"the box did not restore its daily\n{box_story(box)}"
    assert daily_attrs()["HostConfig"]["RestartPolicy"]["Name"] == "unless-stopped"
    watchdog = [c for c in box_containers(box) if "campaign.failsafe" in c.get("Labels", "")]
    assert len(watchdog) == 1
    # the socket's folder, read-only: a socket the engine made anew (a restart) is the one the watchdog reaches
    mounts = {m["Destination"]: m for m in json.loads(box.docker("inspect", watchdog[0]["ID"]).stdout)[0]["Mounts"]}
    engine = mounts["/campaign/engine"]
    assert (engine["Source"], engine["RW"]) == (str(Path(box.socket).parent), False), mounts
    said = ""
    while time.monotonic() - killed_at < 60 and "restored:" not in said:  # it checks the daily answers each second
        said = box.docker("logs", watchdog[0]["ID"]).stdout
        time.sleep(0.5)
    assert "heartbeat stopped" in said and "restored: the daily answers" in said, said
    lanes = [c for c in box_containers(box) if "campaign.lane=" in c.get("Labels", "")]
    assert lanes == []  # the lane that held the port was removed first
    # the runner's machine says which box's daily is in which state, and what the box watchdog did
    shown = campaign("status", "--json")
    rows = json.loads(shown.stdout)
    assert rows[0]["boxes"] == [box.tls_url] and rows[0]["runner_alive"] is False
    assert rows[0]["daily"].startswith(f"running (container {daily})") and "restored" in rows[0]["daily"]
    # another runner machine (its own state) finds the watchdog the dead runner left on that box: stale there
    # (a new window's pre-flight removes it the same way, saying so, before it could restore mid-window)
    elsewhere = {"XDG_STATE_HOME": str(home / "state2"), "COLUMNS": "250"}  # a table wide enough not to wrap
    listed = campaign("cleanup", "--engines-of", str(contract), env=elsewhere)
    assert "(failsafe watchdog)" in listed.stdout and rows[0]["window"] in listed.stdout, listed.stdout
    here = campaign("cleanup", "--engines-of", str(contract), env={"COLUMNS": "250"})
    assert "(failsafe watchdog)" not in here.stdout  # on the first machine its window is still armed
    removed = campaign("cleanup", "--engines-of", str(contract), "--remove", env=elsewhere)
    assert removed.returncode == 0 and "removed 1" in removed.stdout, removed.stdout
    assert _campaign_containers(box) == [] and serves_at(BOX_ADDRESS, port)
    # on the first machine the old window still reads armed; abort ends it there (the daily already serves)
    abort = campaign("abort", rows[0]["window"])
    assert abort.returncode == 0 and "restored" in abort.stdout, abort.stdout + abort.stderr
    box.docker("rm", "-f", daily)


def test_the_box_engine_gone_mid_window_the_runner_says_so_and_the_box_restores_when_it_is_back(
        box: Box, home: Path) -> None:
    port = free_port()
    daily = start_daily(box, port)
    contract = box_contract(home, box, box.tls_host(), port, name="gone", daily=daily, grace="6s")
    assert campaign("freeze", str(contract)).returncode == 0
    out = home / "runs"
    runner = runner_once_a_lane_is_up(contract, out, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    engine_gone(box)
    _, stderr = runner.communicate(timeout=600)
    # the next lane could not start (the engine, not the lane, failed) and the daily could not be started
    # from here: the runner says so in one line, naming who restores it, and leaves the window to resume
    assert runner.returncode == 1 and len(stderr.strip().splitlines()) == 1, stderr
    # named as the contract names it, the step it was at, and why (the Docker error boundary's one line)
    assert f"docker engine {box.tls_url}: inspecting container" in stderr and "connection refused" in stderr
    assert f"the watchdog on {box.tls_url} restores the daily by itself" in stderr and "campaign resume" in stderr
    bundle = next(out.iterdir())
    summary = json.loads((bundle / "SUMMARY.json").read_text())
    assert summary["lanes"]["spec"]["cause"] == "engine_unreachable", summary["lanes"]["spec"]
    (row,) = json.loads(campaign("status", "--json").stdout)
    assert row["armed"] and not row["restored"] and row["boxes"] == [box.tls_url]
    assert row["daily"].startswith("unknown (docker engine") and "box watchdog: unknown" in row["daily"], row["daily"]
    engine_back(box)  # the engine restarts its watchdog (restart policy always), which restores the daily
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not serves_at(BOX_ADDRESS, port):
        time.sleep(0.5)
    assert serves_at(BOX_ADDRESS, port), f"the box did not restore its daily once its engine was back\n{box_story(box)}"
    (row,) = json.loads(campaign("status", "--json").stdout)
    assert row["daily"].startswith(f"running (container {daily})"), row["daily"]
    resumed = campaign("resume", bundle.name)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert campaign("verify", str(bundle)).returncode == 0
    summary = json.loads((bundle / "SUMMARY.json").read_text())
    assert summary["restore"]["proved"] is True and summary["lanes"]["spec"]["status"] == "ran"
    assert _campaign_containers(box) == [] and serves_at(BOX_ADDRESS, port)
    box.docker("rm", "-f", daily)


def test_a_lane_left_on_the_box_by_a_killed_runner_is_found_and_removed_by_cleanup(box: Box, home: Path) -> None:
    contract = box_contract(home, box, box.ssh_host(), free_port(), name="leftover", daily=None)
    assert campaign("freeze", str(contract)).returncode == 0
    kill_once_a_lane_is_up(contract, home / "runs")
    assert len(_campaign_containers(box)) == 1  # no daily, so no failsafe: the lane stays until cleanup
    listed = campaign("cleanup", "--engines-of", str(contract), env={"COLUMNS": "250"})
    assert listed.returncode == 0 and box.ssh_url in listed.stdout and "base" in listed.stdout, listed.stdout
    removed = campaign("cleanup", "--engines-of", str(contract), "--remove")
    assert removed.returncode == 0 and "removed 1" in removed.stdout, removed.stdout
    assert _campaign_containers(box) == []


def test_two_windows_at_once_on_two_engines_from_one_command(box: Box, home: Path, image_id_local: str) -> None:
    port_box = free_port()
    daily = start_daily(box, port_box)
    on_box = box_contract(home, box, box.ssh_host(), port_box, name="overssh", daily=daily)
    local = box_contract(home, box, {"url": "unix:///var/run/docker.sock"}, free_port(), name="local", daily=None)
    text = local.read_text().replace(BOX_ADDRESS, "127.0.0.1").replace(_image(box), image_id_local)
    local.write_text(text)
    for contract in (on_box, local):
        assert campaign("freeze", str(contract)).returncode == 0
    # the same box through two URLs is one box: refused before anything starts
    also_tls = box_contract(home, box, box.tls_host(), free_port(), name="alsotls", daily=None)
    assert campaign("freeze", str(also_tls)).returncode == 0
    refused = campaign("run", str(on_box), str(also_tls), "--out", str(home / "refused"))
    assert refused.returncode != 0 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert "both use" in refused.stderr and not (home / "refused").exists()
    both = subprocess.Popen([sys.executable, "-m", "campaign.cli", "run", str(on_box), str(local), "--out",
                             str(home / "runs")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen: set[tuple[str, ...]] = set()
    while both.poll() is None:  # `campaign status` shows every live window, each with its box
        shown = campaign("status", "--json")
        if shown.returncode == 0:
            rows = [row for row in json.loads(shown.stdout) if row["runner_alive"]]
            seen.add(tuple(sorted(box for row in rows for box in row["boxes"])))
        time.sleep(0.5)
    stdout, stderr = both.communicate()
    assert both.returncode in (0, 3), stdout + stderr  # both completed: promotable or not
    assert ("ssh://root@10.231.77.2:22", "this machine") in seen, seen
    assert "overssh" in stdout and "local" in stdout and "signed" in stdout
    bundles = sorted((home / "runs").iterdir())
    assert len(bundles) == 2
    for bundle in bundles:
        assert campaign("verify", str(bundle)).returncode == 0
        records = read_jsonl(bundle / "journal.jsonl")
        assert any(r["step"] == "gate" and r["event"] == "done" for r in records)
    starts = [read_jsonl(b / "journal.jsonl")[0]["t"] for b in bundles]
    ends = [read_jsonl(b / "journal.jsonl")[-1]["t"] for b in bundles]
    assert max(starts) < min(ends)  # they ran at the same time
    assert serves_at(BOX_ADDRESS, port_box)
    assert _campaign_containers(box) == []
    box.docker("rm", "-f", daily)


@pytest.fixture
def image_id_local() -> str:
    return need_docker()


@pytest.mark.parametrize("fault", ["other-ca", "stranger-cert", "refused-key", "nobody-listening"])
def test_a_box_that_cannot_be_reached_is_a_one_line_error_before_anything_is_touched(box: Box, home: Path,
                                                                                     fault: str) -> None:
    engine = {"other-ca": box.tls_host(ca="other-ca.pem"), "stranger-cert": box.tls_host(client="stranger"),
              "refused-key": box.ssh_host(key="stranger_ed25519"),
              "nobody-listening": {"url": f"tcp://{BOX_ADDRESS}:2999"}}[fault]
    contract = box_contract(home, box, engine, free_port(), name=fault, daily=None)
    assert campaign("freeze", str(contract)).returncode == 0
    ran = campaign("run", str(contract), "--out", str(home / "runs"))
    assert ran.returncode != 0 and "Traceback" not in ran.stderr
    assert len(ran.stderr.strip().splitlines()) == 1, ran.stderr
    expected = {"other-ca": "TLS certificate is not signed by the given ca_cert",
                "stranger-cert": "refused our TLS client certificate",
                "refused-key": "Permission denied (publickey)",
                "nobody-listening": "connection refused"}[fault]
    assert expected in ran.stderr and BOX_ADDRESS in ran.stderr, ran.stderr
