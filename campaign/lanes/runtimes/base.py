"""What every runtime (local process, docker container) offers a lane session."""

from __future__ import annotations

import errno
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

__all__ = ["PROC_ARGS_BYTES", "PROC_SMALL_BYTES", "LaunchSpec", "Runtime", "RunningLane", "read_proc"]

# What the tool reads from /proc itself (not inputs, but bounded all the same). A process's cmdline and
# environ are held to a quarter of its stack limit by the kernel (2 MiB at the usual 8 MiB): 8 MiB covers a
# 32 MiB stack. A stat line, a boot id or /proc/stat's first line is well under 64 KiB.
PROC_ARGS_BYTES = 8 << 20
PROC_SMALL_BYTES = 64 << 10


def read_proc(path: str | Path, limit: int = PROC_SMALL_BYTES) -> bytes:
    """A file of /proc (or /sys) read with a byte cap: OSError (EFBIG) past it, so a caller that already
    treats an unreadable /proc file (a process gone) as unknown does so for this too, never truncating."""
    with open(path, "rb") as handle:  # buffered: read() loops until EOF or the cap (procfs reads by page)
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise OSError(errno.EFBIG, f"over the {limit:,}-byte cap", str(path))
    return data


@dataclass(frozen=True)
class LaunchSpec:
    """A fully resolved launch: what the runtime executes, nothing left to interpret."""

    lane: str
    argv: list[str]
    env: dict[str, str]
    log_path: Path
    labels: dict[str, str] = field(default_factory=dict)
    # the folder the engine's temp files and caches go to (its env points there); a container gets an
    # empty private tmpfs at the same path, since the host folder may not exist where docker runs
    scratch: str | None = None
    cpus: str | None = None  # a cpuset the lane is pinned to (the contract's lane.cpus)
    gpus: str | int | None = None  # the contract's lane.gpus (a process lane: CUDA_VISIBLE_DEVICES)


class RunningLane(Protocol):
    def alive(self) -> bool: ...

    def exit_code(self) -> int | None: ...

    def inspect(self) -> dict[str, Any]: ...

    def file_sha256(self, path: str) -> str:
        """The sha256 of a file as the running lane sees it at ``path`` (a lane file read back)."""
        ...

    def tree_sha256s(self, path: str) -> dict[str, str]:
        """{relative path: sha256} of every file of a directory as the running lane sees it at ``path`` (a
        directory model read back); a link or a special file in it is an error."""
        ...

    def failure_facts(self) -> dict[str, Any]:
        """What the runtime itself knows about a death (e.g. ``oom_killed``, an engine ``error``)."""
        ...

    def stop(self, timeout: float = 20.0) -> int | None: ...


class Runtime(Protocol):
    def start(self, spec: LaunchSpec) -> RunningLane: ...

