"""The text of a chat completion's first choice, or why there is none, read from a raw record.

One reading for every gate that scores replies, so "what counts as a reply" cannot drift between them:
a transport error, no choices, or a finish reason other than stop/length (a cut or filtered reply)
is a problem, never a short answer.
"""

from __future__ import annotations

from typing import Any

__all__ = ["chat_reply"]


def chat_reply(record: dict[str, Any], *, allow_empty: bool = False) -> tuple[str, str | None]:
    """(text, None) for a whole reply, or ("", problem). ``allow_empty``: an empty reply is an answer
    (a task scores it incorrect) rather than a failed request (greedy identity cannot use it)."""
    if record.get("error"):
        return "", str(record["error"])
    response = record.get("response") or {}
    choices = response.get("choices") or []
    if not choices:
        return "", "no choices in response"
    choice = choices[0]
    text = (choice.get("message") or {}).get("content")
    if not isinstance(text, str):
        return "", "no text content in reply"
    if not text and not allow_empty:
        return "", "empty reply"
    if choice.get("finish_reason") not in ("stop", "length"):
        return "", f"finish_reason {choice.get('finish_reason')!r}"
    if not allow_empty and (response.get("usage") or {}).get("completion_tokens", 1) <= 0:
        return "", "engine reports 0 completion tokens"
    return text, None
