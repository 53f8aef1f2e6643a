"""How long the cache-replay screen takes at the field's size, measured in this one run.

Generates a seeded routing trace of the field's shape (71,210 decode steps x 75 MoE layers, top-8 of 256
experts, step-to-step locality 0.6) and a seeded slot map of 7,360 slots (64..176 per layer), then times
(campaign/gates/screen/cachereplay.py):

* generating the trace (including the Trace's own check of every id);
* each policy's exact replay: lru, static, belady, lookahead-1;
* the cross-layer and step-to-step overlaps;
* a 1-in-8000 LRU subsample (the field's old shortcut), beside the exact figure it stood in for.

Prints seconds, hit rate, misses and loads per layer-step, and whether the exact LRU replay took under
10 s. The machine's speed is part of the figure: run it on an otherwise idle machine.

    python benchmarks/cache_replay.py                       # the field's size
    python benchmarks/cache_replay.py --steps 5000 --json out.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from campaign.gates.screen.cachereplay import (cross_layer_overlap, generate_trace, replay,  # noqa: E402
                                               step_overlap)

LRU_TARGET_S = 10.0


def slot_map(layers: int, experts: int, total: int, low: int, high: int, seed: int) -> np.ndarray:
    """``layers`` counts in [low, high] summing to ``total``: ``low`` each, the rest spread by seeded weights
    (a layer that reaches ``high`` passes its share on)."""
    if not layers * low <= total <= layers * min(high, experts):
        raise SystemExit(f"{total} slots cannot be spread over {layers} layers within {low}..{high}")
    weights = np.random.default_rng(seed).gamma(2.0, size=layers)
    slots = np.full(layers, low, dtype=np.int64)
    while (left := total - int(slots.sum())) > 0:
        room = np.minimum(high, experts) - slots
        share = weights * (room > 0)
        grant = np.minimum(room, np.floor(left * share / share.sum()).astype(np.int64))
        if not grant.any():  # the last few: one each to the heaviest layers with room
            grant = np.zeros(layers, dtype=np.int64)
            grant[np.argsort(-share, kind="stable")[:left]] = 1
        slots += grant
    return slots


def timed(run: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    value = run()
    return time.perf_counter() - start, value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=71_210)
    parser.add_argument("--layers", type=int, default=75)
    parser.add_argument("--experts", type=int, default=256)
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument("--locality", type=float, default=0.6)
    parser.add_argument("--slots-total", type=int, default=7_360)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sample-every", type=int, default=8000, help="the subsample shown beside the exact LRU")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    slots = slot_map(args.layers, args.experts, args.slots_total, 64, 176, args.seed)
    print(f"trace {args.steps:,} steps x {args.layers} layers, top-{args.k} of {args.experts}, locality "
          f"{args.locality}, seed {args.seed}; slots {int(slots.sum()):,} ({slots.min()}..{slots.max()} per layer)")
    seconds, trace = timed(lambda: generate_trace(args.steps, args.layers, args.experts, args.k,
                                                  locality=args.locality, seed=args.seed))
    rows: list[dict[str, Any]] = [{"what": "generate trace", "seconds": seconds}]
    print(f"{'':<26}{'seconds':>9}{'hit rate':>10}{'misses/LS':>11}{'loads/LS':>10}")
    print(f"{'generate trace':<26}{seconds:>9.2f}")
    runs = [("lru", {}), ("static", {}), ("belady", {}), ("lookahead", {"lookahead": 1}),
            ("lru", {"sample_every": args.sample_every})]
    for policy, options in runs:
        seconds, result = timed(lambda: replay(trace, slots, policy, **options))
        name = f"{policy}-{result.lookahead}" if result.lookahead else policy
        name += "" if result.exact else f" 1-in-{args.sample_every} subsample"
        rows.append({"what": name, "seconds": seconds, **result.to_json()})
        print(f"{name:<26}{seconds:>9.2f}{result.hit_rate:>10.4f}{result.misses_per_layer_step:>11.3f}"
              f"{result.loads_per_layer_step:>10.3f}")
    for measure in (cross_layer_overlap, step_overlap):
        seconds, overlap = timed(lambda: measure(trace))
        rows.append({"what": overlap.what, "seconds": seconds, **overlap.to_json()})
        print(f"{overlap.what:<26}{seconds:>9.2f}   {overlap.describe()}")
    lru, sub = rows[1], rows[5]
    print(f"exact LRU {lru['hit_rate']:.4f} vs its 1-in-{args.sample_every} subsample {sub['hit_rate']:.4f} "
          f"({sub['steps_replayed']} of {sub['steps_total']:,} steps)")
    under = "yes" if lru["seconds"] < LRU_TARGET_S else "NO"
    print(f"exact LRU replay of {args.steps:,} steps x {args.layers} layers: {lru['seconds']:.2f} s; "
          f"under {LRU_TARGET_S:.0f} s: {under}")
    if args.json:
        args.json.write_text(json.dumps({"slots": slots.tolist(), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
