"""The ruler proves the declared value, not only that the lane differs, on real llama-server lanes: with
``--spec-type ngram-simple`` the depth is ``--spec-ngram-simple-size-m`` (the lookup n-gram
``--spec-ngram-simple-size-n`` must not be longer, or nothing is drafted), and ``--spec-draft-n-max``
parses and bounds nothing (the engine drafts up to 48 deep). One small window, one probe plus the copy
exercise per lane: the lane that declares a depth its counters contradict FAILs, the one whose depth holds
PASSes."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from campaign.fsutil import load_json_strict
from tests.support.contracts import EXAMPLES, QUIET_ARGS, candidate, contract_yaml, control, free_port, process_defaults
from tests.support.windows import window_bundle

pytestmark = pytest.mark.integration

NGRAM = {"--spec-type": "ngram-simple"}


def contract(port: int) -> str:
    return contract_yaml(
        "t-ruler-declared",
        defaults=process_defaults(port, args=[*QUIET_ARGS, "--metrics"]),
        lanes=[control(),
               candidate("draft-n-max-4", ["args.spec-type", "args.spec-draft-n-max"],
                         args={**NGRAM, "--spec-draft-n-max": "4"}),
               candidate("ngram-k4", ["args.spec-type", "args.spec-ngram-simple-size-n",
                                      "args.spec-ngram-simple-size-m"],
                         args={**NGRAM, "--spec-ngram-simple-size-n": "4", "--spec-ngram-simple-size-m": "4"})],
        inputs={"tf": {"file": EXAMPLES / "prompts/tf4.jsonl"}},
        gates=[{"kind": "ruler", "input": "tf", "probes": 1, "max_tokens": 8}],
        requires=["ruler"])


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not shutil.which("llama-server"):
        pytest.fail("llama-server is not on PATH: run the tests with `make test`")
    root = tmp_path_factory.mktemp("ruler-declared")
    path = root / "c.yaml"
    path.write_text(contract(free_port()))
    return window_bundle(root, path, allow=EXAMPLES)[0]


def result(bundle: Path, lane: str) -> dict:
    return load_json_strict(bundle / "gates" / "ruler" / f"{lane}.json")


def test_a_depth_the_engine_does_not_keep_fails_the_ruler(bundle: Path) -> None:
    r = result(bundle, "draft-n-max-4")
    assert r["verdict"] == "FAIL", r["reasons"]
    (reason,) = r["reasons"]
    found = re.fullmatch(r"draft-n-max-4: declared --spec-draft-n-max 4, drafts accepted at position (\d+): the flag "
                         r"is not what limits the depth here", reason)
    assert found and int(found.group(1)) >= 4, reason
    depth = next(d for d in r["details"]["declared"] if d["field"] == "args.spec-draft-n-max")
    assert depth["status"] == "contradicted"


def test_a_depth_the_engine_keeps_passes_and_the_rest_is_said_unproven(bundle: Path) -> None:
    r = result(bundle, "ngram-k4")
    assert r["verdict"] == "PASS", r["reasons"]
    status = {d["field"]: d["status"] for d in r["details"]["declared"]}
    assert status == {"args.spec-type": "unproven", "args.spec-ngram-simple-size-n": "unproven",
                      "args.spec-ngram-simple-size-m": "holds"}
    assert any("declared --spec-ngram-simple-size-m 4 in effect (4 draft positions counted" in reason
               for reason in r["reasons"]), r["reasons"]
    assert sum("unproven" in caveat for caveat in r["caveats"]) == 2, r["caveats"]
