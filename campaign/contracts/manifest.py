"""A directory model's identity: a ``sha256sum``-format manifest of its files.

One walker serves ``campaign manifest DIR`` (writing one), freeze and run (checking a pinned directory
against its manifest) and a process lane's read-back (the same walk through ``/proc/<pid>/root``): the
directory holds regular files and folders only (a link would dangle inside a container's mount, or read
something else tomorrow), a bounded number of them, each named without a newline or a backslash (which
``sha256sum`` would escape), listed in one stable order (by path, codepoint order).
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path, PurePosixPath

from campaign.fsutil import UnreadableFile, hash_regular_file, read_text_bounded

__all__ = ["MANIFEST_BYTES", "MAX_MANIFEST_FILES", "ManifestError", "manifest_problems", "parse_manifest",
           "read_manifest", "render_manifest", "tree_digests"]

# About 100 bytes a line: 4 MiB is some 40,000 files, past any checkpoint's shard count.
MANIFEST_BYTES = 4 << 20
MAX_MANIFEST_FILES = 40_000
_MAX_DEPTH = 32
_LINE = re.compile(r"^([0-9a-fA-F]{64}) [ *](.+)$")


class ManifestError(ValueError):
    """A manifest or a directory that cannot be pinned as one, in words (the caller adds the place)."""


def _clean_name(name: str, where: str) -> str:
    path = PurePosixPath(name.removeprefix("./"))
    if (not name or path.is_absolute() or any(part in ("..", ".") for part in path.parts)
            or "\\" in name or str(path) != name.removeprefix("./")):
        raise ManifestError(f"{where}: {name[:80]!r} is not a plain relative path inside the directory")
    return str(path)


def parse_manifest(text: str, source: str = "manifest") -> dict[str, str]:
    """{relative path: sha256} of a ``sha256sum`` listing (``<digest>  <path>`` or ``<digest> *<path>``);
    a line of another shape, a path leaving the directory or a path listed twice is a ManifestError naming
    the line."""
    found: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        match = _LINE.match(line)
        where = f"{source}:{number}"
        if not match:
            raise ManifestError(f"{where}: not a `sha256sum` line (<sha256>  <path>)")
        name = _clean_name(match.group(2), where)
        if name in found:
            raise ManifestError(f"{where}: {name!r} is listed twice")
        found[name] = match.group(1).lower()
        if len(found) > MAX_MANIFEST_FILES:
            raise ManifestError(f"{source}: more than {MAX_MANIFEST_FILES:,} files")
    if not found:
        raise ManifestError(f"{source}: lists no file")
    return found


def read_manifest(path: Path) -> dict[str, str]:
    """A manifest file, read bounded (``UnreadableFile`` for what is no regular file or is too big)."""
    return parse_manifest(read_text_bounded(path, MANIFEST_BYTES, what="model manifest"), path.name)


def render_manifest(digests: dict[str, str]) -> str:
    """The ``sha256sum`` text of {path: sha256}, in the one stable order (``sha256sum -c`` reads it)."""
    return "".join(f"{digests[name]}  {name}\n" for name in sorted(digests))


def tree_digests(root: Path, *, what: str = "model directory") -> dict[str, str]:
    """{relative path: sha256} of every regular file under ``root`` (``root`` itself may be a link; nothing
    under it may). A link, a FIFO, a device, a socket, a name sha256sum would escape, more than
    ``MAX_MANIFEST_FILES`` files or folders deeper than 32 are a ManifestError naming the path."""
    if not root.is_dir():
        raise ManifestError(f"{root}: not a directory" if root.exists() else f"{root}: no such directory")
    names: list[str] = []
    _walk(root, "", 0, names)
    if not names:
        raise ManifestError(f"{root}: holds no file")
    digests = {}
    for name in sorted(names):
        try:
            digests[name] = hash_regular_file(root / name, what=f"file of the {what}")
        except UnreadableFile as exc:
            raise ManifestError(f"{root / name}: {exc.reason}") from None
    return digests


def _walk(folder: Path, prefix: str, depth: int, names: list[str]) -> None:
    if depth > _MAX_DEPTH:
        raise ManifestError(f"{folder}: folders nested deeper than {_MAX_DEPTH}")
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError as exc:
        raise ManifestError(f"{folder}: cannot list it: {exc.strerror}") from None
    for entry in entries:
        rel = f"{prefix}{entry.name}"
        if "\n" in entry.name or "\\" in entry.name:
            raise ManifestError(f"{folder}: a file name with a newline or a backslash ({entry.name[:60]!r})")
        try:
            mode = entry.stat(follow_symlinks=False).st_mode
        except OSError as exc:  # gone meanwhile, or unreadable: said as it is
            raise ManifestError(f"{folder / entry.name}: {exc.strerror}") from None
        if stat.S_ISLNK(mode):
            raise ManifestError(f"{folder / entry.name}: a link; a pinned directory holds its files itself "
                                "(a link would dangle inside a container, or read something else later): "
                                "copy the directory with `cp -rL`")
        if stat.S_ISDIR(mode):
            _walk(Path(entry.path), rel + "/", depth + 1, names)
        elif stat.S_ISREG(mode):
            names.append(rel)
            if len(names) > MAX_MANIFEST_FILES:
                raise ManifestError(f"{folder}: more than {MAX_MANIFEST_FILES:,} files")
        else:
            raise ManifestError(f"{folder / entry.name}: not a regular file or a folder")


def manifest_problems(pinned: dict[str, str], found: dict[str, str]) -> str:
    """'' when a directory's files are exactly the manifest's; else how they differ, with an example."""
    missing = sorted(set(pinned) - set(found))
    extra = sorted(set(found) - set(pinned))
    changed = sorted(name for name in set(pinned) & set(found) if pinned[name] != found[name])
    parts = []
    if changed:
        parts.append(f"{len(changed)} of {len(pinned)} files differ (e.g. {changed[0]})")
    if missing:
        parts.append(f"{len(missing)} listed files are missing (e.g. {missing[0]})")
    if extra:
        parts.append(f"{len(extra)} files are not in the manifest (e.g. {extra[0]})")
    return "; ".join(parts)
