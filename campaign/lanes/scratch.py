"""Where a lane's scratch folder is: the one place the engine writes during a boot (temp files, caches).

Its name is known before the lane starts, so the redactor (which names it in the engine's env) and the boot
(which makes and empties it) agree without either importing the other's folder."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from campaign.contracts.resolve import EffectiveLane

__all__ = ["engine_facts_dir", "remove_scratch", "scratch_path"]


def _scratch_root() -> Path:
    return Path(tempfile.gettempdir()) / f"campaign-{os.getuid()}"


def scratch_path(lane: EffectiveLane) -> Path:
    """Where a lane's scratch folder is, without touching it (the redactor needs the name, not the folder)."""
    return _scratch_root() / f"lane-{lane.host}-{lane.port}"


def remove_scratch(recorded: str, *, stopped_here: bool) -> None:
    """A recorded lane's scratch folder removed after its runner died: whole when the caller has just stopped the
    lane (it held the address until now, so no other lane can be using the folder), else only when empty (the
    lane was already gone, and another lane may hold its address by now). Only a real folder of this user's
    scratch root, never a link or a path a state file names elsewhere."""
    path = Path(recorded)
    if path.parent != _scratch_root() or not path.name.startswith("lane-") or path.is_symlink() or not path.is_dir():
        return
    if stopped_here:
        shutil.rmtree(path, ignore_errors=True)
        return
    try:
        path.rmdir()
    except OSError:  # not empty, or gone already: it may be another lane's now
        pass


def engine_facts_dir(name: str) -> Path:
    """A folder of facts an engine caches about its own code, kept between boots (``$XDG_CACHE_HOME/campaign/
    engine-facts/NAME``, made 0700): never a compile cache or anything a lane's numbers could depend on."""
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "campaign" / "engine-facts"
    folder = root / name
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    return folder
