"""The vLLM adapter's pure parts: command lines, the lane's env, and parsing recorded responses.

The records below have the shapes vLLM 0.32 answered with on this machine (prompt_logprobs,
completions logprobs named by token id, /tokenize token strings, /metrics text); the integration tests
check the same parsers against the live server.
"""

from __future__ import annotations

import pytest

from campaign.contracts.resolve import EffectiveLane
from campaign.contracts.schema import ModelSpec
from campaign.errors import ScoreError
from campaign.lanes.engines.prometheus import counter_deltas, parse_prometheus, sample_key
from campaign.lanes.engines.registry import adapter_for
from campaign.lanes.engines.scoring import TokenSeq
from campaign.lanes.engines.vllm import SERVE_MODULE, VllmAdapter, _seq


def lane(**changes) -> EffectiveLane:
    fields = dict(name="v", role="control", runtime="process", engine="vllm", executable="/opt/venv/bin/python",
                  args=["--enforce-eager", "--max-model-len", "2048"], host="127.0.0.1", port=18555,
                  model=ModelSpec(path="m", served_name="smollm2"))
    fields.update(changes)
    return EffectiveLane(**fields)


def test_registered_for_engine_kind_vllm() -> None:
    assert isinstance(adapter_for("vllm"), VllmAdapter)


@pytest.mark.parametrize("executable, entry", [
    ("/c/venv/bin/python", ["-m", SERVE_MODULE]),
    ("python3.11", ["-m", SERVE_MODULE]),
    ("vllm-cpu-python", ["-m", SERVE_MODULE]),
    ("/usr/local/bin/vllm", ["serve"]),
    ("/opt/serve-vllm.sh", []),
    (None, []),  # a docker image: its entrypoint (`vllm serve` in vLLM's images) takes the arguments
])
def test_command_line_per_launcher(executable: str | None, entry: list[str]) -> None:
    args = VllmAdapter().server_args(lane(executable=executable), "/models/hf")
    assert args == [*entry, "--model", "/models/hf", "--served-model-name", "smollm2", "--host", "127.0.0.1",
                    "--port", "18555", "--enforce-eager", "--max-model-len", "2048"]


def test_served_name_defaults_so_requests_can_name_the_model() -> None:
    args = VllmAdapter().server_args(lane(model=ModelSpec(path="m")), "/m")
    assert args[args.index("--served-model-name") + 1] == "default"


def test_launch_env_keeps_every_write_under_the_scratch_folder() -> None:
    env = VllmAdapter().launch_env(lane(), "/tmp/s")
    paths = {k: v for k, v in env.items() if v.startswith("/")}
    assert {"TMPDIR", "VLLM_CACHE_ROOT", "HF_HOME", "VLLM_CONFIG_ROOT"} <= set(paths)
    assert all(v == "/tmp/s" or v.startswith("/tmp/s/") for v in paths.values())
    assert env["HF_HUB_OFFLINE"] == "1" and env["VLLM_NO_USAGE_STATS"] == "1"


def test_only_the_model_class_facts_carry_over_between_boots(tmp_path, monkeypatch) -> None:  # noqa: ANN001
    """vLLM's modelinfos (facts read from its own source, each keyed by its model module's hash only) are the
    one thing shared: a link from the boot's fresh scratch to one folder per vLLM install under the user's
    cache, which outlives the scratch; the rest of the scratch starts empty. Another install (a candidate on
    another vLLM) gets a folder of its own. A docker lane's scratch is the container's: nothing."""
    import shutil

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    facts = tmp_path / "cache" / "campaign" / "engine-facts"
    installs = [tmp_path / "vllm-a" / "python", tmp_path / "vllm-b" / "python"]
    for executable in installs:
        executable.parent.mkdir()
        executable.write_text("#!/bin/sh\n")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    VllmAdapter().seed_scratch(lane(executable=str(installs[0])), scratch)
    (shared,) = facts.iterdir()
    assert shared.name.startswith("vllm-modelinfos-")
    link = scratch / "vllm-cache" / "modelinfos"
    assert link.is_symlink() and link.resolve() == shared.resolve() and shared.stat().st_mode & 0o777 == 0o700
    assert [p.name for p in scratch.rglob("*")] == ["vllm-cache", "modelinfos"]
    (link / "vllm-model_executor-models-llama-LlamaForCausalLM.json").write_text("{}")  # as vLLM writes it
    shutil.rmtree(scratch)  # the lane's stop
    assert [p.name for p in shared.iterdir()] == ["vllm-model_executor-models-llama-LlamaForCausalLM.json"]
    again = tmp_path / "again"
    again.mkdir()
    VllmAdapter().seed_scratch(lane(executable=str(installs[0])), again)  # the same install's next boot
    assert (again / "vllm-cache" / "modelinfos").resolve() == shared.resolve()
    other = tmp_path / "other"
    other.mkdir()
    VllmAdapter().seed_scratch(lane(executable=str(installs[1])), other)
    assert (other / "vllm-cache" / "modelinfos").resolve() != shared.resolve() and len(list(facts.iterdir())) == 2
    docker = tmp_path / "docker-scratch"
    docker.mkdir()
    VllmAdapter().seed_scratch(lane(runtime="docker", executable=None), docker)
    assert list(docker.iterdir()) == []
    (tmp_path / "not-a-folder").write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "not-a-folder"))  # no cache to keep them in
    VllmAdapter().seed_scratch(lane(executable=str(installs[0])), docker)
    assert list(docker.iterdir()) == []  # the boot reads them itself, as before


METRICS = """\
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="smollm2"} 40.0
vllm:spec_decode_num_drafts_created{engine="0",model_name="smollm2"} 1.79e+09
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="smollm2"} 120.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="smollm2"} 66.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="smollm2",position="0"} 30.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="smollm2",position="1"} 22.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="smollm2",position="2"} 14.0
vllm:num_requests_running{engine="0",model_name="smollm2"} 0.0
vllm:num_requests_waiting{engine="0",model_name="smollm2"} 0.0
vllm:request_success_total{engine="0",finished_reason="stop",model_name="smollm2"} 3.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="smollm2"} 5.0
vllm:request_success_total{engine="0",finished_reason="abort",model_name="smollm2"} 0.0
vllm:request_success_total{engine="1",finished_reason="length",model_name="smollm2"} 1.0
vllm:prompt_tokens_total{engine="0",model_name="smollm2"} 400.0
vllm:prompt_tokens_cached_total{engine="0",model_name="smollm2"} 128.0
vllm:prefix_cache_hits_total{engine="0",model_name="smollm2"} 128.0
vllm:generation_tokens_total{engine="0",model_name="smollm2"} 300.0
process_resident_memory_bytes 7.72677632e+08
"""


def test_metric_summary_names_vllm_counters_in_neutral_terms() -> None:
    before = parse_prometheus(METRICS)
    after = dict(before)
    engine = {"engine": "0", "model_name": "smollm2"}
    for name, labels, add in (("spec_decode_num_drafts_total", {}, 10), ("spec_decode_num_draft_tokens_total", {}, 30),
                              ("spec_decode_num_accepted_tokens_total", {}, 18),
                              ("spec_decode_num_accepted_tokens_per_pos_total", {"position": "0"}, 9),
                              ("spec_decode_num_accepted_tokens_per_pos_total", {"position": "1"}, 6),
                              ("spec_decode_num_accepted_tokens_per_pos_total", {"position": "2"}, 3),
                              ("request_success_total", {"finished_reason": "stop"}, 3),
                              ("request_success_total", {"finished_reason": "abort"}, 1),
                              ("prompt_tokens_total", {}, 200), ("prompt_tokens_cached_total", {}, 64),
                              ("generation_tokens_total", {}, 128)):
        after[sample_key(f"vllm:{name}", {**engine, **labels})] += add
    summary = VllmAdapter().metric_summary(counter_deltas(before, after))
    assert summary == {"requests": 4.0, "prompt_tokens": 200.0, "cached_prompt_tokens": 64.0,
                       "generated_tokens": 128.0, "spec_drafts": 10.0, "spec_draft_tokens": 30.0,
                       "spec_accepted_tokens": 18.0, "spec_accepted_per_position": {"0": 9.0, "1": 6.0, "2": 3.0}}


def test_requests_sum_every_finish_reason_and_engine() -> None:
    """An aborted stream (our client gave up) is still a finished request: the speed gate's range check
    needs it counted, between our whole streams and all we sent."""
    zero = {key: 0.0 for key in parse_prometheus(METRICS)}
    summary = VllmAdapter().metric_summary(counter_deltas(zero, parse_prometheus(METRICS)))
    assert summary["requests"] == 9.0  # stop 3 + length 5 + abort 0, engine 0; length 1, engine 1
    assert summary["cached_prompt_tokens"] == 128.0 and summary["prompt_tokens"] == 400.0


def test_no_speculation_no_spec_keys_and_busy_while_requests_run() -> None:
    adapter = VllmAdapter()
    plain = parse_prometheus('vllm:request_success_total{engine="0",finished_reason="stop"} 1\n'
                             'vllm:num_requests_running{engine="0"} 0\nvllm:num_requests_waiting{engine="0"} 0\n')
    summary = adapter.metric_summary(counter_deltas(plain, plain))
    assert summary == {"requests": 0.0}
    assert not adapter.metrics_busy(plain)
    assert adapter.metrics_busy(parse_prometheus('vllm:num_requests_waiting{engine="0"} 1\n'))
    assert adapter.metrics_busy(parse_prometheus('vllm:num_requests_running{engine="1"} 2\n'))


def test_capabilities_are_the_gate_api() -> None:
    assert {"render_chat", "tokenize", "generate", "score"} <= VllmAdapter.capabilities
    assert VllmAdapter().stream_token_counter is None  # several tokens per chunk when speculating: usage only


def _record(part: str, request: dict, response: dict | None, error: str | None = None) -> dict:
    record = {"seq": 3, "lane": "v", "request": request, "status": 200 if error is None else 400,
              "response": response, "tags": {"item": "p", "part": part}}
    if error:
        record["error"] = error
    return record


PROMPT = TokenSeq((1, 504, 3575), "<|im_start|>The capital", ("<|im_start|>", "The", " capital"))
CONT = TokenSeq((282, 4649), " of France", (" of", " France"))
# prompt_logprobs as vLLM 0.32 answered: None for the first token; the top-k by rank plus the prompt
# token itself when it is not among them
PROMPT_LOGPROBS = [None,
                   {"504": {"logprob": -1.47, "rank": 1, "decoded_token": "The"},
                    "788": {"logprob": -1.60, "rank": 2, "decoded_token": "In"}},
                   {"3575": {"logprob": -11.708, "rank": 3121, "decoded_token": " capital"},
                    "29": {"logprob": -0.833, "rank": 1, "decoded_token": "-"},
                    "28": {"logprob": -2.583, "rank": 2, "decoded_token": ","}},
                   {"282": {"logprob": -0.3356, "rank": 1, "decoded_token": " of"},
                    "2240": {"logprob": -2.3356, "rank": 2, "decoded_token": " city"}},
                   {"4649": {"logprob": -0.9, "rank": 2, "decoded_token": " France"},
                    "8721": {"logprob": -0.7, "rank": 1, "decoded_token": " Paris"}}]
NEXT = {"tokens": ["token_id:314"], "token_logprobs": [-0.05], "text_offset": [0],
        "top_logprobs": [{"token_id:314": -0.05, "token_id:28": -3.2}]}


def _score_record(**changes) -> dict:
    choice = {"index": 0, "text": " is", "finish_reason": "length", "logprobs": NEXT,
              "prompt_logprobs": PROMPT_LOGPROBS, "prompt_token_ids": [1, 504, 3575, 282, 4649], "token_ids": [314]}
    choice.update(changes)
    request = {"prompt": [1, 504, 3575, 282, 4649], "max_tokens": 1, "prompt_logprobs": 2, "logprobs": 2,
               "return_tokens_as_token_ids": True}
    return _record("score", request, {"choices": [choice]})


def test_score_reads_each_continuation_token_and_the_next_token_after_it() -> None:
    positions = VllmAdapter().parse_score([_score_record()], PROMPT, CONT)
    assert len(positions) == len(CONT) + 1
    of, france, nxt = positions
    assert (of.token, of.text, of.logprob, of.rank()) == (282, " of", -0.3356, 1)
    assert (france.token, france.logprob, france.rank()) == (4649, -0.9, 2)
    assert france.lookup(8721, " Paris") == -0.7 and france.best().token == 8721
    assert (nxt.token, nxt.logprob, nxt.rank()) == (314, -0.05, 1)
    assert [a.token for a in nxt.top] == [314, 28]


def test_score_keeps_a_prompt_token_outside_the_top_k_out_of_the_top() -> None:
    prompt = TokenSeq((1, 504), "", ())
    cont = TokenSeq((3575, 282, 4649), "", ())
    positions = VllmAdapter().parse_score([_score_record()], prompt, cont)
    capital = positions[0]
    assert capital.logprob == -11.708 and capital.rank() == 3
    assert [a.token for a in capital.top] == [29, 28]  # the floor stays the k-th best, not the scored token
    assert capital.floor == -2.583


def test_score_refuses_what_it_cannot_trust() -> None:
    adapter = VllmAdapter()
    with pytest.raises(ScoreError, match="does not hold this prompt"):
        adapter.parse_score([_score_record()], PROMPT, TokenSeq((282,), " of", (" of",)))
    with pytest.raises(ScoreError, match="prompt_logprobs for 5 tokens, got 4"):
        adapter.parse_score([_score_record(prompt_logprobs=PROMPT_LOGPROBS[:4])], PROMPT, CONT)
    broken = [*PROMPT_LOGPROBS[:3], {"29": {"logprob": -0.8, "rank": 1}}, PROMPT_LOGPROBS[4]]
    with pytest.raises(ScoreError, match="missing from its own prompt_logprobs"):
        adapter.parse_score([_score_record(prompt_logprobs=broken)], PROMPT, CONT)
    with pytest.raises(ScoreError, match="other prompt tokens"):
        adapter.parse_score([_score_record(prompt_token_ids=[1, 504, 3575, 282, 4650])], PROMPT, CONT)
    text_named = {**NEXT, "tokens": [" is"], "top_logprobs": [{" is": -0.05}]}
    with pytest.raises(ScoreError, match="return_tokens_as_token_ids"):
        adapter.parse_score([_score_record(logprobs=text_named)], PROMPT, CONT)
    failed = _record("score", _score_record()["request"], {"error": {"message": "bad"}}, error="HTTP 400")
    with pytest.raises(ScoreError, match="HTTP 400"):
        adapter.parse_score([failed], PROMPT, CONT)


GENERATED = {"tokens": ["token_id:504", "token_id:6147", "token_id:2"],
             "token_logprobs": [-1.47, -2.55, -0.3], "text_offset": [0, 12, 25],
             "top_logprobs": [{"token_id:504": -1.47, "token_id:788": -1.59},
                              {"token_id:6147": -2.55, "token_id:253": -2.0, "token_id:11": -2.6},
                              {"token_id:2": -0.3, "token_id:198": -1.9}]}


def _generation_records(pieces_ids: list[int] | None = None, **changes) -> list[dict]:
    choice = {"index": 0, "text": "The waves<|im_end|>", "finish_reason": "stop", "logprobs": GENERATED,
              "prompt_token_ids": [1, 504, 3575], "token_ids": [504, 6147, 2]}
    choice.update(changes)
    generate = _record("generate", {"prompt": [1, 504, 3575], "max_tokens": 8, "logprobs": 1,
                                    "return_tokens_as_token_ids": True}, {"choices": [choice]})
    pieces = _record("pieces", {"prompt": choice["text"], "return_token_strs": True},
                     {"tokens": pieces_ids or [504, 6147, 2], "token_strs": ["The", "\u0120waves", "<|im_end|>"],
                      "count": 3})
    return [generate, pieces]


def test_generation_reads_ids_logprobs_and_pieces() -> None:
    gen = VllmAdapter().parse_generation(_generation_records())
    assert gen.tokens.ids == (504, 6147, 2) and gen.finish == "stop"
    assert gen.tokens.pieces == ("The", " waves", "<|im_end|>") and gen.tokens.head(2).text == "The waves"
    assert [p.logprob for p in gen.positions] == [-1.47, -2.55, -0.3]
    assert gen.positions[1].text == " waves"
    assert [a.token for a in gen.positions[1].top] == [253]  # top-1 asked; vLLM added the chosen token
    assert gen.positions[1].rank() == 2  # a sampled (non-greedy) token shows as rank 2


def test_generation_without_matching_pieces_keeps_ids_and_text() -> None:
    gen = VllmAdapter().parse_generation(_generation_records(pieces_ids=[504, 6147, 17, 2]))
    assert gen.tokens.ids == (504, 6147, 2) and gen.tokens.text == "The waves<|im_end|>"
    assert gen.tokens.pieces == ()


def test_generation_refuses_ids_that_disagree() -> None:
    adapter = VllmAdapter()
    with pytest.raises(ScoreError, match="differ from the ids"):
        adapter.parse_generation(_generation_records(token_ids=[504, 6147, 3]))
    with pytest.raises(ScoreError, match="other prompt tokens"):
        adapter.parse_generation(_generation_records(prompt_token_ids=[1, 504]))


@pytest.mark.parametrize("strs, text, pieces", [
    (["<|im_start|>", "user", "\u010a", "Hi", "\u0120there"], "<|im_start|>user\nHi there",
     ("<|im_start|>", "user", "\n", "Hi", " there")),
    (["\u0120caf", "\u00c3", "\u00a9"], " café", (" caf", "\ufffd", "\ufffd")),  # é split across two tokens
    (["\u2581Hello", "<0x0A>", "\u2581w", "orld"], " Hello\n world", (" Hello", "\n", " w", "orld")),
    (["\u2581Hello"], "Hello", ()),  # SentencePiece's dummy prefix: pieces do not join up, text kept
])
def test_token_pieces_from_vocabulary_strings(strs: list[str], text: str, pieces: tuple) -> None:
    seq = _seq(list(range(len(strs))), strs, text)
    assert seq.text == text and seq.pieces == pieces


@pytest.mark.parametrize("line, cause", [
    ("(VllmWorker-0 pid=27954) ERROR [multiproc_executor.py:953] ValueError: Available memory on node 0 "
     "(11.84/14.46 GiB) on startup is less than desired CPU memory utilization (0.92, 13.31 GiB).", "out_of_memory"),
    ("huggingface_hub.errors.HFValidationError: Repo id must be in the form 'repo_name' or 'namespace/repo_name': "
     "'/tmp/no-such-model'.", "model_load_failed"),
    ("api_server.py: error: unrecognized arguments: --no-such-flag", "bad_argument"),
])
def test_vllm_launch_failures_are_classified_from_their_own_words(line: str, cause: str) -> None:
    """Lines as vLLM 0.32 printed them when launched with the default memory fraction, a missing
    model directory and an unknown flag; the root cause sits far above the last traceback. The first two are
    vLLM's own words (its adapter's ``facts.boot_failures``): another engine's lane reads them as no cause."""
    from campaign.lanes.bootlog import classify_failure
    from campaign.lanes.engines.llamacpp import LlamaCppAdapter

    log = "\n".join(["INFO starting"] * 5 + [line] + ["RuntimeError: Engine core initialization failed."] * 100)
    assert classify_failure(log, 1, engine=VllmAdapter.facts) == cause
    shared = cause == "bad_argument"
    assert (classify_failure(log, 1, engine=LlamaCppAdapter.facts) == cause) is shared
