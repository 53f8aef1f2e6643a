"""Unattended windows against real llama-server processes: a real daily is stopped behind the watchdog
failsafe and restored with proof, whatever happens to the runner (kill -9 at every journal step,
a kill mid-gate then `campaign resume`, a failsafe that cannot be armed, a detached run)."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from campaign.daily.state import WindowState, process_start_time
from campaign.fsutil import read_jsonl
from tests.support.cli import assert_exit_as_decided, campaign
from tests.support.daily import (
    daily_pid,
    first_record_of_each_kind,
    kill_runner_and_watchdogs,
    runner_past_the_daily_stop,
    serves,
    serves_within,
    watchdog_pids,
)

pytestmark = pytest.mark.integration


def _window_state(root: Path) -> WindowState:
    (state_dir,) = list((root / "state" / "campaign" / "windows").iterdir())
    return WindowState.load(state_dir.name)


def test_window_stops_and_restores_the_daily_with_proof(daily: dict) -> None:
    before = daily_pid(daily["root"])
    ran = campaign("run", str(daily["contract"]), "--out", str(daily["root"] / "runs"))
    assert ran.returncode == 0, ran.stdout + ran.stderr  # exit 0: completed with a promotable candidate
    bundle = next((daily["root"] / "runs").iterdir())
    summary = json.loads((bundle / "SUMMARY.json").read_text())
    assert summary["restore"]["proved"] is True and summary["restore"]["action"] == "started"
    assert summary["candidates"]["spec"]["overall"] == "PASS"
    assert_exit_as_decided(ran, bundle)
    assert daily_pid(daily["root"]) != before and serves(daily["port"])
    steps = [(r["step"], r["event"]) for r in read_jsonl(bundle / "journal.jsonl")]
    order = [s for s, e in steps if e == "done"]
    assert order.index("failsafe.arm") < order.index("incumbent.stop") < order.index("boot")
    assert order.index("incumbent.restore") < order.index("failsafe.disarm") < order.index("judge")
    state = _window_state(daily["root"])
    assert not state.armed and state.restored
    snapshot = json.loads((bundle / "incumbent" / "snapshot.json").read_text())
    from campaign.lanes.redact import ENV_ALLOW

    # the daily's env never enters the bundle: each value a keyed digest, except harmless ones (PATH...)
    assert all(v.startswith("<redacted hmac:") for k, v in snapshot["env"].items() if k not in ENV_ALLOW)
    assert campaign("verify", str(bundle)).returncode == 0
    _console_says_the_daily_and_each_decision(ran.stdout, bundle)


def _console_says_the_daily_and_each_decision(stdout: str, bundle: Path) -> None:
    """The console says the daily came back, as it happens and at the end, in the time the restore's record
    measured; then one line per candidate: the report's decision, its reason and its first step, and a
    promotable candidate's required gates' headlines under it."""
    from campaign.receipts.decision import decisions
    from campaign.window.report import load_report_data

    record = json.loads((bundle / "incumbent" / "restore.json").read_text())
    said = f"daily restored and proved in {record['proof']['proved_at'] - record['t']:.1f} s"
    lines = stdout.strip().splitlines()
    assert any(line.endswith(f" {said}") and line[:8].count(":") == 2 for line in lines), stdout  # HH:MM:SS, as it happens
    data = load_report_data(bundle)
    (spec,) = decisions(data["summary"], data["gates"])
    assert spec.decision == "PROMOTABLE" and spec.figure.startswith("greedy self_identical 2/2 prompts"), spec
    # the end: the daily, the candidate's line, its required gate's headline under it, the bundle
    greedy = data["summary"]["candidates"]["spec"]["gates"]["greedy"]["headline"]
    assert greedy.startswith("PASS ") and len(greedy) <= 100, greedy
    assert lines[-4:] == [said, f"spec: PROMOTABLE: {spec.reason}; next: {spec.next_step}", f"  greedy: {greedy}",
                          f"bundle: {bundle}"]


def test_kill_at_each_kind_of_journal_step_leaves_the_daily_serving(daily: dict) -> None:
    ran = campaign("run", str(daily["contract"]), "--out", str(daily["root"] / "probe"))
    assert ran.returncode == 0, ran.stderr
    every = first_record_of_each_kind(next((daily["root"] / "probe").iterdir()) / "journal.jsonl")
    # before the arm nothing is touched and each such step ends the same way: the first stands for them
    untouched = {("incumbent.snapshot", "intent"), ("incumbent.snapshot", "done"), ("failsafe.dry_run", "intent"),
                 ("failsafe.dry_run", "done")}
    kill_points = [k for k, step in every if step not in untouched]
    assert len(kill_points) >= 10 and len(every) - len(kill_points) == len(untouched)
    for k in kill_points:
        out = daily["root"] / f"runs-{k}"
        killed = campaign("run", str(daily["contract"]), "--out", str(out),
                          env={"CAMPAIGN_FAULT_KILL_AFTER_RECORD": str(k)})
        assert killed.returncode == -signal.SIGKILL, (k, killed.stderr)
        bundle = next(out.iterdir())
        window = bundle.name
        state = WindowState.load(window)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (state.armed or (state.incumbent_stopped and not state.restored)):
            time.sleep(0.2)
            state = state.reload()
        assert not state.armed, f"failsafe still armed after kill at record {k}"
        assert serves(daily["port"]), f"daily not serving after kill at record {k}"
        for lane in state.lanes:
            assert lane.pid is None or process_start_time(lane.pid) != lane.start_time, (k, lane)
            assert lane.scratch is not None and not Path(lane.scratch).exists(), (k, lane)  # nothing left in /tmp
        records = read_jsonl(bundle / "journal.jsonl")
        stops = [i for i, r in enumerate(records) if r["step"] == "incumbent.stop"]
        if stops:  # the daily was touched: a proven restore is recorded after that, by runner or failsafe
            assert any(r["step"] == "incumbent.restore" and r["event"] == "done" and r.get("proof")
                       for r in records[stops[-1]:]), k
        assert not (bundle / "receipt.dsse.json").exists()  # an interrupted window never verifies


def _kill_mid_candidate_gate(daily: dict) -> Path:
    """A window SIGKILLed while the candidate's gate runs; its bundle."""
    runner = subprocess.Popen([sys.executable, "-m", "campaign.cli", "run", str(daily["contract"]), "--out",
                               str(daily["root"] / "runs")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        found = list((daily["root"] / "runs").glob("*/raw/greedy/spec.jsonl"))
        if found and found[0].read_text().count("\n") >= 1:
            os.kill(runner.pid, signal.SIGKILL)
            runner.wait()
            return found[0].parent.parent.parent
        time.sleep(0.05)
    runner.kill()
    raise AssertionError("the candidate's gate never started")


def test_kill_mid_gate_then_resume_keeps_finished_gates(daily: dict) -> None:
    bundle = _kill_mid_candidate_gate(daily)
    raw_spec = bundle / "raw" / "greedy" / "spec.jsonl"
    base_raw = bundle / "raw" / "greedy" / "base.jsonl"
    base_digest = hashlib.sha256(base_raw.read_bytes()).hexdigest()
    partial = raw_spec.read_bytes()
    assert len(read_jsonl(raw_spec)) < 4  # cut short: 2 prompts x 2 repeats were asked for
    resumed = campaign("resume", bundle.name)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert hashlib.sha256(base_raw.read_bytes()).hexdigest() == base_digest  # not re-run
    assert (bundle / "raw" / "greedy" / "spec.interrupted-1.jsonl").read_bytes() == partial  # kept
    assert len(read_jsonl(raw_spec)) == 4
    records = read_jsonl(bundle / "journal.jsonl")
    gate_runs = [(r["lane"]) for r in records if r["step"] == "gate" and r["event"] == "intent"]
    assert gate_runs.count("base") == 1 and gate_runs.count("spec") == 2
    assert campaign("verify", str(bundle)).returncode == 0
    summary = json.loads((bundle / "SUMMARY.json").read_text())
    assert summary["resumed"] is True and summary["restore"]["proved"] is True
    assert serves(daily["port"])


def test_resume_refuses_another_source_or_executable_then_resumes_as_first_recorded(daily: dict) -> None:
    bundle = _kill_mid_candidate_gate(daily)
    source, inspect = bundle / "source.json", bundle / "lanes" / "base" / "inspect.json"
    first_source, first_inspect = source.read_bytes(), inspect.read_bytes()
    spec_inspect = (bundle / "lanes" / "spec" / "inspect.json").read_bytes()
    runner = _window_state(daily["root"]).runner_pid
    recorded = json.loads(first_source)
    recorded["files"]["campaign/window/run.py"] = "0" * 64  # as if the window had started on other code
    source.write_text(json.dumps(recorded))
    refused = campaign("resume", bundle.name)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and "Traceback" not in refused.stderr
    assert "source.json: refusing to resume" in refused.stderr and "campaign/window/run.py differs" in refused.stderr
    source.write_bytes(first_source)
    snapshot = json.loads(first_inspect)
    snapshot["executable_sha256"] = "f" * 64  # as if the first boot had run another llama-server
    inspect.write_text(json.dumps(snapshot))
    refused = campaign("resume", bundle.name)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "lane base's executable sha256 is now" in refused.stderr and "inspect.json" in refused.stderr
    # refused before anything was touched: no resume recorded, the killed runner still the one on record (the
    # watchdog restores the daily meanwhile, on its own, as after any kill)
    assert not any(r["step"] == "resume" for r in read_jsonl(bundle / "journal.jsonl"))
    assert _window_state(daily["root"]).runner_pid == runner
    inspect.write_bytes(first_inspect)
    resumed = campaign("resume", bundle.name)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    # the candidate booted again: its first snapshot kept, the new boot recorded beside it
    assert (bundle / "lanes" / "spec" / "inspect.json").read_bytes() == spec_inspect
    again = json.loads((bundle / "lanes" / "spec" / "inspect.resume1.json").read_text())
    assert again["executable_sha256"] == json.loads(spec_inspect)["executable_sha256"]
    assert not (bundle / "lanes" / "base" / "inspect.resume1.json").exists()  # its gates had all finished
    assert campaign("verify", str(bundle)).returncode == 0
    assert serves(daily["port"])


def test_failsafe_that_cannot_be_armed_leaves_the_daily_untouched(daily: dict) -> None:
    contract = daily["contract"]
    contract.write_text(contract.read_text().replace("heartbeat_grace: 30s", "heartbeat_grace: 30s\n  backend: systemd"))
    (daily["root"] / "c.freeze.json").unlink()
    assert campaign("freeze", str(contract)).returncode == 0
    before = daily_pid(daily["root"])
    ran = campaign("run", str(contract), "--out", str(daily["root"] / "runs"))
    assert ran.returncode == 1
    assert "failsafe dry run failed, so the incumbent was not touched" in ran.stderr
    assert len(ran.stderr.strip().splitlines()) == 1
    assert daily_pid(daily["root"]) == before and serves(daily["port"])


def test_detached_window_finishes_and_status_follows_it(daily: dict) -> None:
    started = campaign("run", str(daily["contract"]), "--out", str(daily["root"] / "runs"), "--detach")
    assert started.returncode == 0, started.stderr
    window = started.stdout.split()[1]
    seen = set()
    deadline = time.monotonic() + 300
    row = {}
    while time.monotonic() < deadline:
        status = campaign("status", window, "--json")
        if status.returncode == 0:
            (row,) = json.loads(status.stdout)
            seen.add(row["phase"])
            if row["signed"] and not row["runner_alive"]:
                break
        time.sleep(0.5)
    assert row.get("signed"), row
    assert row["gates_done"] == row["gates_planned"] == 2
    assert len(seen) >= 2  # status showed the window moving
    bundle = Path(row["bundle"])
    assert "judge done" in (bundle / "runner.log").read_text()
    assert campaign("verify", str(bundle)).returncode == 0
    assert serves(daily["port"])


def test_restore_twice_is_a_no_op_and_fenced(daily: dict) -> None:
    from campaign.daily.restore import restore

    ran = campaign("run", str(daily["contract"]), "--out", str(daily["root"] / "runs"))
    assert ran.returncode == 0
    state = _window_state(daily["root"])
    bystander = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        with state.locked():
            fresh = state.reload()
            # a pid recorded with another start time is not ours any more: it must not be touched
            fresh.lanes.append(type(fresh.lanes[0])(visit="ghost", pid=bystander.pid, start_time=1))
            fresh.save()
        pid = daily_pid(daily["root"])
        record = restore(state.window, reason="test", by="test")
        assert record["action"] == "already serving" and record["proof"]["pid"] == pid
        assert bystander.poll() is None
    finally:
        bystander.kill()


def _runner_past_the_daily_stop(daily: dict) -> tuple[subprocess.Popen, WindowState]:
    runner, window = runner_past_the_daily_stop(daily["contract"], daily["root"] / "runs")
    return runner, WindowState.load(window)


def test_runner_and_watchdog_killed_together_the_partner_restores(daily: dict) -> None:
    runner, state = _runner_past_the_daily_stop(daily)
    pids = watchdog_pids(state)
    os.kill(runner.pid, signal.SIGKILL)
    os.kill(pids["a"], signal.SIGKILL)  # the same moment: nobody left but the partner
    runner.wait()
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and (state.reload().armed or not state.reload().restored):
        time.sleep(0.2)
    assert state.reload().restored, "nobody restored the daily"
    assert serves_within(daily["port"], 30)
    records = read_jsonl(Path(state.bundle) / "journal.jsonl")
    restores = [r for r in records if r["step"] == "incumbent.restore" and r["event"] == "done"]
    assert restores and restores[-1]["by"].startswith("watchdog") and restores[-1].get("proof")
    assert not state.reload().armed
    from campaign.lanes.runtimes.process import marked_processes

    assert marked_processes(state.window) == []  # no lane left serving, tracked or not


def test_runner_and_both_watchdogs_killed_the_next_command_restores(daily: dict) -> None:
    runner, state = _runner_past_the_daily_stop(daily)
    kill_runner_and_watchdogs(runner, state)
    time.sleep(0.5)
    status = campaign("status")  # any command: it finds the orphaned window first
    assert "the runner and both watchdogs are gone; the daily was restored" in status.stderr, \
        (status.stderr, state.reload().model_dump())
    assert serves(daily["port"]) and not state.reload().armed
    from campaign.lanes.runtimes.process import marked_processes

    assert marked_processes(state.window) == []


def test_status_watch_follows_a_window_to_its_end_and_names_the_bundle(daily: dict) -> None:
    out = daily["root"] / "runs"
    runner = subprocess.Popen([sys.executable, "-m", "campaign.cli", "run", str(daily["contract"]), "--out", str(out)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not list(out.glob("*/journal.jsonl")):
        time.sleep(0.05)
    watched = campaign("status", "--watch", "--every", "0.5", timeout=600)
    assert runner.wait(timeout=60) == 0  # exit 0: the window completed with a promotable candidate
    assert watched.returncode == 0, watched.stderr
    bundle = next(out.iterdir())
    ended, decided, report = watched.stdout.strip().splitlines()[-3:]
    assert ended == f"window {bundle.name} ended (end done, signed); bundle: {bundle}", watched.stdout
    assert "phase" in watched.stdout and "failsafe" in watched.stdout  # the table, as it stood at the end
    # what it decided, per candidate, with the deciding reason; and where the report is (not yet written)
    assert decided.startswith(f"{bundle.name}: spec: PROMOTABLE: "), watched.stdout
    assert report == f"{bundle.name}: report: not published yet (campaign publish {bundle})"
    assert campaign("publish", str(bundle)).returncode == 0
    (row,) = json.loads(campaign("status", bundle.name, "--json").stdout)
    assert row["report"] == str(bundle.parent / f"{bundle.name}.published" / "report.html")
    assert [(d["candidate"], d["decision"]) for d in row["decisions"]] == [("spec", "PROMOTABLE")]
    shown = campaign("status", bundle.name)
    assert shown.returncode == 0 and f"{bundle.name}: report: {row['report']}" in shown.stdout


def test_the_periodic_check_cron_runs_brings_the_daily_back_when_every_process_of_the_window_is_killed(
        daily: dict) -> None:
    """A process daily behind the watchdog pair, on a machine without systemd: the periodic check is the
    supervisor outside the runner's process tree. The command its crontab line runs (taken from
    `campaign failsafe install --print`) is run here as cron runs it, in a bare environment: no cron daemon
    runs in the test machine, and the real `crontab` would edit this machine's own."""
    from campaign.failsafe.supervisor import MARK

    shown = campaign("failsafe", "install", "--print")
    assert shown.returncode == 0, shown.stderr
    line = shown.stdout.splitlines()[0]
    assert line.startswith("* * * * * ") and line.endswith(MARK)
    assert f"XDG_STATE_HOME={daily['root'] / 'state'}" in line and "-m campaign.cli failsafe check" in line
    command = line[len("* * * * * "):-len(MARK)]
    cron = {"HOME": os.environ["HOME"], "PATH": "/usr/bin:/bin", "SHELL": "/bin/sh"}  # what cron gives a job

    def periodic() -> subprocess.CompletedProcess[str]:
        return subprocess.run(["/bin/sh", "-c", command], env=cron, capture_output=True, text=True, timeout=300)

    assert periodic().returncode == 0  # nothing to restore yet; it marks that it ran
    log = daily["root"] / "state" / "campaign" / "failsafe-check.log"
    assert not log.exists() or log.read_text() == ""  # silent when there is nothing to do
    runner, window = runner_past_the_daily_stop(daily["contract"], daily["root"] / "runs")
    state = WindowState.load(window)
    # the window says which supervisor guards it, outside its own process tree
    assert state.failsafe_backend == "watchdog" and "periodic check" in (state.failsafe_supervisor or "")
    kill_runner_and_watchdogs(runner, state)
    assert not serves(daily["port"])  # down, and nothing of the window left to bring it back
    ran = periodic()
    assert ran.returncode == 0, ran.stdout + ran.stderr + (log.read_text() if log.exists() else "")
    assert serves(daily["port"]) and not state.reload().armed
    (row,) = json.loads(campaign("status", "--json").stdout)
    assert "periodic check" in row["failsafe_supervisor"]
    assert f"window {window}: the runner and both watchdogs are gone; the daily was restored" in log.read_text()
    records = read_jsonl(daily["root"] / "runs" / window / "journal.jsonl")
    armed = next(r for r in records if r["step"] == "failsafe.arm" and r["event"] == "done")
    assert "periodic check" in armed["supervisor"] and "warning" not in armed
    restored = [r for r in records if r["step"] == "incumbent.restore" and r["event"] == "done"]
    assert restored[-1]["by"] == "campaign failsafe check" and restored[-1]["proof"]["completion"]["status"] == 200
    # installing needs a crontab; where there is none the command says what to install, and the line to run
    no_cron = campaign("failsafe", "install", env={"PATH": str(daily["root"])})
    assert no_cron.returncode != 0 and len(no_cron.stderr.strip().splitlines()) == 1, no_cron.stderr
    assert "no `crontab` on this machine" in no_cron.stderr and "failsafe check" in no_cron.stderr
