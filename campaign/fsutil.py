"""Files that survive a crash: atomic replace with fsync, append-with-fsync, strict JSON reading."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import orjson

from campaign.errors import InputError

__all__ = ["DuplicateKeyError", "JsonlAppender", "atomic_write_bytes", "atomic_write_json", "fsync_dir",
           "jsonl_line", "load_json_strict", "loads_strict", "read_jsonl"]


class DuplicateKeyError(ValueError):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateKeyError(f"duplicate JSON key {key!r}")
        out[key] = value
    return out


def loads_strict(text: str | bytes) -> Any:
    """JSON with duplicate keys refused (two readers could otherwise see two different documents)."""
    return json.loads(text, object_pairs_hook=_no_duplicates)


def load_json_strict(path: Path) -> Any:
    try:
        return loads_strict(path.read_bytes())
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror}") from exc
    except ValueError as exc:
        raise InputError(f"{path}: not valid JSON: {exc}") from exc


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path: Path, data: bytes, *, mode: int | None = None) -> None:
    """Temp file in the same directory, fsync, replace, fsync the directory. The file is 0600 (mkstemp's)
    unless ``mode`` says otherwise (a published report is meant to be read by others)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        if mode is not None:
            os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


def atomic_write_json(path: Path, value: Any) -> None:
    atomic_write_bytes(path, (json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode())


def _set_aside_torn_tail(path: Path) -> None:
    """A crash mid-write leaves a last line without its newline. Appending after it would glue the next
    record to the fragment and make a torn middle line, which readers refuse; the fragment (never a
    whole record) moves to ``<file>.torn`` instead."""
    try:
        handle = open(path, "rb+")
    except FileNotFoundError:
        return
    with handle:
        size = handle.seek(0, os.SEEK_END)
        if size == 0:
            return
        handle.seek(size - 1)
        if handle.read(1) == b"\n":
            return
        end = size
        while end > 0:
            start = max(0, end - 65536)
            handle.seek(start)
            block = handle.read(end - start)
            cut = block.rfind(b"\n")
            if cut >= 0:
                keep = start + cut + 1
                break
            end = start
        else:
            keep = 0
        handle.seek(keep)
        fragment = handle.read()
        with open(path.with_name(path.name + ".torn"), "ab") as torn:
            torn.write(fragment + b"\n")
        handle.truncate(keep)
        handle.flush()
        os.fsync(handle.fileno())


_JSONL_OPTIONS = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS | orjson.OPT_APPEND_NEWLINE


def jsonl_line(record: dict[str, Any]) -> bytes:
    """A record as one JSONL line. orjson: a speed rep writes thousands of streamed events a second."""
    try:
        return orjson.dumps(record, option=_JSONL_OPTIONS)
    except orjson.JSONEncodeError:  # what orjson refuses (an integer past 64 bits) the stdlib writes
        return (json.dumps(record, sort_keys=True, ensure_ascii=False) + "\n").encode()


class JsonlAppender:
    """One JSON object per line, flushed and fsynced per record: a crash loses at most the line being written."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        _set_aside_torn_tail(path)
        self._handle = open(path, "ab")

    def append(self, record: dict[str, Any]) -> None:
        self.append_line(jsonl_line(record))

    def append_line(self, line: bytes) -> None:
        """One line already encoded by ``jsonl_line`` (so a caller can encode on its own thread)."""
        self._handle.write(line)
        self._handle.flush()
        os.fsync(self._handle.fileno())

    def close(self) -> None:
        self._handle.close()

    def __enter__(self) -> "JsonlAppender":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Records of a JSONL file; a torn last line (a crash mid-write) is ignored, a torn middle is not."""
    records = []
    lines = path.read_text(encoding="utf-8").split("\n")
    for index, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            records.append(loads_strict(line))
        except ValueError as exc:
            if index == len(lines) - 1:  # no newline after it: the write was cut short
                break
            raise InputError(f"{path}:{index + 1}: unreadable record: {exc}") from exc
    return records
