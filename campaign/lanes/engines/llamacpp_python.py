"""llama-cpp-python's OpenAI-compatible server (``python -m llama_cpp.server``).

Ready: no /health route; /v1/models answers 200 once the model is loaded (connection refused before).

Greedy is not greedy by default: the server applies ``repeat_penalty`` 1.1 unless a request says
otherwise, so at temperature 0 it picked a token 0.45 nats below the top one wherever the top one had
appeared before (seen as a "rank 2" greedy token when teacher-forced; its reported logprobs are before
the penalty). Every request the gates send says ``repeat_penalty: 1.0`` (GREEDY).
``--interrupt_requests`` defaults to true: a new request cuts a running stream short, so gates send
one request at a time. No chat-template endpoint.

Scoring: /v1/completions with ``echo`` and ``logprobs`` returns prompt-token logprobs (use
``max_tokens`` 1: 0 means unlimited). Prompts are text only, and top-k alternatives are keyed by
token text, not id, so every score first checks that the engine tokenizes the text back into exactly
the ids that were meant (/extras/tokenize), and that the echoed tokens line up with them; otherwise
the score is refused (``ScoreError``), never shifted into place.
"""

from __future__ import annotations

from typing import Any

from campaign.contracts.engines import EngineFacts
from campaign.contracts.resolve import EffectiveLane
from campaign.errors import EngineError, ScoreError
from campaign.lanes.engines.base import EngineAdapter, Readiness, register
from campaign.lanes.engines.client import LaneClient
from campaign.lanes.engines.llamacpp import LlamaCppAdapter
from campaign.lanes.engines.scoring import Alt, Generation, Position, TokenSeq

__all__ = ["GREEDY", "LlamaCppPythonAdapter"]

GREEDY = {"repeat_penalty": 1.0}  # the server's own default is 1.1: not greedy at temperature 0


@register
class LlamaCppPythonAdapter(EngineAdapter):
    name = "llama-cpp-python"
    # llama.cpp underneath: the same words for a failed allocation on a GPU build
    facts = EngineFacts(context_options=("--n_ctx",), model_forms=("file",), build_hint="make engine-python",
                        boot_failures=LlamaCppAdapter.facts.boot_failures)
    api_key_option = "--api_key"  # llama_cpp/server/cli.py: one option per settings field, by its own name
    capabilities = frozenset({"tokenize", "generate", "score", "json_schema", "tools"})

    def server_args(self, lane: EffectiveLane, model_path: str) -> list[str]:
        args = ["-m", "llama_cpp.server", "--model", model_path, "--host", lane.host, "--port", str(lane.port)]
        if lane.model.served_name:
            args += ["--model_alias", lane.model.served_name]
        return args + list(lane.args)

    def served_model(self, lane: EffectiveLane) -> str:
        return lane.model.served_name or lane.model.path

    async def probe(self, client: LaneClient) -> Readiness:
        status, text = await self.poll(client, "/v1/models")  # this server has no /health
        if status is None:
            return Readiness(False, text)
        if status == 200:
            return Readiness(True, "models 200")
        return Readiness(False, f"models {status}: {text[:120]}")

    async def version(self, client: LaneClient) -> dict[str, Any]:
        try:
            models = await client.get_json("/v1/models")
        except EngineError:
            return {}
        return {"models": [m.get("id") for m in models.get("data", [])]}

    def chat_body(self, lane: EffectiveLane, messages: list[dict[str, Any]], *, max_tokens: int,
                  json_schema: dict[str, Any] | None = None,
                  tools: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """Its own shapes: a schema rides on ``json_object``; tool calls are parsed only when the server was
        started with a function-calling ``--chat_format`` (e.g. chatml-function-calling)."""
        body = super().chat_body(lane, messages, max_tokens=max_tokens, tools=tools) | GREEDY
        # its request model refuses an assistant turn whose content is null (OpenAI allows it)
        body["messages"] = [m if m.get("content") is not None else {**m, "content": ""} for m in messages]
        if json_schema is not None:
            body["response_format"] = {"type": "json_object", "schema": json_schema}
        return body

    async def tokenize(self, client: LaneClient, text: str, *, special: bool, sink: Any,
                       tags: dict[str, Any]) -> TokenSeq:
        # the server always parses special-token text; ``special`` cannot be honoured per call
        record = await client.post("/extras/tokenize", {"input": text}, sink=sink, tags={**tags, "part": "tokenize"})
        return TokenSeq(tuple(_tokens(record)), text)

    # It streams no usage and no running count (0.3.x has no stream_options), and a chunk is not always
    # one token (held-back stop text and split UTF-8 join chunks): the speed gate counts a stream that ran
    # to its limit as max_tokens, and any other by this tokenizer, which the result states.
    stream_count_by_tokenizer = True

    def stream_request_fields(self) -> dict[str, Any]:
        return dict(GREEDY)  # no usage to ask for; greedy, as every other request

    async def count_tokens(self, client: LaneClient, text: str) -> int:
        # /extras/tokenize adds the model's BOS; the empty text's tokens are that overhead
        whole = await client.post("/extras/tokenize", {"input": text})
        empty = await client.post("/extras/tokenize", {"input": ""})
        try:
            return len(_tokens(whole)) - len(_tokens(empty))
        except ScoreError as exc:
            raise EngineError(f"lane {client.lane}: cannot count streamed tokens: {exc}") from exc

    async def generate(self, client: LaneClient, lane: EffectiveLane, prompt: TokenSeq, *, max_tokens: int,
                       top_k: int, sink: Any, tags: dict[str, Any]) -> Generation:
        body = {"model": self.served_model(lane), "prompt": prompt.text, "max_tokens": max_tokens,
                "temperature": 0, "logprobs": top_k, "seed": 0, **GREEDY}
        tags = {**tags, "prompt_ids": list(prompt.ids)}
        record = await client.post("/v1/completions", body, sink=sink, tags={**tags, "part": "generate"})
        if record.get("error"):
            raise ScoreError(f"lane {client.lane}: generation failed: {record['error']}")
        text = _choice(record).get("text", "")
        # the reply is text: its token ids are what the engine's tokenizer makes of prompt + reply
        ids = await client.post("/extras/tokenize", {"input": prompt.text + text}, sink=sink,
                                tags={**tags, "part": "tokenize_generation"})
        return self.parse_generation([record, ids])

    def parse_generation(self, records: list[dict[str, Any]]) -> Generation:
        record = _one(records, "generate")
        prompt_ids = list(record["tags"]["prompt_ids"])
        all_ids = _tokens(_one(records, "tokenize_generation"))
        if all_ids[:len(prompt_ids)] != prompt_ids:
            raise ScoreError("the engine tokenizes prompt + reply into a different prompt prefix")
        ids = all_ids[len(prompt_ids):]
        choice = _choice(record)
        logprobs = choice.get("logprobs") or {}
        texts = list(logprobs.get("tokens") or [])
        if len(ids) != len(texts):
            raise ScoreError(f"the reply has {len(texts)} generated tokens but re-tokenizes into {len(ids)}")
        positions = tuple(_position(ids[i], texts[i], logprobs, i) for i in range(len(ids)))
        finish = choice["finish_reason"] if choice.get("finish_reason") in ("length", "stop") else "other"
        return Generation(tokens=TokenSeq(tuple(ids), choice.get("text", ""), tuple(texts)), positions=positions,
                          finish=finish)

    async def score(self, client: LaneClient, lane: EffectiveLane, prompt: TokenSeq, continuation: TokenSeq, *,
                    top_k: int, sink: Any, tags: dict[str, Any]) -> list[Position]:
        text = prompt.text + continuation.text
        check = await client.post("/extras/tokenize", {"input": text}, sink=sink,
                                  tags={**tags, "part": "tokenize_check"})
        body = {"model": self.served_model(lane), "prompt": text, "max_tokens": 1, "temperature": 0, **GREEDY,
                "logprobs": top_k, "echo": True, "seed": 0}
        record = await client.post("/v1/completions", body, sink=sink, tags={**tags, "part": "score"})
        return self.parse_score([check, record], prompt, continuation)

    def parse_score(self, records: list[dict[str, Any]], prompt: TokenSeq,
                    continuation: TokenSeq) -> list[Position]:
        ids = _tokens(_one(records, "tokenize_check"))
        if ids != list(prompt.ids) + list(continuation.ids):
            raise ScoreError("the engine tokenizes the text into other ids than the ones to be scored; "
                             "it would score different tokens")
        record = _one(records, "score")
        choice = _choice(record)
        logprobs = choice.get("logprobs") or {}
        texts = list(logprobs.get("tokens") or [])
        n = len(continuation)
        sent = record["request"]["prompt"]
        generated = choice.get("text", "")[len(sent):] if choice.get("text", "").startswith(sent) else None
        # The engine drops a leading BOS and every later token with the BOS id, and reports the logprob of
        # the remaining tokens from the row before each: aligned only when the prompt starts with BOS.
        # The next token is absent when it is end-of-sequence (empty text, finish "stop").
        eos = generated == "" and choice.get("finish_reason") == "stop"
        aligned = len([t for t in ids[1:] if t != ids[0]]) + (0 if eos else 1) if ids else -1
        if generated is None or len(texts) != aligned or (not eos and texts[-1] != generated):
            raise ScoreError("the echoed positions do not end with the generated token: prompt-token "
                             "logprobs are not aligned with the tokens sent")
        end = len(texts) if eos else len(texts) - 1
        echoed = texts[end - n:end]
        expected = list(continuation.pieces) if continuation.pieces else None
        if (expected is not None and echoed != expected) or "".join(echoed) != continuation.text:
            raise ScoreError("the echoed tokens differ from the continuation sent")
        positions = [_position(continuation.ids[i], texts[end - n + i], logprobs, end - n + i) for i in range(n)]
        positions.append(Position(None, "", None) if eos else _position(None, texts[-1], logprobs, len(texts) - 1))
        return positions


def _tokens(record: dict[str, Any]) -> list[int]:
    tokens = (record.get("response") or {}).get("tokens") if not record.get("error") else None
    if not isinstance(tokens, list):
        raise ScoreError(f"/extras/tokenize failed: {record.get('error') or 'no tokens'}")
    return [int(t) for t in tokens]


def _one(records: list[dict[str, Any]], part: str) -> dict[str, Any]:
    found = [r for r in records if (r.get("tags") or {}).get("part") == part]
    if len(found) != 1:
        raise ScoreError(f"expected one {part} record, found {len(found)}")
    if found[0].get("error"):
        raise ScoreError(f"{part} request failed: {found[0]['error']}")
    return found[0]


def _choice(record: dict[str, Any]) -> dict[str, Any]:
    choices = (record.get("response") or {}).get("choices") or []
    if not choices:
        raise ScoreError("completion has no choices")
    return choices[0]


def _position(token: int | None, text: str, logprobs: dict[str, Any], index: int) -> Position:
    value = (logprobs.get("token_logprobs") or [None] * (index + 1))[index]
    top = (logprobs.get("top_logprobs") or [None] * (index + 1))[index] or {}
    return Position(token=token, text=text, logprob=None if value is None else float(value),
                    top=tuple(Alt(None, str(t), float(lp)) for t, lp in top.items()))
