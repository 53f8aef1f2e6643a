"""The executed source version: the tool's version, git commit when known, and every module's sha256."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import campaign
from campaign import __version__
from campaign.contracts.hashing import sha256_file

__all__ = ["source_changes", "source_snapshot"]


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


def source_changes(recorded: dict[str, Any], current: dict[str, Any] | None = None) -> list[str]:
    """How the tool now differs from a recorded snapshot, one phrase per module (changed, added, gone) and
    for the version; [] when the same code would run. The git commit is left out: the digests decide."""
    now = current if current is not None else source_snapshot()
    before_files, now_files = recorded.get("files") or {}, now.get("files") or {}
    changes = [f"{name} differs" for name in sorted(set(before_files) & set(now_files))
               if before_files[name] != now_files[name]]
    changes += [f"{name} is new" for name in sorted(set(now_files) - set(before_files))]
    changes += [f"{name} is gone" for name in sorted(set(before_files) - set(now_files))]
    if recorded.get("tool_version") != now.get("tool_version"):
        changes.append(f"tool version {recorded.get('tool_version')} -> {now.get('tool_version')}")
    return changes
