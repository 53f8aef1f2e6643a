"""The client benchmark runs and measures what it says, on a tiny budget (its local SSE server is the
benchmark's own instrument, not a stand-in for an engine)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support.contracts import REPO


def test_client_capacity_reports_rates_cpu_and_timing_error(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    ran = subprocess.run([sys.executable, str(REPO / "benchmarks" / "client_capacity.py"), "--levels", "4",
                          "--budget-tokens", "4000", "--timing-requests", "4", "--ttft-ms", "30", "--itl-ms", "2",
                          "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr
    assert "capacity:" in ran.stdout and "timing:" in ran.stdout
    figures = json.loads(out.read_text())
    # the gate's client, the hand-written one it replaced, plain aiohttp and the raw socket, at each level
    assert sorted((r["client"], r["level"]) for r in figures["capacity"]) == sorted(
        (client, 4) for client in ("campaign", "hand-written", "aiohttp", "raw-socket"))
    for row in figures["capacity"]:
        assert row["errors"] == 0 and row["tok_s"] > 0 and row["client_cpu_ms_per_1k_tokens"] > 0
        assert row["loop_lag_p99_ms"] >= 0
    for row in figures["timing"]:
        assert row["errors"] == 0
        # a client can only see the first token after the server slept its injected TTFT
        assert row["ttft_error_ms"] >= row["of_which_server_ms"] >= -1.0
        assert row["of_which_client_ms"] > 0
