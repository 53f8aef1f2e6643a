"""A greedy gate over hand-written raw records, for the tests of the greedy judge and of what it decides."""

from __future__ import annotations

from pathlib import Path

from campaign.contracts.load import load_contract
from campaign.fsutil import JsonlAppender
from campaign.gates.base import GateContext
from campaign.gates.registry import gate_for
from tests.support.contracts import demo_like, write_contract

__all__ = ["greedy_gate"]


def greedy_gate(tmp_path: Path, replies: dict[str, dict[str, list[str]]], rule: str = '"3/3"', cached: int = 0):
    prompts = [(pid, f"Say something about {pid}.") for pid in next(iter(replies.values()))]
    contract = load_contract(write_contract(tmp_path, demo_like(18000, rule=rule), prompts=prompts))
    ctx = GateContext(bundle=tmp_path / "bundle", contract=contract,
                      input_paths={"p": tmp_path / "prompts" / "p.jsonl"})
    gate = gate_for(contract.contract.gates[0], ctx)
    for lane, table in replies.items():
        with JsonlAppender(ctx.raw_path("greedy", lane)) as sink:
            for pid, texts in table.items():
                for repeat, text in enumerate(texts):
                    sink.append({"tags": {"prompt": pid, "repeat": repeat}, "status": 200,
                                 "response": {"choices": [{"message": {"content": text}, "finish_reason": "stop"}],
                                              "usage": {"completion_tokens": 5},
                                              # llama-server's own count of prompt tokens taken from its cache
                                              "timings": {"prompt_n": 9 - (cached if repeat else 0),
                                                          "cache_n": cached if repeat else 0}}})
    return gate, contract.lanes["spec"], contract.lanes["base"]
