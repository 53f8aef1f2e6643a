"""The ruler against real llama-server lanes, in a window of its own (ruler gates only, so these lanes
do not pay for every quality gate): a deprecated no-op flag is never promotable, and n-gram speculation
passes only on counters its own probes moved."""

from __future__ import annotations

from pathlib import Path

import pytest

from campaign.fsutil import load_json_strict
from tests.support.contracts import EXAMPLES, QUIET_ARGS, candidate, contract_yaml, control, free_port, process_defaults
from tests.support.windows import window_bundle

pytestmark = pytest.mark.integration


def contract(port: int) -> str:
    ruler = {"kind": "ruler", "input": "tf", "probes": 2, "max_tokens": 8}
    return contract_yaml(
        "t-ruler",
        defaults=process_defaults(port, args=[*QUIET_ARGS, "--metrics"]),
        lanes=[control(), candidate("ngram", ["args.spec-type"], args={"--spec-type": "ngram-simple"}),
               candidate("defrag", ["args.defrag-thold"], args={"--defrag-thold": "0.1"})],
        inputs={"tf": {"file": EXAMPLES / "prompts/tf4.jsonl"}},
        gates=[ruler, {"id": "ruler-plain", **ruler, "exercise": []}],
        requires=["ruler"])


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import shutil

    if not shutil.which("llama-server"):
        pytest.fail("llama-server is not on PATH: run the tests with `make test`")
    root = tmp_path_factory.mktemp("ruler")
    path = root / "c.yaml"
    path.write_text(contract(free_port()))
    return window_bundle(root, path, allow=EXAMPLES)[0]


def result(bundle: Path, gate: str, lane: str) -> dict:
    return load_json_strict(bundle / "gates" / gate / f"{lane}.json")


def test_a_deprecated_no_op_flag_is_never_promotable(bundle: Path) -> None:
    r = result(bundle, "ruler", "defrag")
    assert r["verdict"] != "PASS", r["reasons"]
    summary = load_json_strict(bundle / "SUMMARY.json")
    assert summary["candidates"]["defrag"]["overall"] != "PASS"
    # each gate's verdict and its warnings agree: a gate that warns about the axis never passes it
    for name, entry in summary["candidates"].items():
        for gate, judged in entry["gates"].items():
            if any("AXIS" in w for w in judged.get("warnings", [])):
                assert judged["verdict"] != "PASS", (name, gate)


def test_n_gram_speculation_passes_only_on_counters_that_moved_in_its_probes(bundle: Path) -> None:
    exercised = result(bundle, "ruler", "ngram")
    assert exercised["verdict"] == "PASS", exercised["reasons"]
    moved = exercised["details"]["candidate_counters"]
    assert "metrics" in exercised["details"]["differs"]
    assert any("spec" in k and v > 0 for k, v in moved.items()), moved  # drafts fired on the copy probe
    plain = result(bundle, "ruler-plain", "ngram")
    assert plain["verdict"] == "INCONCLUSIVE", plain["reasons"]
    assert "not exercised" in " ".join(plain["reasons"])
