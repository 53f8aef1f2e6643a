"""What vLLM shows of the values its flags declare.

Speculative depth: ``--speculative-config``/``-sc`` JSON's ``num_speculative_tokens``, against
``vllm:spec_decode_num_accepted_tokens_per_pos_total{position}``, which vLLM exports with one series per
draft position (0 to num_speculative_tokens - 1) while speculating (docs/engine-lanes.md, the vLLM demo figures: per
position 66/60/60 at ``num_speculative_tokens: 3``; not re-measured with this check). Nothing else is mapped
yet: every other declared value of a vLLM lane is listed as unproven.
"""

from __future__ import annotations

import json

from campaign.contracts.args import axis_key
from campaign.lanes.engines.declared import Observable, depth_check

__all__ = ["OBSERVABLES"]

PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos_total"


def _num_speculative_tokens(value: str) -> int | None:
    try:
        config = json.loads(value)
    except ValueError:
        return None
    tokens = config.get("num_speculative_tokens") if isinstance(config, dict) else None
    return tokens if isinstance(tokens, int) and not isinstance(tokens, bool) else None


_DEPTH = Observable("per-position acceptance counters (/metrics)", depth_check(PER_POSITION, _num_speculative_tokens),
                    "limits the depth")
OBSERVABLES = {axis_key(option): _DEPTH for option in ("--speculative-config", "-sc")}
