"""Secrets of a real daily never reach a bundle or a published archive, and `${env:NAME}` references are
resolved on every launch path. The daily is a real llama-server started by hand with a literal
`--api-key` (the normal way a daily exists), with a token in its environment; the lanes take their key
from `${env:LANE_KEY}`."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import tarfile
import textwrap
import time
from pathlib import Path

import httpx
import pytest

from campaign.daily.state import WindowState
from campaign.fsutil import read_jsonl
from tests.support.cli import assert_exit_as_decided, campaign, keys_and_freeze
from tests.support.contracts import MODEL, demo_like, free_port, write_contract
from tests.support.daily import kill_runner_and_watchdogs, runner_past_the_daily_stop

pytestmark = pytest.mark.integration

DAILY_KEY = "sk-daily-" + "Q7c2Lx9PaaVt3Kd8"
LANE_KEY = "lane-key-" + "Zr84vNq2"
HF_SECRET = "hf_" + "TokenOfTheDailyNeverShown42"


def answers(port: int, key: str | None) -> int:
    headers = {"Authorization": f"Bearer {key}"} if key is not None else {}
    try:
        return httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", headers=headers, timeout=30.0,
                          json={"max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}).status_code
    except httpx.HTTPError:
        return 0


def wait_serving(port: int, key: str) -> None:
    deadline = time.monotonic() + 60
    while answers(port, key) != 200:
        assert time.monotonic() < deadline, "the daily never served"
        time.sleep(0.3)


def hand_started_daily(llama_server: str, port: int, pidfile: Path) -> subprocess.Popen[bytes]:
    """Started by hand, as a user does: the key on the command line, a token in the environment."""
    daily = subprocess.Popen([llama_server, "-m", str(MODEL), "--port", str(port), "--ctx-size", "1024",
                              "--threads", "1", "--api-key", DAILY_KEY], env={**os.environ, "HF_TOKEN": HF_SECRET},
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    pidfile.write_text(f"{daily.pid}\n")
    return daily


def keyed_contract(tmp_path: Path, port: int, *, daily_port: int, api_key_env: str, lane: str | None = None) -> Path:
    """Lanes keyed by ${env:LANE_KEY}, a token in their env, and a daily behind a failsafe."""
    body = textwrap.dedent(demo_like(port, max_tokens=8, rule='"2/2"')).replace(
        '--seed, "0", --no-webui]', '--seed, "0", --no-webui, --api-key, "${env:LANE_KEY}"]').replace(
        "lane_defaults:\n", "lane_defaults:\n  env: {HF_TOKEN: \"${env:HF_TOKEN}\"}\n", 1)
    body += (f"incumbent:\n  runtime: process\n  endpoint: http://127.0.0.1:{daily_port}\n  pidfile: daily.pid\n"
             + (f"  lane: {lane}\n" if lane else "") + f"  api_key_env: {api_key_env}\n"
             + "failsafe: {deadline: 10m}\n")
    return write_contract(tmp_path, body, prompts=[("capital", "What is the capital of France?"),
                                                   ("sea", "Describe the sea.")])


def test_daily_start_resolves_secret_references(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                llama_server: str) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("LANE_KEY", LANE_KEY)
    monkeypatch.setenv("HF_TOKEN", HF_SECRET)
    port = free_port()
    contract = keyed_contract(tmp_path, port, daily_port=port, api_key_env="LANE_KEY", lane="base")
    started = campaign("daily", "start", str(contract), "--log", str(tmp_path / "daily.log"))
    pid = int((tmp_path / "daily.pid").read_text()) if (tmp_path / "daily.pid").exists() else None
    try:
        assert started.returncode == 0, started.stderr
        assert answers(port, LANE_KEY) == 200
        assert answers(port, "${env:LANE_KEY}") == 401
        environ = Path(f"/proc/{pid}/environ").read_bytes()
        assert f"HF_TOKEN={HF_SECRET}".encode() in environ and b"${env:" not in environ
        shown = campaign("daily", "show", str(contract))  # the running daily, its command, its log
        assert shown.returncode == 0, shown.stderr
        assert f"running, pid {pid}" in shown.stdout and str(tmp_path / "daily.log") in shown.stdout
        assert "--api-key '<redacted hmac:" in shown.stdout and LANE_KEY not in shown.stdout
    finally:
        if pid:
            os.killpg(pid, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while Path(f"/proc/{pid}/cmdline").exists() and Path(f"/proc/{pid}/cmdline").read_bytes() and \
                    time.monotonic() < deadline:
                time.sleep(0.05)
    # a missing variable is refused, not passed on as text
    monkeypatch.delenv("LANE_KEY")
    refused = campaign("daily", "start", str(contract), "--log", str(tmp_path / "daily2.log"))
    assert refused.returncode != 0 and "LANE_KEY" in refused.stderr and "Traceback" not in refused.stderr


def test_hand_started_daily_key_never_reaches_bundle_or_archive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                llama_server: str) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("LANE_KEY", LANE_KEY)
    monkeypatch.setenv("HF_TOKEN", HF_SECRET)
    monkeypatch.setenv("DAILY_KEY", DAILY_KEY)
    daily_port, lane_port = free_port(), free_port()
    daily = hand_started_daily(llama_server, daily_port, tmp_path / "daily.pid")
    try:
        wait_serving(daily_port, DAILY_KEY)
        contract = keyed_contract(tmp_path, lane_port, daily_port=daily_port, api_key_env="DAILY_KEY")
        keys_and_freeze(contract)
        ran = campaign("run", str(contract), "--out", str(tmp_path / "runs"))
        assert ran.returncode in (0, 3), ran.stdout + ran.stderr  # completed: promotable or not
        bundle = next(p for p in (tmp_path / "runs").iterdir() if p.is_dir())
        assert_exit_as_decided(ran, bundle)
        summary = json.loads((bundle / "SUMMARY.json").read_text())
        assert summary["restore"]["proved"] is True
        assert summary["lanes"]["spec"]["status"] == "ran"  # the lanes served with their resolved key
        snapshot = json.loads((bundle / "incumbent" / "snapshot.json").read_text())
        argv = snapshot["argv"]
        assert argv[argv.index("--api-key") + 1].startswith("<redacted hmac:")
        assert snapshot["env"]["HF_TOKEN"].startswith("<redacted hmac:")
        published = campaign("publish", str(bundle))
        assert published.returncode == 0, published.stderr
        archive = next(bundle.parent.glob(f"{bundle.name}.published/*.tar.gz"))
        secrets = [s.encode() for s in (DAILY_KEY, LANE_KEY, HF_SECRET)]
        for path in [*bundle.rglob("*"), *archive.parent.rglob("*")]:
            if path.is_file():
                data = path.read_bytes()
                assert not any(s in data for s in secrets), path
        with tarfile.open(archive) as tar:
            for member in tar.getmembers():
                if member.isreg():
                    data = tar.extractfile(member).read()  # type: ignore[union-attr]
                    assert not any(s in data for s in secrets), member.name
        new_pid = int((tmp_path / "daily.pid").read_text())
        assert answers(daily_port, DAILY_KEY) == 200 and answers(daily_port, None) == 401
        (state_file,) = (tmp_path / "state").glob("campaign/windows/*/state.json")
        # the key kept for a bare-environment failsafe, and the daily's own credentials (its --api-key, its
        # token), only while the window ran: the private state of the ended window keeps references to the
        # variables that hold them, no value
        private = state_file.read_text()
        assert json.loads(private)["incumbent_api_key"] is None
        assert DAILY_KEY not in private and HF_SECRET not in private and LANE_KEY not in private
        kept = json.loads(private)["incumbent"]
        assert kept["argv"][kept["argv"].index("--api-key") + 1] == "${env:DAILY_KEY}"
        assert kept["env"]["HF_TOKEN"] == "${env:HF_TOKEN}"
        assert kept["secrets_removed"]["${env:DAILY_KEY}"] == "DAILY_KEY"
        status = json.loads(campaign("status", "--json").stdout)
        assert status[0]["daily"].startswith("running"), status  # still known as the daily by its references

        # the systemd timer restores in a bare environment (no DAILY_KEY): the key the window recorded in its
        # private state proves the daily with a real completion all the same
        runner, window = runner_past_the_daily_stop(contract, tmp_path / "runs-killed")
        kill_runner_and_watchdogs(runner, WindowState.load(window))
        assert answers(daily_port, DAILY_KEY) == 0  # down, and nobody left to bring it back
        bare = {k: v for k, v in os.environ.items() if k not in ("DAILY_KEY", "LANE_KEY", "HF_TOKEN")}
        timer = subprocess.run([sys.executable, "-m", "campaign.failsafe.restore_now", window], env=bare,
                               capture_output=True, text=True, timeout=300)
        assert timer.returncode == 0, timer.stdout + timer.stderr
        assert answers(daily_port, DAILY_KEY) == 200
        killed = next((tmp_path / "runs-killed").iterdir())
        restore = [r for r in read_jsonl(killed / "journal.jsonl") if r["step"] == "incumbent.restore"]
        assert restore[-1]["event"] == "done" and restore[-1]["proof"]["completion"]["status"] == 200
        state_file = WindowState.load(window).directory / "state.json"
        assert stat.S_IMODE(state_file.stat().st_mode) == 0o600
        # every process of the window killed and the daily proven back by the timer: the window is over, and
        # its private state keeps no credential of the daily (as at a window's normal end)
        private = state_file.read_text()
        assert json.loads(private)["incumbent_api_key"] is None and json.loads(private)["restored"]
        assert DAILY_KEY not in private and HF_SECRET not in private and LANE_KEY not in private
        assert json.loads(private)["incumbent"]["env"]["HF_TOKEN"] == "${env:HF_TOKEN}"
        for path in [*killed.rglob("*"), *WindowState.load(window).directory.rglob("*")]:
            assert not (path.is_file() and DAILY_KEY.encode() in path.read_bytes()), path
        status = json.loads(campaign("status", "--json").stdout)
        assert all(row["daily"].startswith("running") for row in status), status  # known by its references
        new_pid = int((tmp_path / "daily.pid").read_text())
    finally:
        for pid in {daily.pid, int((tmp_path / "daily.pid").read_text())}:
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
        daily.wait()
    assert new_pid != daily.pid


def test_an_interrupted_window_forgets_the_daily_key_and_its_resume_reads_it_from_the_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, llama_server: str) -> None:
    """The window ends (interrupted: SIGINT once the daily is down) with the daily proven back: its private
    state loses the daily's credentials. A resume that would stop the daily again without them in its
    environment is refused before the daily is touched; with them it runs, and its end forgets them again."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("LANE_KEY", LANE_KEY)
    monkeypatch.setenv("DAILY_KEY", DAILY_KEY)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    daily_port, lane_port = free_port(), free_port()
    daily = hand_started_daily(llama_server, daily_port, tmp_path / "daily.pid")
    try:
        wait_serving(daily_port, DAILY_KEY)
        contract = keyed_contract(tmp_path, lane_port, daily_port=daily_port, api_key_env="DAILY_KEY")
        monkeypatch.setenv("HF_TOKEN", HF_SECRET)  # the lanes' env references it
        keys_and_freeze(contract)
        runner, window = runner_past_the_daily_stop(contract, tmp_path / "runs")
        runner.send_signal(signal.SIGINT)
        assert runner.wait(timeout=300) != 0
        state_file = WindowState.load(window).directory / "state.json"
        private = state_file.read_text()
        assert json.loads(private)["restored"] and DAILY_KEY not in private and HF_SECRET not in private
        assert answers(daily_port, DAILY_KEY) == 200
        before = int((tmp_path / "daily.pid").read_text())

        refused = campaign("resume", window, env={"HF_TOKEN": ""})  # the daily's token is not in this environment
        assert refused.returncode != 0 and "Traceback" not in refused.stderr
        assert "HF_TOKEN" in refused.stderr and "the daily was not touched" in refused.stderr, refused.stderr
        assert int((tmp_path / "daily.pid").read_text()) == before and answers(daily_port, DAILY_KEY) == 200
        assert HF_SECRET not in state_file.read_text()

        resumed = campaign("resume", window)
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        summary = json.loads((tmp_path / "runs" / window / "SUMMARY.json").read_text())
        assert summary["restore"]["proved"] is True and summary["resumed"] is True
        assert int((tmp_path / "daily.pid").read_text()) != before  # stopped again and started from the snapshot
        assert answers(daily_port, DAILY_KEY) == 200
        private = state_file.read_text()
        assert DAILY_KEY not in private and HF_SECRET not in private and LANE_KEY not in private
        assert json.loads(private)["incumbent_api_key"] is None
    finally:
        for pid in {daily.pid, int((tmp_path / "daily.pid").read_text())}:
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
        daily.wait()
