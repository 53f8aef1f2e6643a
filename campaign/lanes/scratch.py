"""Where a lane's scratch folder is: the one place the engine writes during a boot (temp files, caches).

Its name is known before the lane starts, so the redactor (which names it in the engine's env) and the boot
(which makes and empties it) agree without either importing the other's folder."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from campaign.contracts.resolve import EffectiveLane

__all__ = ["engine_facts_dir", "scratch_path"]


def scratch_path(lane: EffectiveLane) -> Path:
    """Where a lane's scratch folder is, without touching it (the redactor needs the name, not the folder)."""
    return Path(tempfile.gettempdir()) / f"campaign-{os.getuid()}" / f"lane-{lane.host}-{lane.port}"


def engine_facts_dir(name: str) -> Path:
    """A folder of facts an engine caches about its own code, kept between boots (``$XDG_CACHE_HOME/campaign/
    engine-facts/NAME``, made 0700): never a compile cache or anything a lane's numbers could depend on."""
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "campaign" / "engine-facts"
    folder = root / name
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    return folder
