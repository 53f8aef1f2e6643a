"""Files that survive a crash (atomic replace with fsync, append-with-fsync) and files read safely.

Reading: every file the tool reads from an input (a contract, an input set, a model, a lane file, an
envelope, a SUMMARY, a key) goes through ``open_regular``: opened once without blocking (a FIFO never
hangs the open), checked on the open descriptor to be a regular file (so ``/dev/zero``, a FIFO, a socket
or a directory is refused by what it is, after links are followed, with a loop caught), refused on a
kernel file system (proc, sys, dev: ``/proc/self/environ`` reports itself a regular file), and read with
a byte bound that does not trust ``st_size``. Errors are ``UnreadableFile`` (an ``InputError``) naming the
user's path and what is wrong with it.
"""

from __future__ import annotations

import errno
import glob
import hashlib
import json
import os
import shutil
import stat
import tempfile
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterator

import orjson

from campaign.errors import InputError

__all__ = ["MAX_JSON_BYTES", "DuplicateKeyError", "JsonlAppender", "UnreadableFile",
           "atomic_write_bytes", "atomic_write_json", "describe_mode", "fsync_dir", "hash_regular_file", "jsonl_line",
           "load_json_strict", "loads_strict", "MAX_JSONL_BYTES", "open_regular", "private_tempdir", "read_bounded",
           "read_jsonl", "read_text_bounded"]

# A bundle's JSON files (SUMMARY, gate results, specs, inspect snapshots) are kilobytes to a few MB; raw
# record files are read line by line elsewhere. The cap keeps a hostile file from costing memory.
MAX_JSON_BYTES = 64 << 20

# File systems whose files are the kernel's, never a user's input: procfs reports /proc/self/environ a
# regular file of size 0 and would copy the runner's environment into a bundle.
_KERNEL_FS = frozenset({"proc", "sysfs", "devtmpfs", "devpts", "debugfs", "tracefs", "securityfs", "cgroup",
                        "cgroup2", "configfs", "bpf", "pstore", "efivarfs", "fusectl", "binfmt_misc",
                        "mqueue", "hugetlbfs", "autofs", "rpc_pipefs", "nsfs"})


class UnreadableFile(InputError):
    """A path that cannot be read as the file it should be; ``reason`` is the words without the path."""

    def __init__(self, path: Path | str, reason: str) -> None:
        self.path, self.reason = str(path), reason
        super().__init__(f"{path}: {reason}")


@lru_cache(maxsize=1)
def _kernel_devices() -> frozenset[tuple[int, int]]:
    """(major, minor) of every mount of a kernel file system, from /proc/self/mountinfo."""
    devices = set()
    try:
        with open("/proc/self/mountinfo", "rb") as handle:
            text = handle.read(4 << 20).decode("utf-8", "replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if sep and len(fields) >= 3 and tail and tail[0] in _KERNEL_FS:
            major, _, minor = fields[2].partition(":")
            if major.isdigit() and minor.isdigit():
                devices.add((int(major), int(minor)))
    return frozenset(devices)


def describe_mode(mode: int) -> str:
    """What a file is, in words, from its ``st_mode``: "a directory", "a FIFO (named pipe)", ..."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    return "a regular file" if stat.S_ISREG(mode) else "not a regular file"


@contextmanager
def open_regular(path: Path | str, *, what: str = "file") -> Iterator[int]:
    """A descriptor of ``path``, proven a regular file on an ordinary file system; closed on exit."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except ValueError as exc:  # a NUL byte in the path
        raise UnreadableFile(repr(str(path)), f"{what} path holds a NUL byte") from exc
    except OSError as exc:
        reason = {errno.ENOENT: f"no such {what}", errno.ELOOP: f"{what} path is a symlink loop",
                  errno.EACCES: f"{what} not readable (permission denied)",
                  errno.ENOTDIR: f"{what} path goes through something that is not a directory",
                  errno.ENAMETOOLONG: f"{what} path is too long",
                  errno.ENXIO: f"{what} is a socket or a device with nothing behind it"}.get(
            exc.errno or 0, f"cannot open {what}: {exc.strerror}")
        raise UnreadableFile(path, reason) from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UnreadableFile(path, f"{what} is {describe_mode(info.st_mode)}, not a regular file")
        if (os.major(info.st_dev), os.minor(info.st_dev)) in _kernel_devices():
            raise UnreadableFile(path, f"{what} lies on a kernel file system (proc, sys or dev), "
                                       "which is never an input, whatever --allow-path says")
        os.set_blocking(fd, True)
        yield fd
    finally:
        os.close(fd)


def _read_fd(fd: int, limit: int, path: Path | str, what: str) -> bytes:
    chunks: list[bytes] = []
    total = 0
    while True:
        block = os.read(fd, min(1 << 20, limit + 1 - total))
        if not block:
            return b"".join(chunks)
        chunks.append(block)
        total += len(block)
        if total > limit:
            raise UnreadableFile(path, f"{what} is over the {limit:,}-byte cap")


def read_bounded(path: Path | str, limit: int, *, what: str = "file") -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes (``st_size`` is not trusted)."""
    with open_regular(path, what=what) as fd:
        try:
            return _read_fd(fd, limit, path, what)
        except OSError as exc:
            raise UnreadableFile(path, f"cannot read {what}: {exc.strerror}") from exc


def read_text_bounded(path: Path | str, limit: int, *, what: str = "file") -> str:
    data = read_bounded(path, limit, what=what)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UnreadableFile(path, f"{what} is not UTF-8 text (byte {exc.start})") from exc


def hash_regular_file(path: Path | str, *, what: str = "file", limit: int | None = None) -> str:
    """sha256 of a regular file, streamed (models are gigabytes); a device or FIFO is refused, not read
    forever. ``limit`` bounds the bytes read where the caller knows one: a file whose size says it is over
    is refused before a byte is read (a sparse file of terabytes costs nothing), and the bytes are counted
    whatever the size said."""
    digest, total = hashlib.sha256(), 0
    with open_regular(path, what=what) as fd:
        if limit is not None and os.fstat(fd).st_size > limit:
            raise UnreadableFile(path, f"{what} is over the {limit:,}-byte cap ({os.fstat(fd).st_size:,} bytes)")
        try:
            while block := os.read(fd, 1 << 20):
                digest.update(block)
                total += len(block)
                if limit is not None and total > limit:
                    raise UnreadableFile(path, f"{what} is over the {limit:,}-byte cap")
        except OSError as exc:
            raise UnreadableFile(path, f"cannot read {what}: {exc.strerror}") from exc
    return digest.hexdigest()


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
    """JSON with duplicate keys refused (two readers could otherwise see two different documents). The
    stdlib parser stops a deep nesting (1 MiB of ``[``) with RecursionError at the interpreter's limit,
    linear in the input: that is a bad document, not a crash."""
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates)
    except RecursionError as exc:
        raise ValueError("nested too deeply (over the parser's recursion limit)") from exc


def load_json_strict(path: Path, *, limit: int = MAX_JSON_BYTES, what: str = "file") -> Any:
    data = read_bounded(path, limit, what=what)
    try:
        return loads_strict(data)
    except ValueError as exc:
        raise UnreadableFile(path, f"not valid JSON: {exc}") from exc


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


def atomic_write_json(path: Path, value: Any, *, mode: int | None = None) -> None:
    atomic_write_bytes(path, (json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode(),
                       mode=mode)


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

    def append_line(self, line: bytes, *, sync: bool = True) -> None:
        """One line already encoded by ``jsonl_line`` (so a caller can encode on its own thread). Without
        ``sync`` the line is in the OS's hands (a killed process loses nothing) and ``sync`` makes it durable."""
        self._handle.write(line)
        self._handle.flush()
        if sync:
            os.fsync(self._handle.fileno())

    def sync(self) -> None:
        os.fsync(self._handle.fileno())

    def close(self) -> None:
        self._handle.close()

    def __enter__(self) -> "JsonlAppender":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# A journal is a few hundred lines; raw records of a long speed gate reach hundreds of MB (one line per
# streamed event). Past these a file is not one this tool wrote.
MAX_JSONL_BYTES = 2 << 30
MAX_JSONL_LINE = 256 << 20  # a vLLM teacher-forcing reply holds top-k for every prompt position


def read_jsonl(path: Path, *, limit: int = MAX_JSONL_BYTES, what: str = "record file") -> list[dict[str, Any]]:
    """Records of a JSONL file; a torn last line (a crash mid-write) is ignored, a torn middle is not. Read
    line by line from one open of a regular file, with the file and each line bounded."""
    records: list[dict[str, Any]] = []
    total = 0
    with open_regular(path, what=what) as fd, os.fdopen(os.dup(fd), "rb") as handle:
        number = 0
        while raw := handle.readline(MAX_JSONL_LINE + 1):
            number += 1
            total += len(raw)
            if total > limit:
                raise UnreadableFile(path, f"{what} is over the {limit:,}-byte cap")
            torn = not raw.endswith(b"\n")
            if torn and len(raw) > MAX_JSONL_LINE:
                raise UnreadableFile(path, f"line {number} is over the {MAX_JSONL_LINE:,}-byte cap for one record")
            if not raw.strip():
                continue
            try:
                record = loads_strict(raw)
            except ValueError as exc:
                if torn:  # no newline after it: the write was cut short
                    break
                raise InputError(f"{path}:{number}: unreadable record: {exc}") from exc
            if not isinstance(record, dict):
                raise InputError(f"{path}:{number}: a record must be a JSON object")
            records.append(record)
    return records


@contextmanager
def private_tempdir(prefix: str) -> Iterator[Path]:
    """A private temporary folder (``{tmp}/{prefix}{pid}-{random}``, mode 0700), removed when the block ends.
    A process killed inside the block (SIGKILL, the OOM killer) cannot remove its own, so each use first
    removes this user's folders of the same prefix whose process is gone: a killed promotion leaves its
    bundle copy behind until the next one, never for good."""
    root = Path(tempfile.gettempdir())
    for left in root.glob(f"{glob.escape(prefix)}*-*"):
        pid = left.name[len(prefix):].split("-", 1)[0]
        try:
            if not pid.isdigit() or int(pid) == os.getpid() or left.is_symlink() or left.stat().st_uid != os.getuid():
                continue
            os.kill(int(pid), 0)  # alive (or another user's): its folder is its own
        except ProcessLookupError:
            shutil.rmtree(left, ignore_errors=True)
        except OSError:  # gone between the glob and the stat, or a process we may not signal: not ours to remove
            continue
    with tempfile.TemporaryDirectory(prefix=f"{prefix}{os.getpid()}-") as made:
        yield Path(made)
