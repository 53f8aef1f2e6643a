"""The SGLang adapter's scoring API (render_chat, tokenize, generate, score) replayed on SGLang 0.5.23's own
replies: tests/data/sglang/teacher_forcing.jsonl holds the raw records one lane of the real window in
tests/integration/engines/test_sglang_window.py wrote (float32, SmolLM2 HF; README.md there), so the adapter's
requests are checked against the ones that server answered, and its parsers against what it answered.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from campaign.errors import ScoreError
from campaign.gates.teacher_forced import InstrumentCheck, check_instrument
from campaign.lanes.engines.client import LaneClient
from campaign.lanes.engines.scoring import TokenSeq
from campaign.lanes.engines.sglang import SGLangAdapter
from tests.support.sglang import sglang_lane

RECORDS = [json.loads(line) for line in
           (Path(__file__).parents[3] / "data" / "sglang" / "teacher_forcing.jsonl").read_text().splitlines()]


def records(purpose: str, item: str = "recipe", part: str | None = None) -> list[dict[str, Any]]:
    return [r for r in RECORDS if r["tags"].get("purpose") == purpose and r["tags"].get("item") == item
            and (part is None or r["tags"].get("part") == part)]


def prepared(purpose: str, item: str) -> dict[str, Any]:
    return next(r for r in records(purpose, item) if r.get("derived") == "prepared")


def answering() -> LaneClient:
    """A client whose transport answers each request with the recorded reply to that exact request."""

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        # each scoring request carries a salt of its own (no cached prefix reused): the recordings predate it
        salt = body.pop("cache_salt", None)
        if request.url.path == "/generate":  # every generation and score carries a salt of its own
            assert isinstance(salt, str) and salt.startswith("uncached-"), body
        for record in RECORDS:
            if record.get("path") == request.url.path and record.get("request") == body:
                return httpx.Response(record["status"], json=record["response"])
        return httpx.Response(599, json={"unrecorded": body})

    client = LaneClient("http://127.0.0.1:30000", lane="base")
    client._http = httpx.AsyncClient(base_url="http://127.0.0.1:30000", transport=httpx.MockTransport(handler))
    return client


async def test_a_chat_prompt_is_rendered_and_tokenized_as_the_server_did() -> None:
    adapter, sink = SGLangAdapter(), []
    async with answering() as client:
        messages = [{"role": "user", "content": "Give a simple recipe for pancakes."}]
        text = await adapter.render_chat(client, messages, sink=sink, tags={})
        prompt = await adapter.tokenize(client, text, special=True, sink=sink, tags={})
    want = prepared("prompt", "recipe")["prompt"]
    assert text == want["text"] and text.endswith("<|im_start|>assistant\n")
    assert list(prompt.ids) == want["ids"] == sink[0]["response"]["tokens"]  # the chat's own ids, tokenized again
    assert "".join(prompt.pieces) == text and prompt.pieces[0] == "<|im_start|>"  # special tokens kept
    assert [r["path"] for r in sink] == ["/tokenize", "/detokenize", "/tokenize", "/detokenize"]


async def test_generation_and_its_teacher_forcing_agree_within_float_rounding() -> None:
    adapter = SGLangAdapter()
    prompt = TokenSeq.load(prepared("prompt", "recipe")["prompt"])
    async with answering() as client:
        gen = await adapter.generate(client, sglang_lane(), prompt, max_tokens=24, top_k=10, sink=[], tags={})
        scored = await adapter.score(client, sglang_lane(), prompt, gen.tokens, top_k=10, sink=[], tags={})
    generated = records("generate", part="generate")[0]["response"]
    assert list(gen.tokens.ids) == generated["output_ids"] and gen.finish == "length" and len(gen.tokens) == 24
    assert "".join(gen.tokens.pieces) == gen.tokens.text == generated["text"]
    assert all(len(p.top) == 10 and p.rank() == 1 for p in gen.positions)  # greedy: each token its own top-1
    assert len(scored) == len(gen.positions) + 1  # every token, then the next-token pick after them all
    check = InstrumentCheck()
    check_instrument(gen, scored, 0.001, "base", check)
    assert check.within == check.tokens == 24 and check.failures == []
    assert 0 < check.max_drift < 1e-4  # decode against prefill in float32: 1.8e-5 nats at most here
    assert gen.extra["usage"]["prompt_tokens"] == len(prompt)


async def test_a_reference_is_scored_from_its_first_token_and_a_site_is_one_position() -> None:
    adapter = SGLangAdapter()
    ref = prepared("reference", "capital")
    prompt, text = TokenSeq.load(ref["prompt"]), TokenSeq.load(ref["text"])
    site = records("site")[0]
    async with answering() as client:
        scored = await adapter.score(client, sglang_lane(), prompt, text, top_k=10, sink=[], tags={})
    assert [p.token for p in scored[:-1]] == list(text.ids) and all(p.logprob is not None for p in scored[:-1])
    assert [p.text for p in scored[:-1]] == list(text.pieces)
    assert scored[-1].token == 2  # <|im_end|>: the model ends the reference there
    # a divergence site: the shared prefix scored with nothing after it gives the next-token distribution
    (generate,) = records("generate", part="generate")
    generated = generate["response"]
    prefix = TokenSeq(tuple(site["request"]["input_ids"]), "")
    assert list(prefix.ids) == generate["request"]["input_ids"] + generated["output_ids"][:3]
    (nxt,) = adapter.parse_score([site], prefix, TokenSeq((), ""))
    assert nxt.token == generated["output_ids"][3] and nxt.rank() == 1 and len(nxt.top) == 10


def test_replies_that_do_not_hold_what_was_asked_are_refused() -> None:
    adapter = SGLangAdapter()
    ref = prepared("reference", "capital")
    prompt, text = TokenSeq.load(ref["prompt"]), TokenSeq.load(ref["text"])
    (score,) = records("reference", "capital", "score")
    with pytest.raises(ScoreError, match="does not hold this prompt"):
        adapter.parse_score([score], prompt, text.head(len(text) - 1))
    shifted = json.loads(json.dumps(score))
    shifted["response"]["meta_info"]["input_token_logprobs"].pop(1)
    with pytest.raises(ScoreError, match="scored .* prompt positions"):
        adapter.parse_score([shifted], prompt, text)
    (gen,) = records("generate", part="generate")
    other = json.loads(json.dumps(gen))
    other["response"]["output_ids"][0] += 1
    with pytest.raises(ScoreError, match="generated token ids differ"):
        adapter.parse_generation([other])
