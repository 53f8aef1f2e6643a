"""Cache replay: each fast policy equals an obviously-correct brute force exactly, hand-counted traces, the
steady state of uniform routing, the orderings that are provable, subsample labelling, overlaps beside
chance, and loaders that name the file and the place of every fault."""

from __future__ import annotations

import itertools
import json
import math
from collections import Counter, OrderedDict
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from campaign.errors import InputError
from campaign.gates.screen.cachereplay import (
    POLICIES,
    Trace,
    TraceError,
    cross_layer_overlap,
    generate_trace,
    load_slot_map,
    load_trace,
    replay,
    step_overlap,
    trace_from_array,
)

# ------------------------------------------------------------------------------------ brute-force references
# Per layer, per step, with Python sets and dicts, following the module docstring's conventions word by word.


def _ids(trace: Trace, t: int, layer: int) -> list[int]:
    return [int(e) for e in trace.experts[t, layer]]


def brute_lru(trace: Trace, slots: list[int]) -> list[int]:
    hits = []
    for layer in range(trace.layers):
        cache: OrderedDict[int, None] = OrderedDict()  # least recently used first
        count = 0
        for t in range(trace.steps):
            ids = _ids(trace, t, layer)
            count += sum(e in cache for e in ids)  # resident at the start of the step
            for e in ids:  # in position order: a later position is more recent
                cache.pop(e, None)
                cache[e] = None
            while len(cache) > slots[layer]:
                cache.popitem(last=False)
        hits.append(count)
    return hits


def brute_static(trace: Trace, slots: list[int]) -> list[int]:
    hits = []
    for layer in range(trace.layers):
        counts = Counter(e for t in range(trace.steps) for e in _ids(trace, t, layer))
        pinned = sorted(range(trace.n_experts), key=lambda e: (-counts[e], e))[:slots[layer]]
        hits.append(sum(counts[e] for e in pinned))
    return hits


def _next_use(trace: Trace, layer: int, e: int, t: int) -> tuple[float, int]:
    for s in range(t + 1, trace.steps):
        ids = _ids(trace, s, layer)
        if e in ids:
            return s, ids.index(e)
    return math.inf, e


def brute_belady(trace: Trace, slots: list[int]) -> list[int]:
    hits = []
    for layer in range(trace.layers):
        cache: set[int] = set()
        count = 0
        for t in range(trace.steps):
            ids = _ids(trace, t, layer)
            count += len(cache & set(ids))
            candidates = cache | set(ids)
            cache = set(sorted(candidates, key=lambda e: _next_use(trace, layer, e, t))[:slots[layer]])
        hits.append(count)
    return hits


def brute_lookahead(trace: Trace, slots: list[int], horizon: int) -> tuple[list[int], list[int]]:
    hits, loads = [], []
    for layer in range(trace.layers):
        cache: set[int] = set()
        last: dict[int, tuple[int, int]] = {}
        count = loaded = 0
        for t in range(trace.steps):
            due: list[int] = []  # by first use: step, then position
            for s in range(t, min(t + horizon, trace.steps)):
                due += [e for e in _ids(trace, s, layer) if e not in due]
            keep = due[:slots[layer]]
            rest = sorted(cache - set(due), key=lambda e: last[e], reverse=True)  # KeyError: a never-used resident
            new = set(keep) | set(rest[:slots[layer] - len(keep)])
            loaded += len(new - cache)
            ids = _ids(trace, t, layer)
            step_hits = sum(e in new for e in ids)
            count += step_hits
            loaded += len(ids) - step_hits  # read on demand, not kept
            for j, e in enumerate(ids):
                last[e] = (t, j)
            cache = new
        hits.append(count)
        loads.append(loaded)
    return hits, loads


def _trace(rows: list[list[list[int]]], n: int) -> Trace:
    return trace_from_array(np.array(rows), n_experts=n, source="hand")


# ------------------------------------------------------------------------------------ fast == brute force

SLOT_MAPS = {2: [[0, 1, 2], [1, 2, 5], [12, 5, 1], [3, 7, 12]], 3: [[0, 1, 2], [2, 3, 5], [12, 5, 0], [1, 7, 12]]}
CASES = [(k, locality, seed) for k in (2, 3) for locality, seed in ((0.0, 1), (0.5, 2), (0.9, 3))]


@pytest.mark.parametrize(("k", "locality", "seed"), CASES)
def test_fast_policies_equal_brute_force_exactly(k: int, locality: float, seed: int) -> None:
    trace = generate_trace(200, 3, 12, k, locality=locality, seed=seed)
    for slots in SLOT_MAPS[k]:
        assert replay(trace, slots, "lru").hits_per_layer == brute_lru(trace, slots)
        assert replay(trace, slots, "static").hits_per_layer == brute_static(trace, slots)
        assert replay(trace, slots, "belady").hits_per_layer == brute_belady(trace, slots)
        for horizon in (1, 3):
            result = replay(trace, slots, "lookahead", lookahead=horizon)
            assert (result.hits_per_layer, result.loads_per_layer) == brute_lookahead(trace, slots, horizon)


def test_the_brute_force_comparison_can_fail() -> None:
    # a one-slot shift changes the figure: the comparison above is not vacuous
    trace = generate_trace(200, 3, 12, 2, locality=0.5, seed=2)
    assert replay(trace, [3, 5, 7], "lru").hits_per_layer != brute_lru(trace, [4, 5, 7])
    assert replay(trace, [3, 5, 7], "belady").hits_per_layer != brute_belady(trace, [4, 5, 7])


# ------------------------------------------------------------------------------------ hand-counted traces


def test_cycle_of_three_in_two_slots() -> None:
    trace = _trace([[[e]] for e in (0, 1, 2, 0, 1, 2)], 3)
    assert replay(trace, [2], "lru").hits_per_layer == [0]  # each id returns just after being evicted
    # Belady: 0,1,2 miss (2 bypasses: 0 and 1 return sooner), 0 and 1 hit, 2 misses
    assert replay(trace, [2], "belady").hits_per_layer == [2]
    assert replay(trace, [2], "static").hits_per_layer == [4]  # pins 0 and 1 (ties: lower ids)
    one = replay(trace, [2], "lookahead", lookahead=1)
    assert (one.hits_per_layer, one.loads_per_layer) == ([6], [6])  # LRU's six misses, all prefetched
    two = replay(trace, [2], "lookahead", lookahead=2)
    assert (two.hits_per_layer, two.loads_per_layer) == ([6], [6])  # 2 + 1 + 1 + 1 + 1 + 0


def test_a_steps_miss_does_not_evict_that_steps_hit() -> None:
    # slots 2: after [0, 1], step [2, 0] hits 0 and its miss 2 evicts 1 (not 0, accessed this step);
    # then [1, 2] misses 1 and hits 2. One id at a time, 2 would have evicted 0 before 0 was read.
    trace = _trace([[[0, 1]], [[2, 0]], [[1, 2]]], 3)
    assert replay(trace, [2], "lru").hits_per_layer == [2]


def test_fewer_slots_than_k_keep_the_steps_last_ids() -> None:
    # 1 slot, k = 2: LRU keeps the step's last id: 1, then 0; Belady keeps the sooner-used one
    trace = _trace([[[0, 1]], [[1, 0]], [[0, 2]]], 3)
    assert replay(trace, [1], "lru").hits_per_layer == [2]
    assert replay(trace, [1], "belady").hits_per_layer == [2]
    # lookahead with 1 slot prefetches the step's first id only
    result = replay(trace, [1], "lookahead")
    assert (result.hits_per_layer, result.loads_per_layer) == ([3], [3 + 3])


def test_zero_slots_hit_nothing_and_all_slots_miss_only_cold() -> None:
    trace = generate_trace(300, 4, 16, 3, locality=0.5, seed=4)
    distinct = [len(set(trace.experts[:, layer].ravel().tolist())) for layer in range(4)]
    accesses = 300 * 3
    for policy in POLICIES:
        assert replay(trace, [0] * 4, policy).hits_per_layer == [0] * 4
    for policy in ("lru", "belady"):
        assert replay(trace, [16] * 4, policy).hits_per_layer == [accesses - d for d in distinct]
    assert replay(trace, [16] * 4, "static").hits_per_layer == [accesses] * 4  # pinned before step 0
    assert replay(trace, [3] * 4, "lookahead", lookahead=2).hits_per_layer == [accesses] * 4  # slots >= k


# ------------------------------------------------------------------------------------ analytic and invariants


def test_uniform_routing_hits_slots_over_experts() -> None:
    # Independent uniform k-subsets: once an LRU layer is full, a step's hits are hypergeometric with mean
    # k*slots/n whatever the cache holds, so the rate is slots/n up to the warm-up (< 10 of 20,000 steps) and
    # a standard error near 0.002 (20,000 steps of sd ~0.9 hits out of 4): 0.02 is many standard errors.
    # Static pins the most counted experts, never below slots/n (the top of n counts is at least their mean)
    # and above it by about 1.3 and 0.8 sd of a count (sd 35 of mean 1,250): +0.009 and +0.011.
    trace = generate_trace(20_000, 2, 64, 4, locality=0.0, seed=7)
    lru = replay(trace, [16, 32], "lru")
    static = replay(trace, [16, 32], "static")
    for layer, share in enumerate((0.25, 0.5)):
        assert abs(lru.hits_per_layer[layer] / 80_000 - share) < 0.02
        assert share <= static.hits_per_layer[layer] / 80_000 < share + 0.02


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_provable_orderings(seed: int) -> None:
    trace = generate_trace(150, 3, 10, 3, locality=0.6, seed=seed)
    by_slots = {}
    for size in range(11):
        by_slots[size] = {p: replay(trace, [size] * 3, p).hits_per_layer for p in ("lru", "belady", "static")}
    for size in range(11):
        lru, belady, static = (by_slots[size][p] for p in ("lru", "belady", "static"))
        # Belady is optimal among policies choosing from what they held and just fetched: LRU is one
        assert all(b >= r for b, r in zip(belady, lru, strict=True))
        # so is a static pin loaded on first use, which loses one hit per pinned expert that is used;
        # the replayed static pin is loaded before step 0, so it may beat Belady by that much and no more
        pinned_used = [min(size, len(set(trace.experts[:, layer].ravel().tolist()))) for layer in range(3)]
        assert all(b >= s - u for b, s, u in zip(belady, static, pinned_used, strict=True))
        if size < 10:  # LRU is a stack algorithm; an optimum cannot lose a slot's worth
            for policy in ("lru", "belady"):
                assert all(a <= b for a, b in zip(by_slots[size][policy], by_slots[size + 1][policy], strict=True))


def test_belady_is_the_optimum_over_every_choice_of_contents() -> None:
    # exhaustive search over every sequence of cache contents (a subset of what was held and this step's ids)
    rng = np.random.default_rng(5)
    for _ in range(12):
        rows = [[sorted(rng.choice(5, size=2, replace=False).tolist())] for _ in range(9)]
        trace = _trace(rows, 5)
        for slots in (1, 2, 3):
            assert replay(trace, [slots], "belady").hits_per_layer == [_optimum(rows, slots)]


def _optimum(rows: list[list[list[int]]], slots: int) -> int:
    best = {frozenset(): 0}
    for row in rows:
        ids = set(row[0])
        following: dict[frozenset[int], int] = {}
        for held, score in best.items():
            gained = score + len(held & ids)
            pool = sorted(held | ids)
            for size in range(min(slots, len(pool)) + 1):
                for kept in itertools.combinations(pool, size):
                    key = frozenset(kept)
                    following[key] = max(following.get(key, -1), gained)
        best = following
    return max(best.values())


def test_one_step_lookahead_loads_what_lru_misses() -> None:
    # with slots >= k both hold the step's ids plus the most recent others: prefetch moves LRU's misses
    # off the critical path, it does not remove them
    trace = generate_trace(400, 3, 16, 3, locality=0.5, seed=9)
    slots = [3, 6, 11]
    lru = replay(trace, slots, "lru")
    ahead = replay(trace, slots, "lookahead", lookahead=1)
    assert ahead.hits_per_layer == ahead.accesses_per_layer
    assert ahead.loads_per_layer == [a - h for a, h in zip(lru.accesses_per_layer, lru.hits_per_layer, strict=True)]


# ------------------------------------------------------------------------------------ result and subsample


def test_a_subsample_says_it_is_not_the_exact_replay() -> None:
    trace = generate_trace(20_001, 2, 32, 2, locality=0.6, seed=3)
    sub = replay(trace, [8, 8], "lru", sample_every=8000)
    assert (sub.exact, sub.steps_replayed, sub.steps_total) == (False, 3, 20_001)
    assert sub.fraction == 3 / 20_001 < 1
    assert sub.accesses_per_layer == [6, 6]
    text = sub.describe()
    assert "1-in-8000 subsample" in text and "(3 of 20,001 steps)" in text and "not the exact replay" in text
    full = replay(trace, [8, 8], "lru")
    assert (full.exact, full.fraction, full.steps_replayed) == (True, 1.0, 20_001)
    assert "exact replay of all 20,001 steps" in full.describe() and "subsample" not in full.describe()


def test_result_figures_and_json() -> None:
    trace = _trace([[[e], [e]] for e in (0, 1, 2, 0, 1, 2)], 3)
    result = replay(trace, [2, 3], "lru")
    assert result.hits_per_layer == [0, 3] and result.accesses_per_layer == [6, 6]
    assert result.hit_rate == 3 / 12 and result.misses_per_layer_step == 9 / 12 and result.slots_total == 5
    assert result.lookahead is None and replay(trace, [2, 3], "lookahead", lookahead=2).lookahead == 2
    assert json.loads(json.dumps(result.to_json())) == result.to_json()
    assert result.describe().startswith("LRU hit rate 0.250, exact replay of all 6 steps at 5 slots")


@pytest.mark.parametrize(("slots", "policy", "kwargs"), [
    ([1], "lru", {}), ([1, 2, 3], "lru", {}), ([1, -1], "lru", {}), ([1, 4], "lru", {}), ([1.0, 2.0], "lru", {}),
    ([1, 1], "fifo", {}), ([1, 1], "lookahead", {"lookahead": 0}), ([1, 1], "lru", {"sample_every": 0})])
def test_replay_refuses_bad_arguments(slots: list[Any], policy: str, kwargs: dict[str, int]) -> None:
    trace = _trace([[[0], [1]], [[1], [2]]], 3)
    with pytest.raises(ValueError):
        replay(trace, slots, policy, **kwargs)


# ------------------------------------------------------------------------------------ overlap


def test_identical_routing_across_layers_overlaps_fully() -> None:
    rows = generate_trace(100, 1, 32, 4, locality=0.3, seed=1).experts
    trace = trace_from_array(np.repeat(rows, 5, axis=1), n_experts=32)
    overlap = cross_layer_overlap(trace)
    assert (overlap.observed, overlap.chance, overlap.pairs) == (1.0, 4 / 32, 400)


def test_uniform_routing_overlaps_at_chance() -> None:
    # 10,000 steps x 3 adjacent pairs of 4-of-64 draws: mean share k/n = 0.0625, standard error ~0.0008
    trace = generate_trace(10_000, 4, 64, 4, locality=0.0, seed=8)
    for overlap in (cross_layer_overlap(trace), step_overlap(trace)):
        assert overlap.chance == 4 / 64
        assert abs(overlap.observed - 0.0625) < 0.005
    assert cross_layer_overlap(trace).describe().startswith("cross-layer overlap 0.06")
    assert json.loads(json.dumps(step_overlap(trace).to_json()))["chance"] == 0.0625


def test_step_overlap_counts_shared_ids() -> None:
    trace = _trace([[[0, 1], [0, 1]], [[1, 2], [0, 1]], [[2, 3], [5, 4]]], 6)
    # layer 0 shares 1 then 1 of 2; layer 1 shares 2 then 0: (1 + 1 + 2 + 0) / (4 pairs * 2)
    assert step_overlap(trace).observed == 0.5
    # adjacent layers: step 0 shares 2, step 1 shares 1, step 2 shares 0: 3 / (3 * 2)
    assert cross_layer_overlap(trace).observed == 0.5


def test_overlaps_need_two_of_what_they_compare() -> None:
    with pytest.raises(TraceError, match="2 layers"):
        cross_layer_overlap(_trace([[[0]], [[1]]], 2))
    with pytest.raises(TraceError, match="2 steps"):
        step_overlap(_trace([[[0], [1]]], 2))


# ------------------------------------------------------------------------------------ generator


def test_generator_is_seeded_and_has_its_locality() -> None:
    first = generate_trace(2000, 3, 64, 4, locality=0.9, seed=21)
    assert np.array_equal(first.experts, generate_trace(2000, 3, 64, 4, locality=0.9, seed=21).experts)
    assert not np.array_equal(first.experts, generate_trace(2000, 3, 64, 4, locality=0.9, seed=22).experts)
    assert first.experts.dtype == np.int16 and not first.experts.flags.writeable
    # 90% reused plus chance coincidences among the fresh tenth: about 0.9 + 0.1 * 4/64
    overlap = step_overlap(first)
    assert 0.87 < overlap.observed < 0.93 and overlap.observed > 10 * overlap.chance


def test_generator_refuses_impossible_shapes() -> None:
    with pytest.raises(ValueError):
        generate_trace(10, 2, 4, 5, locality=0.5, seed=0)
    with pytest.raises(ValueError):
        generate_trace(10, 2, 8, 2, locality=1.5, seed=0)


# ------------------------------------------------------------------------------------ loaders


def _jsonl(path: Path, lines: list[Any]) -> Path:
    path.write_text("\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines) + "\n")
    return path


def test_npz_roundtrip(tmp_path: Path) -> None:
    trace = generate_trace(50, 3, 40, 4, locality=0.5, seed=2)
    np.savez(tmp_path / "t.npz", experts=trace.experts, n_experts=np.int64(300))
    loaded = load_trace(tmp_path / "t.npz")
    assert np.array_equal(loaded.experts, trace.experts) and loaded.n_experts == 300
    assert (loaded.steps, loaded.layers, loaded.k, loaded.source) == (50, 3, 4, "t.npz")
    assert load_trace(tmp_path / "t.npz", n_experts=40).n_experts == 40  # the argument first
    np.savez(tmp_path / "bare.npz", experts=trace.experts.astype(np.int64))
    assert load_trace(tmp_path / "bare.npz").n_experts == int(trace.experts.max()) + 1
    big = load_trace(tmp_path / "t.npz", n_experts=40_000)
    assert big.experts.dtype == np.int32


def test_jsonl_roundtrip_with_and_without_header(tmp_path: Path) -> None:
    steps = [{"layers": [[3, 1], [0, 2]]}, {"layers": [[1, 4], [2, 0]], "token": 17}]
    loaded = load_trace(_jsonl(tmp_path / "t.jsonl", [{"n_experts": 8}, "", *steps, ""]))
    assert loaded.n_experts == 8 and loaded.experts.tolist() == [[[3, 1], [0, 2]], [[1, 4], [2, 0]]]
    assert load_trace(_jsonl(tmp_path / "bare.json", steps)).n_experts == 5
    assert load_trace(tmp_path / "t.jsonl", n_experts=6).n_experts == 6


@pytest.mark.parametrize(("lines", "where", "what"), [
    ([{"layers": [[0, 1], [2, 3]]}, {"layers": [[0, 1]]}], ":2:", "1 layers"),
    ([{"layers": [[0, 1], [2, 3]]}, {"layers": [[0, 1], [2, 3, 4]]}], ":2:", "layers[1]"),
    ([{"n_experts": 4}, {"layers": [[0, 1], [2, 4]]}], ":2: layers[1]", "expert id 4 outside [0, 4)"),
    ([{"layers": [[0, 1], [2, 3]]}, {"layers": [[-1, 1], [2, 3]]}], ":2: layers[0]", "expert id -1"),
    ([{"layers": [[0, 1], [2, 3]]}, {"layers": [[0, 1], [3, 3]]}], ":2: layers[1]", "expert 3 routed twice"),
    ([{"layers": [[0, 1.5], [2, 3]]}], ":1: layers[0][1]", "1.5 is not an integer"),
    ([{"layers": [[0, 1], [2, True]]}], ":1: layers[1][1]", "True is not an integer"),
    ([{"layers": [[0, "1"], [2, 3]]}], ":1: layers[0][1]", "'1' is not an integer"),
    ([{"layers": [[0, 1], []]}], ":1: layers[1]", "non-empty list"),
    ([{"layers": [[0, 1]]}, {"n_experts": 4}], ":2:", "needs `layers`"),
    (["[1, 2]"], ":1:", "JSON object"),
    (["{not json"], ":1:", "not a JSON object"),
    ([{"n_experts": 0}, {"layers": [[0]]}], ":1: n_experts", "not a positive integer"),
    ([{"n_experts": 4}], ": no decode steps", ""),
])
def test_malformed_jsonl_names_file_and_line(tmp_path: Path, lines: list[Any], where: str, what: str) -> None:
    path = _jsonl(tmp_path / "bad.jsonl", lines)
    with pytest.raises(TraceError) as caught:
        load_trace(path)
    message = str(caught.value)
    assert message.startswith(f"{path}{where}") and what in message and "\n" not in message
    assert isinstance(caught.value, InputError) and caught.value.exit_code == 2


def _npz(path: Path, **arrays: Any) -> Path:
    np.savez(path, **arrays)
    return path


@pytest.mark.parametrize(("arrays", "what"), [
    ({"routes": np.zeros((2, 2, 2), int)}, "no array `experts`"),
    ({"experts": np.zeros((2, 2), int)}, "array `experts` has shape (2, 2)"),
    ({"experts": np.zeros((0, 2, 2), int)}, "array `experts` has shape (0, 2, 2)"),
    ({"experts": np.zeros((2, 2, 1), float)}, "array `experts` has dtype float64"),
    ({"experts": np.array([[[0, 1]], [[1, 9]]]), "n_experts": np.int64(8)}, "array `experts`[1, 0]: expert id 9"),
    ({"experts": np.array([[[0, 1]], [[5, 5]]])}, "array `experts`[1, 0]: expert 5 routed twice"),
    ({"experts": np.array([[[0, 1]]]), "n_experts": np.array([8, 8])}, "array `n_experts` must be"),
])
def test_malformed_npz_names_file_and_array(tmp_path: Path, arrays: dict[str, Any], what: str) -> None:
    path = _npz(tmp_path / "bad.npz", **arrays)
    with pytest.raises(TraceError) as caught:
        load_trace(path)
    assert str(caught.value).startswith(f"{path}: ") and what in str(caught.value)


def test_unreadable_traces_name_the_file(tmp_path: Path) -> None:
    for name in ("missing.jsonl", "missing.npz"):
        with pytest.raises(TraceError, match=f"{name}: cannot read") as caught:
            load_trace(tmp_path / name)
        assert isinstance(caught.value.__cause__, OSError)
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(TraceError, match="junk.npz: cannot read as .npz"):
        load_trace(tmp_path / "junk.npz")
    np.save(tmp_path / "plain.npy", np.zeros((2, 2, 2), int))
    (tmp_path / "plain.npy").rename(tmp_path / "plain.npz")
    with pytest.raises(TraceError, match="plain.npz: not an .npz archive"):
        load_trace(tmp_path / "plain.npz")
    with pytest.raises(TraceError, match=r"t\.csv: unknown trace format"):
        load_trace(tmp_path / "t.csv")


def test_trace_checks_itself() -> None:
    with pytest.raises(TraceError, match="here: step 1, layer 0: expert 2 routed twice"):
        Trace(np.array([[[0, 1]], [[2, 2]]], dtype=np.int16), 4, "here")
    with pytest.raises(TraceError, match="expert id 4 outside"):
        trace_from_array([[[0, 4]]], n_experts=4)
    with pytest.raises(TraceError, match="integer array"):
        trace_from_array([[[0.0, 1.0]]])


# ------------------------------------------------------------------------------------ slot maps


@pytest.mark.parametrize("doc", [[4, 0, 8], {"slots_per_layer": [4, 0, 8], "model": "x"}, {"0": 4, "2": 8, "1": 0}])
def test_slot_map_formats(tmp_path: Path, doc: Any) -> None:
    path = tmp_path / "slots.json"
    path.write_text(json.dumps(doc))
    slots = load_slot_map(path, layers=3, n_experts=8)
    assert slots.tolist() == [4, 0, 8] and slots.dtype == np.int64


@pytest.mark.parametrize(("doc", "what"), [
    ([4, 4], "list: 2 slot counts for a trace of 3 layers"),
    ({"slots_per_layer": [4, 4, 4, 4]}, "slots_per_layer: 4 slot counts for a trace of 3 layers"),
    ({"slots_per_layer": {"0": 1}}, "slots_per_layer: must be a list"),
    ([4, -1, 4], "[1]: -1 slots outside 0..8"),
    ([4, 9, 4], "[1]: 9 slots outside 0..8"),
    ({"slots_per_layer": [4, 4, True]}, "slots_per_layer[2]: True is not an integer slot count"),
    ([4, 4.0, 4], "[1]: 4.0 is not an integer slot count"),
    ({"0": 4, "1": 4}, "layer \"2\": missing"),
    ({"0": 4, "1": 4, "2": 4, "3": 4}, "key '3': not a layer index 0..2"),
    ({"0": 4, "1": "4", "2": 4}, "layer \"1\": '4' is not an integer slot count"),
    ("96", "expected a list of slot counts"),
])
def test_malformed_slot_map_names_file_and_field(tmp_path: Path, doc: Any, what: str) -> None:
    path = tmp_path / "slots.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(TraceError) as caught:
        load_slot_map(path, layers=3, n_experts=8)
    assert str(caught.value).startswith(f"{path}: {what}")


def test_unreadable_slot_map_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="nope.json: cannot read"):
        load_slot_map(tmp_path / "nope.json", layers=1, n_experts=8)
    (tmp_path / "bad.json").write_text('{"0": 1, "0": 2}')
    with pytest.raises(TraceError, match="bad.json: not valid JSON: duplicate"):
        load_slot_map(tmp_path / "bad.json", layers=1, n_experts=8)
