"""`gpus` on a process lane, on a real llama-server, on a machine with no GPU (CI's): zero GPUs is
CUDA_VISIBLE_DEVICES="" (recorded as launched and as read back from the running process, and compared by the
runtime one-axis check as `gpus`, not as an env variable); a GPU this machine does not have is a launch
failure `gpu_unavailable` before anything starts, not an engine quietly serving on the CPU. The GPU side
(a device used, read back by nvidia-smi; a context too large for it) runs on the lent H200:
scripts/gpu/README.md."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import pytest

from campaign.contracts.resolve import EffectiveLane
from campaign.errors import LaunchError
from campaign.fsutil import JsonlAppender, atomic_write_json
from campaign.lanes.session import boot_lane
from campaign.window.inspectdiff import runtime_axis_difference
from tests.support.contracts import MODEL, free_port, llama_server_lane

pytestmark = pytest.mark.integration


def lane(name: str, gpus: str | int | None, port: int, role: str = "control") -> EffectiveLane:
    return llama_server_lane(name, port, role, gpus=gpus)


def boot(spec: EffectiveLane, tmp_path: Path) -> dict:
    async def go() -> dict:
        with JsonlAppender(tmp_path / f"{spec.name}-warm.jsonl") as sink:
            run = await boot_lane(spec, model_path=str(MODEL), log_path=tmp_path / f"{spec.name}.log",
                                  warm_sink=sink, labels={"campaign.window": f"gpus-{os.getpid()}"})
            try:
                return run.inspect
            finally:
                await run.stop()

    return asyncio.run(go())


def test_zero_gpus_is_an_empty_cuda_visible_devices_compared_as_gpus(tmp_path: Path) -> None:
    control = boot(lane("c", None, free_port()), tmp_path)
    none = boot(lane("n", 0, free_port(), role="candidate"), tmp_path)
    assert "launched_gpus" in control and control["launched_gpus"] is None and "gpus" not in control
    assert none["launched_gpus"] == "" and none["gpus"] == ""  # read back from /proc/<pid>/environ
    assert none["env"]["CUDA_VISIBLE_DEVICES"] == ""
    bundle = tmp_path / "bundle"
    for name, snapshot in (("c", control), ("n", none)):
        atomic_write_json(bundle / "lanes" / name / "inspect.json", snapshot)
    c, n = lane("c", None, 1), lane("n", 0, 1, role="candidate")
    assert runtime_axis_difference(bundle, c, n, {"gpus"}) == ""
    undeclared = runtime_axis_difference(bundle, c, n, set())
    assert undeclared == "ran with undeclared differences gpus", undeclared  # not env.CUDA_VISIBLE_DEVICES


@pytest.mark.parametrize("gpus", [1, "device=3", "all"])
def test_a_gpu_this_machine_does_not_have_is_gpu_unavailable_before_the_engine_starts(
        tmp_path: Path, gpus: str | int, monkeypatch: pytest.MonkeyPatch) -> None:
    if shutil.which("nvidia-smi"):
        pytest.skip("this machine has an NVIDIA driver: the GPU side runs on the lent H200 (scripts/gpu)")
    with pytest.raises(LaunchError) as caught:
        boot(lane("g", gpus, free_port()), tmp_path)
    assert caught.value.cause == "gpu_unavailable" and "nvidia-smi not found" in str(caught.value)
    assert not (tmp_path / "g.log").exists()  # nothing was started
