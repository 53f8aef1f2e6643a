"""Paths made into what a regular file must not be (a device, a FIFO, a socket, a folder, a loop, a dangling
link, nothing at all), with the words a refusal of each must hold: the contract's by default, or the table a
caller passes (the doctor's and the run's preflight say it in their own words)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

__all__ = ["REFUSAL", "SPECIAL_KINDS", "make_special"]

# what the contract's loader and validate say of each
REFUSAL = {
    "device": "is a device, not a regular file",
    "fifo": "is a FIFO (named pipe), not a regular file",
    "socket": "is a socket",
    "folder": "is a directory, not a regular file (a directory is pinned by sha256_manifest)",
    "loop": "symlink loop",
    "dangling": "a symlink to nothing",
}
SPECIAL_KINDS = list(REFUSAL)


def make_special(kind: str, path: Path, words: dict[str, str] = REFUSAL) -> str:
    """``path`` made into ``kind``; ``words[kind]``, what the refusal must hold."""
    if kind == "device":
        path.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind(str(path))
    elif kind == "folder":
        path.mkdir()
    elif kind == "loop":
        path.symlink_to(path.name)
    elif kind == "dangling":
        path.symlink_to("gone.gguf")
    elif kind != "missing":
        raise AssertionError(kind)
    return words[kind]
