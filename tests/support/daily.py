"""A daily lane as the tests see it from outside: does it answer, and which process is it."""

from __future__ import annotations

from pathlib import Path

import httpx

__all__ = ["daily_pid", "serves"]


def serves(port: int) -> bool:
    try:
        response = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", timeout=20.0, json={
            "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]})
        return response.status_code == 200 and bool(response.json()["choices"])
    except httpx.HTTPError:
        return False


def daily_pid(root: Path) -> int:
    return int((root / "daily.pid").read_text())
