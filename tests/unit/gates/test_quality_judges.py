"""Pure logic of the quality gates on hand-written records. Outputs the small model never produces on the
real engines (duplicated JSON, extra braces, reasoning in content, parsed-but-wrong tool calls...) are
covered here from fixtures, marked as such; the real outputs are in test_quality_window.py."""

from __future__ import annotations

import math

import pytest

from campaign.errors import ScoreError
from campaign.gates.common.stats import percentile
from campaign.gates.kl import kl_topk
from campaign.gates.ruler import counter_deltas, normalize_boot_log, parse_prometheus
from campaign.gates.structured import classify
from campaign.gates.teacher_forced import InstrumentCheck, check_instrument, first_divergence
from campaign.gates.tools import check_call, judge_episode
from campaign.lanes.engines.llamacpp import LlamaCppAdapter
from campaign.lanes.engines.llamacpp_python import LlamaCppPythonAdapter
from campaign.lanes.engines.scoring import Alt, Generation, Position, TokenSeq

SCHEMA = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}


@pytest.mark.parametrize(("text", "outcome"), [
    ('{"answer": 5}', "correct"),
    ('{"answer": 4}', "wrong_value"),
    ('{"answer": "5"}', "schema_invalid"),
    # fixtures (not produced by SmolLM2 here): the seeds' malformed classes
    ('{"answer": 5}\nI hope this helps.', "prose_appended"),
    ('{"answer": 5}{"answer": 5}', "duplicated_json"),
    ('{"answer": 5}}', "extra_braces"),
    ('Sure! {"answer": 5}', "prose_prepended"),
    ('```json\n{"answer": 5}\n```', "code_fenced"),
    ('<think>2+3</think>{"answer": 5}', "reasoning_in_content"),
    ("five", "not_json"),
    ("", "empty"),
])
def test_structured_outcome_classes(text: str, outcome: str) -> None:
    assert classify(text, SCHEMA, {"answer": 5})["outcome"] == outcome


def test_structured_truncated_needs_the_budget_to_run_out() -> None:
    assert classify('{"answer": ', SCHEMA, {"answer": 5}, finish="length")["outcome"] == "truncated"
    assert classify('{"answer": ', SCHEMA, {"answer": 5}, finish="stop")["outcome"] == "not_json"


EXPECT = {"name": "get_weather", "arguments": {"city": "Paris"}}


def _call(name: str, arguments: str) -> dict:
    return {"id": "c1", "type": "function", "function": {"name": name, "arguments": arguments}}


def test_tool_call_checks() -> None:
    # the first is the shape llama-cpp-python's chatml-function-calling returned for this request
    assert check_call(_call("get_weather", '{ "city": "Paris" }'), EXPECT)[0] == "passed"
    assert check_call(None, EXPECT)[0] == "no_call"
    assert check_call(_call("get_time", '{"city": "Paris"}'), EXPECT)[0] == "wrong_function"
    assert check_call(_call("get_weather", '{"city": "Rome"}'), EXPECT)[0] == "wrong_arguments"
    assert check_call(_call("get_weather", "{city: Paris"), EXPECT)[0] == "unparsable_arguments"


def _turn(turn: int, message: dict) -> dict:
    return {"tags": {"item": "w", "turn": turn}, "response": {"choices": [{"message": message}]}}


def test_tool_episode_needs_the_call_then_a_plain_final_answer() -> None:
    row = {"expect": [EXPECT], "final_contains": "18"}
    call = _turn(0, {"content": None, "tool_calls": [_call("get_weather", '{"city": "Paris"}')]})
    assert judge_episode(row, [call, _turn(1, {"content": "It is 18 C."})])["outcome"] == "passed"
    assert judge_episode(row, [call, _turn(1, {"content": "Sunny."})])["outcome"] == "final_missing_fact"
    assert judge_episode(row, [call, _turn(1, {"content": "<think>hm</think>18"})])["outcome"] == "reasoning_in_content"
    assert judge_episode(row, [call])["outcome"] == "no_final_answer"
    assert judge_episode(row, [_turn(0, {"content": "Paris is nice."})])["outcome"] == "no_call"


def _pos(token: int, logprob: float | None, top: list[tuple[int, float]]) -> Position:
    return Position(token=token, text=str(token), logprob=logprob,
                    top=tuple(Alt(t, str(t), lp) for t, lp in top))


def test_rank_lookup_and_censoring() -> None:
    pos = _pos(7, -1.0, [(3, -0.9995), (7, -1.0), (9, -2.0)])
    assert pos.rank() == 2 and pos.rank(tie=0.001) == 1
    assert pos.lookup(9, "9") == -2.0 and pos.lookup(11, "11") is None
    assert _pos(5, None, [(3, -0.1)]).rank() is None  # censored: never guessed


def test_first_divergence() -> None:
    assert first_divergence((1, 2, 3), (1, 2, 3)) is None
    assert first_divergence((1, 2, 3), (1, 4, 3)) == 1
    assert first_divergence((1, 2), (1, 2, 3)) == 2


def _generation(tokens: list[int], logprobs: list[float]) -> Generation:
    positions = tuple(_pos(t, lp, [(t, lp), (999, lp - 1.0)]) for t, lp in zip(tokens, logprobs, strict=True))
    return Generation(tokens=TokenSeq(tuple(tokens), ""), positions=positions, finish="length")


def test_instrument_accepts_its_own_tokens_back_and_catches_a_shift() -> None:
    gen = _generation([5, 6, 7], [-0.1, -0.2, -0.3])
    good = [*gen.positions, _pos(8, -0.5, [(8, -0.5)])]
    check = InstrumentCheck()
    check_instrument(gen, good, 0.001, "lane", check)
    assert (check.within, check.tokens, check.failures) == (3, 3, [])
    # an engine that reports each logprob one position late (as echo does without a leading BOS)
    shifted = [_pos(5, None, [(1, -0.01)]), _pos(6, -0.1, [(5, -0.1), (6, -0.1)]), _pos(7, -0.2, [(7, -0.2)]),
               _pos(8, -0.3, [(8, -0.3)])]
    check = InstrumentCheck()
    check_instrument(gen, shifted, 0.001, "lane", check)
    assert check.within < 3 and check.failures
    drift = [_pos(5, -0.1, [(5, -0.1)]), _pos(6, -0.25, [(6, -0.25)]), _pos(7, -0.3, [(7, -0.3)]), good[-1]]
    check = InstrumentCheck()
    check_instrument(gen, drift, 0.01, "lane", check)
    assert len(check.failures) == 1 and math.isclose(check.max_drift, 0.05, abs_tol=1e-9)


def test_kl_topk_tail_and_missing_tokens() -> None:
    p = _pos(1, math.log(0.6), [(1, math.log(0.6)), (2, math.log(0.3))])
    assert kl_topk(p, p) == (0.0, 0)
    q = _pos(1, math.log(0.5), [(1, math.log(0.5)), (2, math.log(0.4))])
    expected = 0.6 * math.log(0.6 / 0.5) + 0.3 * math.log(0.3 / 0.4) + 0.1 * math.log(0.1 / 0.1)
    assert math.isclose(kl_topk(p, q)[0], expected, rel_tol=1e-9)
    value, missing = kl_topk(p, _pos(1, math.log(0.9), [(1, math.log(0.9)), (3, math.log(0.05))]))
    assert missing == 1 and value > 0
    assert percentile([1.0, 2.0, 3.0, 4.0], 99) == 4.0 and percentile([1.0, 2.0], 50) == 1.0


def test_ruler_helpers() -> None:
    before = parse_prometheus("# HELP x\nllamacpp:n_decode_total 10\nllamacpp:prompt_seconds_total 1.5\n")
    after = parse_prometheus('llamacpp:n_decode_total 14\nllamacpp:prompt_seconds_total 2.5\nfoo{pos="1"} 3\n')
    assert counter_deltas(before, after) == {"llamacpp:n_decode_total": 4.0}
    log = "0.00.026.304 I srv  init: n_ubatch = 8\n0.03.121.833 I slot launch_slot_: id 0 | task 0\n"
    assert normalize_boot_log(log) == ["srv  init: n_ubatch = 8"]


def test_llama_server_score_parse_refuses_a_record_for_other_tokens() -> None:
    prompt, cont = TokenSeq((1, 2), "ab", ("a", "b")), TokenSeq((3,), "c", ("c",))
    entry = {"id": 3, "token": "c", "logprob": -0.5, "top_logprobs": [{"id": 3, "token": "c", "logprob": -0.5}]}
    record = {"tags": {"part": "score"}, "request": {"prompt": [[1, 2], [1, 2, 3]]},
              "response": [{"index": 0, "completion_probabilities": [entry]},
                           {"index": 1, "completion_probabilities": [dict(entry, id=4, token="d")]}]}
    positions = LlamaCppAdapter().parse_score([record], prompt, cont)
    assert positions[0].logprob == -0.5 and positions[1].token == 4
    with pytest.raises(ScoreError):
        LlamaCppAdapter().parse_score([record], prompt, TokenSeq((9,), "z", ("z",)))


def test_llama_cpp_python_refuses_misaligned_echo() -> None:
    """The shape llama-cpp-python returns for echo on a prompt with no leading BOS: the positions are
    the prompt tokens themselves and the generated token is missing."""
    prompt, cont = TokenSeq((504, 3575), "The capital", ()), TokenSeq((282,), " of", ())
    check = {"tags": {"part": "tokenize_check"}, "response": {"tokens": [504, 3575, 282]}}
    echo = {"tags": {"part": "score"}, "request": {"prompt": "The capital of"},
            "response": {"choices": [{"text": "The capital of France", "logprobs": {
                "tokens": ["The", " capital", " of"], "token_logprobs": [None, -9.1, -7.2],
                "top_logprobs": [None, {" capital": -9.1}, {" of": -7.2}]}}]}}
    with pytest.raises(ScoreError, match="not aligned"):
        LlamaCppPythonAdapter().parse_score([check, echo], prompt, cont)
    retokenized = {"tags": {"part": "tokenize_check"}, "response": {"tokens": [504, 3575, 300]}}
    with pytest.raises(ScoreError, match="other ids"):
        LlamaCppPythonAdapter().parse_score([retokenized, echo], prompt, cont)


def test_contract_errors_name_file_line_and_field(tmp_path) -> None:
    from campaign.contracts.load import load_contract
    from campaign.errors import ContractError
    from tests.support.contracts import demo_like, free_port, write_contract

    body = demo_like(free_port()).split("        promotion:")[0]
    kl = body + "          - kind: kl\n            input: p\n            rule: {}\n"
    with pytest.raises(ContractError, match=r"c\.yaml:\d+: gates\[1\]\.rule: .*at least one of max_mean"):
        load_contract(write_contract(tmp_path, kl))
    oracle = body + "          - kind: kl\n            input: p\n            oracle: nobody\n            rule: {max_mean: 0.1}\n"
    with pytest.raises(ContractError, match=r"gates\[1\]\.oracle: no lane named 'nobody'"):
        load_contract(write_contract(tmp_path, oracle))
    refs = body + ("          - kind: teacher_forced\n            input: p\n            references: nope\n"
                   "            rule: {instrument_tolerance: 0.01}\n")
    with pytest.raises(ContractError, match=r"gates\[1\]\.references: no input set named 'nope'"):
        load_contract(write_contract(tmp_path, refs))


def _vllm_contract(args: str, candidate_args: str, rule: str) -> str:
    return f"""\
        contract: t-dtype
        version: 1
        lane_defaults:
          runtime: process
          engine: vllm
          executable: vllm-cpu-python
          port: 18555
          model: {{path: m, served_name: smollm2}}
          args: {args}
        lanes:
          - name: base
            role: control
          - name: cand
            role: candidate
            axis: [args.dtype]
            set:
              args: {candidate_args}
        inputs:
          p: {{file: prompts/p.jsonl}}
        gates:
          - kind: teacher_forced
            input: p
            rule: {rule}
        """


def test_teacher_forced_tolerance_defaults_per_declared_dtype(tmp_path) -> None:
    from campaign.contracts.engines import INSTRUMENT_TOLERANCE, instrument_tolerance
    from campaign.contracts.load import load_contract
    from campaign.errors import ContractError
    from tests.support.contracts import write_contract

    loaded = load_contract(write_contract(tmp_path, _vllm_contract("[--dtype, bfloat16]", "{--dtype: float}",
                                                                     "{max_site_delta: 1.0}")))
    rule = loaded.contract.gates[0].rule
    assert rule.instrument_tolerance is None
    assert "instrument_tolerance" not in loaded.canonical["gates"][0]["rule"]  # the default is not written in
    assert instrument_tolerance(None, loaded.lanes["base"]) == (INSTRUMENT_TOLERANCE["bfloat16"],
                                                                "the default for bfloat16")
    assert instrument_tolerance(None, loaded.lanes["cand"]) == (INSTRUMENT_TOLERANCE["float32"],
                                                                "the default for float32")
    assert instrument_tolerance(0.05, loaded.lanes["base"]) == (0.05, "the contract's rule")
    # a lane that declares no dtype (auto: whatever the model's config says) needs the tolerance frozen
    with pytest.raises(ContractError, match=r"gates\[0\]\.rule: no instrument_tolerance and no default: lane "
                                            r"cand declares no dtype .*--dtype"):
        load_contract(write_contract(tmp_path, _vllm_contract("[--dtype, bfloat16]", "{--dtype: auto}", "{}")))
    assert load_contract(write_contract(tmp_path, _vllm_contract("[--dtype, bfloat16]", "{--dtype: auto}",
                                                                 "{instrument_tolerance: 0.3}")))


def test_counters_count_only_when_they_moved_over_the_probes() -> None:
    from campaign.gates.ruler import moved_differently

    spec = 'llamacpp:spec_decode_num_drafts_total'
    # present on the candidate only, but no draft fired during the probes: nothing shown
    assert moved_differently({"llamacpp:tokens_predicted_total": 24.0},
                             {"llamacpp:tokens_predicted_total": 24.0, spec: 0.0}) == []
    # present on one lane only and moved there: the axis acted
    assert moved_differently({}, {spec: 3.0}) == [spec]
    # both present, same delta: nothing; different deltas: shown
    assert moved_differently({"a_total": 5.0}, {"a_total": 5.0}) == []
    assert moved_differently({"a_total": 5.0}, {"a_total": 3.0}) == ["a_total"]
    assert moved_differently({"b_total": 0.0}, {"b_total": 0.0}) == []


def test_the_scoring_path_measures_its_drift_and_ranks_within_it() -> None:
    """The H200's case, constructed: the first token back exactly, later ones drifting (0.3 nats) with the
    greedy token second on the scoring path by less than that drift: a near-tie on this device, not a
    broken instrument. A scorer one position off (tokens far below the top) still fails, and so does a
    drift beyond the cap."""
    from campaign.gates.teacher_forced import settle_measured

    gen = _generation([5, 6, 7], [-0.1, -0.9, -0.3])
    forced = [_pos(5, -0.1, [(5, -0.1)]), _pos(6, -1.2, [(4, -1.05), (6, -1.2)]), _pos(7, -0.35, [(7, -0.35)]),
              _pos(8, -0.5, [(8, -0.5)])]
    check = InstrumentCheck()
    check_instrument(gen, forced, 1.0, "lane", check, measured=True)
    settle_measured(check, 1.0)
    assert (check.within, check.tokens, check.failures) == (3, 3, []) and math.isclose(check.max_drift, 0.3)
    assert check.rank1_strict == 2  # reported: one token was rank 1 only within the measured drift
    # twice the drift is the tie: each of the two tokens may move by the drift (0.3 here: 0.6 apart at most)
    nearly = [forced[0], _pos(6, -1.2, [(4, -0.65), (6, -1.2)]), *forced[2:]]
    check = InstrumentCheck()
    check_instrument(gen, nearly, 1.0, "lane", check, measured=True)
    settle_measured(check, 1.0)
    assert check.failures == [] and check.within == 3
    for cap, worse in ((0.2, forced), (1.0, [forced[0], _pos(6, -1.2, [(4, -0.55), (6, -1.2)]), *forced[2:]])):
        check = InstrumentCheck()
        check_instrument(gen, worse, cap, "lane", check, measured=True)
        settle_measured(check, cap)
        assert check.failures and check.within < 3, (cap, check)


def test_the_scoring_path_is_capped_by_the_rules_smallest_margin() -> None:
    from campaign.gates.teacher_forced import TeacherForcedRule, scoring_cap

    rule = TeacherForcedRule(instrument="scoring", max_site_delta=1.0, noninferiority_max=0.8)
    assert scoring_cap(rule) == (0.8, "the scoring path, drift measured on this engine and device, capped by "
                                      "noninferiority_max")
    assert scoring_cap(rule.model_copy(update={"instrument_tolerance": 0.6}))[0] == 0.6
    assert scoring_cap(TeacherForcedRule(instrument="scoring")) is None
