"""What llama-server shows of the values its flags declare (read from the llama.cpp vendored by
llama-cpp-python 0.3.36; file:line below are in that tree).

Speculative depth. Every drafting type has its own limit, and only it bounds the depth
(common/speculative.cpp, ``common_speculative_n_max`` 2315-2348): ``--spec-draft-n-max`` for a draft model
(draft-simple, eagle3, mtp), ``--spec-ngram-simple-size-m`` for ngram-simple (default 48; a draft is the m-gram
after an n-gram match, common/ngram-map.cpp 96-101), ``--spec-ngram-map-k-size-m``/``-k4v-size-m``,
``--spec-ngram-mod-n-max`` (default 64). The server truncates a draft only to what the slot's context and
``n_predict`` leave (tools/server/server-context.cpp ``get_n_draft_max`` 453-472), never to
``--spec-draft-n-max``: beside ``--spec-type ngram-simple`` that flag parses and does nothing. /metrics
exports ``llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="p"}``: the verification steps
that accepted more than p draft tokens (server-context.cpp 3964-3970), one series per position up to the
engine's effective limit (the vector is sized ``common_speculative_n_max``), once a draft has been verified.

At the default verbosity (measured on this build) the boot log says only ``llama threadpool init,
n_threads = N`` (common/common.cpp 1701) and ``load_model: initializing, n_slots = S, n_ctx_slot = C,
kv_unified = 'false'`` (tools/server/server-context.cpp 1231): threads, slots and the context per slot.
The context a declared ``--ctx-size N`` gives each slot: N padded up to a multiple of 256, divided among
the slots unless the KV cache is unified, padded again (src/llama-context.cpp 290-296). Batch, micro-batch,
flash attention and the KV cache's types are printed only from ``-lv 4``: the ``llama_context:`` lines
(llama-context.cpp 308-320; n_batch capped at n_ctx and n_ubatch at n_batch at 246-248) and
``llama_kv_cache: ... K (f16) ... V (f16)``; without them those values are unproven. Slots: /props
``total_slots`` too.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from campaign.contracts.args import axis_key
from campaign.lanes.engines.declared import Check, Evidence, Observable, boot_values, depth_check

__all__ = ["OBSERVABLES"]

PER_POSITION = "llamacpp:spec_decode_num_accepted_tokens_per_pos_total"


def _boot(pattern: str, name: str, expect: Callable[[str], str | None] = str, *,
          verbose: bool = False) -> Callable[[str, Evidence], Check]:
    """A value the boot log prints (``pattern`` captures it); ``expect`` turns the declared value into the
    one the engine should print (None: it cannot say); ``verbose``: printed only from ``-lv 4``."""

    def check(value: str, evidence: Evidence) -> Check:
        seen = boot_values(evidence.boot_log, pattern)
        wanted = expect(value)
        if not seen:
            return Check("unproven", f"the boot log has no {name} line"
                                     + (" (llama-server prints it from -lv 4)" if verbose else ""))
        if wanted is None:
            return Check("unproven", f"{value!r}: no value the boot log's {name} can be held to")
        wrong = sorted({s for s in seen if s != wanted})
        if wrong:
            return Check("contradicted", f"the engine's {name} is {', '.join(wrong)} (boot log)")
        return Check("holds", f"boot log {name} = {wanted}")

    return check


_SLOTS = r"initializing, n_slots = (\d+), n_ctx_slot = (\d+), kv_unified = '(\w+)'"


def _pad(n: int) -> int:
    return -(-n // 256) * 256


def _context(value: str, evidence: Evidence) -> Check:
    """``--ctx-size N`` against each slot's context as the server reports it at load."""
    found = re.findall(_SLOTS, evidence.boot_log)
    if not found:
        return Check("unproven", "the boot log has no 'n_slots = S, n_ctx_slot = C' line")
    if not value.isdigit() or int(value) == 0:
        return Check("unproven", f"{value!r}: 0 or no number means the model's own context")
    slots, slot_ctx, unified = int(found[-1][0]), int(found[-1][1]), found[-1][2] == "true"
    # a model trained on less caps the slot below this (server-context.cpp n_ctx_slot): a contradiction too
    expected = _pad(int(value)) if unified else _pad(_pad(int(value)) // slots)
    seen = f"n_ctx_slot = {slot_ctx} over {slots} slots, kv_unified {str(unified).lower()} (boot log)"
    if slot_ctx != expected:
        return Check("contradicted", f"the engine gives each slot {slot_ctx} tokens where {value} gives "
                                     f"{expected}: {seen}")
    return Check("holds", seen)


def _flash(value: str) -> str | None:
    return {"on": "enabled", "off": "disabled", "auto": "auto"}.get(value.lower())


def _slots(value: str, evidence: Evidence) -> Check:
    slots = (evidence.props or {}).get("total_slots")
    if slots is None:
        return Check("unproven", "/props has no total_slots")
    if str(slots) != value:
        return Check("contradicted", f"/props total_slots is {slots}")
    return Check("holds", f"/props total_slots = {slots}")


def _verbose(name: str, pattern: str, sets: str, expect: Callable[[str], str | None] = str) -> Observable:
    """A value printed by the library's own log lines, which llama-server shows only from ``-lv 4``."""
    return Observable(f"boot log {name} (-lv 4)", _boot(pattern, name, expect, verbose=True), sets)


def _table() -> dict[str, Observable]:
    depth = Observable("per-position acceptance counters (/metrics)", depth_check(PER_POSITION), "limits the depth")
    threads = _boot(r"threadpool init, n_threads = (\d+)", "threadpool n_threads")
    entries: list[tuple[tuple[str, ...], Observable]] = [
        (("--spec-draft-n-max", "--spec-ngram-simple-size-m", "--spec-ngram-map-k-size-m",
          "--spec-ngram-map-k4v-size-m", "--spec-ngram-mod-n-max"), depth),
        (("-c", "--ctx-size"), Observable("boot log n_ctx_slot", _context, "sets the context size")),
        (("-t", "--threads"), Observable("boot log threadpool n_threads", threads, "sets the thread count")),
        (("-np", "--parallel"), Observable("/props total_slots", _slots, "sets the slot count")),
        (("-b", "--batch-size"), _verbose("n_batch", r"llama_context: n_batch\s+=\s+(\d+)", "sets the batch size")),
        (("-ub", "--ubatch-size"), _verbose("n_ubatch", r"llama_context: n_ubatch\s+=\s+(\d+)",
                                            "sets the micro-batch size")),
        (("-fa", "--flash-attn"), _verbose("flash_attn", r"llama_context: flash_attn\s+=\s+(\w+)",
                                           "sets flash attention", _flash)),
        (("-ctk", "--cache-type-k"), _verbose("K cache type", r"K \((\w+)\):", "sets the K cache type")),
        (("-ctv", "--cache-type-v"), _verbose("V cache type", r"V \((\w+)\):", "sets the V cache type")),
    ]
    return {axis_key(option): observable for options, observable in entries for option in options}


OBSERVABLES = _table()
