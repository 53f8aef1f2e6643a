"""Rate levels on real llama-server lanes: a Poisson schedule that every boot of both lanes replays (the
control and a candidate that serves one request at a time), late sends counted, and goodput on a stated SLO
with the knee of each lane reported."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from campaign.fsutil import load_json_strict
from tests.support.contracts import candidate, contract_yaml, control, free_port, process_defaults, write_contract
from tests.support.windows import window_bundle

pytestmark = pytest.mark.integration

PROMPTS = ["Name a colour.", "Name a fruit.", "Name a city.", "Name a river.", "Name a tree.", "Name a bird."]


def _measured(path: Path) -> tuple[list[dict], dict[tuple, tuple]]:
    """A boot's schedule records, and each measured request's (scheduled, late) by level, rep and position."""
    records = [json.loads(line) for line in path.read_text().splitlines()]
    sends = {(r["tags"]["level"], r["tags"]["rep"], r["tags"]["position"]): (r["tags"]["scheduled_s"], r["tags"]["late_s"])
             for r in records if (r.get("tags") or {}).get("phase") == "measure"}
    return [r for r in records if r.get("kind") == "schedule"], sends


def test_every_boot_replays_one_poisson_schedule_and_goodput_is_reported(tmp_path: Path) -> None:
    if not shutil.which("llama-server"):
        pytest.fail("llama-server is not on PATH: run the tests with `make test`")
    args = ["--ctx-size", "2048", "--threads", "1", "--parallel", "4", "--seed", "0", "--no-webui", "--metrics"]
    body = contract_yaml(
        "t-rates", defaults=process_defaults(free_port(), args=args),
        lanes=[control(), candidate("one-slot", ["args.parallel"], args={"--parallel": "1"})],
        inputs={"p": {"file": "prompts/p.jsonl"}},
        # one pair: measured and reported, never decided; an SLO every request of this model meets, so the
        # good share is exactly 1 whatever this machine's speed
        gates=[{"kind": "speed", "input": "p", "concurrency": [], "rates": [2, 6], "max_tokens": 8, "reps": 2,
                "max_boot_pairs": 1, "arrival": {"seed": 11, "late_after_s": 0.05, "max_late_share": 0.5},
                "slo": {"e2e_s": 60.0, "min_good_share": 0.99},
                # what this test checks is the load and the goodput, not this shared 2-core host's quiet
                "rule": {"max_spread": 0.9, "max_reruns": 0, "max_host_busy": None, "max_loop_lag_ms": 200.0}}],
        requires=["speed"])
    bundle, _ = window_bundle(tmp_path, write_contract(tmp_path, body, prompts=[(f"p{i}", t) for i, t in enumerate(PROMPTS)]))
    raw = bundle / "raw" / "speed"
    boots = {name: _measured(raw / f"{name}.jsonl") for name in ("base", "one-slot", "base@rerun1")}
    schedules = [schedule for schedule, _ in boots.values()]
    assert schedules[0] == schedules[1] == schedules[2]
    assert [(s["level"], s["process"], s["seed"], len(s["offsets_s"])) for s in schedules[0]] == [
        ("2rps", "poisson", 11, 6), ("6rps", "poisson", 11, 6)]
    # every boot sent the same request at the same offset; each send's lateness was measured
    sent = [{key: scheduled for key, (scheduled, _) in sends.items()} for _, sends in boots.values()]
    assert sent[0] == sent[1] == sent[2] and len(sent[0]) == 2 * 2 * 6
    offsets = {s["level"]: s["offsets_s"] for s in schedules[0]}
    assert all(scheduled == pytest.approx(offsets[level][position], abs=1e-5)
               for (level, _, position), scheduled in sent[0].items())
    assert all(isinstance(late, float) for _, sends in boots.values() for _, late in sends.values())
    result = load_json_strict(bundle / "gates" / "speed" / "one-slot.json")
    assert result["verdict"] == "INCONCLUSIVE", result["reasons"]  # one pair never decides
    for level in ("2rps", "6rps"):
        goodput = result["details"]["levels"][level]["goodput"]
        assert goodput["control"]["share"] == goodput["candidate"]["share"] == 1.0, goodput
        assert goodput["candidate"]["requests"] == 2 * 6 and goodput["control"]["requests"] == 2 * 2 * 6
        assert goodput["paired_change"]["change"] == 0.0 and goodput["paired_change"]["pairs"] == 1
    assert result["details"]["slo"]["highest_within"] == {"control": {"rate": "6rps"}, "candidate": {"rate": "6rps"}}
    assert set(result["details"]["knee"]["control"]) == {"rate"}
