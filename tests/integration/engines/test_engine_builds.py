"""The engine build scripts cache a build only after it served, and refuse a cached one that no longer
runs here. A real engine will not die by SIGILL on demand, so the cached "build" is a stand-in that kills
itself with SIGILL at start, as a binary built for another CPU does; the rebuild it triggers is stopped
as soon as the script says it is rebuilding (a real build takes ten minutes)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.contracts import MODEL, REPO

SCRIPTS = REPO / "scripts"
SIGILL_STAND_IN = "#!/bin/sh\necho 'llama threadpool init'\nkill -ILL $$\n"


def test_smoke_names_sigill_and_refuses(tmp_path: Path) -> None:
    binary = tmp_path / "llama-server"
    binary.write_text(SIGILL_STAND_IN)
    binary.chmod(0o755)
    done = subprocess.run([sys.executable, str(SCRIPTS / "engine_smoke.py"), "llama-server", str(binary), str(MODEL)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "SIGILL" in done.stderr and "CPU instructions this machine cannot run" in done.stderr


@pytest.mark.integration
def test_smoke_passes_a_build_that_serves(llama_server: str) -> None:
    done = subprocess.run([sys.executable, str(SCRIPTS / "engine_smoke.py"), "llama-server", llama_server,
                           str(MODEL)], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    assert "served" in done.stderr


def test_cached_build_that_dies_here_is_rebuilt(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    (cache / "models").mkdir(parents=True)
    (cache / "models" / MODEL.name).symlink_to(MODEL.resolve())
    env = {**os.environ, "CAMPAIGN_CACHE": str(cache)}
    where = subprocess.run([str(SCRIPTS / "build-llama-server.sh"), "--where"], capture_output=True, text=True,
                           env=env, timeout=60)
    assert where.returncode == 0, where.stderr
    entry = Path(where.stdout.strip().splitlines()[-1])
    assert entry.is_relative_to(cache) and "avx2" in entry.name  # the flavour is part of the cache key
    (entry / "bin").mkdir(parents=True)
    (entry / "bin" / "llama-server").write_text(SIGILL_STAND_IN)
    (entry / "bin" / "llama-server").chmod(0o755)
    proc = subprocess.Popen([str(SCRIPTS / "build-llama-server.sh")], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    said: list[str] = []
    deadline = time.monotonic() + 120
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            said.append(line)
            if "rebuilding" in line or time.monotonic() > deadline:
                break
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    refusal = [line for line in said if "rebuilding" in line]
    assert refusal, said
    assert "no longer serves here" in refusal[0] and "SIGILL" in refusal[0]
