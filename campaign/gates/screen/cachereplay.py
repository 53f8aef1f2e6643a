"""Offline cache replay: the hit rate a per-layer expert cache would get on a frozen decode routing trace.

Why: an MoE model serves with a per-layer cache of experts in fast memory. A live window to learn the
cache's hit rate costs hours; replaying a frozen routing trace at the same slot budget costs seconds,
so the screen runs first. Every policy here replays every step (no sampling inside), so its figure is
the exact figure for that trace and slot map. A subsample can still be asked for (``sample_every``),
but its result carries ``exact=False`` and says so in words: an LRU figure of 0.719 from a 1-in-8000
subsample was once reported as the exact replay, which gives 0.802. Overlaps are reported beside their
chance level, because "cross-layer overlap 0.031" says nothing until set beside k/n = 0.031.

Trace formats (``load_trace``):

* ``.npz``: array ``experts``, integer, shape (steps, layers, k): ``experts[t, L]`` holds the k expert
  ids layer L routed at decode step t; optional scalar integer array ``n_experts``.
* ``.jsonl`` or ``.json`` (JSON lines; blank lines skipped): an optional first line
  ``{"n_experts": 256}`` (an object with ``n_experts`` and no ``layers``), then one line per decode step,
  in order: ``{"layers": [[e, e, ...], [e, ...], ...]}``, one list of k expert ids per layer (other
  keys are ignored).

Every step has the same number of layers and every layer the same k >= 1; ids are integers in
[0, n_experts) and distinct within one (step, layer), since a router picks k distinct experts.
n_experts is the argument, else the file's, else the largest id + 1. There is at least one step.

Slot map formats (``load_slot_map``; one JSON document): ``[96, 112, ...]`` (a count per layer),
``{"slots_per_layer": [96, 112, ...]}``, or ``{"0": 96, "1": 112, ...}`` (every layer index once).
Counts are integers in [0, n_experts]; 0 means every access of that layer misses.

Conventions (the brute-force references in the tests follow the same ones):

* Same step: a layer's k ids of one step are accessed at once. An access hits iff the expert is
  resident at the start of the step, so one step's misses never evict that step's other ids.
* ``lru``: after step t a layer holds its ``slots`` most recently used distinct experts, recency ordered
  by step, then by position within the step (later is more recent). A miss therefore evicts the least
  recently used expert not accessed at step t; with slots < k only the step's last ``slots`` ids stay.
  The cache starts empty.
* ``static``: each layer pins, before step 0, its ``slots`` most often accessed experts over the
  replayed steps (ties: lower id). A hit is any access to a pinned expert; there are no cold misses,
  so static can beat Belady, by at most one hit per pinned expert that is used.
* ``belady``: after step t a layer holds the ``slots`` experts of (residents + step t's ids) whose next
  use is nearest (ordered by step, then position; never used again is farthest). Keeping a just-fetched
  expert is not required (a demand fetch may bypass the cache), which makes this the optimum of every
  policy that picks its contents from what it held and what it just fetched: LRU among them, and a
  static pin loaded on first use. The cache starts empty.
* ``lookahead`` (h = ``lookahead`` >= 1): LRU that knows the routing of the next h steps. Before step t
  the experts used at steps t..t+h-1, ordered by first use (step, then position), are made resident,
  the first ``slots`` of them; slots left over keep the most recently used of the other residents. An
  access hits iff resident after that prefetch. With slots >= k every access therefore hits whatever h
  is: the hit rate bounds what perfect route prediction can hide, and what it moves shows in ``loads``.
* ``loads``: experts read from slow memory during the replay: every miss for lru, static and belady
  (static's pin before step 0 is not counted); every prefetch plus every access not resident for
  lookahead. With h = 1 and slots >= k lookahead loads exactly what LRU misses: prefetch hides the
  misses, it does not remove the traffic.
* Subsample: ``sample_every = s`` replays steps 0, s, 2s, ... as if they were consecutive.
"""

from __future__ import annotations

import os
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from campaign.errors import InputError
from campaign.fsutil import UnreadableFile, loads_strict, open_regular, read_bounded, read_text_bounded

__all__ = ["POLICIES", "Overlap", "ReplayResult", "Trace", "TraceError", "cross_layer_overlap", "generate_trace",
           "load_slot_map", "load_trace", "replay", "step_overlap", "trace_from_array"]

POLICIES = ("lru", "static", "belady", "lookahead")
_LABELS = {"lru": "LRU", "static": "static pin", "belady": "Belady"}
# pairwise column comparison finds a repeated id fastest for small k; sorting wins beyond
_PAIRWISE_MAX_K = 16
# overlap comparisons materialise (chunk, layers, k, k) booleans; this keeps a chunk near 10 MB
_OVERLAP_CELLS = 10_000_000
_INT64_MIN, _INT64_MAX = int(np.iinfo(np.int64).min), int(np.iinfo(np.int64).max)
# A routing trace is large by nature (58 MoE layers x top-8 x 100k decode steps is 46M ids, some 150 MB of
# JSON lines): 1 GiB bounds the file read and each array an .npz unpacks (its zip entry's stated size,
# which zipfile holds the inflater to). A slot map is one count per layer.
TRACE_BYTES = 1 << 30
SLOT_MAP_BYTES = 1 << 20


class TraceError(InputError):
    """A trace or slot map that cannot be replayed: one line naming the file, where, and what is wrong."""


class _Invalid(TraceError):
    # raised by Trace itself; loaders catch it to name their own place (a JSONL line, an npz array)
    def __init__(self, source: str, step: int, layer: int, problem: str) -> None:
        self.step, self.layer, self.problem = step, layer, problem
        super().__init__(f"{source}: step {step}, layer {layer}: {problem}")


@dataclass(frozen=True)
class Trace:
    """A frozen decode routing trace. ``experts[t, L]`` are the k distinct ids layer L routed at step t.
    Built by ``load_trace``, ``trace_from_array`` or ``generate_trace``; constructing one checks it."""

    experts: np.ndarray
    n_experts: int
    source: str

    def __post_init__(self) -> None:
        x = self.experts
        if not isinstance(x, np.ndarray) or x.ndim != 3 or x.dtype.kind not in "iu" or 0 in x.shape:
            shape = getattr(x, "shape", None)
            raise TraceError(f"{self.source}: experts must be a non-empty integer array (steps, layers, k), "
                             f"got shape {shape} dtype {getattr(x, 'dtype', type(x).__name__)}")
        if type(self.n_experts) is not int or self.n_experts < 1:
            raise TraceError(f"{self.source}: n_experts must be a positive integer, got {self.n_experts!r}")
        problem = _first_problem(x, self.n_experts)
        if problem is not None:
            raise _Invalid(self.source, *problem)

    @property
    def steps(self) -> int:
        return int(self.experts.shape[0])

    @property
    def layers(self) -> int:
        return int(self.experts.shape[1])

    @property
    def k(self) -> int:
        return int(self.experts.shape[2])


def _first_problem(x: np.ndarray, n: int) -> tuple[int, int, str] | None:
    """(step, layer, what) of the first id out of range or repeated within a (step, layer), else None."""
    low, high = int(x.min()), int(x.max())
    if low < 0 or high >= n:
        bad = (x < 0) | (x >= n)
        t, layer, j = np.unravel_index(int(np.argmax(bad)), x.shape)
        return int(t), int(layer), f"expert id {int(x[t, layer, j])} outside [0, {n})"
    repeated = _repeats(x)
    if repeated.any():
        t, layer = np.unravel_index(int(np.argmax(repeated)), repeated.shape)
        ids = np.sort(x[t, layer])
        twice = int(ids[1:][ids[1:] == ids[:-1]][0])
        return int(t), int(layer), f"expert {twice} routed twice in one step (a router picks k distinct experts)"
    return None


def _repeats(x: np.ndarray) -> np.ndarray:
    """(steps, layers) bool: some id occurs twice among that step's k ids of that layer."""
    k = x.shape[2]
    if k > _PAIRWISE_MAX_K:
        ordered = np.sort(x, axis=2)
        return (ordered[:, :, 1:] == ordered[:, :, :-1]).any(axis=2)
    out = np.zeros(x.shape[:2], dtype=bool)
    for i in range(k):
        for j in range(i + 1, k):
            out |= x[:, :, i] == x[:, :, j]
    return out


def _compact_dtype(n_experts: int) -> type[np.integer]:
    return np.int16 if n_experts <= np.iinfo(np.int16).max else np.int32


def _make_trace(x: np.ndarray, n_experts: int | None, source: str, where: Callable[[int, int], str]) -> Trace:
    """Check the range in the array's own dtype (a cast first could wrap an out-of-range id into range),
    store the ids compact and read-only, and let Trace check the rest. ``where(step, layer)`` names the
    place for an error."""
    if n_experts is None:
        n_experts = max(int(x.max()) + 1, 1)
    if int(x.min()) < 0 or int(x.max()) >= n_experts:
        step, layer, what = _first_problem(x, n_experts) or (0, 0, "")  # always the range problem here
        raise TraceError(f"{where(step, layer)}: {what}")
    experts = x.astype(_compact_dtype(n_experts))
    experts.flags.writeable = False
    try:
        return Trace(experts, n_experts, source)
    except _Invalid as exc:
        raise TraceError(f"{where(exc.step, exc.layer)}: {exc.problem}") from None


def trace_from_array(experts: Any, n_experts: int | None = None, source: str = "<array>") -> Trace:
    """A checked Trace from an integer array-like of shape (steps, layers, k)."""
    x = np.asarray(experts)
    if x.ndim != 3 or x.dtype.kind not in "iu" or 0 in x.shape:
        raise TraceError(f"{source}: expected a non-empty integer array (steps, layers, k), "
                         f"got shape {x.shape} dtype {x.dtype}")
    return _make_trace(x, n_experts, source, lambda t, layer: f"{source}: step {t}, layer {layer}")


# ----------------------------------------------------------------------------------------------- loading


def load_trace(path: Path, n_experts: int | None = None) -> Trace:
    """A decode routing trace from ``.npz`` or JSON lines (formats in the module docstring)."""
    path = Path(path)
    if n_experts is not None and (type(n_experts) is not int or n_experts < 1):
        raise TraceError(f"{path}: n_experts must be a positive integer, got {n_experts!r}")
    suffix = path.suffix.lower()
    if suffix == ".npz":
        return _load_npz(path, n_experts)
    if suffix in (".jsonl", ".json"):
        return _load_jsonl(path, n_experts)
    raise TraceError(f"{path}: unknown trace format {suffix or '(no suffix)'!r}: expected .npz or .jsonl")


def _load_npz(path: Path, n_experts: int | None) -> Trace:
    experts, stored = _npz_arrays(path)
    if experts.ndim != 3 or 0 in experts.shape:
        raise TraceError(f"{path}: array `experts` has shape {experts.shape}: expected (steps, layers, k), "
                         f"each at least 1")
    if experts.dtype.kind not in "iu":
        raise TraceError(f"{path}: array `experts` has dtype {experts.dtype}: expert ids must be integers")
    if n_experts is None and stored is not None:
        if stored.ndim != 0 or stored.dtype.kind not in "iu" or int(stored) < 1:
            raise TraceError(f"{path}: array `n_experts` must be a positive integer scalar, "
                             f"got shape {stored.shape} dtype {stored.dtype}")
        n_experts = int(stored)
    return _make_trace(experts, n_experts, path.name,
                       lambda t, layer: f"{path}: array `experts`[{t}, {layer}]")


def _npz_arrays(path: Path) -> tuple[np.ndarray, np.ndarray | None]:
    """(experts, n_experts or None) read from the archive; any failure to read is a TraceError."""
    unreadable = (OSError, ValueError, EOFError, zipfile.BadZipFile)
    try:
        with open_regular(path, what="trace") as fd, os.fdopen(os.dup(fd), "rb") as handle:
            if os.fstat(fd).st_size > TRACE_BYTES:
                raise TraceError(f"{path}: trace is over the {TRACE_BYTES:,}-byte cap")
            try:
                data = np.load(handle, allow_pickle=False)
            except unreadable as exc:
                raise TraceError(f"{path}: cannot read as .npz: {exc}") from exc
            if not hasattr(data, "files"):  # a plain .npy loads as a bare array
                raise TraceError(f"{path}: not an .npz archive (arrays `experts` and optional `n_experts`)")
            with data:
                return _npz_members(path, data, unreadable)
    except UnreadableFile as exc:
        raise _unreadable(path, exc) from (exc.__cause__ or exc)


def _unreadable(path: Path, exc: UnreadableFile) -> TraceError:
    """The bounded reader's words (a FIFO, a device, a folder, a loop, over the cap, missing) for a trace or
    slot map; raised from the OSError behind them where there is one."""
    return TraceError(f"{path}: cannot read: {exc.reason}")


def _npz_members(path: Path, data: Any,
                 unreadable: tuple[type[BaseException], ...]) -> tuple[np.ndarray, np.ndarray | None]:
    if "experts" not in data.files:
        raise TraceError(f"{path}: no array `experts` (arrays: {', '.join(data.files) or 'none'})")
    for info in data.zip.infolist():  # unpacked sizes, checked before anything is inflated (a zip bomb)
        if info.file_size > TRACE_BYTES:
            raise TraceError(f"{path}: array {info.filename} unpacks to {info.file_size:,} bytes, over the "
                             f"{TRACE_BYTES:,}-byte cap")
    try:
        return data["experts"], (data["n_experts"] if "n_experts" in data.files else None)
    except unreadable as exc:
        raise TraceError(f"{path}: cannot read the arrays: {exc}") from exc


def _load_jsonl(path: Path, n_experts: int | None) -> Trace:
    header_n, steps, lines = _read_jsonl_steps(path)
    if not steps:
        raise TraceError(f"{path}: no decode steps (expected one {{\"layers\": [...]}} line per step)")
    if n_experts is None:
        n_experts = header_n
    return _make_trace(np.stack(steps), n_experts, path.name,
                       lambda t, layer: f"{path}:{lines[t]}: layers[{layer}]")


def _read_jsonl_steps(path: Path) -> tuple[int | None, list[np.ndarray], list[int]]:
    """(header's n_experts or None, one (layers, k) array per step, each step's line number)."""
    try:
        text = read_text_bounded(path, TRACE_BYTES, what="trace")
    except UnreadableFile as exc:  # a FIFO, a device, a folder, over the cap, not UTF-8: in its own words
        raise _unreadable(path, exc) from (exc.__cause__ or exc)
    header_n: int | None = None
    steps: list[np.ndarray] = []
    lines: list[int] = []
    first_row = True
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = loads_strict(line)
        except ValueError as exc:
            raise TraceError(f"{path}:{number}: not a JSON object: {exc}") from exc
        if not isinstance(row, dict):
            raise TraceError(f"{path}:{number}: each line must be a JSON object")
        if "layers" not in row:
            if not first_row or "n_experts" not in row:
                raise TraceError(f"{path}:{number}: needs `layers` (only the first line may be the "
                                 f"{{\"n_experts\": N}} header)")
            header_n = _header_n(path, number, row["n_experts"])
        else:
            ids = _step_ids(f"{path}:{number}", row["layers"], line)
            if steps and ids.shape != steps[0].shape:
                raise TraceError(_shape_change(f"{path}:{number}", ids.shape, steps[0].shape, lines[0]))
            steps.append(ids)
            lines.append(number)
        first_row = False
    return header_n, steps, lines


def _header_n(path: Path, number: int, value: Any) -> int:
    if type(value) is not int or value < 1:
        raise TraceError(f"{path}:{number}: n_experts: {value!r} is not a positive integer")
    return value


def _shape_change(where: str, shape: tuple[int, ...], first: tuple[int, ...], first_line: int) -> str:
    if shape[0] != first[0]:
        return (f"{where}: layers: {shape[0]} layers, the first step (line {first_line}) has {first[0]}: "
                f"every step routes every layer")
    return f"{where}: layers: {shape[1]} ids per layer, the first step (line {first_line}) has {first[1]}: k differs"


def _step_ids(where: str, layers: Any, line: str) -> np.ndarray:
    """One step's ids as a (layers, k) int64 array, or a TraceError naming the layer and the id."""
    if not isinstance(layers, list) or not layers:
        raise TraceError(f"{where}: layers: must be a non-empty list (one list of expert ids per layer)")
    k = len(layers[0]) if isinstance(layers[0], list) else -1
    for i, ids in enumerate(layers):
        if not isinstance(ids, list) or not ids:
            raise TraceError(f"{where}: layers[{i}]: must be a non-empty list of expert ids")
        if len(ids) != k:
            raise TraceError(f"{where}: layers[{i}]: {len(ids)} ids, layers[0] has {k}: every layer routes k experts")
    ids = np.array(layers)
    # numpy reads [1, true] as [1, 1]: a boolean hides among integers, so then look at the values themselves
    if ids.dtype.kind != "i" or ids.ndim != 2 or "true" in line or "false" in line:
        for i, row in enumerate(layers):
            for j, value in enumerate(row):
                if type(value) is not int:
                    raise TraceError(f"{where}: layers[{i}][{j}]: {value!r} is not an integer expert id")
                if not _INT64_MIN <= value <= _INT64_MAX:
                    raise TraceError(f"{where}: layers[{i}][{j}]: expert id {value} is out of range")
    return ids.astype(np.int64)


def load_slot_map(path: Path, layers: int, n_experts: int) -> np.ndarray:
    """Per-layer slot counts (int64, shape (layers,)) from JSON (formats in the module docstring)."""
    path = Path(path)
    try:
        doc = loads_strict(read_bounded(path, SLOT_MAP_BYTES, what="slot map"))
    except UnreadableFile as exc:
        raise _unreadable(path, exc) from (exc.__cause__ or exc)
    except ValueError as exc:
        raise TraceError(f"{path}: not valid JSON: {exc}") from exc
    counts = _slot_entries(path, doc, layers)
    for label, value in counts:
        if type(value) is not int:
            raise TraceError(f"{path}: {label}: {value!r} is not an integer slot count")
        if not 0 <= value <= n_experts:
            raise TraceError(f"{path}: {label}: {value} slots outside 0..{n_experts} (the layer's experts)")
    return np.array([value for _, value in counts], dtype=np.int64)


def _slot_entries(path: Path, doc: Any, layers: int) -> list[tuple[str, Any]]:
    """(label for errors, value) per layer, in layer order."""
    if isinstance(doc, dict) and "slots_per_layer" in doc:
        doc, name = doc["slots_per_layer"], "slots_per_layer"
        if not isinstance(doc, list):
            raise TraceError(f"{path}: slots_per_layer: must be a list with one slot count per layer")
    else:
        name = ""
    if isinstance(doc, list):
        if len(doc) != layers:
            raise TraceError(f"{path}: {name or 'list'}: {len(doc)} slot counts for a trace of {layers} layers")
        return [(f"{name}[{i}]", value) for i, value in enumerate(doc)]
    if not isinstance(doc, dict):
        raise TraceError(f"{path}: expected a list of slot counts, {{\"slots_per_layer\": [...]}} "
                         f"or {{\"<layer>\": count}}")
    indices = {str(i) for i in range(layers)}  # canonical spellings only: "01" or " 1" is no layer
    for key in doc:
        if key not in indices:
            raise TraceError(f"{path}: key {key!r}: not a layer index 0..{layers - 1}")
    missing = [str(i) for i in range(layers) if str(i) not in doc]
    if missing:
        raise TraceError(f"{path}: layer \"{missing[0]}\": missing ({len(missing)} of {layers} layers have no count)")
    return [(f"layer \"{i}\"", doc[str(i)]) for i in range(layers)]


# ----------------------------------------------------------------------------------------------- replay


@dataclass(frozen=True)
class ReplayResult:
    """One policy replayed at one slot map. ``exact`` only when every step was replayed."""

    policy: str
    lookahead: int | None
    steps_total: int
    steps_replayed: int
    sample_every: int
    exact: bool
    fraction: float
    hits_per_layer: list[int]
    accesses_per_layer: list[int]
    loads_per_layer: list[int]
    hit_rate: float
    misses_per_layer_step: float
    loads_per_layer_step: float
    slots_total: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        label = _LABELS.get(self.policy, f"{self.policy}-{self.lookahead}")
        if not self.exact:
            return (f"{label} hit rate {self.hit_rate:.3f} on a 1-in-{self.sample_every} subsample "
                    f"({self.steps_replayed:,} of {self.steps_total:,} steps): not the exact replay")
        return (f"{label} hit rate {self.hit_rate:.3f}, exact replay of all {self.steps_total:,} steps at "
                f"{self.slots_total:,} slots ({self.misses_per_layer_step:.2f} misses and "
                f"{self.loads_per_layer_step:.2f} loads per layer-step)")


def replay(trace: Trace, slots: Sequence[int] | np.ndarray, policy: str, *, lookahead: int = 1,
           sample_every: int = 1) -> ReplayResult:
    """Replay ``trace`` under ``policy`` (one of POLICIES) with ``slots[L]`` slots in layer L."""
    budget = _checked_slots(slots, trace.layers, trace.n_experts)
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}: one of {', '.join(POLICIES)}")
    if type(lookahead) is not int or lookahead < 1:
        raise ValueError(f"lookahead must be an integer >= 1, got {lookahead!r}")
    if type(sample_every) is not int or sample_every < 1:
        raise ValueError(f"sample_every must be an integer >= 1, got {sample_every!r}")
    x = trace.experts[::sample_every]
    if policy == "lookahead":
        hits, loads = _lookahead_hits(x, budget, trace.n_experts, lookahead)
    else:
        demand = {"lru": _lru_hits, "static": _static_hits, "belady": _belady_hits}[policy]
        hits = demand(x, budget, trace.n_experts)
        loads = x.shape[0] * x.shape[2] - hits  # every miss is read from slow memory
    return _result(trace, budget, policy, lookahead if policy == "lookahead" else None, sample_every, x.shape[0],
                   hits, loads)


def _checked_slots(slots: Sequence[int] | np.ndarray, layers: int, n_experts: int) -> np.ndarray:
    budget = np.asarray(slots)
    if budget.shape != (layers,) or budget.dtype.kind not in "iu":
        raise ValueError(f"slots must be {layers} integers (one per layer), got shape {budget.shape} "
                         f"dtype {budget.dtype}")
    if budget.min() < 0 or budget.max() > n_experts:
        raise ValueError(f"slots must lie in 0..{n_experts}, got {budget.min()}..{budget.max()}")
    return budget.astype(np.int64)


def _result(trace: Trace, budget: np.ndarray, policy: str, lookahead: int | None, sample_every: int,
            replayed: int, hits: np.ndarray, loads: np.ndarray) -> ReplayResult:
    accesses = replayed * trace.k
    total = accesses * trace.layers
    return ReplayResult(
        policy=policy, lookahead=lookahead, steps_total=trace.steps, steps_replayed=replayed,
        sample_every=sample_every, exact=replayed == trace.steps, fraction=replayed / trace.steps,
        hits_per_layer=[int(h) for h in hits], accesses_per_layer=[accesses] * trace.layers,
        loads_per_layer=[int(v) for v in loads], hit_rate=int(hits.sum()) / total,
        misses_per_layer_step=(total - int(hits.sum())) / (replayed * trace.layers),
        loads_per_layer_step=int(loads.sum()) / (replayed * trace.layers), slots_total=int(budget.sum()))


def _key_dtype(x: np.ndarray, n: int) -> type[np.integer]:
    # keys are step*k + position, offset by up to 2*steps*k + 2n: int32 sorts twice as fast as int64
    steps, _, k = x.shape
    return np.int32 if 2 * steps * k + 2 * n + 2 < np.iinfo(np.int32).max else np.int64


def _flat_index(x: np.ndarray, n: int) -> Callable[[int], np.ndarray]:
    """Step t's ids as flat indices into a (layers, n) array, so one gather serves every layer."""
    base = (np.arange(x.shape[1], dtype=np.intp) * n)[:, None]
    return lambda t: base + x[t]


def _lru_hits(x: np.ndarray, budget: np.ndarray, n: int) -> np.ndarray:
    """Resident at the start of step t = the ``slots`` largest last-access keys of the layer (LRU holds the
    most recently used distinct experts), so an access hits iff its key reaches that threshold."""
    steps, layers, k = x.shape
    dtype = _key_dtype(x, n)
    last = np.full((layers, n), -1, dtype=dtype)
    flat = last.reshape(-1)
    index = _flat_index(x, n)
    rows = np.arange(layers)
    column = np.clip(n - budget, 0, n - 1)
    # a layer with 0 slots holds nothing; otherwise a never-used expert (key -1) is never resident
    floor = np.where(budget == 0, np.iinfo(dtype).max, 0).astype(dtype)
    position = np.arange(k, dtype=dtype)
    hits = np.zeros((layers, k), dtype=np.int64)
    for t in range(steps):
        at = index(t)
        threshold = np.maximum(np.sort(last, axis=1)[rows, column], floor)
        hits += flat[at] >= threshold[:, None]
        flat[at] = t * k + position
    return hits.sum(axis=1)


def _static_hits(x: np.ndarray, budget: np.ndarray, n: int) -> np.ndarray:
    counts = np.stack([np.bincount(x[:, layer].reshape(-1), minlength=n) for layer in range(x.shape[1])])
    order = np.argsort(-counts, axis=1, kind="stable")  # stable: equal counts keep the lower id first
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.arange(n)[None, :].repeat(x.shape[1], axis=0), axis=1)
    return (counts * (rank < budget[:, None])).sum(axis=1)


def _next_keys(x: np.ndarray, n: int, dtype: type[np.integer]) -> tuple[np.ndarray, np.ndarray]:
    """(after, first): ``after[t, L, j]`` is the key of the next use of ``x[t, L, j]`` after step t and
    ``first[L, e]`` the key of e's first use. Never used (again) is ``steps*k + e``: farther than any
    use, and distinct per expert so that ordering by key never ties."""
    steps, layers, k = x.shape
    upcoming = np.tile(np.arange(n, dtype=dtype) + steps * k, (layers, 1))
    flat = upcoming.reshape(-1)
    index = _flat_index(x, n)
    position = np.arange(k, dtype=dtype)
    after = np.empty(x.shape, dtype=dtype)
    for t in range(steps - 1, -1, -1):
        at = index(t)
        after[t] = flat[at]
        flat[at] = t * k + position
    return after, upcoming


def _keeper(budget: np.ndarray, n: int, never: int) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """keep(key, candidate): per layer, the ``budget[L]`` candidates with the smallest (distinct) keys, as a
    bool mask. ``never`` is above every key, so a non-candidate sorts last."""
    rows = np.arange(budget.shape[0])
    column = np.clip(budget - 1, 0, n - 1)
    # never - 1 keeps a short row from admitting non-candidates; -1 empties a layer with 0 slots
    cap = np.where(budget == 0, -1, never - 1)

    def keep(key: np.ndarray, candidate: np.ndarray) -> np.ndarray:
        masked = np.where(candidate, key, never)
        threshold = np.minimum(np.sort(masked, axis=1)[rows, column], cap)
        return masked <= threshold[:, None]

    return keep


def _belady_hits(x: np.ndarray, budget: np.ndarray, n: int) -> np.ndarray:
    steps, layers, k = x.shape
    dtype = _key_dtype(x, n)
    after, _ = _next_keys(x, n, dtype)
    keep = _keeper(budget, n, steps * k + n + 1)
    upcoming = np.zeros((layers, n), dtype=dtype)  # residents' and this step's next uses; others unused
    resident = np.zeros((layers, n), dtype=bool)
    index = _flat_index(x, n)
    hits = np.zeros((layers, k), dtype=np.int64)
    for t in range(steps):
        at = index(t)
        hits += resident.reshape(-1)[at]
        upcoming.reshape(-1)[at] = after[t]
        resident.reshape(-1)[at] = True  # now the candidates: keep() hands back a new array
        resident = keep(upcoming, resident)
    return hits.sum(axis=1)


def _lookahead_hits(x: np.ndarray, budget: np.ndarray, n: int, horizon: int) -> tuple[np.ndarray, np.ndarray]:
    """One sort per step ranks, smaller first: the experts due within the horizon by first use (keys below
    steps*k), then the other residents by recency (``top - last`` lies above steps*k)."""
    steps, layers, k = x.shape
    dtype = _key_dtype(x, n)
    after, upcoming = _next_keys(x, n, dtype)
    top = 2 * steps * k + n
    keep = _keeper(budget, n, top + n + 1)
    # top - last use: never used is older than any use, and distinct per expert
    age = np.tile(top + 1 + np.arange(n, dtype=dtype), (layers, 1))
    resident = np.zeros((layers, n), dtype=bool)
    index = _flat_index(x, n)
    used = top - np.arange(k, dtype=dtype)
    hits = np.zeros((layers, k), dtype=np.int64)
    fetched = np.zeros((layers, n), dtype=np.int64)
    for t in range(steps):
        at = index(t)
        due = upcoming < min(t + horizon, steps) * k
        kept = keep(np.where(due, upcoming, age), resident | due)
        fetched += kept > resident  # newly resident: prefetched
        hits += kept.reshape(-1)[at]
        age.reshape(-1)[at] = used - t * k
        upcoming.reshape(-1)[at] = after[t]
        resident = kept
    hits_per_layer = hits.sum(axis=1)
    return hits_per_layer, fetched.sum(axis=1) + steps * k - hits_per_layer


# ----------------------------------------------------------------------------------------------- overlap


@dataclass(frozen=True)
class Overlap:
    """Mean share of k ids two routing sets have in common, beside the share two independent uniform
    draws of k of n would have (expected intersection k*k/n, over k: k/n)."""

    what: str
    observed: float
    chance: float
    pairs: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        return f"{self.what} {self.observed:.4f} (chance {self.chance:.4f}, {self.pairs:,} pairs)"


def _common(a: np.ndarray, b: np.ndarray) -> int:
    """Total |a_i ∩ b_i| over rows of two (..., k) id arrays whose rows hold distinct ids."""
    per_row = a.shape[-1] * a.shape[-1] * int(np.prod(a.shape[1:-1], dtype=np.int64))
    chunk = max(1, _OVERLAP_CELLS // max(per_row, 1))
    total = 0
    for start in range(0, a.shape[0], chunk):
        left, right = a[start:start + chunk], b[start:start + chunk]
        total += int(np.count_nonzero(left[..., :, None] == right[..., None, :]))
    return total


def cross_layer_overlap(trace: Trace) -> Overlap:
    """Per step and adjacent layers (L, L+1): |ids_L ∩ ids_L+1| / k, averaged. Expert e of layer L and e of
    layer L+1 are different weights; this asks whether routers of different layers pick the same ids
    more often than chance, which is what a cache shared across layers would need."""
    if trace.layers < 2:
        raise TraceError(f"{trace.source}: cross-layer overlap needs at least 2 layers, the trace has 1")
    x = trace.experts
    pairs = trace.steps * (trace.layers - 1)
    observed = _common(x[:, :-1], x[:, 1:]) / (pairs * trace.k)
    return Overlap("cross-layer overlap", observed, trace.k / trace.n_experts, pairs)


def step_overlap(trace: Trace) -> Overlap:
    """Per layer and consecutive steps (t, t+1): |ids_t ∩ ids_t+1| / k, averaged: the reuse an LRU feeds on."""
    if trace.steps < 2:
        raise TraceError(f"{trace.source}: step-to-step overlap needs at least 2 steps, the trace has 1")
    x = trace.experts
    pairs = (trace.steps - 1) * trace.layers
    observed = _common(x[:-1], x[1:]) / (pairs * trace.k)
    return Overlap("step-to-step overlap", observed, trace.k / trace.n_experts, pairs)


# ----------------------------------------------------------------------------------------------- generator


def generate_trace(steps: int, layers: int, experts: int, k: int, *, locality: float, seed: int) -> Trace:
    """A seeded trace of known locality. Per step and layer each of the k ids is, with probability
    ``locality``, one of the previous step's ids of that layer (without replacement), else a uniform
    draw among the ids not chosen yet this step. ``locality=0``: independent uniform k-subsets."""
    if min(steps, layers, experts, k) < 1 or k > experts:
        raise ValueError(f"need steps, layers, experts, k >= 1 and k <= experts, got {steps}, {layers}, "
                         f"{experts}, {k}")
    if not 0.0 <= locality <= 1.0:
        raise ValueError(f"locality must lie in [0, 1], got {locality}")
    rng = np.random.default_rng(seed)
    out = np.empty((steps, layers, k), dtype=_compact_dtype(experts))
    previous = np.zeros((layers, k), dtype=np.int64)
    # random numbers are drawn a block of steps at a time: few calls, bounded memory
    block = max(1, min(1024, 4_000_000 // (layers * k * k)))
    for start in range(0, steps, block):
        reuse, turn, draws, against = _block_draws(rng, min(block, steps - start), layers, experts, k, locality)
        if start == 0:
            reuse[0] = False  # step 0 has no previous step
            against[0, ..., :k] = np.tri(k, k, -1, dtype=bool)
        for i in range(reuse.shape[0]):
            row = np.where(reuse[i], previous.reshape(-1)[turn[i]], draws[i])
            previous = _redraw_repeats(rng, row, against[i], experts)
            out[start + i] = previous
    out.flags.writeable = False
    return Trace(out, experts, f"generated(steps={steps}, layers={layers}, experts={experts}, k={k}, "
                                f"locality={locality}, seed={seed})")


def _block_draws(rng: np.random.Generator, size: int, layers: int, n: int, k: int,
                 locality: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """For ``size`` steps: which positions reuse, where in the previous step's flat (layers, k) ids each
    reuses from, the fresh draws, and ``against[s, L, j, i]``: a fresh id at j must differ from position i
    (i padded with False to a multiple of 8, so each j's row reads as whole 64-bit words)."""
    reuse = rng.random((size, layers, k)) < locality
    # a random rotation per layer: which of the previous ids a step reuses does not follow their position
    turn = (np.arange(k) + rng.integers(0, k, (size, layers, 1))) % k + (np.arange(layers) * k)[:, None]
    draws = rng.integers(0, n, (size, layers, k))
    width = -(-k // 8) * 8
    against = np.zeros((size, layers, k, width), dtype=bool)
    before = np.tri(k, k, -1, dtype=bool)  # before[j, i]: position i comes before position j
    # i = j drops out by itself: a position cannot both reuse and not
    np.logical_and(before | reuse[..., None, :], ~reuse[..., :, None], out=against[..., :k])
    return reuse, turn, draws, against


def _redraw_repeats(rng: np.random.Generator, row: np.ndarray, against: np.ndarray, n: int) -> np.ndarray:
    """Redraw each fresh id equal to a reused id or to an earlier position's id until none is. The rule
    looks only at equality, so it treats every id not reused alike: the fresh ids end a uniform subset."""
    k, width = row.shape[1], against.shape[-1]
    # padding compares with any id: ``against`` masks it out
    spread = slice(None) if width == k else np.arange(width) % k
    while True:
        same = (row[:, :, None] == row[:, None, spread]) & against
        clash = (same.view(np.uint64) != 0).any(axis=2) if width > 8 else same.view(np.uint64)[..., 0] != 0
        count = int(np.count_nonzero(clash))
        if not count:
            return row
        row[clash] = rng.integers(0, n, count)
