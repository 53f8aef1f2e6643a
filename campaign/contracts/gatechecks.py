"""Gate checks that need the whole contract: found at validation, never at run time.

- needle: every rung, plus its answer, must fit the context of every lane that runs it. The context
  is read from the lane's args (per engine) or its declared ``context`` field; a lane that says
  neither is refused, because then a rung that does not fit could only be discovered mid-window.
- task: the frozen margin must be reachable: if even 0 losses in n tasks leaves the upper bound at or
  above the margin, the gate could never pass, and that is a contract error, not a finding.
"""

from __future__ import annotations

import math

from campaign.contracts.args import parse_args
from campaign.contracts.resolve import EffectiveLane

__all__ = ["CONTEXT_OPTIONS", "check_gate_specs", "lane_context"]

# Options that set the per-request context, by engine. llama.cpp splits its context between the
# --parallel slots unless the KV cache is unified.
CONTEXT_OPTIONS: dict[str, tuple[str, ...]] = {
    "llamacpp": ("--ctx-size", "-c"),
    "llama-cpp-python": ("--n_ctx",),
    "vllm": ("--max-model-len",),
    "sglang": ("--context-length",),
}


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
