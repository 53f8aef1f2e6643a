"""Input sets (prompts, tasks) read from the frozen copies in the bundle, with file:line errors."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from campaign.contracts.model import INPUT_FILE_BYTES  # the cap the contract's load holds input files to
from campaign.errors import ContractError
from campaign.fsutil import UnreadableFile, loads_strict, read_text_bounded

__all__ = ["Prompt", "Source", "load_prompts", "load_rows", "load_sources", "read_jsonl_rows"]


@dataclass(frozen=True)
class Prompt:
    id: str
    messages: list[dict[str, Any]]
    cls: str | None = None


def read_jsonl_rows(path: Path) -> list[tuple[int, dict[str, Any]]]:
    rows = []
    try:
        text = read_text_bounded(path, INPUT_FILE_BYTES, what="input file")
    except UnreadableFile as exc:  # a FIFO, a device, a folder, too large, not UTF-8: said of the user's file
        raise ContractError(exc.reason, file=str(path)) from exc
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = loads_strict(line)
        except ValueError as exc:
            raise ContractError(f"not a JSON object: {exc}", file=str(path), line=number) from exc
        if not isinstance(row, dict):
            raise ContractError("each line must be a JSON object", file=str(path), line=number)
        rows.append((number, row))
    return rows


def load_prompts(path: Path) -> list[Prompt]:
    """Rows ``{"id": ..., "prompt": "..."}`` or ``{"id": ..., "messages": [...]}``, optional ``"class"``."""
    prompts, seen = [], set()
    for number, row in read_jsonl_rows(path):
        pid = row.get("id")
        if not isinstance(pid, (str, int)) or str(pid) in seen:
            raise ContractError("needs a unique `id`", file=str(path), line=number, field="id")
        seen.add(str(pid))
        if isinstance(row.get("prompt"), str):
            messages = [{"role": "user", "content": row["prompt"]}]
        elif isinstance(row.get("messages"), list) and row["messages"]:
            messages = row["messages"]
        else:
            raise ContractError("needs `prompt` (text) or `messages` (a list)", file=str(path), line=number,
                                field="prompt")
        prompts.append(Prompt(id=str(pid), messages=messages, cls=row.get("class")))
    if not prompts:
        raise ContractError("no prompts", file=str(path))
    return prompts


@dataclass(frozen=True)
class Source:
    """A prompt for token-level gates: chat ``messages`` (rendered by the engine's template) or raw
    ``context`` text, and for reference sets the ``text`` to teacher-force after it."""

    id: str
    messages: list[dict[str, Any]] | None
    context: str | None
    text: str | None = None


def load_sources(path: Path, *, need_text: bool) -> list[Source]:
    """Rows ``{"id", "prompt"|"messages"|"context", "text"?}``; ``text`` is required when ``need_text``."""
    sources, seen = [], set()
    for number, row in read_jsonl_rows(path):
        pid = row.get("id")
        if not isinstance(pid, (str, int)) or str(pid) in seen:
            raise ContractError("needs a unique `id`", file=str(path), line=number, field="id")
        seen.add(str(pid))
        messages, context = None, None
        if isinstance(row.get("prompt"), str):
            messages = [{"role": "user", "content": row["prompt"]}]
        elif isinstance(row.get("messages"), list) and row["messages"]:
            messages = row["messages"]
        elif isinstance(row.get("context"), str):
            context = row["context"]
        else:
            raise ContractError("needs `prompt` (text), `messages` (a list) or `context` (raw text)",
                                file=str(path), line=number, field="prompt")
        text = row.get("text")
        if need_text and (not isinstance(text, str) or not text):
            raise ContractError("needs `text`: the reference continuation to teacher-force", file=str(path),
                                line=number, field="text")
        sources.append(Source(id=str(pid), messages=messages, context=context, text=text))
    if not sources:
        raise ContractError("no rows", file=str(path))
    return sources


def load_rows(path: Path, *, required: tuple[str, ...]) -> list[tuple[int, dict[str, Any]]]:
    """Rows with a unique ``id`` and the ``required`` fields, for gates with their own row shapes."""
    rows, seen = [], set()
    for number, row in read_jsonl_rows(path):
        pid = row.get("id")
        if not isinstance(pid, (str, int)) or str(pid) in seen:
            raise ContractError("needs a unique `id`", file=str(path), line=number, field="id")
        seen.add(str(pid))
        for name in required:
            if name not in row:
                raise ContractError(f"needs `{name}`", file=str(path), line=number, field=name)
        rows.append((number, row))
    if not rows:
        raise ContractError("no rows", file=str(path))
    return rows
