"""Canonical JSON and sha256, the one way anything in campaign is hashed."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from campaign.fsutil import hash_regular_file

__all__ = ["canonical_json", "canonical_sha256", "sha256_bytes", "sha256_file"]


def canonical_json(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode("utf-8")


def canonical_sha256(value: Any) -> str:
    return hashlib.sha256(canonical_json(value)).hexdigest()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path, *, what: str = "file", limit: int | None = None) -> str:
    """sha256 of a regular file, streamed; a FIFO, a device, a directory or a symlink loop is an
    ``UnreadableFile`` naming the path and what it is (never a hang, never a traceback), and so is a file
    over ``limit`` bytes."""
    return hash_regular_file(path, what=what, limit=limit)
