"""Paths made into what a regular file must not be (a device, a FIFO, a socket, a folder, a loop, a dangling
link), with the words a refusal of each must hold."""

from __future__ import annotations

import os
import socket
from pathlib import Path

__all__ = ["SPECIAL_KINDS", "make_special"]


def make_special(kind: str, path: Path) -> str:
    """``path`` made into ``kind``; the words the refusal must hold."""
    if kind == "device":
        path.symlink_to("/dev/zero")
        return "is a device, not a regular file"
    if kind == "fifo":
        os.mkfifo(path)
        return "is a FIFO (named pipe), not a regular file"
    if kind == "socket":
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind(str(path))
        return "is a socket"
    if kind == "folder":
        path.mkdir()
        return "is a directory, not a regular file (a directory is pinned by sha256_manifest)"
    if kind == "loop":
        path.symlink_to(path.name)
        return "symlink loop"
    if kind == "dangling":
        path.symlink_to("gone.gguf")
        return "a symlink to nothing"
    raise AssertionError(kind)


SPECIAL_KINDS = ["device", "fifo", "socket", "folder", "loop", "dangling"]
