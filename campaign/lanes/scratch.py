"""Where a lane's scratch folder is: the one place the engine writes during a boot (temp files, caches).

Its name is known before the lane starts, so the redactor (which names it in the engine's env) and the boot
(which makes and empties it) agree without either importing the other's folder."""

from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
from pathlib import Path

from campaign.contracts.resolve import EffectiveLane

__all__ = ["engine_facts_dir", "remove_scratch", "scratch_path"]


_ROOT_NAME = re.compile(r"campaign-(\d{1,10})")


def scratch_path(lane: EffectiveLane) -> Path:
    """Where a lane's scratch folder is, without touching it (the redactor needs the name, not the folder)."""
    return Path(tempfile.gettempdir()) / f"campaign-{os.getuid()}" / f"lane-{lane.host}-{lane.port}"


def _is_scratch_folder(path: Path) -> bool:
    """A lane's folder as ``scratch_path`` names it, checked by its shape, not by this process's temp folder
    (the systemd timer's restore runs with another TMPDIR than the runner had): ``campaign-<uid>/lane-...``,
    both real folders (never a link) owned by that uid, the root private to it."""
    root = path.parent
    owner = _ROOT_NAME.fullmatch(root.name)
    if not path.is_absolute() or ".." in path.parts or owner is None or not path.name.startswith("lane-"):
        return False
    try:
        root_stat, own_stat = os.lstat(root), os.lstat(path)
    except OSError:
        return False
    uid = int(owner.group(1))
    return (stat.S_ISDIR(root_stat.st_mode) and stat.S_ISDIR(own_stat.st_mode) and root_stat.st_uid == uid
            and own_stat.st_uid == uid and not root_stat.st_mode & 0o077)


def remove_scratch(recorded: str, *, stopped_here: bool) -> None:
    """A recorded lane's scratch folder removed after its runner died: whole when the caller has just stopped the
    lane (it held the address until now, so no other lane can be using the folder), else only when empty (the
    lane was already gone, and another lane may hold its address by now). Only a lane's folder by its shape
    (``_is_scratch_folder``), never a link or a path a state file names elsewhere."""
    path = Path(recorded)
    if not _is_scratch_folder(path):
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
