"""Input sets (prompts, tasks) read from the frozen copies in the bundle, with file:line errors."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from campaign.errors import ContractError
from campaign.fsutil import loads_strict

__all__ = ["Prompt", "load_prompts", "read_jsonl_rows"]


@dataclass(frozen=True)
class Prompt:
    id: str
    messages: list[dict[str, Any]]
    cls: str | None = None


def read_jsonl_rows(path: Path) -> list[tuple[int, dict[str, Any]]]:
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
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
