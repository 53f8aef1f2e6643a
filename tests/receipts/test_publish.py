"""Publishing renders only from the bundle, and archives unpack only when every member is safe."""

from __future__ import annotations

import io
import json
import tarfile
import tempfile
from pathlib import Path

import pytest

from campaign.errors import InputError
from campaign.receipts.bundle import sign_bundle, verify_bundle
from campaign.receipts.publish import archive_bundle, load_report_data, publish, render_html, unpack_archive
from campaign.signing import init_keys, load_signing_key, load_trusted


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
    sign_bundle(root, load_signing_key(), {"window": root.name})
    return root


def test_report_shows_bundle_values_and_rerenders_changes(bundle: Path) -> None:
    html = render_html(load_report_data(bundle))
    assert "self_identical 8/8 &gt;= required 8/8" in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "<script>" not in html  # autoescaped
    assert "<svg" in html and "http://" not in html.replace("http://www.w3.org/2000/svg", "").replace(
        "http://127.0.0.1:1", "")
    gate_path = bundle / "gates" / "greedy" / "spec.json"
    gate = json.loads(gate_path.read_text())
    gate["metrics"]["self_identical"]["value"] = 7919
    gate_path.write_text(json.dumps(gate))
    assert ">7919<" in render_html(load_report_data(bundle))


def test_publish_writes_report_summary_and_verifiable_archive(bundle: Path, tmp_path: Path) -> None:
    written = publish(bundle, tmp_path / "out")
    assert "| spec | greedy | PASS |" in written["markdown"].read_text()
    unpacked = unpack_archive(written["archive"])
    assert verify_bundle(unpacked, load_trusted()).files == 3
    assert not list(bundle.parent.glob(f"{bundle.name}/*.html"))  # the signed bundle is left as it was


def _archive(tmp_path: Path, member: tarfile.TarInfo, data: bytes = b"x") -> Path:
    path = tmp_path / "evil.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        ok = tarfile.TarInfo("b/SUMMARY.json")
        ok.size = 2
        tar.addfile(ok, io.BytesIO(b"{}"))
        tar.addfile(member, io.BytesIO(data) if member.isreg() else None)
    return path


@pytest.mark.parametrize("kind", ["dotdot", "absolute", "symlink"])
def test_unsafe_archive_is_refused_before_anything_is_written(tmp_path: Path, kind: str) -> None:
    if kind == "symlink":
        member = tarfile.TarInfo("b/link")
        member.type, member.linkname = tarfile.SYMTYPE, "/etc/passwd"
    else:
        member = tarfile.TarInfo("b/../../outside" if kind == "dotdot" else "/tmp/outside")
        member.size = 1
    archive = _archive(tmp_path, member)
    before = set(Path(tempfile.gettempdir()).glob("campaign-verify-*"))
    with pytest.raises(InputError, match="not allowed|not a regular file"):
        unpack_archive(archive)
    assert set(Path(tempfile.gettempdir()).glob("campaign-verify-*")) == before
