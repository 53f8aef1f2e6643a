"""A daily lane as the tests see it from outside: does it answer, and which process is it."""

from __future__ import annotations

from pathlib import Path

import httpx

__all__ = ["daily_pid", "first_record_of_each_kind", "serves"]


def serves(port: int) -> bool:
    try:
        response = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", timeout=20.0, json={
            "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]})
        return response.status_code == 200 and bool(response.json()["choices"])
    except httpx.HTTPError:
        return False


def daily_pid(root: Path) -> int:
    return int((root / "daily.pid").read_text())


def first_record_of_each_kind(journal: Path) -> list[tuple[int, tuple[str, str]]]:
    """(1-based position, (step, event)) of the first record of each kind a full window journaled, counting
    only the records the runner writes (restore records come from restore()): every state a killed runner
    can leave the daily in (a second lane's boot leaves it as the first one's did)."""
    from campaign.fsutil import read_jsonl

    steps = [(r["step"], r["event"]) for r in read_jsonl(journal) if r["step"] != "incumbent.restore"]
    return [(index + 1, step) for index, step in enumerate(steps) if step not in steps[:index]]
