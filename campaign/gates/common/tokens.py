"""Token-level inputs shared by the scoring gates: prompts are rendered and tokenized once, on the
control, and every lane is sent those same token ids, so both servers score the same tokens.

What was prepared goes into the raw records as a ``derived`` record next to the engine's own
tokenize responses, so judging (and a later re-judge) reads exactly what was sent.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from campaign.errors import EngineError
from campaign.fsutil import JsonlAppender
from campaign.gates.common.inputs import Source, load_sources
from campaign.lanes.engines.scoring import TokenSeq
from campaign.lanes.lanerun import LaneRun

__all__ = ["Prepared", "prepare_sources", "prepared_on_control", "read_prepared", "score_texts"]


@dataclass(frozen=True)
class Prepared:
    prompt: TokenSeq | None
    text: TokenSeq | None = None
    error: str | None = None
    lane: str | None = None


async def prepare_sources(run: LaneRun, sources: list[Source], sink: JsonlAppender, *,
                          purpose: str) -> dict[str, Prepared]:
    out: dict[str, Prepared] = {}
    for source in sources:
        tags = {"purpose": purpose, "item": source.id}
        try:
            if source.messages is not None:
                rendered = await run.adapter.render_chat(run.client, source.messages, sink=sink, tags=tags)
            else:
                rendered = source.context or ""
            prompt = await run.adapter.tokenize(run.client, rendered, special=True, sink=sink, tags=tags)
            prompt = TokenSeq(prompt.ids, rendered, prompt.pieces)
            text = None
            if source.text is not None:
                text = await run.adapter.tokenize(run.client, source.text, special=False, sink=sink, tags=tags)
            prepared = Prepared(prompt=prompt, text=text, lane=run.lane.name)
        except EngineError as exc:
            prepared = Prepared(prompt=None, error=str(exc), lane=run.lane.name)
        if prepared.prompt is not None and not prepared.prompt.ids:
            prepared = Prepared(prompt=None, error="the prompt tokenized to nothing", lane=run.lane.name)
        sink.append({"derived": "prepared", "lane": run.lane.name, "tags": tags,
                     "prompt": prepared.prompt.dump() if prepared.prompt else None,
                     "text": prepared.text.dump() if prepared.text else None, "error": prepared.error})
        out[source.id] = prepared
    return out


def read_prepared(records: list[dict[str, Any]], purpose: str) -> dict[str, Prepared]:
    out = {}
    for record in records:
        if record.get("derived") != "prepared" or (record.get("tags") or {}).get("purpose") != purpose:
            continue
        prompt = TokenSeq.load(record["prompt"]) if record.get("prompt") else None
        text = TokenSeq.load(record["text"]) if record.get("text") else None
        out[str(record["tags"]["item"])] = Prepared(prompt=prompt, text=text, error=record.get("error"),
                                                    lane=record.get("lane"))
    return out


async def prepared_on_control(run: LaneRun, sink: JsonlAppender, owner_records: list[dict[str, Any]],
                              source_path: Path, *, purpose: str, need_text: bool) -> dict[str, Prepared]:
    """What the control prepared for ``purpose`` (``owner_records``: its raw records); prepared here,
    from ``source_path``, when this lane is the control's first visit."""
    prepared = read_prepared(owner_records, purpose)
    if prepared:
        return prepared
    return await prepare_sources(run, load_sources(source_path, need_text=need_text), sink, purpose=purpose)


async def score_texts(run: LaneRun, sink: JsonlAppender, prepared: dict[str, Prepared], *, purpose: str,
                      top_k: int) -> None:
    """Teacher-force each prepared text after its prompt; an engine error is a record, not an abort."""
    for item, entry in prepared.items():
        if entry.prompt is None or entry.text is None:
            continue
        tags = {"purpose": purpose, "item": item}
        try:
            await run.adapter.score(run.client, run.lane, entry.prompt, entry.text, top_k=top_k, sink=sink,
                                    tags=tags)
        except EngineError as exc:
            sink.append({"derived": "error", "tags": tags, "error": str(exc)})
