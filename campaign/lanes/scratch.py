"""Where a lane's scratch folder is: the one place the engine writes during a boot (temp files, caches).

Its name is known before the lane starts, so the redactor (which names it in the engine's env) and the boot
(which makes and empties it) agree without either importing the other's folder."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from campaign.contracts.resolve import EffectiveLane

__all__ = ["scratch_path"]


def scratch_path(lane: EffectiveLane) -> Path:
    """Where a lane's scratch folder is, without touching it (the redactor needs the name, not the folder)."""
    return Path(tempfile.gettempdir()) / f"campaign-{os.getuid()}" / f"lane-{lane.host}-{lane.port}"
