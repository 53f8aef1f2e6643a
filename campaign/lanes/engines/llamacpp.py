"""llama.cpp's llama-server.

Ready: /health answers 503 {"error": {"message": "Loading model"}} while loading, then 200.
Greedy at temperature <= 0. No prompt-token logprobs (echo is rejected); top-k logprobs of
generated tokens only. Metrics need --metrics. Speculative decoding without a draft model:
--spec-type ngram-simple, its depth K set by --spec-ngram-simple-size-m K (not --spec-draft-n-max, which
bounds a draft model only: llamacpp_declared says where). Token counting: POST /apply-template renders the chat
template, POST /tokenize counts it (with special tokens parsed, as a chat request does); the count
equals the chat response's usage.prompt_tokens. ``cache_prompt: false`` keeps the slot's prompt cache
out of a request; responses (and the last stream event) carry ``timings`` with prompt_n/prompt_ms.

Scoring: the native /completion takes prompts as token-id arrays (several in one request), and
``n_probs`` returns the top-k raw (pre-sampling) logprobs of each generated token. A prefix is scored
by asking for one token after it; a continuation of n tokens is n+1 such prefixes, each in a request of its
own (one request of several prompts is prefilled in one batch by a server of several slots: other kernels)
and each prefilled from scratch (``cache_prompt: false``) so a score never reuses the KV the generation left.
A token outside the returned top-k has no logprob (censored).
Streams (measured on this build): with ``timings_per_token`` every content chunk carries
``timings.predicted_n``, the running count of generated tokens, one per chunk even when speculative
decoding accepts several at once; ``stream_options.include_usage`` adds a final chunk with ``usage``
(a stop's EOS token is counted there but never streamed). /metrics has no request counter: generated
and prompt token counters are what tell another client's traffic apart.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, cast

from campaign.contracts.engines import EngineFacts
from campaign.contracts.resolve import EffectiveLane
from campaign.errors import EngineError, ScoreError
from campaign.lanes.engines.base import EngineAdapter, Readiness, register
from campaign.lanes.engines.client import LaneClient
from campaign.lanes.engines.declared import Observable
from campaign.lanes.engines.llamacpp_declared import OBSERVABLES
from campaign.lanes.engines.prometheus import Samples
from campaign.lanes.engines.scoring import Alt, Generation, Position, TokenSeq, one_record

__all__ = ["LlamaCppAdapter"]


@register
class LlamaCppAdapter(EngineAdapter):
    name = "llamacpp"
    # its context is split between the --parallel slots unless the KV cache is unified; its dtype is the GGUF's
    # and its kernels' (no flag). Draft flags from llama-server 0.5.0-dev's `--help` (build 0c1e570).
    facts = EngineFacts(context_options=("--ctx-size", "-c"), model_forms=("file",), context_split_by_slots=True,
                        build_hint="make engine",
                        # a cudaMalloc that failed while loading weights or the KV cache
                        boot_failures=(("gpu_out_of_memory", re.compile(
                            r"cudaMalloc failed: out of memory|unable to allocate CUDA\d* buffer", re.I)),),
                        draft_options=("--spec-draft-model", "--model-draft", "-md"),
                        draft_env=("LLAMA_ARG_SPEC_DRAFT_MODEL",),
                        hub_draft_options=("--spec-draft-hf", "--hf-repo-draft", "-hfd", "-hfrd"),
                        hub_draft_env=("LLAMA_ARG_SPEC_DRAFT_HF_REPO",))
    # typed as the base types them, so an adapter built on this one may set None or another table
    api_key_env: str | None = "LLAMA_API_KEY"  # common/arg.cpp: --api-key ... set_env("LLAMA_API_KEY"), comma-separated
    declared_observables: Mapping[str, Observable] = OBSERVABLES  # what bounds each flag's value, and where the server shows it

    def server_args(self, lane: EffectiveLane, model_path: str) -> list[str]:
        args = ["-m", model_path, "--host", lane.host, "--port", str(lane.port)]
        if lane.model.served_name:
            args += ["--alias", lane.model.served_name]
        return args + list(lane.args)

    async def probe(self, client: LaneClient) -> Readiness:
        status, text = await self.poll(client, "/health")
        if status is None:
            return Readiness(False, text)
        if status == 200:
            return Readiness(True, "health 200")
        return Readiness(False, f"health {status}: {text[:120]}")

    async def version(self, client: LaneClient) -> dict[str, Any]:
        try:
            props = await client.get_json("/props")
        except EngineError:
            return {}
        return {"build_info": props.get("build_info"), "model_path": props.get("model_path"),
                "n_ctx": (props.get("default_generation_settings") or {}).get("n_ctx"),
                "total_slots": props.get("total_slots")}

    async def count_chat_tokens(self, client: LaneClient, lane: EffectiveLane,
                                messages: list[dict[str, Any]]) -> int:
        rendered = await client.post("/apply-template", {"messages": messages})
        prompt = (rendered.get("response") or {}).get("prompt")
        if rendered.get("error") or not isinstance(prompt, str):
            raise EngineError(f"lane {lane.name}: /apply-template failed: {rendered.get('error', 'no prompt')}")
        counted = await client.post("/tokenize", {"content": prompt, "add_special": True, "parse_special": True})
        tokens = (counted.get("response") or {}).get("tokens")
        if counted.get("error") or not isinstance(tokens, list):
            raise EngineError(f"lane {lane.name}: /tokenize failed: {counted.get('error', 'no tokens')}")
        return len(tokens)

    def uncached_fields(self) -> dict[str, Any]:
        return {"cache_prompt": False}

    def engine_timings(self, response: dict[str, Any]) -> dict[str, float]:
        timings = response.get("timings") or {}
        out: dict[str, float] = {}
        for key, name in (("prompt_n", "prompt_tokens_processed"), ("prompt_ms", "prefill_ms"),
                          ("prompt_per_second", "prefill_tok_s"), ("cache_n", "cached_tokens")):
            if isinstance(timings.get(key), (int, float)):
                out[name] = float(timings[key])
        return out
    capabilities = frozenset({"render_chat", "tokenize", "generate", "score", "json_schema", "tools", "metrics"})

    async def render_chat(self, client: LaneClient, messages: list[dict[str, Any]], *, sink: Any,
                          tags: dict[str, Any]) -> str:
        record = await client.post("/apply-template", {"messages": messages}, sink=sink,
                                   tags={**tags, "part": "render_chat"})
        prompt = (record.get("response") or {}).get("prompt") if not record.get("error") else None
        if not isinstance(prompt, str):
            raise ScoreError(f"lane {client.lane}: /apply-template failed: {record.get('error') or 'no prompt'}")
        return prompt

    async def tokenize(self, client: LaneClient, text: str, *, special: bool, sink: Any,
                       tags: dict[str, Any]) -> TokenSeq:
        record = await client.post("/tokenize", {"content": text, "add_special": special, "parse_special": special,
                                                 "with_pieces": True}, sink=sink, tags={**tags, "part": "tokenize"})
        tokens = (record.get("response") or {}).get("tokens") if not record.get("error") else None
        if not isinstance(tokens, list):
            raise ScoreError(f"lane {client.lane}: /tokenize failed: {record.get('error') or 'no tokens'}")
        ids, raw = [], []
        for entry in tokens:
            ids.append(int(entry["id"]))
            piece = entry.get("piece", "")
            raw.append(bytes(piece) if isinstance(piece, list) else piece.encode("utf-8"))
        return _seq(ids, raw)

    async def generate(self, client: LaneClient, lane: EffectiveLane, prompt: TokenSeq, *, max_tokens: int,
                       top_k: int, sink: Any, tags: dict[str, Any]) -> Generation:
        body = {"prompt": list(prompt.ids), "n_predict": max_tokens, "temperature": 0, "n_probs": top_k,
                "cache_prompt": False, "return_tokens": True, "seed": 0}
        record = await client.post("/completion", body, sink=sink, tags={**tags, "part": "generate"})
        return self.parse_generation([record])

    def parse_generation(self, records: list[dict[str, Any]]) -> Generation:
        record = one_record(records, "generate")
        response = record["response"]
        probs = response.get("completion_probabilities")
        if not isinstance(probs, list):
            raise ScoreError("generation has no completion_probabilities (was n_probs sent?)")
        positions = [_position(entry) for entry in probs]
        ids = cast("list[int]", [p.token for p in positions])  # _position names every token
        if list(response.get("tokens") or ids) != ids:
            raise ScoreError("generated token ids differ from the ids their logprobs are reported for")
        raw = [bytes(entry.get("bytes") or entry.get("token", "").encode("utf-8")) for entry in probs]
        finish = {"limit": "length", "eos": "stop", "word": "stop"}.get(response.get("stop_type"), "other")
        return Generation(tokens=_seq([int(i) for i in ids], raw), positions=tuple(positions), finish=finish,
                          extra={"timings": response.get("timings")})

    async def score(self, client: LaneClient, lane: EffectiveLane, prompt: TokenSeq, continuation: TokenSeq, *,
                    top_k: int, sink: Any, tags: dict[str, Any]) -> list[Position]:
        """Each prefix in a request of its own, one after another: a server of several slots prefills the prompts
        of one request in parallel, in one batch, and one of one slot in turn, so the same prefix went through
        other kernels on two lanes that differ only in --parallel (an H200 scored a reference 1.7 nats apart at
        --parallel 4 and 1, whose greedy tokens were identical). Alone, a prefix is prefilled the same way on
        any lane."""
        records = []
        for t in range(len(continuation) + 1):
            body = {"prompt": list(prompt.ids) + list(continuation.ids[:t]), "n_predict": 1, "temperature": 0,
                    "n_probs": top_k, "seed": 0, **self.uncached_fields()}
            records.append(await client.post("/completion", body, sink=sink,
                                             tags={**tags, "part": "score", "prefix": t}))
            if records[-1].get("error"):
                break  # a score with a prefix missing is no score: the rest would only wait on a failing server
        return self.parse_score(records, prompt, continuation)

    def parse_score(self, records: list[dict[str, Any]], prompt: TokenSeq,
                    continuation: TokenSeq) -> list[Position]:
        expected = [list(prompt.ids) + list(continuation.ids[:t]) for t in range(len(continuation) + 1)]
        results = _prefix_results(records, expected)
        positions = []
        for t, result in enumerate(results):
            probs = result.get("completion_probabilities") or []
            if len(probs) != 1:
                raise ScoreError(f"prefix {t}: expected one next-token distribution, got {len(probs)}")
            nxt = _position(probs[0])
            if t == len(continuation):
                positions.append(nxt)  # the next token after the whole continuation: the engine's pick
                continue
            token, text = continuation.ids[t], _piece(continuation, t)
            positions.append(Position(token=token, text=text, logprob=nxt.lookup(token, text), top=nxt.top))
        return positions

    stream_token_counter = "timings.predicted_n"

    def stream_request_fields(self) -> dict[str, Any]:
        return {"stream_options": {"include_usage": True}, "timings_per_token": True}

    async def scrape_metrics(self, client: LaneClient) -> str | None:
        status, text = await client.get_text("/metrics", timeout=10.0)
        if status == 501:  # started without --metrics
            return None
        if status != 200:
            raise EngineError(f"lane {client.lane}: GET /metrics answered {status}: {text[:120]}")
        return text

    def metrics_busy(self, samples: Samples) -> bool:
        return samples.get("llamacpp:requests_processing", 0.0) > 0

    def metric_summary(self, deltas: Samples) -> dict[str, Any]:
        def get(name: str) -> float | None:
            return deltas.get(f"llamacpp:{name}")

        summary: dict[str, Any] = {}
        processed, cached = get("prompt_tokens_total"), get("prompt_tokens_cached_total")
        if processed is not None and cached is not None:
            summary["prompt_tokens"] = processed + cached  # the counter excludes cached tokens
            summary["cached_prompt_tokens"] = cached
        for ours, theirs in (("generated_tokens", "tokens_predicted_total"),
                             ("spec_drafts", "spec_decode_num_drafts_total"),
                             ("spec_draft_tokens", "spec_decode_num_draft_tokens_total"),
                             ("spec_accepted_tokens", "spec_decode_num_accepted_tokens_total")):
            if get(theirs) is not None:
                summary[ours] = get(theirs)
        prefix = 'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="'
        per_position = {key[len(prefix):-2]: value for key, value in deltas.items() if key.startswith(prefix)}
        if per_position:
            summary["spec_accepted_per_position"] = dict(sorted(per_position.items(), key=lambda kv: int(kv[0])))
        return summary


def _alt(entry: dict[str, Any]) -> Alt:
    return Alt(token=int(entry["id"]), text=str(entry.get("token", "")), logprob=float(entry["logprob"]))


def _position(entry: dict[str, Any]) -> Position:
    top = tuple(_alt(e) for e in entry.get("top_logprobs") or [])
    return Position(token=int(entry["id"]), text=str(entry.get("token", "")), logprob=float(entry["logprob"]),
                    top=top)


def _piece(seq: TokenSeq, index: int) -> str:
    return seq.pieces[index] if index < len(seq.pieces) else ""


def _prefix_results(records: list[dict[str, Any]], expected: list[list[int]]) -> list[dict[str, Any]]:
    """One result per expected prefix, in order: a request per prefix (tagged ``prefix``), or, in an older bundle,
    every prefix in one request (a list of prompts, its results listed by ``index``)."""
    found = [r for r in records if (r.get("tags") or {}).get("part") == "score"]
    if len(found) == 1 and "prefix" not in (found[0].get("tags") or {}):
        record = one_record(found, "score")
        if record["request"].get("prompt") != expected:
            raise ScoreError("the scoring request does not hold the prefixes of this continuation")
        results = record["response"] if isinstance(record["response"], list) else [record["response"]]
        if len(results) != len(expected):
            raise ScoreError(f"asked to score {len(expected)} prefixes, got {len(results)} results")
        return sorted(results, key=lambda r: r.get("index", 0))
    by_prefix = {(r.get("tags") or {}).get("prefix"): r for r in found}
    if len(found) != len(expected) or set(by_prefix) != set(range(len(expected))):
        raise ScoreError(f"expected a score record for each of {len(expected)} prefixes, found {len(found)}")
    results = []
    for t, ids in enumerate(expected):
        record = one_record([by_prefix[t]], "score")
        if record["request"].get("prompt") != ids or not isinstance(record["response"], dict):
            raise ScoreError(f"prefix {t}: the scoring request does not hold this prefix")
        results.append(record["response"])
    return results


def _seq(ids: list[int], raw: list[bytes]) -> TokenSeq:
    # joined as bytes: a multi-byte character split across two tokens must survive the join
    return TokenSeq(tuple(ids), b"".join(raw).decode("utf-8", "replace"),
                    tuple(r.decode("utf-8", "replace") for r in raw))
