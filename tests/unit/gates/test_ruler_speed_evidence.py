"""The ruler's `speed` observable also takes a speed gate of the same window as evidence: an axis that
acts only on speed (a thread count) shows nowhere else, and a comparison over interleaved boots that
excludes zero is far stronger evidence than a few short probes. Hand-written speed records (the judge
reads only the bundle)."""

from __future__ import annotations

import json
from pathlib import Path

from campaign.contracts.load import load_contract
from campaign.gates.base import GateContext
from campaign.gates.registry import gate_for
from tests.support.contracts import MODEL_SHA256, write_contract
from tests.support.speedrecords import PROMPTS, rates, write_boots

BODY = f"""\
    contract: t-ruler-speed
    version: 1
    lane_defaults:
      runtime: process
      engine: llamacpp
      executable: llama-server
      port: 18000
      model: {{path: m.gguf, sha256: {MODEL_SHA256}}}
    lanes:
      - {{name: base, role: control}}
      - name: cand
        role: candidate
        axis: [args.threads]
        set: {{args: {{--threads: "2"}}}}
    inputs:
      p: {{file: prompts/p.jsonl}}
    gates:
      - {{kind: ruler, input: p, rule: {{observe: [outputs, speed]}}}}
      - {{kind: speed, input: p, concurrency: [1, 2], max_tokens: 16, reps: 2, max_boot_pairs: 3}}
    """


def gates(tmp_path: Path):
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = write_contract(tmp_path, BODY)
    (tmp_path / "prompts" / "p.jsonl").write_text("".join(
        json.dumps({"id": pid, "class": cls, "prompt": f"prompt {pid}"}) + "\n" for pid, cls in PROMPTS))
    loaded = load_contract(path)
    ctx = GateContext(bundle=tmp_path / "bundle", contract=loaded, input_paths={"p": tmp_path / "prompts" / "p.jsonl"})
    ruler, speed = (gate_for(spec, ctx) for spec in loaded.contract.gates)
    return ruler, speed, loaded.lanes["cand"], loaded.lanes["base"]


def test_a_speed_comparison_that_excludes_zero_shows_the_axis_acting(tmp_path: Path) -> None:
    ruler, speed, cand, base = gates(tmp_path)
    write_boots(speed, [rates(), rates(1.01), rates(0.99)], [rates(1.3, wobble=0.01), rates(1.31)])
    evidence = ruler._speed_gate_evidence(cand, base)
    assert evidence.startswith("the speed gate's comparison at C1: +3") and "over 5 boots" in evidence


def test_an_identical_lane_gives_no_speed_evidence(tmp_path: Path) -> None:
    ruler, speed, cand, base = gates(tmp_path)
    write_boots(speed, [rates(1.02), rates(0.98), rates(1.01), rates(0.99)], [rates(1.0), rates(1.01), rates(0.985)])
    assert ruler._speed_gate_evidence(cand, base) is None
    # and none at all without speed records
    assert gates(tmp_path / "empty")[0]._speed_gate_evidence(cand, base) is None
