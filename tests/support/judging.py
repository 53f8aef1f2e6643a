"""A bundle as a window leaves it before judging (hand-made records of the shape a window writes), and one judged
and signed as a complete window leaves it, for the tests of judging, rejudging and reading bundles."""

from __future__ import annotations

import shutil
from pathlib import Path

from campaign.contracts.freeze import freeze
from campaign.contracts.load import LoadedContract, load_contract
from campaign.fsutil import JsonlAppender, atomic_write_json, load_json_strict
from campaign.receipts.bundle import sign_bundle
from campaign.signing import init_keys, load_signing_key
from campaign.window.judge import LaneOutcome, build_gates, input_copies, judge_bundle, predicate, summarize
from tests.support.contracts import demo_like, write_contract

__all__ = ["REPLIES", "SPEC_ARGS", "lane_inspect", "signed_window", "unjudged_bundle"]

REPLIES = {"capital": "Paris.", "haiku": "Waves on the shore.", "fib": "def fib(n): ..."}


SPEC_ARGS = ["--spec-type", "ngram-simple", "--spec-draft-n-max", "4"]


def lane_inspect(argv: list[str]) -> dict:
    return {"runtime": "process", "argv": argv, "env": {}, "launched_argv": argv, "launched_env": {},
            "executable_sha256": "ab" * 32}


def unjudged_bundle(tmp_path: Path) -> tuple[Path, LoadedContract]:
    """A bundle as a window leaves it before judging: contract copy and freeze record, input copies, lane
    specs and snapshots differing exactly on the axis, greedy records (2 repeats, identical replies)."""
    init_keys()
    contract = write_contract(tmp_path, demo_like(18000))
    record, _ = freeze(load_contract(contract), load_signing_key())
    loaded = load_contract(contract)
    bundle = tmp_path / "20261201T000000Z-t-demo-v1-abcd1234"
    (bundle / "contract" / "inputs").mkdir(parents=True)
    shutil.copyfile(contract, bundle / "contract" / contract.name)
    shutil.copyfile(record, bundle / "contract" / "freeze.json")
    for name, copy in input_copies(loaded, bundle).items():
        shutil.copyfile(loaded.resolve(loaded.contract.inputs[name].file), copy)
    base_argv = ["/usr/bin/llama-server", "--port", "18000"]
    for lane, argv in (("base", base_argv), ("spec", base_argv + SPEC_ARGS)):
        atomic_write_json(bundle / "lanes" / lane / "spec.json", loaded.lanes[lane].model_dump(mode="json"))
        atomic_write_json(bundle / "lanes" / lane / "inspect.json", lane_inspect(argv))
        with JsonlAppender(bundle / "raw" / "greedy" / f"{lane}.jsonl") as sink:
            for repeat in range(2):
                for pid, text in REPLIES.items():
                    sink.append({"tags": {"prompt": pid, "repeat": repeat}, "status": 200,
                                 "request": {"temperature": 0},
                                 "response": {"choices": [{"message": {"content": text}, "finish_reason": "stop"}],
                                              "usage": {"completion_tokens": 5}}})
    return bundle, loaded


def signed_window(tmp_path: Path, *, old_verdict: str | None = None) -> Path:
    """A complete window's bundle; ``old_verdict`` stands for what an older judge said about greedy/spec."""
    bundle, loaded = unjudged_bundle(tmp_path)
    lanes = {"base": LaneOutcome(status="ran", boot_seconds=1.25), "spec": LaneOutcome(status="ran")}
    results = judge_bundle(loaded, build_gates(loaded, bundle), lanes, bundle)
    summary = summarize(loaded, {}, bundle.name, 0.0, "complete", lanes, results)
    summary["restore"] = {"incumbent": None}
    if old_verdict:
        summary["candidates"]["spec"]["gates"]["greedy"]["verdict"] = old_verdict
        result = load_json_strict(bundle / "gates" / "greedy" / "spec.json")
        atomic_write_json(bundle / "gates" / "greedy" / "spec.json", {**result, "verdict": old_verdict})
    atomic_write_json(bundle / "SUMMARY.json", summary)
    atomic_write_json(bundle / "journal.jsonl", {"not": "read by a rejudge"})
    atomic_write_json(bundle / "incumbent" / "snapshot.json", {"runtime": "process", "argv": ["srv"]})
    sign_bundle(bundle, load_signing_key(), predicate(loaded, bundle.name))
    return bundle
