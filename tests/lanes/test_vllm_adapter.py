"""The vLLM adapter's pure parts: command lines, the lane's env, and parsing recorded responses.

The records below have the shapes vLLM 0.32 answered with on this machine (echo, prompt_logprobs,
completions logprobs with token ids, /metrics text); the integration tests check the same parsers
against the live server.
"""

from __future__ import annotations

import pytest

from campaign.contracts.resolve import EffectiveLane
from campaign.contracts.schema import ModelSpec
from campaign.errors import EngineError
from campaign.lanes.adapter import adapter_for
from campaign.lanes.prometheus import metric, parse_prometheus, spec_decode_delta
from campaign.lanes.vllm import SERVE_MODULE, VllmAdapter


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
vllm:request_success_total{engine="0",finished_reason="stop",model_name="smollm2"} 3.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="smollm2"} 5.0
vllm:request_success_total{engine="1",finished_reason="length",model_name="smollm2"} 1.0
vllm:prefix_cache_hits_total{engine="0",model_name="smollm2"} 128.0
process_resident_memory_bytes 7.72677632e+08
"""


def test_prometheus_parse_drops_identity_labels_and_sums_engines() -> None:
    parsed = parse_prometheus(METRICS)
    assert metric(parsed, "vllm:request_success_total", finished_reason="length") == 6.0
    assert metric(parsed, "vllm:spec_decode_num_accepted_tokens_per_pos_total", position="1") == 22.0
    assert metric(parsed, "vllm:prefix_cache_hits_total") == 128.0
    assert parsed["process_resident_memory_bytes"] == pytest.approx(7.72677632e8)
    assert not any("_created" in key for key in parsed)


def test_spec_decode_delta_between_scrapes() -> None:
    before = parse_prometheus(METRICS)
    after = dict(before)
    for key, add in (("vllm:spec_decode_num_drafts_total", 10), ("vllm:spec_decode_num_draft_tokens_total", 30),
                     ("vllm:spec_decode_num_accepted_tokens_total", 18),
                     ('vllm:spec_decode_num_accepted_tokens_per_pos_total{position="0"}', 9),
                     ('vllm:spec_decode_num_accepted_tokens_per_pos_total{position="1"}', 6),
                     ('vllm:spec_decode_num_accepted_tokens_per_pos_total{position="2"}', 3)):
        after[key] += add
    spec = spec_decode_delta(before, after, "vllm:")
    assert spec is not None
    assert (spec.drafts, spec.draft_tokens, spec.accepted_tokens) == (10, 30, 18)
    assert spec.accepted_per_position == [9, 6, 3]
    assert spec.per_position_rate == [0.9, 0.6, 0.3]
    assert spec.mean_acceptance_length == pytest.approx(2.8)
    assert spec.acceptance_rate == pytest.approx(0.6)


def test_spec_decode_absent_without_speculation_and_refuses_a_restarted_server() -> None:
    plain = parse_prometheus("vllm:request_success_total{finished_reason=\"stop\"} 1\n")
    assert spec_decode_delta(plain, plain, "vllm:") is None
    before = parse_prometheus(METRICS)
    restarted = {k: 0.0 for k in before}
    with pytest.raises(ValueError, match="restarted"):
        spec_decode_delta(before, restarted, "vllm:")


def _record(request: dict, choice: dict, error: str | None = None) -> dict:
    record = {"seq": 3, "lane": "v", "request": request, "status": 200, "response": {"choices": [choice]}}
    if error:
        record["error"] = error
    return record


PROMPT = [504, 3575, 282]
PROMPT_LOGPROBS = [None,
                   {"3575": {"logprob": -11.708, "rank": 3121, "decoded_token": " capital"},
                    "29": {"logprob": -0.833, "rank": 1, "decoded_token": "-"},
                    "28": {"logprob": -2.583, "rank": 2, "decoded_token": ","}},
                   {"282": {"logprob": -0.3356, "rank": 1, "decoded_token": " of"},
                    "2240": {"logprob": -2.3356, "rank": 2, "decoded_token": " city"}}]


def test_prompt_logprobs_parse_keeps_rank_beyond_top_k() -> None:
    adapter = VllmAdapter()
    record = _record(adapter.score_request(PROMPT, top_k=2), {"prompt_logprobs": PROMPT_LOGPROBS})
    scores = adapter.parse_prompt_scores(record)
    assert [s.token_id for s in scores] == PROMPT
    assert scores[0].logprob is None
    assert (scores[1].logprob, scores[1].rank, scores[1].text) == (-11.708, 3121, " capital")
    assert scores[1].top == ((29, -0.833), (28, -2.583))  # the prompt token itself is not in the top 2
    assert scores[2].rank == 1 and scores[2].top[0] == (282, -0.3356)


def test_echo_parse_matches_token_ids_and_ranks_within_top_k() -> None:
    adapter = VllmAdapter()
    request = adapter.score_request(PROMPT, top_k=2, method="echo")
    assert request["max_tokens"] == 0 and request["echo"] and request["return_tokens_as_token_ids"]
    logprobs = {"tokens": ["token_id:504", "token_id:3575", "token_id:282"],
                "token_logprobs": [None, -11.708, -0.3356],
                "top_logprobs": [None, {"token_id:3575": -11.708, "token_id:29": -0.833, "token_id:28": -2.583},
                                 {"token_id:282": -0.3356, "token_id:2240": -2.3356}]}
    scores = adapter.parse_prompt_scores(_record(request, {"logprobs": logprobs}))
    assert [s.token_id for s in scores] == PROMPT
    assert scores[1].rank is None and scores[1].top == ((29, -0.833), (28, -2.583))
    assert scores[2].rank == 1


def test_parse_refuses_what_it_cannot_trust() -> None:
    adapter = VllmAdapter()
    request = adapter.score_request(PROMPT, top_k=1)
    with pytest.raises(EngineError, match="2 prompt_logprobs for 3 prompt tokens"):
        adapter.parse_prompt_scores(_record(request, {"prompt_logprobs": PROMPT_LOGPROBS[:2]}))
    broken = [None, {"29": {"logprob": -0.8, "rank": 1}}, PROMPT_LOGPROBS[2]]
    with pytest.raises(EngineError, match="missing from its own scores"):
        adapter.parse_prompt_scores(_record(request, {"prompt_logprobs": broken}))
    text_tokens = {"tokens": [" Paris"], "token_logprobs": [-0.2], "top_logprobs": [{" Paris": -0.2}]}
    with pytest.raises(EngineError, match="return_tokens_as_token_ids"):
        adapter.parse_generation_scores(_record({"logprobs": 1}, {"logprobs": text_tokens}))
    with pytest.raises(EngineError, match="HTTP 400"):
        adapter.parse_prompt_scores(_record(request, {}, error="HTTP 400"))


@pytest.mark.parametrize("line, cause", [
    ("(VllmWorker-0 pid=27954) ERROR [multiproc_executor.py:953] ValueError: Available memory on node 0 "
     "(11.84/14.46 GiB) on startup is less than desired CPU memory utilization (0.92, 13.31 GiB).", "out_of_memory"),
    ("huggingface_hub.errors.HFValidationError: Repo id must be in the form 'repo_name' or 'namespace/repo_name': "
     "'/tmp/no-such-model'.", "model_load_failed"),
    ("api_server.py: error: unrecognized arguments: --no-such-flag", "bad_argument"),
])
def test_vllm_launch_failures_are_classified_from_their_own_words(line: str, cause: str) -> None:
    """Lines as vLLM 0.32 printed them when launched with the default memory fraction, a missing
    model directory and an unknown flag; the root cause sits far above the last traceback."""
    from campaign.lanes.bootlog import classify_failure

    log = "\n".join(["INFO starting"] * 5 + [line] + ["RuntimeError: Engine core initialization failed."] * 100)
    assert classify_failure(log, 1) == cause
