"""A booted lane as gates see it: its spec, its engine's adapter, the running process or container, an HTTP
client bound to it, and what its boot recorded. Apart from ``session`` (which boots it) so that a gate can
name the type without importing the boot machinery."""

from __future__ import annotations

import asyncio
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from campaign.contracts.resolve import EffectiveLane
from campaign.lanes.engines.base import EngineAdapter
from campaign.lanes.engines.client import LaneClient
from campaign.lanes.runtimes.base import RunningLane

__all__ = ["LaneRun"]


@dataclass
class LaneRun:
    lane: EffectiveLane
    adapter: EngineAdapter
    running: RunningLane
    client: LaneClient
    boot_seconds: float
    inspect: dict[str, Any] = field(default_factory=dict)
    engine_version: dict[str, Any] = field(default_factory=dict)
    scratch: Path | None = None

    async def stop(self, timeout: float = 20.0) -> int | None:
        await self.client.aclose()
        code = await asyncio.to_thread(self.running.stop, timeout)
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)
        return code
