"""Hand-written speed records, as the live gate writes them: one lane visit's rows, reps and streams,
with each prompt's decode rate chosen by the test (the judge reads only these)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any, Callable

from campaign.contracts.load import LoadedContract, load_contract
from campaign.fsutil import JsonlAppender
from campaign.gates.base import Gate, GateContext
from campaign.gates.registry import gate_for
from tests.support.contracts import MODEL_SHA256, write_contract

PROMPTS = [("p1", "prose"), ("p2", "prose"), ("p3", "prose"), ("c1", "code"), ("c2", "code"), ("c3", "code")]
TOKENS = 16


def speed_contract(lanes: str, gates: str, name: str = "t-speed") -> str:
    """A contract on a model nobody loads (the judge reads only records): the lanes and gates given."""
    return f"""\
contract: {name}
version: 1
lane_defaults:
  runtime: process
  engine: llamacpp
  executable: llama-server
  port: 18000
  model: {{path: m.gguf, sha256: {MODEL_SHA256}}}
lanes:
{textwrap.indent(textwrap.dedent(lanes).strip(), "  ")}
inputs:
  p: {{file: prompts/p.jsonl}}
gates:
{textwrap.indent(textwrap.dedent(gates).strip(), "  ")}
"""


def load_gates(tmp_path: Path, body: str) -> tuple[LoadedContract, list[Gate]]:
    """The contract and PROMPTS written under ``tmp_path``; every gate, its bundle under tmp_path/bundle."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = write_contract(tmp_path, body)
    (tmp_path / "prompts" / "p.jsonl").write_text("".join(
        json.dumps({"id": pid, "class": cls, "prompt": f"prompt {pid}"}) + "\n" for pid, cls in PROMPTS))
    loaded = load_contract(path)
    ctx = GateContext(bundle=tmp_path / "bundle", contract=loaded, input_paths={"p": tmp_path / "prompts" / "p.jsonl"})
    return loaded, [gate_for(spec, ctx) for spec in loaded.contract.gates]


def request(pid: str, cls: str, level: int | str, rep: int, user: int, attempt: int, rate: float,
            text: str | None = None, cut: bool = False, ttft: float = 0.2,
            tags: dict[str, Any] | None = None) -> dict[str, Any]:
    events = [{"t": 0.01, "data": {"id": "s", "choices": [{"delta": {"role": "assistant"}, "finish_reason": None}]}}]
    for i in range(TOKENS):
        events.append({"t": ttft + i / rate, "data": {"id": "s", "timings": {"predicted_n": i + 1}, "choices": [
            {"delta": {"content": (text or f"{pid} ")[i % len(text or pid)]}, "finish_reason": None}]}})
        if cut and i == 3:
            break
    end = ttft + (TOKENS - 1) / rate
    if not cut:
        events.append({"t": end, "data": {"id": "s", "choices": [{"delta": {}, "finish_reason": "length"}]}})
        events.append({"t": end, "data": {"id": "s", "choices": [], "usage": {"completion_tokens": TOKENS}}})
    return {"status": 200, "events": events, "done_marker": True, "elapsed_s": end + 0.001,
            "tags": {"phase": "measure", "level": level, "class": cls, "rep": rep, "user": user,
                     "attempt": attempt, "prompt": pid, **(tags or {})}}


def write_visit(gate, key: str, rates: dict[str, float], *, levels=(1, 2), void_attempts: int = 0,
                always_void: bool = False, text: str | None = None, cut_level: int | None = None,
                host_busy: float | None = None, ttft: Callable[[int, int], float] | None = None,
                late: Callable[[int, int], float] | None = None) -> None:
    """One lane visit: every row measured with reps whose durations agree (or spread 60% when void);
    ``host_busy``: other processes used that share of the host's 2 CPUs during every rep of a void attempt;
    ``ttft(rep, position)``: each request's time to first token (default 0.2 s); a rate level ("2rps")
    sends each prompt once a rep, each ``late(rep, position)`` seconds after its scheduled time (default 0)."""
    with JsonlAppender(gate.ctx.raw_path(gate.gate_id, key)) as sink:
        sink.append({"kind": "instrument", "engine": "llamacpp", "token_counter": "timings.predicted_n",
                     "tokens_per_chunk": None})
        for level in levels:
            for cls in ("prose", "code"):
                pids = [p for p, c in PROMPTS if c == cls]
                attempts = 3 if always_void else void_attempts + 1
                for attempt in range(attempts):
                    void = always_void or attempt < void_attempts
                    for rep in range(2):
                        count = max(len(pids), level) if isinstance(level, int) else len(pids)
                        for position in range(count):
                            pid = pids[position % len(pids)]
                            sent = ({"user": position % level} if isinstance(level, int) else
                                    {"scheduled_s": 0.5 * position, "late_s": late(rep, position) if late else 0.0})
                            sink.append(request(pid, cls, level, rep, position, attempt, rates[pid], text,
                                                cut=cut_level == level and rep == 1,
                                                ttft=ttft(rep, position) if ttft else 0.2, tags=sent))
                        duration = (1.0 if rep == 0 else (1.6 if void else 1.02)) * len(pids)
                        host = {} if host_busy is None or not void else {"host_cpus": 2, "lane_cpu_s": 0.0,
                                                             "host_busy_s": host_busy * duration * 2 + 0.01}
                        sink.append({"kind": "rep", "level": level, "class": cls, "attempt": attempt, "rep": rep,
                                     "duration_s": duration, "client_cpu_s": 0.01, **host})


def rates(scale: float = 1.0, wobble: float = 0.0) -> dict[str, float]:
    base = {"p1": 50.0, "p2": 60.0, "p3": 55.0, "c1": 70.0, "c2": 65.0, "c3": 75.0}
    return {pid: value * scale * (1 + wobble * (-1) ** i) for i, (pid, value) in enumerate(base.items())}


def write_boots(gate, control: list[dict[str, float]], candidate: list[dict[str, float]], *,
                control_lane: str = "base", candidate_lane: str = "cand", **kwargs: Any) -> None:
    """Boots as the window makes them: base, cand, base@rerun1, cand@rerun1, base@rerun2, ...; kwargs
    (a void or cut row) go to the candidate's first boot."""
    for j, values in enumerate(control):
        write_visit(gate, control_lane if j == 0 else f"{control_lane}@rerun{j}", values)
    for j, values in enumerate(candidate):
        write_visit(gate, candidate_lane if j == 0 else f"{candidate_lane}@rerun{j}", values,
                    **(kwargs if j == 0 else {}))


JUDGE_LANES = """\
- {name: base, role: control}
- name: cand
  role: candidate
  axis: [args.spec-type]
  set: {args: {--spec-type: ngram-simple}}
"""


def judge_contract(rule: str = "{}", levels: str = "[1, 2]", pairs: int = 3) -> str:
    return speed_contract(JUDGE_LANES, f"""\
        - kind: speed
          input: p
          concurrency: {levels}
          max_tokens: {TOKENS}
          reps: 2
          max_boot_pairs: {pairs}
          rule: {rule}
        """)


def judge_gate(tmp_path: Path, rule: str = "{}", pairs: int = 3):
    loaded, gates = load_gates(tmp_path, judge_contract(rule, pairs=pairs))
    return gates[0], loaded.lanes["cand"], loaded.lanes["base"]
