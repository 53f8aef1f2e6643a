"""The ruler holds each declared axis value to what the engine shows of it: the observables llama-server's
adapter knows (per-position acceptance counters for a speculative depth, boot-log lines, /props), and the
ruler's verdict over hand-written records shaped as its live half writes them (the judge reads only them).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from campaign.contracts.resolve import EffectiveLane
from campaign.fsutil import JsonlAppender
from campaign.lanes.engines.declared import Evidence, per_position
from campaign.lanes.engines.llamacpp import LlamaCppAdapter
from campaign.lanes.engines.llamacpp_declared import PER_POSITION
from campaign.lanes.engines.vllm import VllmAdapter
from tests.support.speedrecords import load_gates, speed_contract

# The lines llama-server 0.3.36 printed here with `-lv 4 --ctx-size 4096 --parallel 4 -ctv q8_0`; at the default
# verbosity only the threadpool and load_model lines are printed
BOOT = """\
0.00.488.771 I llama_context: n_seq_max             = 4
0.00.488.771 I llama_context: n_ctx                 = 4096
0.00.488.772 I llama_context: n_batch               = 2048
0.00.488.772 I llama_context: n_ubatch              = 512
0.00.488.773 I llama_context: flash_attn            = disabled
0.00.554.409 I llama_kv_cache: size =   68.91 MiB (  1024 cells,  30 layers,  4/4 seqs), K (f16):   45.00 MiB, V (q8_0):   23.91 MiB
0.00.562.015 I cmn          init: llama threadpool init, n_threads = 1
0.07.930.325 I srv    load_model: initializing, n_slots = 4, n_ctx_slot = 1024, kv_unified = 'false'
"""
DEFAULT_BOOT = "\n".join(line for line in BOOT.splitlines() if "llama_context" not in line and "kv_cache" not in line)


def lane(args: list[str], axis: list[str], **fields: object) -> EffectiveLane:
    return EffectiveLane.model_validate({"name": "cand", "role": "candidate", "control": "base", "axis": axis,
                                         "runtime": "process", "engine": "llamacpp", "port": 1, "args": args,
                                         "model": {"path": "m.gguf"}, **fields})


def metrics(accepted: list[int], *, drafts: int = 10) -> str:
    """llama-server's /metrics with one per-position series per draft position the engine can fill."""
    lines = [f"llamacpp:spec_decode_num_drafts_total {drafts}"]
    lines += [f'{PER_POSITION}{{position="{p}"}} {n}' for p, n in enumerate(accepted)]
    return "\n".join(lines) + "\n"


def samples(accepted: list[int]) -> dict[str, float]:
    from campaign.lanes.engines.prometheus import parse_prometheus

    return parse_prometheus(metrics(accepted))


def findings(args: list[str], axis: list[str], *, accepted: list[int] | None = None, boot: str = BOOT,
             props: dict | None = None):
    evidence = Evidence(metrics=samples(accepted) if accepted is not None else None, props=props, boot_log=boot)
    return LlamaCppAdapter().check_declared(lane(args, axis), axis, evidence)


# ngram-simple with --spec-draft-n-max 4: the engine's 48 positions, drafts accepted to position 46
DEEP = [9, 7, 5, 5, 4, *([2] * 41), 1, 0]
assert len(DEEP) == 48  # positions 0-47


def test_a_depth_the_counters_contradict_names_the_position() -> None:
    (found,) = findings(["--spec-type", "ngram-simple", "--spec-draft-n-max", "4"], ["args.spec-draft-n-max"],
                        accepted=DEEP)
    assert found.status == "contradicted"
    assert found.sentence() == ("cand: declared --spec-draft-n-max 4, drafts accepted at position 46: the flag is "
                                "not what limits the depth here")


def test_a_depth_the_counters_bound_holds() -> None:
    (found,) = findings(["--spec-type", "ngram-simple", "--spec-ngram-simple-size-m", "4"],
                        ["args.spec-ngram-simple-size-m"], accepted=[6, 3, 2, 1])
    assert found.status == "holds", found.seen
    assert "deepest accepted at position 3" in found.seen


def test_a_limit_other_than_declared_contradicts_even_before_a_deep_draft_is_accepted() -> None:
    # nothing accepted past position 1, but the engine counts 48 positions: its limit is 48, not 4
    (found,) = findings(["--spec-draft-n-max", "4"], ["args.spec-draft-n-max"], accepted=[3, 1] + [0] * 46)
    assert found.status == "contradicted"
    assert "its draft limit is 48" in found.seen
    # and a limit below the declared one (a draft model clamped to its trained block) as well
    (clamped,) = findings(["--spec-draft-n-max", "8"], ["args.spec-draft-n-max"], accepted=[3, 1])
    assert clamped.status == "contradicted" and "its draft limit is 2" in clamped.seen


def test_a_depth_without_a_verified_draft_or_metrics_is_unproven() -> None:
    (none_verified,) = findings(["--spec-draft-n-max", "4"], ["args.spec-draft-n-max"], accepted=[])
    assert none_verified.status == "unproven" and "no draft was verified" in none_verified.seen
    (no_metrics,) = findings(["--spec-draft-n-max", "4"], ["args.spec-draft-n-max"])
    assert no_metrics.status == "unproven" and "no metrics" in no_metrics.seen


@pytest.mark.parametrize(("args", "status", "seen"), [
    (["--ctx-size", "4096"], "holds", "n_ctx_slot = 1024 over 4 slots"),
    (["-c", "4000"], "holds", "n_ctx_slot = 1024"),  # padded to a multiple of 256 by the engine, then shared
    (["--ctx-size", "8192"], "contradicted", "gives each slot 1024 tokens where 8192 gives 2048"),
    (["-ub", "512"], "holds", "n_ubatch = 512"),
    (["--batch-size", "4096"], "contradicted", "n_batch is 2048"),
    (["-ctk", "f16"], "holds", "K cache type = f16"),
    (["--cache-type-v", "f16"], "contradicted", "V cache type is q8_0"),
    (["-fa", "on"], "contradicted", "flash_attn is disabled"),
    (["-fa", "off"], "holds", "flash_attn = disabled"),
    (["--threads", "1"], "holds", "n_threads = 1"),
    (["-t", "2"], "contradicted", "threadpool n_threads is 1"),
])
def test_boot_log_values(args: list[str], status: str, seen: str) -> None:
    field = "args." + args[0].lstrip("-")
    (found,) = findings(args, [field])
    assert (found.status, found.observable is not None) == (status, True)
    assert seen in found.seen, found.seen


def test_values_the_default_boot_log_does_not_print_are_unproven_with_the_way_to_show_them() -> None:
    for args in (["-b", "512"], ["-ctk", "q8_0"], ["-fa", "off"]):
        (found,) = findings(args, ["args." + args[0].lstrip("-")], boot=DEFAULT_BOOT)
        assert found.status == "unproven" and "-lv 4" in found.seen, found
    (context,) = findings(["--ctx-size", "4096"], ["args.ctx-size"], boot=DEFAULT_BOOT)
    assert context.status == "holds"
    (unified,) = findings(["--ctx-size", "1024"], ["args.ctx-size"],
                          boot=DEFAULT_BOOT.replace("kv_unified = 'false'", "kv_unified = 'true'"))
    assert unified.status == "holds"  # a unified cache gives every slot the whole context


def test_slots_are_read_from_props() -> None:
    assert findings(["-np", "4"], ["args.np"], props={"total_slots": 4})[0].status == "holds"
    assert findings(["--parallel", "2"], ["args.parallel"], props={"total_slots": 4})[0].status == "contradicted"
    assert findings(["--parallel", "2"], ["args.parallel"], props={})[0].status == "unproven"


def test_a_value_no_observable_covers_is_unproven_and_an_unset_one_declares_nothing() -> None:
    found = findings(["--spec-type", "ngram-simple", "--threads", "1"],
                     ["args.spec-type", "cpus", "args.defrag-thold", "env.HOOK"], accepted=[1])
    assert [(f.field, f.status) for f in found] == [("args.spec-type", "unproven")]
    assert "knows no observable of args.spec-type" in found[0].sentence()
    pinned = LlamaCppAdapter().check_declared(lane([], ["cpus"], cpus="0-1"), ["cpus"],
                                              Evidence(metrics=None, props=None, boot_log=""))
    assert [(f.declared, f.status) for f in pinned] == [("cpus=0-1", "unproven")]
    # an adapter that knows no observable at all says so for every declared value
    other = VllmAdapter().check_declared(lane(["--max-model-len", "2048"], ["args.max-model-len"]),
                                         ["args.max-model-len"], Evidence(metrics=None, props=None, boot_log=BOOT))
    assert [f.status for f in other] == ["unproven"]


def test_a_vllm_depth_is_read_from_its_speculative_config() -> None:
    from campaign.lanes.engines.prometheus import parse_prometheus

    def vllm(k: str, accepted: list[int]):
        text = "".join(f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="m",position="{p}"}}'
                       f" {n}\n" for p, n in enumerate(accepted))
        config = '{"method":"ngram","num_speculative_tokens":%s,"prompt_lookup_max":4}' % k
        evidence = Evidence(metrics=parse_prometheus(text), props=None, boot_log="")
        return VllmAdapter().check_declared(lane(["--speculative-config", config], ["args.speculative-config"]),
                                            ["args.speculative-config"], evidence)[0]

    assert vllm("3", [66, 60, 60]).status == "holds"
    assert vllm("2", [66, 60, 60]).seen == "drafts accepted at position 2"
    assert vllm('"3"', [66, 60, 60]).status == "unproven"  # a depth that is not a number declares none


def test_per_position_reads_only_its_own_series() -> None:
    got = per_position({**samples([4, 2]), "other{position=\"9\"} 3": 3.0}, PER_POSITION)
    assert got == {0: 4.0, 1: 2.0}


# --- the ruler's verdict over hand-written records


def ruler_with(tmp_path: Path, candidate_args: str, axis: str, accepted: list[int]):
    body = speed_contract(f"""\
        - {{name: base, role: control}}
        - name: cand
          role: candidate
          axis: [{axis}]
          set: {{args: {{{candidate_args}}}}}
        """, "- {kind: ruler, input: p, probes: 2}", name="t-ruler-declared")
    loaded, (ruler,) = load_gates(tmp_path, body)
    for name, shown in (("base", None), ("cand", accepted)):
        with JsonlAppender(ruler.ctx.raw_path(ruler.gate_id, name)) as sink:
            sink.append({"derived": "metrics", "tags": {"purpose": "metrics", "phase": "before"},
                         "text": metrics([0] * len(shown or []), drafts=0) if shown else "", "error": None})
            for item in ("p1", "p2", "exercise:repetition"):
                reply = f"{name} {item}"
                sink.append({"tags": {"purpose": "probe", "item": item}, "elapsed_s": 1.0,
                             "response": {"choices": [{"message": {"content": reply}}],
                                          "usage": {"completion_tokens": 8}}})
            sink.append({"derived": "metrics", "tags": {"purpose": "metrics", "phase": "after"},
                         "text": metrics(shown) if shown else "", "error": None})
            sink.append({"derived": "props", "tags": {"purpose": "props"}, "props": {"total_slots": 1}})
    return ruler.judge(loaded.lanes["cand"], loaded.lanes["base"])


def test_the_ruler_fails_a_depth_its_counters_contradict(tmp_path: Path) -> None:
    result = ruler_with(tmp_path, '--spec-type: ngram-simple, --spec-draft-n-max: "4"',
                        "args.spec-type, args.spec-draft-n-max", DEEP)
    assert result.verdict.value == "FAIL"
    assert result.reasons == ["cand: declared --spec-draft-n-max 4, drafts accepted at position 46: the flag is "
                              "not what limits the depth here"]
    declared = {(d["lane"], d["field"]): d["status"] for d in result.details["declared"]}
    assert declared == {("cand", "args.spec-type"): "unproven", ("cand", "args.spec-draft-n-max"): "contradicted"}


def test_the_ruler_passes_a_depth_that_holds_and_lists_what_it_could_not_prove(tmp_path: Path) -> None:
    result = ruler_with(tmp_path, '--spec-type: ngram-simple, --spec-ngram-simple-size-n: "3", '
                                  '--spec-ngram-simple-size-m: "4"',
                        "args.spec-type, args.spec-ngram-simple-size-n, args.spec-ngram-simple-size-m", [5, 4, 2, 1])
    assert result.verdict.value == "PASS", result.reasons
    assert "declared --spec-ngram-simple-size-m 4 in effect" in result.reasons[-1]
    unproven = [c for c in result.caveats if "unproven" in c]
    assert len(unproven) == 2 and any("--spec-ngram-simple-size-n 3" in c for c in unproven), result.caveats
