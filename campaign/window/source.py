"""The executed source version: the tool's version, git commit when known, and every module's sha256."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import campaign
from campaign import __version__
from campaign.contracts.hashing import sha256_file

__all__ = ["source_snapshot"]


def source_snapshot() -> dict[str, Any]:
    root = Path(campaign.__file__).parent
    files = {p.relative_to(root.parent).as_posix(): sha256_file(p) for p in sorted(root.rglob("*.py"))}
    commit = None
    try:
        out = subprocess.run(["git", "-C", str(root.parent), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=5)
        if out.returncode == 0:
            commit = out.stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root.parent), "status", "--porcelain", "--", "campaign"],
                               capture_output=True, text=True, timeout=5).stdout.strip() != ""
    except (OSError, subprocess.SubprocessError):
        dirty = None
    return {"tool_version": __version__, "git_commit": commit, "git_dirty": dirty, "files": files}
