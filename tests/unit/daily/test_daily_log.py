"""`campaign daily start --log FILE`: the log is created 0600 and holds the daily's output redacted as every
lane's boot log is (the resolved ${env:...} values, credential options and variables, credential shapes).
A real child process echoes its command line and environment; no engine needed."""

from __future__ import annotations

import os
import random
import string
import subprocess
import sys
from pathlib import Path

import pytest

from campaign.contracts.load import load_contract
from campaign.daily import daily
from campaign.errors import RunError
from campaign.lanes.redact import MARK
from tests.support.contracts import free_port

ECHO = """#!/bin/sh
echo "argv: $*"
echo "HF_TOKEN=$HF_TOKEN"
echo "loading with token $HF_TOKEN and Authorization: Bearer $HF_TOKEN"
exit 3
"""


def generated(prefix: str, seed: int) -> str:
    rng = random.Random(seed)
    return prefix + "".join(rng.choices(string.ascii_letters + string.digits, k=rng.randint(6, 30)))


def write_daily_contract(tmp_path: Path) -> Path:
    script = tmp_path / "echo-server"
    script.write_text(ECHO)
    script.chmod(0o755)
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    port = free_port()
    path = tmp_path / "c.yaml"
    path.write_text(f"""\
contract: d
version: 1
lane_defaults:
  runtime: process
  engine: llamacpp
  executable: {script}
  port: {port}
  model: {{path: m.gguf}}
  args: [--api-key, "${{env:DAILY_T_KEY}}"]
  env: {{HF_TOKEN: "${{env:DAILY_T_HF}}"}}
lanes:
  - {{name: base, role: control}}
incumbent:
  runtime: process
  endpoint: http://127.0.0.1:{port}
  pidfile: daily.pid
  lane: base
failsafe: {{deadline: 10m}}
""")
    return path


@pytest.mark.parametrize("seed", [1, 2])
def test_daily_start_log_is_private_and_redacted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    key, token = generated("", seed), generated("hf", seed + 100)  # short and plain: only the exact values say
    monkeypatch.setenv("DAILY_T_KEY", key)
    monkeypatch.setenv("DAILY_T_HF", token)
    log = tmp_path / "logs" / "daily.log"
    os.umask(0)
    try:
        with pytest.raises(RunError, match="exited"):
            daily.start_daily(load_contract(write_daily_contract(tmp_path)), log, wait=30)
    finally:
        os.umask(0o022)
    text = log.read_text()
    assert key not in text and token not in text, text
    assert f"--api-key {MARK}" in text and f"HF_TOKEN={MARK}" in text and "Bearer" in text, text
    assert log.stat().st_mode & 0o777 == 0o600


def test_an_existing_log_is_made_private_and_appended_to(tmp_path: Path) -> None:
    log = tmp_path / "daily.log"
    log.write_text("an earlier start\n")
    log.chmod(0o644)
    secret = generated("", 7)
    popen, pump = daily._launch_logged(["sh", "-c", f'echo "key: {secret}"; echo done'], {"PATH": os.environ["PATH"]},
                                       log, [secret])
    assert popen.wait(timeout=30) == 0
    pump.wait(timeout=30)
    assert log.read_text() == f"an earlier start\nkey: {MARK}\ndone\n"
    assert log.stat().st_mode & 0o777 == 0o600


def test_the_pump_takes_its_secrets_on_stdin_not_its_command_line(tmp_path: Path) -> None:
    secret = generated("", 9)
    popen, pump = daily._launch_logged(["sh", "-c", "sleep 1"], {"PATH": os.environ["PATH"]}, tmp_path / "l.log",
                                       [secret])
    try:
        assert secret not in " ".join(pump.args) and "--pump" in pump.args
    finally:
        popen.wait(timeout=30)
        pump.wait(timeout=30)
    assert pump.returncode == 0


def test_the_pump_module_runs_as_a_program(tmp_path: Path) -> None:
    read_end, write_end = os.pipe()
    os.write(write_end, b"hello\nDB_PASSWORD=hunter22\n")
    os.close(write_end)
    done = subprocess.run([sys.executable, "-m", "campaign.daily.daily", "--pump", str(tmp_path / "p.log"),
                           str(read_end)], input=b'["hunter22"]', pass_fds=(read_end,), timeout=60)
    os.close(read_end)
    assert done.returncode == 0
    assert (tmp_path / "p.log").read_text() == f"hello\nDB_PASSWORD={MARK}\n"
