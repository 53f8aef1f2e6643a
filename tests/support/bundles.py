"""A hand-made bundle of the shape a window writes, for tests of what reads bundles (publishing reads
files, not engines)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from campaign.receipts.bundle import sign_bundle
from campaign.signing import init_keys, load_signing_key

__all__ = ["bundle"]


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    """A small bundle of the shape a window writes (hand-made: publishing reads files, not engines)."""
    init_keys()
    root = tmp_path / "20261129T000000Z-demo-v1-abcd"
    (root / "gates" / "greedy").mkdir(parents=True)
    (root / "lanes" / "spec").mkdir(parents=True)
    (root / "lanes" / "spec" / "launch_failure.txt").write_text("readiness_timeout: <script>alert(1)</script>\n")
    summary = {"schema": "campaign.summary/v1", "tool_version": "0.1.0", "window": root.name, "status": "complete",
               "started_at": "2026-11-29T00:00:00Z", "ended_at": "2026-11-29T00:05:00Z",
               "duration": {"value": 300, "unit": "s"},
               "contract": {"name": "demo", "version": 1, "canonical_sha256": "ab" * 32,
                            "frozen_at": "2026-11-28T00:00:00Z"},
               "lanes": {"base": {"status": "ran", "cause": None, "boot_seconds": {"value": 1.5, "unit": "s"},
                                  "engine_version": {}}},
               "candidates": {"spec": {"control": "base", "promotion_gates": ["greedy"], "overall": "PASS",
                                       "gates": {"greedy": {"verdict": "PASS", "reasons": ["self_identical 8/8"],
                                                            "metrics": {}}}}},
               "restore": {"incumbent": "http://127.0.0.1:1", "proved": True, "action": "started"}}
    (root / "SUMMARY.json").write_text(json.dumps(summary))
    gate = {"schema": "campaign.gate-result/v1", "gate": "greedy", "kind": "greedy", "candidate": "spec",
            "control": "base", "verdict": "PASS", "reasons": ["self_identical 8/8 >= required 8/8"],
            "rule": {"self_identical": "8/8"}, "caveats": [],
            "metrics": {"self_identical": {"value": 8, "denominator": 8, "unit": "prompts"}},
            "details": {"prompts": [{"prompt": "p1", "cross_identical": True, "change_pct": 4.5, "ci_low": 1.0,
                                     "ci_high": 8.0}]}}
    (root / "gates" / "greedy" / "spec.json").write_text(json.dumps(gate))
    (root / "gates" / "kl").mkdir()
    kl = {"schema": "campaign.gate-result/v1", "gate": "kl", "kind": "kl", "candidate": "spec", "control": "base",
          "verdict": "PASS", "reasons": ["KL mean 0.004 <= 0.05 nats over 3 tokens"], "rule": {"max_mean": 0.05},
          "caveats": [], "metrics": {"kl_mean": {"value": 0.004, "denominator": 3, "unit": "nats"}},
          "details": {"texts": [{"reference": "<script>alert(2)</script>", "tokens": 3,
                                 "per_position": [0.0, 0.011, 0.001]}]}}
    (root / "gates" / "kl" / "spec.json").write_text(json.dumps(kl))
    sign_bundle(root, load_signing_key(), {"window": root.name})
    return root
