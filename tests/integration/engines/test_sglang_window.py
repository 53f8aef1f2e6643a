"""Real windows of SGLang 0.5.23 process lanes on this CPU (scripts/setup-sglang.sh: SGLang's own Python code,
its CPU kernels left out, see docs/engines.md) serving SmolLM2 converted to Hugging Face format, through the CLI:
freeze, run, judge, sign, verify.

1. base against no-radix (``--disable-radix-cache``: the prefix cache off, an axis that exists on the CPU):
   - greedy: each lane deterministic in float32; the cache changes no output here;
   - teacher_forced through native /generate (input ids, ``logprob_start_len`` at the prompt's last token): the
     instrument gives every greedy token back at rank 1 within the float32 tolerance on both lanes, and
     reference texts score the same on both servers to float rounding;
   - structured: SGLang's json_schema (xgrammar) keeps every reply well-formed JSON on both lanes;
   - speed (one boot pair: measured and reported, never decided): SGLang's own counters show the axis, the
     control's repeated prompts read from the prefix cache and the candidate's never do, and its request
     counter matches what the client sent.
2. the thinking switch, in the same window (one SGLang window, not two: each boot costs 40 s here): both lanes
   serve a template that honours ``enable_thinking``, and the ruler proves SGLang passes the switch on
   (``chat_template_kwargs``) on each. An ignored switch flagged inert is shown on llama-server
   (tests/integration/quality/test_ruler_thinking.py), where SmolLM2's own template ignores it.

Serving flags for this 2-core machine: float32 (teacher forcing's default tolerance is measured for it); a KV
cache of 16k tokens (SGLang sizes it as 72% of free memory otherwise: 14.6 GB, 36 s to allocate); no overlap
scheduler and sleep when idle (its scheduler thread otherwise spins on one of the two cores, beside the two
OpenMP threads that compute: decoding measured 2-4 tokens/s with it, 12 without).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from campaign.fsutil import load_json_strict, read_jsonl
from tests.support.contracts import (
    EXAMPLES,
    THINKING_TEMPLATE,
    candidate,
    contract_yaml,
    control,
    free_port,
    process_defaults,
)
from tests.support.vllm import VLLM_MANIFEST, VLLM_MODEL
from tests.support.windows import window_bundle

pytestmark = pytest.mark.integration

SGLANG_VERSION = "0.5.23"
SGLANG_ARGS = ["--device", "cpu", "--dtype", "float32", "--enable-metrics", "--max-total-tokens", "16384",
               "--random-seed", "0", "--disable-overlap-schedule", "--sleep-on-idle"]

def sglang_defaults(port: int, extra_args: list[str]) -> dict:
    if not shutil.which("sglang-cpu-python"):
        pytest.fail("sglang-cpu-python is not on PATH: run the tests with `make test` (scripts/setup-sglang.sh "
                    "installs SGLang and the wrapper)")
    if not (VLLM_MODEL / "config.json").exists():
        pytest.fail(f"{VLLM_MODEL} missing: run scripts/convert-model-hf.sh (`make vllm`)")
    return process_defaults(port, engine="sglang", executable="sglang-cpu-python", args=[*SGLANG_ARGS, *extra_args],
                            budget="300s", model={"path": VLLM_MODEL, "sha256_manifest": "smollm2-135m-hf.sha256",
                                   "served_name": "smollm2"})


def run(root: Path, body: str) -> Path:
    path = root / "c.yaml"
    path.write_text(body)
    shutil.copyfile(VLLM_MANIFEST, root / "smollm2-135m-hf.sha256")
    return window_bundle(root, path, allow=EXAMPLES, verify=True)[0]


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sglang")
    (root / "thinking.jinja").write_text(THINKING_TEMPLATE)
    (root / "p.jsonl").write_text('{"id": "capital", "prompt": "What is the capital of France?"}\n'
                                  '{"id": "haiku", "prompt": "Write a haiku about the sea."}\n')
    body = contract_yaml(
        "t-sglang",
        defaults=sglang_defaults(free_port(), ["--chat-template", str(root / "thinking.jinja")]),
        lanes=[control(), candidate("no-radix", ["args.disable-radix-cache"], args={"--disable-radix-cache": True})],
        inputs={"tf": {"file": EXAMPLES / "prompts/tf-vllm4.jsonl"}, "refs": {"file": EXAMPLES / "prompts/refs2.jsonl"},
                "structured": {"file": EXAMPLES / "structured/structured4.jsonl"},
                "speed": {"file": EXAMPLES / "prompts/speed4.jsonl"}, "p": {"file": "p.jsonl"}},
        gates=[
            # 8 tokens: each lane's determinism and the cache's effect on outputs, not how far they run (SGLang decodes
            # 8-12 tokens/s here, and every token of greedy's 16 replies per lane counts)
            {"kind": "greedy", "input": "tf", "repeats": 2, "max_tokens": 8, "rule": {"self_identical": "4/4"}},
            {"kind": "teacher_forced", "input": "tf", "references": "refs", "max_tokens": 24, "top_k": 10,
             "rule": {"max_site_delta": 0.5, "noninferiority_max": 0.5}},
            {"kind": "structured", "input": "structured", "max_tokens": 32, "rule": {"correct": "1/4"}},
            # max_boot_pairs 1: measured and reported, never decided; SGLang boots take half a minute or more here.
            # max_spread: this window checks SGLang's counters, not a decision, and short reps here spread up to
            # 55% (a row voided by it drops that boot's figures, which the counters' test reads); 8 tokens: the
            # counters count requests and cached prompt tokens, which the reply's length does not change
            {"kind": "speed", "input": "speed", "concurrency": [1], "max_tokens": 8, "reps": 2, "max_boot_pairs": 1,
             "rule": {"min_mean_change": 0.05, "max_reruns": 0, "max_spread": 2.0}},
            {"kind": "ruler", "input": "p", "probes": 2, "max_tokens": 8, "thinking": {"max_tokens": 16}}])
    return run(root, body)


def result(bundle: Path, gate: str, lane: str = "no-radix") -> dict:
    return load_json_strict(bundle / "gates" / gate / f"{lane}.json")


def test_window_completes_on_sglang_and_what_ran_differs_only_by_the_axis(bundle: Path) -> None:
    summary = load_json_strict(bundle / "SUMMARY.json")
    assert summary["status"] == "complete"
    for lane, radix_off in (("base", False), ("no-radix", True), ("base@rerun1", False)):
        assert summary["lanes"][lane]["status"] == "ran", summary["lanes"][lane]
        seen = summary["lanes"][lane]["engine_version"]  # SGLang's /server_info, as resolved by the server
        assert seen["version"] == SGLANG_VERSION and seen["device"] == "cpu" and seen["dtype"] == "float32"
        assert seen["attention_backend"] == "torch_native"  # no AMX here: SGLang's native torch path
        assert seen["disable_radix_cache"] is radix_off
    base = load_json_strict(bundle / "lanes" / "base" / "inspect.json")
    cand = load_json_strict(bundle / "lanes" / "no-radix" / "inspect.json")
    assert base["argv"][1:3] == ["-m", "sglang.launch_server"]
    assert [a for a in cand["argv"] if a not in base["argv"]] == ["--disable-radix-cache"]


def test_greedy_is_deterministic_on_both_lanes(bundle: Path) -> None:
    r = result(bundle, "greedy")
    assert r["verdict"] == "PASS", r["reasons"]
    assert r["metrics"]["self_identical"]["value"] == r["metrics"]["control_self_identical"]["value"] == 4
    # the prefix cache reuses KV computed for another request; in float32 no greedy token moved here
    assert r["metrics"]["cross_identical"]["value"] == 4
    records = read_jsonl(bundle / "raw" / "greedy" / "no-radix.jsonl")
    assert len(records) == 4 * 2 and all(rec["status"] == 200 for rec in records)
    assert len({rec["response"]["choices"][0]["message"]["content"] for rec in records}) == 4


def test_teacher_forcing_through_native_generate_gives_each_greedy_token_back(bundle: Path) -> None:
    r = result(bundle, "teacher_forced")
    assert r["verdict"] == "PASS", r["reasons"]
    assert r["rule"]["instrument_tolerance_applied"] == {
        lane: {"value": 0.001, "source": "the default for float32"} for lane in ("base", "no-radix")}
    for who in ("control", "candidate"):
        check = r["metrics"][f"instrument_{who}"]
        assert check["value"] == check["denominator"] >= 4 * 10  # every greedy token, rank 1, within tolerance
        # decode and prefill in float32: measured 2e-5 nats at most
        assert 0 <= r["metrics"][f"instrument_max_drift_{who}"]["value"] < 1e-3
    # the same greedy tokens on both lanes (see greedy): nothing diverged, so nothing to weigh at a site
    assert r["metrics"]["sites"]["value"] == 0
    # the references score the same on both servers, to float rounding (0.0 measured here)
    assert r["metrics"]["noninferiority_max"]["value"] < 1e-3
    assert r["metrics"]["control_reboot_identical"]["value"] == 4  # the control booted again generates the same
    raw = [rec for rec in read_jsonl(bundle / "raw" / "teacher_forced" / "base.jsonl")
           if rec.get("tags", {}).get("purpose") == "instrument"]
    assert len(raw) == 4 and all(rec["path"] == "/generate" for rec in raw)
    for rec in raw:  # scored from the prompt's last token: its own entry is SGLang's null
        request, meta = rec["request"], rec["response"]["meta_info"]
        assert meta["input_token_logprobs"][0][0] is None
        assert [t[1] for t in meta["input_token_logprobs"]] == request["input_ids"][request["logprob_start_len"]:]


def test_structured_output_is_sglang_json_schema_on_both_lanes(bundle: Path) -> None:
    r = result(bundle, "structured")
    assert r["verdict"] in ("PASS", "FAIL"), r["reasons"]  # judged on the rows, whichever way
    assert r["metrics"]["valid_json"]["value"] == r["metrics"]["control_valid_json"]["value"] == 4
    assert r["metrics"]["schema_valid"]["value"] == 4
    # the grammar keeps the form; the values are the model's (3/4 right on both lanes when measured here)
    assert {row[who]["outcome"] for row in r["details"]["rows"] for who in ("control", "candidate")} <= {
        "correct", "wrong_value"}
    request = read_jsonl(bundle / "raw" / "structured" / "no-radix.jsonl")[0]["request"]
    assert request["response_format"]["type"] == "json_schema"


def test_speed_sees_the_prefix_cache_on_the_control_only(bundle: Path) -> None:
    r = result(bundle, "speed")
    assert r["verdict"] == "INCONCLUSIVE", r["reasons"]  # one boot pair: measured and reported, never decided
    assert r["reasons"][0].startswith("C1: after 1 boot pair(s)") and "a single pair leaves no degree of freedom" \
        in r["reasons"][0]
    for role in ("control", "candidate", "control_rerun1"):  # measured on every boot (about 10-13 tok/s here)
        assert r["metrics"][f"C1.{role}.decode_tok_s"]["value"] > 0 and r["metrics"][f"C1.{role}.ttft_s"]["value"] > 0
    engine = r["details"]["engine"]
    control_hits = r["metrics"]["control.prefix_cache_hit_rate"]["value"]
    assert control_hits > 0 and r["metrics"]["candidate.prefix_cache_hit_rate"]["value"] == 0
    assert engine["candidate"]["cached_prompt_tokens"] == 0 < engine["control"]["cached_prompt_tokens"]
    for role, lane in (("control", "base"), ("candidate", "no-radix")):
        measured = [rec for rec in read_jsonl(bundle / "raw" / "speed" / f"{lane}.jsonl")
                    if rec.get("tags", {}).get("phase") == "measure"]
        # SGLang's finished-request counter is what the gate holds the client's records to
        assert engine[role]["requests"] == len(measured) == engine[role]["counted_attempts"] * 2 * 2
        assert engine[role]["generated_tokens"] == engine[role]["output_tokens"]
    assert not any("another client" in reason for row in r["details"]["rows"] for reason in row["reasons"])


def test_the_thinking_switch_reaches_sglang_and_is_proven_on_both_lanes(bundle: Path) -> None:
    r = result(bundle, "ruler")
    assert not any("inert" in reason for reason in r["reasons"]), r["reasons"]
    assert "inert" not in (r.get("window_finding") or "")
    details = r["details"]["thinking"]
    # the template with a thinking branch, on both lanes: SGLang hands enable_thinking to it (chat_template_kwargs)
    # and every probe changes with the switch
    for who in ("control", "candidate"):
        assert details[who]["changed"] == ["capital", "haiku"] and details[who]["probes"] == 2, details
    for lane in ("base", "no-radix"):
        raw = [rec for rec in read_jsonl(bundle / "raw" / "ruler" / f"{lane}.jsonl")
               if rec["tags"].get("purpose") == "thinking"]
        assert sorted(rec["tags"]["switch"] for rec in raw) == ["off", "off", "on", "on"]
        assert all(rec["request"]["chat_template_kwargs"]["enable_thinking"] == (rec["tags"]["switch"] == "on")
                   for rec in raw)
        on = {rec["tags"]["item"]: rec["response"]["choices"][0]["message"] for rec in raw
              if rec["tags"]["switch"] == "on"}
        off = {rec["tags"]["item"]: rec["response"]["choices"][0]["message"] for rec in raw
               if rec["tags"]["switch"] == "off"}
        assert all(on[item] != off[item] for item in on)
