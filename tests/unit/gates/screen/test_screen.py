"""The screen gate on real scripts run in the task sandbox's fences and on real trace files: a rule over
the printed metrics decides; a script that fails, times out or prints something else is INCONCLUSIVE with
the reason; the cache replay's figures are exact and a declared subsample says so in the verdict."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from campaign.contracts.load import load_contract
from campaign.fsutil import JsonlAppender
from campaign.gates.base import GateContext
from campaign.gates.registry import gate_for
from campaign.gates.result import Verdict
from campaign.gates.screen.gate import evaluate
from tests.support.contracts import MODEL, MODEL_SHA256, write_contract


def _pin(path: Path, data: bytes) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return hashlib.sha256(data).hexdigest()


def _contract(directory: Path, screen: str, *, slots: tuple[list[int], list[int]] = ([2, 2], [4, 4])) -> Path:
    sha_a = _pin(directory / "slots" / "a.json", json.dumps(slots[0]).encode())
    sha_b = _pin(directory / "slots" / "b.json", json.dumps(slots[1]).encode())
    return write_contract(directory, f"""\
        contract: t-screen
        version: 1
        lane_defaults:
          runtime: process
          engine: llamacpp
          executable: llama-server
          port: 18002
          model: {{path: {MODEL}, sha256: {MODEL_SHA256}}}
          env: {{SLOT_CACHE_PER_LAYER: "${{file:slotmap}}"}}
          files: [{{name: slotmap, path: slots/a.json, sha256: {sha_a}}}]
        lanes:
          - name: base
            role: control
          - name: wide
            role: candidate
            axis: [files.slotmap]
            set:
              files: [{{name: slotmap, path: slots/b.json, sha256: {sha_b}}}]
        gates:
          - {screen}
        """)


def _run(path: Path) -> tuple[object, dict]:
    loaded = load_contract(path)
    bundle = path.parent / "bundle"
    gate = gate_for(loaded.contract.gates[0], GateContext(bundle=bundle, contract=loaded))
    candidate, control = loaded.lanes["wide"], loaded.lanes["base"]
    with JsonlAppender(gate.ctx.raw_path(gate.gate_id, candidate.name)) as sink:
        record = gate.screen(candidate, control, sink)
    return gate.judge(candidate, control), record


def _script_screen(directory: Path, source: str, rule: str, *, timeout: str = "20s", args: str = "") -> str:
    sha = _pin(directory / "screens" / "s.py", source.encode())
    return (f"{{kind: screen, id: s, script: {{path: screens/s.py, sha256: {sha}, args: [{args}]}}, "
            f"timeout: {timeout}, rule: {{require: [{rule!r}]}}}}")


METRICS = """\
import json, sys
slots = json.load(open(sys.argv[1]))
print("reading", sys.argv[1], file=sys.stderr)
print(json.dumps({"hit_rate": sum(slots) / 10, "layers": len(slots)}))
"""


@pytest.mark.parametrize(("rule", "verdict"), [("hit_rate >= 0.75", Verdict.PASS), ("hit_rate >= 0.9", Verdict.FAIL)])
def test_a_script_screen_reads_the_candidates_file_and_its_rule_decides(tmp_path: Path, rule: str,
                                                                        verdict: Verdict) -> None:
    path = _contract(tmp_path, _script_screen(tmp_path, METRICS, rule, args='"${file:slotmap}"'))
    result, record = _run(path)
    assert record["metrics"] == {"hit_rate": 0.8} and record["reported"] == 2  # the candidate's map: [4, 4]
    assert result.verdict is verdict, result.reasons
    assert result.reasons == [f"hit_rate 0.8 >= {float(rule.split()[-1]):g}: "
                              f"{'holds' if verdict is Verdict.PASS else 'does not hold'}"]


@pytest.mark.parametrize(("source", "timeout", "reason"), [
    ("raise SystemExit(3)\n", "20s", "did not finish (program, exit code 1)"),
    ("import time\ntime.sleep(30)\n", "1s", "did not finish (timeout, exit code"),
    ("print('hit rate: 0.8')\n", "20s", "not one JSON object"),
    ("import subprocess\nsubprocess.run(['true'])\n", "20s", "did not finish (program, exit code 1)"),
    ("print('[0.8]')\n", "20s", "printed a JSON list, not an object"),
    ("import json\nprint(json.dumps({'miss': 1}))\n", "20s", None),
])
def test_a_screen_that_cannot_measure_is_inconclusive_with_the_reason(tmp_path: Path, source: str, timeout: str,
                                                                      reason: str | None) -> None:
    result, _ = _run(_contract(tmp_path, _script_screen(tmp_path, source, "hit_rate >= 0.5", timeout=timeout)))
    assert result.verdict is Verdict.INCONCLUSIVE
    expected = reason or "hit_rate was not reported"
    assert any(expected in text for text in result.reasons), result.reasons


def test_clauses_weigh_numbers_only() -> None:
    assert evaluate(["a >= 1", "b < 2"], {"a": 1, "b": 1.5})[0] is Verdict.PASS
    assert evaluate(["a > 1"], {"a": 1})[0] is Verdict.FAIL
    assert evaluate(["a > 1"], {"a": True})[0] is Verdict.INCONCLUSIVE
    assert evaluate(["a > 1"], {"a": float("nan")})[0] is Verdict.INCONCLUSIVE


def _trace(directory: Path, steps: int, layers: int, experts: int, k: int) -> str:
    """A trace whose hit rates are known by construction: every layer cycles through ``k + 1`` sets' worth
    of experts, so a cache of at least that many ids hits everything after the first pass."""
    ids = np.arange(steps * k).reshape(steps, 1, k) % ((k + 1) * 1)
    experts_ids = np.broadcast_to(ids, (steps, layers, k)).astype(np.int16)
    buffer = directory / "trace.npz"
    np.savez(buffer, experts=experts_ids, n_experts=np.array(experts))
    return hashlib.sha256(buffer.read_bytes()).hexdigest()


def _replay_screen(directory: Path, rule: str, *, sample_every: int = 1) -> str:
    sha = _trace(directory, steps=400, layers=2, experts=16, k=2)
    return (f"{{kind: screen, id: cache, files: [{{name: trace, path: trace.npz, sha256: {sha}}}], "
            f"cache_replay: {{trace: trace, slot_map: slotmap, sample_every: {sample_every}}}, "
            f"rule: {{require: [{rule!r}]}}}}")


def test_cache_replay_is_exact_and_compares_with_the_control(tmp_path: Path) -> None:
    # ids cycle 0,1 | 2,0 | 1,2 ...: three distinct ids per layer. 4 slots hold them all (only the first
    # pass misses: 3 of 800 accesses per layer); 2 slots under LRU always evict the id needed next.
    result, record = _run(_contract(tmp_path, _replay_screen(tmp_path, "hit_rate >= 0.99")))
    assert result.verdict is Verdict.PASS, result.reasons
    metrics = record["metrics"]
    assert metrics["hit_rate"] == pytest.approx(1 - 3 / 800)
    assert metrics["control_hit_rate"] < metrics["hit_rate"]
    assert metrics["hit_rate_gain"] == pytest.approx(metrics["hit_rate"] - metrics["control_hit_rate"])
    assert record["details"]["exact"] is True and record["details"]["fraction"] == 1
    assert metrics["belady.hit_rate"] >= metrics["hit_rate"]


def test_a_declared_subsample_is_never_called_exact(tmp_path: Path) -> None:
    result, record = _run(_contract(tmp_path, _replay_screen(tmp_path, "hit_rate >= 0.5", sample_every=8)))
    assert record["details"]["exact"] is False and record["details"]["fraction"] < 1
    assert any("subsample" in reason for reason in result.reasons), result.reasons


def test_an_unreadable_trace_is_inconclusive(tmp_path: Path) -> None:
    path = _contract(tmp_path, _replay_screen(tmp_path, "hit_rate >= 0.5"))
    loaded = load_contract(path)
    (tmp_path / "trace.npz").write_bytes(b"not a trace")  # after loading: as if changed under a running window
    gate = gate_for(loaded.contract.gates[0], GateContext(bundle=tmp_path / "b", contract=loaded))
    with JsonlAppender(gate.ctx.raw_path("cache", "wide")) as sink:
        gate.screen(loaded.lanes["wide"], loaded.lanes["base"], sink)
    result = gate.judge(loaded.lanes["wide"], loaded.lanes["base"])
    assert result.verdict is Verdict.INCONCLUSIVE and "could not measure" in result.reasons[0]


def test_only_named_numbers_leave_a_screen_and_numpy_loads_under_the_audit_hook(tmp_path: Path) -> None:
    """A contract from someone else may pin a script that reads what the runner can read: none of its text
    (a printed string, a key made of it, an exception's message) reaches the bundle."""
    secret = tmp_path / "secret.txt"
    secret.write_text("hunter2-do-not-leak")
    leak = f"""\
import json, numpy as np
text = open({str(secret)!r}).read()
print(json.dumps({{"hit_rate": float(np.mean([0.7, 0.9])), "leak": text, text: 1.0}}))
"""
    result, record = _run(_contract(tmp_path, _script_screen(tmp_path, leak, "hit_rate >= 0.75")))
    assert result.verdict is Verdict.PASS and record["metrics"] == {"hit_rate": 0.8} and record["reported"] == 3
    assert "hunter2" not in json.dumps(record) and "hunter2" not in json.dumps(result.dump())
    raising = f"raise ValueError(open({str(secret)!r}).read())\n"
    (tmp_path / "again").mkdir()
    result, record = _run(_contract(tmp_path / "again", _script_screen(tmp_path / "again", raising, "hit_rate >= 0.5")))
    assert result.verdict is Verdict.INCONCLUSIVE and "hunter2" not in json.dumps(result.dump())
