"""The speed gate against real llama-server processes (parallel slots, --metrics) and the real model."""

from __future__ import annotations

import asyncio
import csv
import os
from pathlib import Path

import httpx
import pytest

from campaign.fsutil import load_json_strict, read_jsonl
from campaign.gates.result import Verdict
from campaign.lanes.engines.client import LaneClient
from campaign.lanes.engines.llamacpp import LlamaCppAdapter
from tests.support.cli import campaign, keys_and_freeze
from tests.support.contracts import free_port, write_contract
from tests.support.speed import (
    SPEED_PROMPTS,
    gate_on,
    llama_server_argv,
    measure,
    process,
    speed_contract,
    write_prompts,
)

pytestmark = pytest.mark.integration



@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> str:
    import shutil

    executable = shutil.which("llama-server")
    if not executable:
        pytest.fail("llama-server is not on PATH: run the tests with `make test`")
    port = free_port()
    log = tmp_path_factory.mktemp("llama") / "server.log"
    with process(llama_server_argv(executable, port), log, f"http://127.0.0.1:{port}/health"):
        yield f"http://127.0.0.1:{port}"


class _Intruder(LlamaCppAdapter):
    """The real llama-server adapter, plus another client that sends one real completion to the same
    port right after the first row's opening metrics scrape: the seeds' 'another client mid-probe'."""

    def __init__(self, base_url: str) -> None:
        self.base_url, self.fired, self.task = base_url, False, None

    async def scrape_metrics(self, client: LaneClient) -> str | None:
        text = await super().scrape_metrics(client)
        if not self.fired:
            self.fired = True
            self.task = asyncio.create_task(self._other_client())
            await asyncio.sleep(0.2)  # its request is in the engine before ours start
        return text

    async def _other_client(self) -> None:
        async with httpx.AsyncClient(base_url=self.base_url, timeout=120) as other:
            await other.post("/v1/chat/completions", json={
                "messages": [{"role": "user", "content": "Tell me about owls."}], "max_tokens": 12})


async def test_another_client_on_the_port_voids_the_row_which_is_rerun(server: str, tmp_path: Path) -> None:
    gate, _ = gate_on(tmp_path, "{kind: speed, input: p, concurrency: [1], max_tokens: 8, reps: 2, "
                                "rule: {max_spread: 100.0, max_reruns: 1}}")
    intruder = _Intruder(server)
    results = await measure(gate, server, "base", intruder)
    await intruder.task
    first = results[(1, "prose")]
    assert [r.status for r in first] == ["VOID", "valid"]
    assert any("another client on the port" in reason for reason in first[0].reasons), first[0].reasons
    assert first[1].engine["generated_tokens"] == sum(s.tokens for _, s in first[1].stats)
    assert [r.status for r in results[(1, "code")]] == ["valid"]
    # the void attempt stays in the bundle, the row was re-warmed before its re-run
    rows = [r for r in gate.ctx.raw_records("speed", "base") if r.get("kind") == "row"]
    assert [(r["class"], r["attempt"], r["status"]) for r in rows] == [
        ("prose", 0, "VOID"), ("prose", 1, "valid"), ("code", 0, "valid")]
    warm = read_jsonl(gate.ctx.bundle / "raw" / "speed" / "warmup" / "base.jsonl")
    assert [(w["tags"]["wave"], w["tags"]["class"]) for w in warm] == [
        ("initial", "prose"), ("initial", "code"), ("rewarm", "prose")]


async def test_a_row_that_stays_void_is_rewarmed_rerun_then_inconclusive(server: str, tmp_path: Path) -> None:
    gate, contract = gate_on(tmp_path, "{kind: speed, input: p, concurrency: [2], max_tokens: 8, reps: 2, "
                                       "rule: {max_spread: 0.000001, max_reruns: 1, max_control_drift: null}}",
                             prompts=SPEED_PROMPTS[4:6])
    for visit in ("base", "same"):
        results = await measure(gate, server, visit)
        assert [r.status for r in results[(2, "code")]] == ["VOID", "VOID"]
    result = gate.judge(contract.lanes["same"], contract.lanes["base"])
    assert result.verdict is Verdict.INCONCLUSIVE
    assert any(c.startswith("boot not counted at C2:") and "row C2/code stayed VOID after 2 attempt(s): spread" in c
               for c in result.caveats), result.caveats
    assert result.reasons[0].startswith("C2: ") and "too few boots count at this level" in result.reasons[0]
    table = gate.bundle_tables()["throughput.csv"]
    assert len(table) == 2 * 2 * 2  # visits x attempts x reps, every void row kept
    assert {row["row_status"] for row in table} == {"VOID"}
    assert all(row["aggregate_tok_s"] > 0 and row["requests"] == 2 for row in table)
    warm = read_jsonl(gate.ctx.bundle / "raw" / "speed" / "warmup" / "same.jsonl")
    assert [w["tags"]["wave"] for w in warm] == ["initial"] * 2 + ["rewarm"] * 2


@pytest.fixture(scope="module")
def window(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A whole window, run in this process so its lanes are always stopped by the window itself."""
    import shutil

    from campaign.signing import load_signing_key, load_trusted
    from campaign.window.run import run_window

    if not shutil.which("llama-server"):
        pytest.fail("llama-server is not on PATH: run the tests with `make test`")
    root = tmp_path_factory.mktemp("speedwindow")
    gate = ("{kind: speed, input: p, concurrency: [1, 4], max_tokens: 16, reps: 2, max_boot_pairs: 2, "
            "rule: {confidence: 0.99, max_spread: 0.25, max_reruns: 1, max_control_drift: 0.15}}")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CONFIG_HOME", str(root / "xdg"))
        contract = write_contract(root, speed_contract(free_port(), gate=gate))
        write_prompts(root / "prompts" / "p.jsonl")
        keys_and_freeze(contract)
        outcome = run_window(contract, key=load_signing_key(), trusted=load_trusted(), out_dir=root / "runs")
        assert outcome.signed
        verified = campaign("verify", str(outcome.bundle))
        yield {"bundle": outcome.bundle, "verify": verified}


def test_identical_lanes_are_not_a_win_and_their_ci_covers_zero(window: dict) -> None:
    """Two lanes that serve identically (a dead env knob). The verdict must not be a win; a CI that
    decides (FAIL: even its high end under the +5% bar) covers zero. 99% over the looks here, because a
    test that asserts coverage of a 95% CI would fail by design one run in twenty. The boots are the
    unit: over prompts alone, one idle CI run once put this lane at +8.6% [+4.9%, +11.9%], because every
    prompt of one boot shares that boot's luck. Undecided at the last pair, or with boots that could not
    count (a busy host, spread), INCONCLUSIVE is the honest answer: without the host check, a run here
    once measured the identical candidate +39% faster."""
    result = load_json_strict(window["bundle"] / "gates" / "speed" / "same.json")
    assert result["verdict"] != "PASS", result["reasons"]
    metrics = result["metrics"]
    for level in ("C1", "C4"):
        if f"{level}.ci_low" in metrics:
            assert metrics[f"{level}.ci_low"]["value"] <= 0 <= metrics[f"{level}.ci_high"]["value"], result["reasons"]
            assert metrics[f"{level}.mean_change"]["denominator"] == 8
    if result["verdict"] == "INCONCLUSIVE":
        assert any(word in r for r in result["reasons"] for word in ("undecided", "needs 2 pairs", "moved")), \
            result["reasons"]
    schedule = result["details"]["schedule"]
    assert [b["visit"] for b in schedule["boots"]][:5] == ["base", "same", "base@rerun1", "same@rerun1", "base@rerun2"]
    assert schedule["looks"] == schedule["pairs"] - 1 or schedule["stopped_at_pairs"] is not None


def test_the_report_draws_every_boot_of_the_real_window(window: dict, tmp_path: Path) -> None:
    from campaign.receipts.publish import publish
    from tests.support.browser import labelled_plots, open_in_chromium

    report = publish(window["bundle"], tmp_path / "out")["html"]
    html = report.read_text()
    dom, console, requests = open_in_chromium(report)  # the real window's report, in a real browser
    assert console == [] and requests == [] and len(labelled_plots(dom)) >= 4
    section = html.split('id="gate-speed-same"')[1].split("</section>")[0]
    result = load_json_strict(window["bundle"] / "gates" / "speed" / "same.json")
    for level, entry in result["details"]["levels"].items():
        if entry.get("prompts"):
            assert f'data-title="C{level}: decode_tok_s of every boot, in window order' in section
    assert 'data-title="Every row over the window' in section
    for visit in (boot["visit"] for boot in result["details"]["schedule"]["boots"]):
        assert f">{visit}</text>" in section  # each visit is a tick of the rows' plot


def test_reps_record_the_hosts_other_load(window: dict) -> None:
    """A shared host is the one thing a paired CI cannot see: every prompt of a lane visit shares its
    load. Each rep records host, lane and client CPU, so a busy host voids the row instead."""
    reps = [r for r in read_jsonl(window["bundle"] / "raw" / "speed" / "same.jsonl") if r.get("kind") == "rep"]
    assert reps and all(r["lane_cpu_s"] > 0 and r["host_busy_s"] > 0 and r["host_cpus"] >= 1 for r in reps)
    # the host's counter is sampled at each tick while a process's time is its scheduler runtime, so over
    # a sub-second rep the host may read a few ticks per CPU short of the lane (CI saw it once): the two
    # agree within that sampling, not exactly
    tick = 1 / os.sysconf("SC_CLK_TCK")
    for rep in reps:
        slack = 0.1 * rep["lane_cpu_s"] + 4 * tick * rep["host_cpus"]
        assert rep["host_busy_s"] >= rep["lane_cpu_s"] - slack, rep
    result = load_json_strict(window["bundle"] / "gates" / "speed" / "same.json")
    for row in result["details"]["rows"]:
        if any("another tenant on the host" in reason for reason in row["reasons"]):
            assert row["status"] == "VOID"


def test_window_bundle_has_throughput_csv_warmup_and_engine_counters(window: dict) -> None:
    bundle = window["bundle"]
    assert window["verify"].returncode == 0, window["verify"].stderr
    with open(bundle / "throughput.csv", newline="") as handle:
        table = list(csv.DictReader(handle))
    lanes = {row["lane"] for row in table}
    # the control's boots and the candidate's, interleaved in the same window
    assert {"base", "same", "base@rerun1", "same@rerun1", "base@rerun2"} <= lanes
    for lane in lanes:
        valid = {(r["level"], r["class"], r["rep"]) for r in table if r["lane"] == lane and r["row_status"] == "valid"}
        assert len(valid) <= 2 * 2 * 2
    assert all((bundle / row["source"]).is_file() for row in table)
    assert all(float(row["aggregate_tok_s"]) > 0 for row in table)
    warm = read_jsonl(bundle / "raw" / "speed" / "warmup" / "base.jsonl")
    initial = [w for w in warm if w["tags"]["wave"] == "initial"]
    assert sorted((w["tags"]["level"], w["tags"]["class"]) for w in initial) == sorted(
        [(1, "prose"), (1, "code")] + [(4, "prose")] * 4 + [(4, "code")] * 4)
    measured = [r for r in read_jsonl(bundle / "raw" / "speed" / "base.jsonl") if r.get("tags", {}).get("phase")]
    assert measured and not any(r["tags"]["phase"] == "warmup" for r in measured)
    result = load_json_strict(bundle / "gates" / "speed" / "same.json")
    rows = result["details"]["rows"]  # every attempt, valid or void, carries its engine counter deltas
    assert rows and all(row["engine"]["generated_tokens"] > 0 for row in rows)
    assert result["metrics"]["control.client_cpu_ms_per_1k_tokens"]["unit"] == "ms per 1k tokens"


def test_c4_requests_really_overlap_on_parallel_slots(window: dict) -> None:
    records = read_jsonl(window["bundle"] / "raw" / "speed" / "base.jsonl")
    reps = [r for r in records if r.get("kind") == "rep" and r["level"] == 4]
    for rep in reps:
        requests = [r for r in records if r.get("tags", {}).get("phase") == "measure"
                    and (r["tags"]["level"], r["tags"]["class"], r["tags"]["attempt"], r["tags"]["rep"])
                    == (4, rep["class"], rep["attempt"], rep["rep"])]
        in_flight = sum(r["elapsed_s"] for r in requests) / rep["duration_s"]
        assert in_flight > 2.0, in_flight  # four users on four slots, not one after another
    props = load_json_strict(window["bundle"] / "SUMMARY.json")["lanes"]["base"]["engine_version"]
    assert props["total_slots"] == 4
