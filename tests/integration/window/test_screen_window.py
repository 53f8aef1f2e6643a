"""A window that ends at its screen: the cache replay says the candidate's slot map is not worth a live
window, so no lane boots and the daily (a real llama-server, started by hand) is never stopped, and the
signed bundle carries the exact hit rate and the decision."""

from __future__ import annotations

import hashlib
import json
import os
import signal
from pathlib import Path

import pytest

from campaign.fsutil import load_json_strict, read_jsonl
from tests.support.cli import campaign, frozen_window
from tests.support.contracts import candidate, contract_yaml, control, free_port, process_defaults, write_contract
from tests.support.daily import daily_pid, serves

pytestmark = pytest.mark.integration


def _write(path: Path, text: str) -> str:
    path.write_text(text)
    return hashlib.sha256(text.encode()).hexdigest()


def _screened_contract(tmp_path: Path, port: int, *, daily: bool = True) -> Path:
    """Lanes that differ in their slot map; a cache screen that the candidate's map fails."""
    # 2 layers, 6 experts, top-2; every step routes the next two ids of a cycle over all 6: an LRU of 4
    # slots never holds the ids asked for next (each was used 3 steps ago, behind 4 newer ids)
    trace = "".join(json.dumps({"layers": [[(2 * s) % 6, (2 * s + 1) % 6]] * 2}) + "\n" for s in range(300))
    digests = {"trace": _write(tmp_path / "trace.jsonl", json.dumps({"n_experts": 6}) + "\n" + trace),
               "a": _write(tmp_path / "slots-a.json", "[2, 2]\n"), "b": _write(tmp_path / "slots-b.json", "[4, 4]\n")}
    daily_fields = {"incumbent": {"runtime": "process", "endpoint": f"http://127.0.0.1:{port}", "pidfile": "daily.pid",
                                  "lane": "base"},
                    "failsafe": {"deadline": "10m"}} if daily else {}
    return write_contract(tmp_path, contract_yaml(
        "t-screen-window",
        defaults=process_defaults(port, budget=None, env={"SLOT_CACHE_PER_LAYER": "${file:slotmap}"},
                                  files=[{"name": "slotmap", "path": "slots-a.json", "sha256": digests["a"]}]),
        lanes=[control(), candidate("wide", ["files.slotmap"],
                                    files=[{"name": "slotmap", "path": "slots-b.json", "sha256": digests["b"]}])],
        inputs={"p": {"file": "prompts/p.jsonl"}},
        gates=[{"kind": "screen", "id": "cache", "files": [{"name": "trace", "path": "trace.jsonl",
                                                           "sha256": digests["trace"]}],
                "cache_replay": {"trace": "trace", "slot_map": "slotmap"}, "rule": {"require": ["hit_rate >= 0.5"]}},
               {"kind": "greedy", "input": "p", "repeats": 2, "max_tokens": 8, "rule": {"self_identical": "3/3"}}],
        requires=["cache", "greedy"], **daily_fields))


def test_a_window_ends_at_a_failing_screen_with_its_exact_figure_signed(tmp_path: Path, llama_server: str) -> None:
    port = free_port()
    contract = _screened_contract(tmp_path, port)
    env = {"XDG_CONFIG_HOME": str(tmp_path / "xdg"), "XDG_STATE_HOME": str(tmp_path / "state")}
    assert campaign("keys", "init", env=env).returncode == 0
    assert campaign("freeze", str(contract), env=env).returncode == 0
    started = campaign("daily", "start", str(contract), "--log", str(tmp_path / "daily.log"), env=env)
    assert started.returncode == 0, started.stderr
    pid = daily_pid(tmp_path)
    try:
        bundle, verified = frozen_window(contract, tmp_path / "runs", env=env)
        assert daily_pid(tmp_path) == pid and serves(port)  # the same process: never stopped, still serving
    finally:
        os.killpg(pid, signal.SIGKILL)
    assert verified.returncode == 0, verified.stderr

    screen = load_json_strict(bundle / "gates" / "cache" / "wide.json")
    assert screen["verdict"] == "FAIL"
    assert screen["metrics"]["hit_rate"]["value"] == 0  # exact: every access of the cycle misses
    assert screen["details"]["details"]["exact"] is True
    assert screen["details"]["details"]["trace"]["steps"] == 300
    assert [p.name for p in (bundle / "lanes" / "wide").iterdir()] == ["spec.json"]  # never booted
    assert [p.name for p in (bundle / "lanes" / "base").iterdir()] == ["spec.json"]
    steps = {r.get("step") for r in read_jsonl(bundle / "journal.jsonl")}
    assert "screened" in steps and not steps & {"incumbent.snapshot", "failsafe.arm", "incumbent.stop"}
    summary = load_json_strict(bundle / "SUMMARY.json")
    assert summary["candidates"]["wide"]["screened_out"]["gate"] == "cache"
    assert summary["restore"] == {"incumbent": f"http://127.0.0.1:{port}", "proved": None, "action": "never stopped",
                                  "error": None}
    assert summary["candidates"]["wide"]["gates"]["greedy"]["verdict"] == "INCONCLUSIVE"
    assert "not worth a live window" in summary["candidates"]["wide"]["gates"]["greedy"]["reasons"][0]
    rejudged = campaign("rejudge", str(bundle), "--out", str(tmp_path / "rejudged"), env=env)
    assert rejudged.returncode == 0, rejudged.stdout + rejudged.stderr
    assert "changed:" not in rejudged.stdout  # the screen's verdict replays from its raw record
    published = campaign("publish", str(bundle), "--out", str(tmp_path / "report"), env=env)
    assert published.returncode == 0, published.stderr
    assert "wide: REFUSED: cache: not worth a live window: hit_rate 0 >= 0.5: does not hold" in published.stdout
    assert "not worth a live window" in (tmp_path / "report" / "SUMMARY.md").read_text()


def test_a_window_killed_after_its_screen_resumes_without_running_it_again(tmp_path: Path) -> None:
    contract = _screened_contract(tmp_path, free_port(), daily=False)
    env = {"XDG_CONFIG_HOME": str(tmp_path / "xdg"), "XDG_STATE_HOME": str(tmp_path / "state")}
    assert campaign("keys", "init", env=env).returncode == 0
    assert campaign("freeze", str(contract), env=env).returncode == 0
    # records: start, the screen's intent, its done: killed right after the screen finished
    killed = campaign("run", str(contract), "--out", str(tmp_path / "runs"),
                      env={**env, "CAMPAIGN_FAULT_KILL_AFTER_RECORD": "3"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    bundle = next((tmp_path / "runs").iterdir())
    assert len(read_jsonl(bundle / "raw" / "cache" / "wide.jsonl")) == 1
    resumed = campaign("resume", bundle.name, env=env)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert len(read_jsonl(bundle / "raw" / "cache" / "wide.jsonl")) == 1  # not run again, nothing set aside
    assert not list((bundle / "raw" / "cache").glob("*.interrupted-*"))
    assert load_json_strict(bundle / "SUMMARY.json")["candidates"]["wide"]["screened_out"]["gate"] == "cache"
    assert campaign("verify", str(bundle), env=env).returncode == 0
