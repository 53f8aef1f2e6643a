"""An engine that cuts streams short under concurrency: llama-cpp-python's real server, whose default
``interrupt_requests=true`` ends a running stream as soon as another request waits (it sends [DONE]
without a finish reason, then drops the connection mid-body). Its measured rows must hold error
records and end VOID, then INCONCLUSIVE: never throughput. At C1 nothing waits, so the same instrument
measures it normally.

The server is started here directly (tracked by PID), not through a lane, and measured through the
real llama-cpp-python adapter: it streams no usage, so a stream that ran to its limit counts max_tokens
and any other is counted by the engine's own tokenizer (checked against the engine's non-streaming
usage for the same greedy request)."""

from __future__ import annotations

from pathlib import Path

import pytest

from campaign.gates.common.streams import StreamFacts, analyze_stream
from campaign.gates.result import Verdict
from campaign.lanes.engines.client import LaneClient
from campaign.lanes.engines.llamacpp_python import LlamaCppPythonAdapter
from tests.support.contracts import MODEL, free_port
from tests.support.speed import SPEED_PROMPTS, gate_on, measure, process

pytestmark = pytest.mark.integration


def _cut(reason: str) -> bool:
    return "incomplete chunked read" in reason or "without a finish reason" in reason


@pytest.fixture(scope="module")
def lcp_server(tmp_path_factory: pytest.TempPathFactory) -> str:
    import os

    from tests.support.contracts import DEFAULT_PYTHON

    python = Path(os.environ.get("LLAMA_CPP_PYTHON", DEFAULT_PYTHON))
    if not python.exists():
        pytest.fail(f"{python} missing: run scripts/build-llama-cpp-python.sh (make test does)")
    port = free_port()
    log = tmp_path_factory.mktemp("lcp") / "server.log"
    argv = [str(python), "-m", "llama_cpp.server", "--model", str(MODEL), "--host", "127.0.0.1",
            "--port", str(port), "--n_threads", "1", "--n_threads_batch", "1", "--n_ctx", "2048", "--seed", "0"]
    with process(argv, log, f"http://127.0.0.1:{port}/v1/models"):  # no /health: /v1/models is readiness
        yield f"http://127.0.0.1:{port}"


async def test_streams_cut_under_concurrency_are_errors_and_the_row_is_void(lcp_server: str, tmp_path: Path) -> None:
    gate, contract = gate_on(tmp_path, "{kind: speed, input: p, concurrency: [1, 2], max_tokens: 12, reps: 2, "
                                       "rule: {max_reruns: 1, max_spread: 5.0, max_control_drift: null}}",
                             prompts=SPEED_PROMPTS[4:6])
    for visit in ("base", "same"):
        results = await measure(gate, lcp_server, visit, LlamaCppPythonAdapter())
        assert [r.status for r in results[(1, "code")]] == ["valid"]  # alone, its streams are whole
        c2 = results[(2, "code")]
        assert [r.status for r in c2] == ["VOID", "VOID"]
        for attempt in c2:
            assert attempt.errors, "two users in flight must have cut at least one stream"
            # the cut stream gets [DONE] and then its connection is dropped mid-body
            assert all(_cut(reason) for _, reason in attempt.errors), attempt.errors
            # a cut stream's tokens never count: aggregate throughput is whole streams only
            whole = sum(stats.tokens for _, stats in attempt.stats)
            assert sum(rep["output_tokens"] for rep in attempt.rep_rows) == whole
            assert all(stats.tokens == 12 and stats.token_source == "limit" for _, stats in attempt.stats)
    result = gate.judge(contract.lanes["same"], contract.lanes["base"])
    assert result.verdict is Verdict.INCONCLUSIVE
    # the boots' C2 rows stayed VOID: those boots do not count at C2, said in the caveats and the reason
    assert any(c.startswith("boot not counted at C2:") and "row C2/code stayed VOID" in c
               and "error records > limit 0" in c and _cut(c) for c in result.caveats), result.caveats
    assert any(r.startswith("C2: ") and "too few boots count at this level" in r for r in result.reasons)
    assert "C2.mean_change" not in result.metrics  # no speed number from cut streams
    assert result.metrics["C1.candidate.decode_tok_s"].value > 0
    table = gate.bundle_tables()["throughput.csv"]
    void = [row for row in table if row["level"] == 2]
    assert void and all(row["row_status"] == "VOID" and row["errors"] >= 1 for row in void)


async def test_the_real_adapter_counts_a_stopped_stream_with_the_engine_tokenizer(lcp_server: str) -> None:
    adapter = LlamaCppPythonAdapter()
    messages = [{"role": "user", "content": "Say hello in three words."}]
    async with LaneClient(lcp_server, lane="lcp") as client:
        plain = await client.post("/v1/chat/completions", {"messages": messages, "max_tokens": 64, "temperature": 0,
                                                           "seed": 0})
        streamed = await client.stream("/v1/chat/completions", {"messages": messages, "max_tokens": 64,
                                                                 "temperature": 0, "seed": 0, "stream": True})
        text = plain["response"]["choices"][0]["message"]["content"]
        streamed["engine_token_count"] = await adapter.count_tokens(client, text)
    assert plain["response"]["choices"][0]["finish_reason"] == "stop"
    usage = plain["response"]["usage"]["completion_tokens"]
    stats, problem = analyze_stream(streamed, 64, StreamFacts(count_by_tokenizer=True))
    assert problem is None and stats is not None
    assert stats.token_source == "tokenizer" and stats.text == text
    # the tokenizer's count of the reply agrees with the engine's own usage count (its stop token aside)
    assert usage - 1 <= stats.tokens <= usage
    # without the declared fact the same stream has no count: the gate never guesses one
    assert analyze_stream(streamed, 64)[1] == "the engine reported no token count (no usage, no per-chunk counter)"
