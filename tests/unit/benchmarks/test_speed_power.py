"""The power table is reproducible from a clone: benchmarks/speed_power.py reads the committed noise figures
(with their provenance), refuses to run without measured figures unless told to assume some, and says so."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "benchmarks" / "speed_power.py"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), "--runs", "3", *args], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)


def test_the_committed_figures_have_provenance_and_drive_the_default_run() -> None:
    data = json.loads((ROOT / "benchmarks" / "data" / "speed_noise.json").read_text())
    assert data["provenance"]["machine"] and data["provenance"]["bundles"]
    assert all(len(level["boots"]) >= 3 for level in data["levels"])
    ran = _run()
    assert ran.returncode == 0, ran.stderr
    assert f"from {len(data['levels'])} level(s) of speed_noise.json" in ran.stdout
    assert "ASSUMED" not in ran.stdout


def test_without_measured_figures_it_refuses_unless_told_to_assume(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    refused = _run("--bundle", str(tmp_path / "empty"))
    assert refused.returncode != 0 and "no measured noise" in refused.stderr and "--assume-noise" in refused.stderr
    assumed = _run("--bundle", str(tmp_path / "empty"), "--assume-noise")
    assert assumed.returncode == 0, assumed.stderr
    assert assumed.stdout.startswith("ASSUMED NOISE (--assume-noise)")
