"""A process daily keeps its --host and --port through a promotion, and its key. The daily is a real
llama-server started by hand with a literal `--api-key` (its pid in daily.pid), the lanes run at another
port with their key in LLAMA_API_KEY from `${env:...}` (the variable llama-server reads its key from), and
the candidate changes the context size. After `promote` the daily's endpoint, called with the daily's key,
answers from the candidate's flags; after `rollback`, from the daily's own command line again. The key is in
no bundle, rollback record, ledger or daily log; `promote --dry-run` and `promote` agree, refusing alike."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from tests.support.cli import campaign, keys_and_freeze
from tests.support.contracts import (
    MODEL,
    candidate,
    contract_yaml,
    control,
    free_port,
    process_defaults,
    write_contract,
)
from tests.support.daily import daily_pid, disarm_windows, n_ctx

pytestmark = pytest.mark.integration

KEY = "sk-daily-" + uuid.uuid4().hex[:16]
KEY_VAR = "CAMPAIGN_T_PROCESS_KEY"
ARGS = ["--ctx-size", "2048", "--threads", "2", "--parallel", "1", "--seed", "0", "--no-webui"]


def cmdline(pid: int) -> list[str]:
    return [p.decode() for p in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if p]


@pytest.fixture
def keyed_daily(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, llama_server: str):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv(KEY_VAR, KEY)
    port = free_port()
    with open(tmp_path / "by-hand.log", "ab") as log:
        daily = subprocess.Popen([llama_server, "-m", str(MODEL), "--host", "127.0.0.1", "--port", str(port), *ARGS,
                                  "--api-key", KEY], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    (tmp_path / "daily.pid").write_text(f"{daily.pid}\n")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and n_ctx(port, KEY) != 2048:
        time.sleep(0.3)
    assert n_ctx(port, KEY) == 2048
    yield {"root": tmp_path, "port": port, "argv": cmdline(daily.pid)}
    disarm_windows(tmp_path / "state")
    for pid in {daily.pid, daily_pid(tmp_path)}:
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass


def test_a_promoted_process_daily_keeps_its_endpoint_and_key_and_rolls_back(keyed_daily: dict) -> None:
    root, port, lane_port = keyed_daily["root"], keyed_daily["port"], free_port()
    body = contract_yaml(
        "t-process-identity",
        defaults=process_defaults(lane_port, args=ARGS, env={"LLAMA_API_KEY": "${env:" + KEY_VAR + "}"}),
        lanes=[control(), candidate("small", ["args.ctx-size"], args={"--ctx-size": "1024"})],
        inputs={"p": {"file": "prompts/p.jsonl"}}, requires=["greedy"],
        gates=[{"kind": "greedy", "input": "p", "repeats": 2, "max_tokens": 8, "rule": {"self_identical": "1/1"}}],
        incumbent={"runtime": "process", "endpoint": f"http://127.0.0.1:{port}", "pidfile": "daily.pid",
                   "api_key_env": KEY_VAR},
        failsafe={"deadline": "10m", "heartbeat_grace": "30s"})
    contract = write_contract(root, body, prompts=[("capital", "What is the capital of France?")])
    validated = campaign("validate", str(contract))
    assert f"warning: lane small is measured at 127.0.0.1:{lane_port} on this host" in validated.stderr
    assert "small runs as the process in daily.pid with the daily's name" in validated.stderr
    keys_and_freeze(contract)
    ran = campaign("run", str(contract), "--out", str(root / "runs"))
    assert ran.returncode == 0, ran.stdout + ran.stderr  # the lanes answered our client: it sent LLAMA_API_KEY's key
    bundle = next((root / "runs").iterdir())

    # without the key's variable both refuse, with the same words, and the daily is untouched
    unset = {KEY_VAR: ""}
    dry, real = (campaign("promote", str(bundle), *more, env=unset) for more in (["--dry-run"], []))
    assert dry.returncode == real.returncode != 0 and dry.stderr == real.stderr, (dry.stderr, real.stderr)
    assert "in no variable of this environment" in real.stderr and KEY not in real.stderr
    assert cmdline(daily_pid(root)) == keyed_daily["argv"]

    dry = campaign("promote", str(bundle), "--dry-run")
    assert dry.returncode == 0 and f"--host 127.0.0.1 --port {port}" in dry.stdout, dry.stdout + dry.stderr
    assert KEY not in dry.stdout + dry.stderr
    promoted = campaign("promote", str(bundle))
    assert promoted.returncode == 0, promoted.stdout + promoted.stderr
    now = cmdline(daily_pid(root))
    assert now[now.index("--host"):now.index("--host") + 4] == ["--host", "127.0.0.1", "--port", str(port)]
    assert "1024" in now and KEY not in now  # the key in its environment, as the lane had it
    assert n_ctx(port, KEY) == 1024 and n_ctx(port, None) is None and n_ctx(lane_port, KEY) is None

    rolled = campaign("rollback")
    assert rolled.returncode == 0, rolled.stdout + rolled.stderr
    assert cmdline(daily_pid(root)) == keyed_daily["argv"] and n_ctx(port, KEY) == 2048  # as the user started it
    state = root / "state" / "campaign"
    kept = [*bundle.rglob("*"), *state.glob("rollback/*.json"), state / "ledger.jsonl", state / "daily.log"]
    assert all(KEY not in path.read_text(errors="replace") for path in kept if path.is_file())
    assert "${env:" + KEY_VAR + "}" in (state / "rollback" / "1.json").read_text()
