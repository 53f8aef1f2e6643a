"""GPUs for process lanes: a lane's ``gpus`` as ``CUDA_VISIBLE_DEVICES``, checked against the devices this
machine has, and the devices a running lane uses read back from ``nvidia-smi``.

A CUDA engine given a device index that does not exist does not fail: it sees no GPU and, like llama.cpp,
quietly serves on the CPU, so a lane that asked for a GPU would be measured on the wrong hardware. The
request is checked before the launch (``gpu_unavailable``), and what the process holds on which device is
recorded in ``inspect.json`` after readiness.
"""

from __future__ import annotations

import shutil
import subprocess
from typing import Any

from campaign.errors import LaunchError

__all__ = ["devices_here", "gpu_use", "visible_devices"]

_SMI_TIMEOUT = 20.0


def _smi(*query: str) -> list[list[str]]:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        raise FileNotFoundError("nvidia-smi not found (no NVIDIA driver on this machine)")
    done = subprocess.run([smi, *query, "--format=csv,noheader,nounits"], capture_output=True, text=True,
                          timeout=_SMI_TIMEOUT)
    if done.returncode != 0:
        raise OSError(" ".join((done.stderr or done.stdout).split())[:200] or f"nvidia-smi exit {done.returncode}")
    return [[part.strip() for part in line.split(",")] for line in done.stdout.splitlines() if line.strip()]


def devices_here() -> list[dict[str, Any]]:
    """This machine's GPUs: index, uuid, name, total memory (MiB)."""
    return [{"index": int(row[0]), "uuid": row[1], "name": row[2],
             "memory_total_mib": int(float(row[3])) if row[3].replace(".", "", 1).isdigit() else None}
            for row in _smi("--query-gpu=index,uuid,name,memory.total")]


def visible_devices(gpus: str | int | None, lane: str) -> str | None:
    """The ``CUDA_VISIBLE_DEVICES`` a process lane gets: None (not set: the lane did not say), "" for 0 GPUs,
    else physical indices. Raises LaunchError(gpu_unavailable) for devices this machine does not have."""
    if gpus is None:
        return None
    text = str(gpus).strip()  # as for docker's --gpus: "all", a count, or device=ids / "0,1"
    if text == "0":
        return ""
    try:
        here = devices_here()
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        raise LaunchError(f"lane {lane}: gpus {gpus!r} asked for, but {exc}", cause="gpu_unavailable") from exc
    indices = [d["index"] for d in here]
    if text == "all":
        wanted = indices
    elif text.isdigit():
        if int(text) > len(indices):
            raise LaunchError(f"lane {lane}: {text} GPUs asked for, this machine has {len(indices)}",
                              cause="gpu_unavailable")
        wanted = indices[:int(text)]
    else:
        ids = [part.strip() for part in text.removeprefix("device=").split(",") if part.strip()]
        by_uuid = {d["uuid"]: d["index"] for d in here}
        wanted = []
        for item in ids:
            if item.isdigit() and int(item) in indices:
                wanted.append(int(item))
            elif item in by_uuid:
                wanted.append(by_uuid[item])
            else:
                raise LaunchError(f"lane {lane}: GPU {item} does not exist here (devices: "
                                  f"{', '.join(str(i) for i in indices) or 'none'})", cause="gpu_unavailable")
    return ",".join(str(i) for i in wanted)


def gpu_use(pid: int) -> list[dict[str, Any]] | None:
    """The devices the process holds memory on, by nvidia-smi (index, uuid, used MiB); None when nvidia-smi
    cannot say (none here, or a sandbox that hides other processes' pids from it)."""
    try:
        here = {d["uuid"]: d["index"] for d in devices_here()}
        apps = _smi("--query-compute-apps=pid,gpu_uuid,used_memory")
        if not apps:
            return None
        return sorted(({"index": here.get(row[1]), "uuid": row[1],
                        "used_mib": int(float(row[2])) if row[2].replace(".", "", 1).isdigit() else None}
                       for row in apps if row[0].isdigit() and int(row[0]) == pid), key=lambda d: str(d["index"]))
    except (OSError, subprocess.SubprocessError, ValueError):  # "[N/A]" fields (MIG) included
        return None
