"""The process runtime: a local server in its own process group, its output captured to the bundle.

Stop is escalated: SIGTERM to the whole group, then SIGKILL after the timeout, so a server's children
(tokenizer workers, engine cores) never outlive the lane. With a redactor, the server's output reaches
boot.log through a pipe and the redactor, line by line, so a secret it echoes never touches the disk.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from campaign.contracts.units import format_cpuset, parse_cpuset
from campaign.errors import LaunchError
from campaign.lanes.redact import RedactingLog, Redactor
from campaign.lanes.runtimes.base import PROC_ARGS_BYTES, LaunchSpec, read_proc
from campaign.lanes.runtimes.gpus import gpu_use, visible_devices

__all__ = ["BASE_ENV_KEYS", "WINDOW_ENV", "ProcessLane", "ProcessRuntime", "marked_processes"]

# A lane sees the variables its contract declares plus these, so the runner's own environment
# (and any secrets in it) does not leak into the lane or change what it computes.
BASE_ENV_KEYS = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "TZ")
WINDOW_LABEL = "campaign.window"
WINDOW_ENV = "CAMPAIGN_WINDOW"


def marked_processes(window: str) -> list[int]:
    """Session leaders whose environment carries this window's mark: its process lanes, tracked or not."""
    found = []
    needle = f"{WINDOW_ENV}={window}".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        try:
            marked = needle in read_proc(f"/proc/{pid}/environ", PROC_ARGS_BYTES).split(b"\0")
            if marked and os.getsid(pid) == pid:
                found.append(pid)
        except OSError:
            continue
    return found


def oom_kills() -> int:
    """The kernel's count of OOM kills in this process's memory cgroup (v2 ``memory.events``, v1
    ``memory.oom_control``); 0 when unknown."""
    try:
        text = read_proc("/proc/self/cgroup").decode(errors="replace")
        lines = [line.strip().split(":", 2) for line in text.splitlines() if line.count(":") >= 2]
    except OSError:
        return 0
    candidates = [f"/sys/fs/cgroup/memory{path}/memory.oom_control" for _, ctrl, path in lines
                  if "memory" in ctrl.split(",")]
    candidates += [f"/sys/fs/cgroup{path}/memory.events" for _, ctrl, path in lines if ctrl == ""]
    for name in candidates:
        try:
            for line in read_proc(name).decode(errors="replace").splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except (OSError, ValueError):
            continue
    return 0


class ProcessLane:
    def __init__(self, spec: LaunchSpec, popen: subprocess.Popen[bytes], log_handle: Any,
                 env: dict[str, str]) -> None:
        self.spec, self._popen, self._log, self._env = spec, popen, log_handle, env
        self.pid = popen.pid
        self.started_at = time.time()
        self._oom_kills_at_start = oom_kills()
        self._copier: threading.Thread | None = None
        if popen.stdout is not None:
            self._copier = threading.Thread(target=self._copy, args=(popen.stdout,), daemon=True,
                                            name=f"log-{spec.lane}")
            self._copier.start()

    def _copy(self, pipe: Any) -> None:
        with pipe:
            while chunk := os.read(pipe.fileno(), 65536):
                self._log.write(chunk)

    def _drain(self) -> None:
        if self._copier is not None:
            self._copier.join(timeout=5)

    def alive(self) -> bool:
        if self._popen.poll() is None:
            return True
        self._drain()  # its last words explain the exit: on disk before anyone reads the log
        return False

    def exit_code(self) -> int | None:
        return self._popen.poll()

    def failure_facts(self) -> dict[str, Any]:
        # A SIGKILL is the OOM killer's only when the kernel counted a kill in our cgroup meanwhile.
        oom = self._popen.returncode == -signal.SIGKILL and oom_kills() > self._oom_kills_at_start
        return {"oom_killed": oom}

    def cpu_seconds(self) -> float | None:
        """CPU time used so far by the lane's processes (its session), for host-load checks."""
        from campaign.lanes.hostcpu import session_cpu_seconds

        return session_cpu_seconds(self.pid)

    def inspect(self) -> dict[str, Any]:
        """What actually runs, read back from the kernel, not from what we meant to run."""
        snapshot: dict[str, Any] = {"runtime": "process", "pid": self.pid, "argv": list(self.spec.argv),
                                    "env": dict(self.spec.env), "launched_argv": list(self.spec.argv),
                                    "launched_env": dict(self._env),
                                    "launched_cpus": format_cpuset(parse_cpuset(self.spec.cpus)) if self.spec.cpus
                                    else None,
                                    "launched_gpus": self._env.get("CUDA_VISIBLE_DEVICES") if self.spec.gpus is not None
                                    else None}
        try:
            cmdline = read_proc(f"/proc/{self.pid}/cmdline", PROC_ARGS_BYTES)
            snapshot["argv"] = [p.decode(errors="replace") for p in cmdline.split(b"\0") if p]
            environ = read_proc(f"/proc/{self.pid}/environ", PROC_ARGS_BYTES)
            pairs = [p.decode(errors="replace").split("=", 1) for p in environ.split(b"\0") if p]
            snapshot["env"] = {k: v for k, v in (p for p in pairs if len(p) == 2)}
            snapshot["exe"] = os.readlink(f"/proc/{self.pid}/exe")
            snapshot["cpus"] = format_cpuset(os.sched_getaffinity(self.pid))
            if self.spec.gpus is not None:
                snapshot["gpus"] = snapshot["env"].get("CUDA_VISIBLE_DEVICES")
                # what it holds on which device (None: nvidia-smi cannot say here); the engine's log says more
                snapshot["gpu_use"] = gpu_use(self.pid)
        except OSError:
            snapshot["read_back"] = False  # exited already: keep what was launched
        return snapshot

    def file_sha256(self, path: str) -> str:
        """The sha256 of a file as the running lane sees it: through its own root (/proc/<pid>/root)."""
        from campaign.contracts.hashing import sha256_file
        from campaign.contracts.model import LANE_FILE_BYTES

        return sha256_file(Path(f"/proc/{self.pid}/root") / path.lstrip("/"), limit=LANE_FILE_BYTES)

    def tree_sha256s(self, path: str) -> dict[str, str]:
        """A directory's files as the running lane sees them (through its root), by the manifest's walker."""
        from campaign.contracts.manifest import tree_digests

        return tree_digests(Path(f"/proc/{self.pid}/root") / path.lstrip("/"))

    def stop(self, timeout: float = 20.0) -> int | None:
        try:
            if self._popen.poll() is None:
                self._signal_group(signal.SIGTERM)
                try:
                    self._popen.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    self._signal_group(signal.SIGKILL)
                    self._popen.wait(timeout=10)
            # a group member may still be alive after the leader exits
            self._signal_group(signal.SIGKILL)
            self._drain()
        finally:
            self._log.close()
        return self._popen.returncode

    def _signal_group(self, sig: int) -> None:
        try:
            os.killpg(self.pid, sig)
        except ProcessLookupError:
            pass


class ProcessRuntime:
    def __init__(self, redactor: Redactor | None = None) -> None:
        self.redactor = redactor

    def start(self, spec: LaunchSpec) -> ProcessLane:
        env = {k: os.environ[k] for k in BASE_ENV_KEYS if k in os.environ}
        env.update(spec.env)
        if spec.labels.get(WINDOW_LABEL):
            # the same mark on every lane of a window: a restore finds a lane the runner started but did
            # not get to record (killed between the two) by this, in /proc
            env[WINDOW_ENV] = spec.labels[WINDOW_LABEL]
        visible = visible_devices(spec.gpus, spec.lane)
        if visible is not None:
            # nvidia-smi numbers devices by PCI bus; CUDA by default fastest first: one order for both
            env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
            env["CUDA_VISIBLE_DEVICES"] = visible
        spec.log_path.parent.mkdir(parents=True, exist_ok=True)
        log: Any = (RedactingLog(spec.log_path, self.redactor) if self.redactor is not None
                    else open(spec.log_path, "ab", buffering=0))
        try:
            popen = subprocess.Popen(spec.argv, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE if self.redactor is not None else log,
                                     stderr=subprocess.STDOUT, env=env, start_new_session=True, close_fds=True)
        except OSError as exc:
            log.close()
            raise LaunchError(f"lane {spec.lane}: cannot start {spec.argv[0]}: {exc.strerror}",
                              cause="cannot_execute") from exc
        if spec.cpus:
            # at once, before the engine loads its model and starts its threads (they inherit the mask);
            # preexec_fn would run Python between fork and exec in a process that has threads
            try:
                os.sched_setaffinity(popen.pid, parse_cpuset(spec.cpus))
            except OSError as exc:
                with contextlib.suppress(OSError):
                    os.killpg(popen.pid, signal.SIGKILL)
                popen.wait()
                log.close()
                raise LaunchError(f"lane {spec.lane}: cannot pin it to cpus {spec.cpus}: {exc.strerror}",
                                  cause="cannot_execute") from exc
        return ProcessLane(spec, popen, log, env)
