"""Fixtures for window tests: a real daily llama-server, started as users start theirs."""

from __future__ import annotations

import json
import os
import signal
import textwrap
from pathlib import Path

import pytest

from campaign.daily.state import process_start_time
from tests.support.cli import campaign, keys_and_freeze
from tests.support.contracts import demo_like, free_port, write_contract
from tests.support.daily import disarm_windows, serves


@pytest.fixture
def daily(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, llama_server: str):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    port = free_port()
    body = textwrap.dedent(demo_like(port, max_tokens=8, rule='"2/2"')) + textwrap.dedent(f"""\
        incumbent:
          runtime: process
          endpoint: http://127.0.0.1:{port}
          pidfile: daily.pid
          lane: base
        failsafe:
          deadline: 10m
          heartbeat_grace: 30s
        """)
    contract = write_contract(tmp_path, body, prompts=[("capital", "What is the capital of France?"),
                                                       ("sea", "Describe the sea.")])
    keys_and_freeze(contract)
    started = campaign("daily", "start", str(contract), "--log", str(tmp_path / "daily.log"))
    assert started.returncode == 0, started.stderr
    assert serves(port)
    yield {"root": tmp_path, "contract": contract, "port": port}
    # disarm first: a failsafe still armed from a failed test would start the daily again after we stop it
    disarm_windows(tmp_path / "state")
    for pidfile in [tmp_path / "daily.pid"]:
        try:
            os.killpg(int(pidfile.read_text()), signal.SIGKILL)
        except (OSError, ValueError):
            pass
    for state in (tmp_path / "state").glob("campaign/windows/*/state.json"):
        for lane in json.loads(state.read_text())["lanes"]:
            if lane["pid"] and process_start_time(lane["pid"]) == lane["start_time"]:
                os.killpg(lane["pid"], signal.SIGKILL)


