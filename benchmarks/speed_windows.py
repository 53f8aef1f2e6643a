"""The speed gate on real engines here: windows of identical lanes (A/A) and windows with a real effect,
counting PASS / FAIL / INCONCLUSIVE, with the boots each window used.

Each window is the demo's speed gate alone (examples/demo.yaml: the demo's prompts, interleaved boots,
``max_boot_pairs`` 3, the engine pinned to CPU 1 and the client to CPU 0), run through the CLI:

* A/A: an ``aa: true`` candidate, the control again (booted and measured as a candidate); any PASS, and
  any look whose CI excludes zero, is a false difference: counted per level against the nominal rate;

* effect: the demo's threads-2 candidate (two threads on both cores instead of one on CPU 1), about +30%
  at C1 when measured by hand here.

    python benchmarks/speed_windows.py --windows 5           # 5 A/A then 5 effect windows
    python benchmarks/speed_windows.py --levels 1 --json out.json
    python benchmarks/speed_windows.py --kinds aa --windows 10 --levels 1,4 --pairs 4   # the README's A/A table

The demo's rule (``max_spread`` 0.25 by default here; ``--max-spread 0.10`` for the schema default).

Needs llama-server on PATH (`export PATH="$(scripts/build-llama-server.sh --where)/bin:$PATH"`) and a
signing key (`campaign keys init`). Run it on an otherwise idle machine: it measures the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODEL = REPO / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
CANDIDATES = {
    "aa": ("aa: true", ""),  # the control again: booted and measured as a candidate, never promoted
    "effect": ("axis: [args.threads, cpus]", "set: {args: {--threads: \"2\"}, cpus: \"0-1\"}"),
}


def contract(kind: str, port: int, levels: str, pairs: int, spread: float, rule: str = "") -> str:
    axis, change = CANDIDATES[kind]
    return f"""\
contract: bench-speed-{kind}
version: 1
lane_defaults:
  runtime: process
  engine: llamacpp
  executable: llama-server
  port: {port}
  model: {{path: {MODEL}, sha256: {MODEL_SHA256}}}
  args: [--ctx-size, "4096", --threads, "1", --parallel, "4", --metrics, --seed, "0", --no-webui]
  cpus: "1"
  readiness: {{budget: 120s}}
lanes:
  - {{name: base, role: control}}
  - name: cand
    role: candidate
    {axis}
    {change}
inputs:
  speed4: {{file: {REPO}/examples/prompts/speed4.jsonl, classes: [prose, code]}}
gates:
  - kind: speed
    input: speed4
    concurrency: {levels}
    max_tokens: 48
    reps: 2
    max_boot_pairs: {pairs}
    client_cpus: "0"
    rule: {{metric: decode_tok_s, min_mean_change: 0.05, ci_lower_above: 0.0, max_spread: {spread}, max_reruns: 1{rule}}}
promotion:
  requires: [speed]
"""


def run_window(kind: str, root: Path, index: int, levels: str, pairs: int, spread: float, rule: str = "") -> dict:
    folder = root / f"{kind}-{index}"
    folder.mkdir(parents=True)
    path = folder / "c.yaml"
    path.write_text(contract(kind, 18700 + index, levels, pairs, spread, f", {rule}" if rule else ""))
    campaign = str(Path(sys.executable).parent / "campaign")
    env = {**os.environ, "CAMPAIGN_ALLOW_PATHS": str(REPO)}
    subprocess.run([campaign, "freeze", str(path), "--allow-path", str(REPO)], check=True, capture_output=True,
                   env=env)
    started = time.monotonic()
    subprocess.run([campaign, "run", str(path), "--out", str(folder / "runs"), "--allow-path", str(REPO)],
                   capture_output=True, env=env)
    bundle = next((folder / "runs").glob("*-bench-speed-*"))
    result = json.loads((bundle / "gates" / "speed" / "cand.json").read_text())
    schedule = result["details"]["schedule"]
    levels = result["details"]["levels"]
    return {"kind": kind, "verdict": result["verdict"], "boots": len(schedule["boots"]),
            "pairs": schedule["pairs"], "stopped_at_pairs": schedule["stopped_at_pairs"],
            "seconds": round(time.monotonic() - started, 1),
            "changes": {level: entry.get("estimate", {}).get("change") for level, entry in levels.items()},
            # each look's CI (the gate's per-look confidence): an A/A's excluding zero is a false difference
            "looks": {level: [{"pairs": look["pairs"], "ci": look.get("ci")} for look in entry.get("looks", [])]
                      for level, entry in levels.items()},
            "look_confidence": schedule["look_confidence"],
            "reason": result["reasons"][0] if result["reasons"] else ""}


def excludes_zero(look: dict) -> bool:
    return bool(look.get("ci")) and (look["ci"][0] > 0 or look["ci"][1] < 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--windows", type=int, default=10, help="windows of each kind")
    parser.add_argument("--levels", default="1", help="concurrency levels, e.g. 1 or 1,4")
    parser.add_argument("--pairs", type=int, default=3, help="max_boot_pairs")
    parser.add_argument("--max-spread", type=float, default=0.25, help="the rule's max_spread (the demo's)")
    parser.add_argument("--kinds", default="aa,effect", help="which windows: aa, effect, or both")
    parser.add_argument("--rule", default="", help="more rule fields for the gate, e.g. 'futility: none'")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if not shutil.which("llama-server"):
        sys.exit("llama-server is not on PATH: export PATH=\"$(scripts/build-llama-server.sh --where)/bin:$PATH\"")
    levels = "[" + args.levels + "]"
    rows = []
    with tempfile.TemporaryDirectory(prefix="speed-windows-") as tmp:
        for kind in args.kinds.split(","):
            for index in range(args.windows):
                row = run_window(kind, Path(tmp), index, levels, args.pairs, args.max_spread, args.rule)
                rows.append(row)
                changes = ", ".join(f"C{k} {v:+.1%}" if v is not None else f"C{k} -" for k, v in row["changes"].items())
                print(f"{kind:>6} #{index}: {row['verdict']:<12} boots {row['boots']}, {row['seconds']:.0f} s; {changes}"
                      f"; {row['reason'][:200]}", flush=True)
                if args.json:  # as each window ends: a stopped run keeps what it measured
                    args.json.write_text(json.dumps(rows, indent=1))
    for kind in args.kinds.split(","):
        counts = Counter(r["verdict"] for r in rows if r["kind"] == kind)
        mean_boots = sum(r["boots"] for r in rows if r["kind"] == kind) / max(1, args.windows)
        minutes = sum(r["seconds"] for r in rows if r["kind"] == kind) / 60 / max(1, args.windows)
        print(f"{kind}: PASS {counts['PASS']}, FAIL {counts['FAIL']}, INCONCLUSIVE {counts['INCONCLUSIVE']} "
              f"of {args.windows}; {mean_boots:.1f} boots, {minutes:.1f} min per window")
        if kind != "aa":
            continue
        for level in sorted({lv for r in rows for lv in r["looks"]}, key=int):
            looks = [look for r in rows if r["kind"] == kind for look in r["looks"].get(level, [])]
            finals = [r["looks"][level][-1] for r in rows if r["kind"] == kind and r["looks"].get(level)]
            windows_any = sum(any(excludes_zero(lk) for lk in r["looks"].get(level, [])) for r in rows if r["kind"] == kind)
            nominal = 1 - (rows[0]["look_confidence"] if rows else 0.95)
            print(f"  A/A C{level}: the CI excludes zero at {sum(map(excludes_zero, looks))} of {len(looks)} looks "
                  f"(nominal {nominal:.1%} per look), at the last look of {sum(map(excludes_zero, finals))} of "
                  f"{len(finals)} windows, at any look of {windows_any} of {len(finals)} windows (nominal at most "
                  f"{min(1.0, nominal * max(1, args.pairs - 1)):.0%} over the looks)")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
