"""The quality gates in one real window: llama-server lanes serving SmolLM2, each candidate one axis.

- kvq8 (--cache-type-k q8_0): changes some greedy outputs (a real divergence) and is lossy (KL > 0);
- fa-off (--flash-attn off): its prefill and decode numerics differ, so teacher-forcing its own greedy
  text does not give its generation-time logprobs back: the instrument check must say INCONCLUSIVE;
- draft8 (--spec-draft-n-max 8 without --spec-type): accepted by the engine and ignored, so the ruler
  must call the axis inert, loudly;
- rope (RoPE base 20000 instead of the model's own): a change that surely alters the greedy path on any
  CPU (the model computes another function, not another rounding: 3 of the 4 prompts diverge within 6
  tokens), while staying close enough that each lane's token is in the other's top-10 to be weighed.
Threads are 2 per lane: one lane serves at a time, and its prefills (each scored token is one) take half as long.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from campaign.fsutil import load_json_strict, read_jsonl
from tests.support.cli import campaign
from tests.support.contracts import EXAMPLES, candidate, contract_yaml, control, free_port, process_defaults
from tests.support.windows import window_bundle

pytestmark = pytest.mark.integration




def contract(port: int) -> str:
    return contract_yaml(
        "t-quality",
        # two slots: a cached prompt would be reused across requests, which the gates' requests must never do
        defaults=process_defaults(port, args=["--ctx-size", "2048", "--threads", "2", "--parallel", "2", "--seed", "0",
                                              "--no-webui", "--metrics"]),
        lanes=[control(),
               candidate("kvq8", ["args.cache-type-k"], args={"--cache-type-k": "q8_0"}),
               candidate("fa-off", ["args.flash-attn"], args={"--flash-attn": "off"}),
               candidate("draft8", ["args.spec-draft-n-max"], args={"--spec-draft-n-max": "8"}),
               candidate("rope", ["args.override-kv"], args={"--override-kv": "llama.rope.freq_base=float:20000"}),
               # one slot instead of two: the same kernels for each request, so every score must be the same
               candidate("slots-1", ["args.parallel"], args={"--parallel": "1"})],
        # one reference text, for teacher forcing's not-worse bound and for KL (weighed per position, 12 here):
        # each of its prefixes is a request of its own on every lane, and one text shows what they test
        inputs={"tf": {"file": EXAMPLES / "prompts/tf4.jsonl"}, "refs": {"file": EXAMPLES / "prompts/refs1.jsonl"},
                "structured": {"file": EXAMPLES / "structured/structured4.jsonl"},
                "tools": {"file": EXAMPLES / "tools/tools2.jsonl"}},
        gates=[
            {"kind": "greedy", "input": "tf", "repeats": 2, "max_tokens": 8, "rule": {"self_identical": "4/4"}},
            # rope diverges within 6 tokens on 3 of the 4 prompts (at tokens 2, 4 and 5 when measured); each token
            # scored costs a prefill of its own, so one token past the last divergence and no more
            {"kind": "teacher_forced", "input": "tf", "references": "refs", "max_tokens": 7, "top_k": 10,
             "rule": {"instrument_tolerance": 0.01, "max_site_delta": 1.0, "noninferiority_max": 2.0}},
            {"kind": "kl", "input": "refs", "top_k": 10, "rule": {"max_mean": 0.5}},
            {"kind": "structured", "input": "structured", "max_tokens": 32, "rule": {"correct": "1/4"}},
            {"id": "structured-free", "kind": "structured", "input": "structured", "constrained": False,
             "max_tokens": 40, "rule": {"correct": "1/4"}},
            {"kind": "tools", "input": "tools", "max_tokens": 32, "rule": {"passed": "2/2"}},
            {"kind": "ruler", "input": "tf", "probes": 2, "max_tokens": 8},
            # the scoring path: its drift from generation measured per lane and capped by max_site_delta
            {"id": "tf-bare", "kind": "teacher_forced", "input": "tf", "max_tokens": 6, "top_k": 10,
             "rule": {"instrument": "scoring", "max_site_delta": 1.0}}],
        requires=["ruler"])


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import shutil

    if not shutil.which("llama-server"):
        pytest.fail("llama-server is not on PATH: run the tests with `make test`")
    root = tmp_path_factory.mktemp("quality")
    path = root / "c.yaml"
    path.write_text(contract(free_port()))
    bundle, ran = window_bundle(root, path, allow=EXAMPLES)
    assert "AXIS MAY BE INERT" in ran.stdout
    return bundle


def result(bundle: Path, gate: str, lane: str) -> dict:
    return load_json_strict(bundle / "gates" / gate / f"{lane}.json")


def test_instrument_gives_own_greedy_tokens_back(bundle: Path) -> None:
    r = result(bundle, "teacher_forced", "kvq8")
    for who in ("control", "candidate"):
        check = r["metrics"][f"instrument_{who}"]
        assert check["value"] == check["denominator"] > 0
        assert r["metrics"][f"instrument_max_drift_{who}"]["value"] <= 0.01


def test_margins_at_a_real_divergence(bundle: Path) -> None:
    r = result(bundle, "teacher_forced", "rope")
    assert r["verdict"] in ("PASS", "FAIL")
    sites = [s for s in r["details"]["sites"] if s["scored"]]
    # another RoPE base is another model function: prompts diverge by construction, not by rounding
    assert r["metrics"]["sites"]["value"] == len(sites) >= 2
    for site in sites:
        # the control's own token is rank 1 on its own server; each lane scored both tokens
        assert site["rank1_control_server"] == "control"
        assert site["control_token"]["id"] != site["candidate_token"]["id"]
        for server in ("control_server", "candidate_server"):
            assert site[server]["logprob_control_token"] <= 0 and site[server]["logprob_candidate_token"] <= 0
    raw = read_jsonl(bundle / "raw" / "teacher_forced" / "base@rerun1.jsonl")
    assert any(rec.get("tags", {}).get("purpose") == "site" for rec in raw)  # scored on the control, rebooted
    assert r["metrics"]["control_reboot_identical"]["denominator"] == 4
    assert r["metrics"]["noninferiority_max"]["unit"] == "nats"


def test_engine_whose_scoring_disagrees_with_its_generation_is_inconclusive(bundle: Path) -> None:
    r = result(bundle, "teacher_forced", "fa-off")
    assert r["verdict"] == "INCONCLUSIVE"
    assert r["reasons"][0].startswith("instrument:")
    assert r["metrics"]["instrument_max_drift_candidate"]["value"] > 0.01
    assert "sites" not in r["metrics"]  # no margin from a broken instrument


def test_the_scoring_path_measures_the_drift_that_breaks_the_generation_path_and_judges_on(bundle: Path) -> None:
    """The same lane as above, the gate that holds scores to their own path (what a GPU lane needs: its decode
    and prefill kernels differ): the drift is measured and recorded, and margins count again."""
    r = result(bundle, "tf-bare", "fa-off")
    assert not r["reasons"][0].startswith("instrument: teacher-forced scores do not give"), r["reasons"]
    drift = r["metrics"]["instrument_max_drift_candidate"]["value"]
    assert 0.01 < drift < 1.0 and any(f"max drift {drift:.4f}" in reason for reason in r["reasons"])
    applied = r["rule"]["instrument_tolerance_applied"]["fa-off"]
    assert applied["value"] == 1.0 and "measured on this engine and device, capped by max_site_delta" in applied["source"]


def test_kl_of_a_lossy_axis_states_its_tail(bundle: Path) -> None:
    r = result(bundle, "kl", "kvq8")
    assert r["metrics"]["kl_mean"]["value"] > 0
    assert r["metrics"]["kl_max"]["value"] >= r["metrics"]["kl_p99"]["value"] >= 0
    assert "lower bound" in r["details"]["tail_treatment"]
    lossless = result(bundle, "kl", "draft8")
    assert lossless["metrics"]["kl_max"]["value"] == 0.0


def test_structured_classifies_real_outputs(bundle: Path) -> None:
    constrained = result(bundle, "structured", "kvq8")
    free = result(bundle, "structured-free", "kvq8")
    outcomes = {row["candidate"]["outcome"] for g in (constrained, free) for row in g["details"]["rows"]}
    assert "correct" in outcomes
    assert outcomes - {"correct", "wrong_value", "schema_invalid"}, "unconstrained chat produced no malformed class"
    assert constrained["metrics"]["valid_json"]["value"] == 4  # the engine's grammar keeps JSON well-formed
    assert constrained["metrics"]["correct"]["denominator"] == 4


def test_tools_on_an_engine_that_parses_no_calls_measures_nothing(bundle: Path) -> None:
    """llama-server parses no tool calls for this model: both lanes fail every episode, which says nothing
    about the candidate (INCONCLUSIVE, with why), not that it lost."""
    r = result(bundle, "tools", "kvq8")
    assert r["verdict"] == "INCONCLUSIVE"
    assert r["metrics"]["outcome_no_call"]["value"] == 2 and r["metrics"]["control_passed"]["value"] == 0
    assert r["reasons"][0].startswith("neither lane completed a tool episode (0/2 on both; the control's outcomes: "
                                      "no_call)")


def test_ruler_flags_an_ignored_flag_and_passes_a_real_one(bundle: Path) -> None:
    inert = result(bundle, "ruler", "draft8")
    assert inert["verdict"] == "FAIL" and inert["warnings"][0].startswith("AXIS MAY BE INERT")
    real = result(bundle, "ruler", "kvq8")
    assert real["verdict"] == "PASS" and "logprobs" in real["details"]["differs"]
    summary = load_json_strict(bundle / "SUMMARY.json")
    assert any("draft8" in w for w in summary["warnings"])
    assert summary["candidates"]["draft8"]["gates"]["ruler"]["warnings"]
    key = bundle.parents[1] / "xdg" / "campaign" / "signing.pub"
    assert campaign("verify", str(bundle), "--trust", str(key)).returncode == 0


def test_no_rule_passes_over_zero_sites(bundle: Path) -> None:
    bare = result(bundle, "tf-bare", "draft8")  # an ignored flag: greedy tokens agree everywhere
    assert bare["verdict"] == "INCONCLUSIVE"
    assert any("nothing to weigh" in r for r in bare["reasons"])
    assert not any("over 0 sites" in r for r in bare["reasons"])
    assert result(bundle, "tf-bare", "rope")["verdict"] in ("PASS", "FAIL")


def test_the_report_draws_the_real_sites_and_kl_per_position(bundle: Path, tmp_path: Path) -> None:
    from campaign.receipts.decision import decisions
    from campaign.receipts.publish import publish
    from tests.support.browser import labelled_plots, open_in_chromium

    report = publish(bundle, tmp_path / "out")["html"]
    html = report.read_text()
    dom, console, requests = open_in_chromium(report)  # the real window's report, in a real browser
    assert console == [] and requests == []
    titles = labelled_plots(dom)
    assert any(t.startswith("Divergence sites") for t in titles) and any(t.startswith("KL(") for t in titles)
    rope = html.split('id="gate-teacher_forced-rope"')[1].split("</section>")[0]
    assert 'data-title="Divergence sites:' in rope and "max_site_delta" in rope
    kvq8 = html.split('id="gate-kl-kvq8"')[1].split("</section>")[0]
    assert 'data-title="KL(base || kvq8) per token position"' in kvq8
    summary = load_json_strict(bundle / "SUMMARY.json")
    assert {d.candidate: d.decision for d in decisions(summary)}["draft8"] == "REFUSED"  # the ruler, required
    assert 'data-candidate="draft8" data-decision="REFUSED"' in html


def test_no_scoring_request_of_any_gate_reused_a_cached_prompt(bundle: Path) -> None:
    """Two slots and the same prompts sent again and again: llama-server's own per-request count of prompt tokens
    taken from its cache (timings.cache_n) is 0 on every reply of every gate, each request saying so."""
    seen: dict[str, int] = {}
    for raw in sorted((bundle / "raw").rglob("*.jsonl")):
        if raw.parent.name == "warmup":
            continue  # the boot's warm-up: it exercises the engine and scores nothing
        for record in read_jsonl(raw):
            request, response = record.get("request") or {}, record.get("response")
            if not isinstance(response, dict) or "timings" not in response:
                continue  # a tokenize or template call: no prompt processed
            if str((record.get("tags") or {}).get("item", "")).startswith("exercise:"):
                continue  # the ruler's exercises keep the cache on purpose: they exercise it
            assert request.get("cache_prompt") is False, (raw.name, request)
            assert response["timings"].get("cache_n") == 0, (raw.name, response["timings"])
            seen[raw.parent.name] = seen.get(raw.parent.name, 0) + 1
    assert {"greedy", "teacher_forced", "kl", "structured", "tools", "ruler"} <= set(seen), seen
    greedy = result(bundle, "greedy", "kvq8")
    assert greedy["metrics"]["control_self_identical"]["value"] == 4, greedy["reasons"]


def test_the_instrument_states_what_it_resolves_from_the_control_against_itself(bundle: Path) -> None:
    tf = result(bundle, "teacher_forced", "rope")
    # the control's rerun scored the references again: on one CPU build, the same numbers
    assert tf["metrics"]["control_self_max"]["value"] == 0.0
    resolution = tf["metrics"]["instrument_resolution_max"]
    assert resolution["value"] <= 0.01 and resolution["value"] < tf["rule"]["noninferiority_max"]
    kl = result(bundle, "kl", "kvq8")
    assert kl["metrics"]["control_self_kl_mean"]["value"] == 0.0
    assert kl["metrics"]["control_self_kl_mean"]["denominator"] == kl["metrics"]["kl_mean"]["denominator"]


def test_a_lane_of_other_slots_scores_every_token_the_same(bundle: Path) -> None:
    """Each prefix is scored in a request of its own, so a two-slot server prefills it as a one-slot server does
    (several prefixes in one request were prefilled in one batch: an H200 put 1.7 nats between the two)."""
    r = result(bundle, "teacher_forced", "slots-1")
    assert r["verdict"] == "PASS", r["reasons"]
    assert r["metrics"]["noninferiority_max"]["value"] == 0.0 and r["metrics"]["sites"]["value"] == 0
    raw = [rec for rec in read_jsonl(bundle / "raw" / "teacher_forced" / "slots-1.jsonl")
           if rec["tags"].get("part") == "score" and rec["tags"].get("purpose") == "reference"]
    assert raw and all(isinstance(rec["request"]["prompt"][0], int) for rec in raw)  # one prefix a request
    assert result(bundle, "kl", "slots-1")["metrics"]["kl_max"]["value"] == 0.0
