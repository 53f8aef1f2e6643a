"""GPU launch facts through campaign's own lane boot, on the GPU box: a lane on GPU 0 (its device use read
back and recorded), a GPU index this box does not have (gpu_unavailable, before anything starts), and a
context too large for the card (gpu_out_of_memory, from the engine's own words). Prints JSON.
python3 check_lanes.py SERVER MODEL"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path

from campaign.contracts.resolve import EffectiveLane
from campaign.errors import LaunchError
from campaign.fsutil import JsonlAppender
from campaign.lanes.session import boot_lane


def lane(name: str, server: str, model: str, gpus: object, args: list[str]) -> EffectiveLane:
    return EffectiveLane.model_validate({
        "name": name, "role": "control", "runtime": "process", "engine": "llamacpp", "executable": server,
        "port": 18610, "gpus": gpus, "args": ["-ngl", "99", "--threads", "8", "--no-webui", *args],
        "model": {"path": model}, "readiness": {"budget": 300}})


async def boot(spec: EffectiveLane, folder: Path, model: str) -> dict:
    with JsonlAppender(folder / f"{spec.name}-warm.jsonl") as sink:
        try:
            run = await boot_lane(spec, model_path=model, log_path=folder / f"{spec.name}.log", warm_sink=sink,
                                  labels={"campaign.window": "gpu-check"})
        except LaunchError as exc:
            return {"lane": spec.name, "launch_failure": exc.cause, "message": str(exc)[:300]}
        try:
            keep = ("launched_gpus", "gpus", "gpu_use")
            return {"lane": spec.name, "served": True, **{k: run.inspect.get(k) for k in keep},
                    "boot_seconds": round(run.boot_seconds, 2)}
        finally:
            await run.stop()


def main(server: str, model: str) -> None:
    folder = Path(tempfile.mkdtemp())
    cases = [lane("on-gpu-0", server, model, 1, ["--ctx-size", "4096"]),
             lane("gpu-7", server, model, "device=7", ["--ctx-size", "4096"]),
             lane("too-long-context", server, model, 1, ["--ctx-size", "16000000", "-fit", "off", "--parallel", "1"])]
    for spec in cases:
        print(json.dumps(asyncio.run(boot(spec, folder, model))), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
