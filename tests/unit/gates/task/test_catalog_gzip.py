"""The task catalog's gzip file is read once, hashed from those bytes, and unpacked with a bound."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from campaign.errors import PreflightError
from campaign.gates.task.catalog import _gunzip


def test_every_member_is_unpacked() -> None:
    rows = b'{"task_id": "t/0"}\n' * 100
    assert _gunzip(gzip.compress(rows) + gzip.compress(rows), 1 << 20, Path("h.gz")) == rows + rows


def test_a_gzip_bomb_stops_at_the_cap() -> None:
    bomb = gzip.compress(b"\0" * (64 << 20))  # 64 KB that unpack to 64 MiB
    with pytest.raises(PreflightError, match=r"h\.gz: unpacks to over the 1,048,576-byte cap"):
        _gunzip(bomb, 1 << 20, Path("h.gz"))


def test_a_cut_short_or_foreign_file_is_refused() -> None:
    with pytest.raises(PreflightError, match="ends before its end"):
        _gunzip(gzip.compress(b"x" * 1000)[:-12], 1 << 20, Path("h.gz"))
    with pytest.raises(PreflightError, match="not a gzip file"):
        _gunzip(b"plain text", 1 << 20, Path("h.gz"))
