"""Publishing renders only from the bundle, and archives unpack only when every member is safe."""

from __future__ import annotations

import io
import json
import tarfile
import tempfile
from pathlib import Path

import pytest

from campaign.errors import InputError
from campaign.receipts.bundle import verify_bundle
from campaign.receipts.publish import render_html, unpacked_archive
from campaign.signing import load_trusted
from campaign.window.report import load_report_data, publish

# the checks of what a command left in the temp folder see this test's own, not another worker's
pytestmark = pytest.mark.usefixtures("own_tempdir")


def test_report_shows_bundle_values_and_rerenders_changes(bundle: Path) -> None:
    html = render_html(load_report_data(bundle))
    assert "self_identical 8/8 &gt;= required 8/8" in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "<script>" not in html  # autoescaped
    assert "<svg" in html and "http:" not in html.replace("http://www.w3.org/2000/svg", "").replace(
        "http://www.w3.org/1999/xlink", "").replace("http://127.0.0.1:1", "") and "https:" not in html
    assert "&lt;script&gt;alert(2)&lt;/script&gt;" in html  # a reference's name, inside the KL plot's legend
    gate_path = bundle / "gates" / "greedy" / "spec.json"
    gate = json.loads(gate_path.read_text())
    gate["metrics"]["self_identical"]["value"] = 7919
    gate_path.write_text(json.dumps(gate))
    assert ">7919<" in render_html(load_report_data(bundle))


def test_publish_writes_report_summary_and_verifiable_archive(bundle: Path, tmp_path: Path) -> None:
    written = publish(bundle, tmp_path / "out")
    assert "| spec | greedy | PASS |" in written["markdown"].read_text()
    with unpacked_archive(written["archive"]) as unpacked:
        assert verify_bundle(unpacked, load_trusted()).files == 4
    assert not unpacked.exists()  # the unpacked copy is gone once verified
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
        with unpacked_archive(archive):
            pass
    assert set(Path(tempfile.gettempdir()).glob("campaign-verify-*")) == before


def _raw_archive(tmp_path: Path, *members: tuple[tarfile.TarInfo, bytes | None], fmt: int = tarfile.GNU_FORMAT) -> Path:
    path = tmp_path / "hostile.tar"
    with tarfile.open(path, "w", format=fmt) as tar:
        for member, data in members:
            tar.addfile(member, io.BytesIO(data) if data is not None else None)
    return path


def _file(name: str, size: int) -> tarfile.TarInfo:
    member = tarfile.TarInfo(name)
    member.size = size
    return member


def _refused(archive: Path, match: str) -> None:
    before = set(Path(tempfile.gettempdir()).glob("campaign-verify-*"))
    with pytest.raises(InputError, match=match):
        with unpacked_archive(archive):
            pass
    assert set(Path(tempfile.gettempdir()).glob("campaign-verify-*")) == before


def test_declared_size_over_the_cap_is_refused_unread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import campaign.receipts.publish as publish_module

    monkeypatch.setattr(publish_module, "MAX_UNPACKED_BYTES", 1000)
    bomb = _raw_archive(tmp_path, (_file("b/SUMMARY.json", 2), b"{}"), (_file("b/zeros", 4000), b"\0" * 4000))
    _refused(bomb, "declares more than 1000 bytes")


def test_a_header_declaring_10_gib_without_data_is_a_one_line_refusal(tmp_path: Path) -> None:
    path = tmp_path / "lying.tar"
    header = _file("b/huge", 10 * 1024**3).tobuf(tarfile.GNU_FORMAT)
    path.write_bytes(_file("b", 0).tobuf(tarfile.GNU_FORMAT).replace(b"0000644", b"0000755") + header)
    _refused(path, "declares more than|unreadable member|not a readable archive")


def test_top_folder_as_a_plain_file_is_refused(tmp_path: Path) -> None:
    archive = _raw_archive(tmp_path, (_file("b", 2), b"{}"), (_file("b/SUMMARY.json", 2), b"{}"))
    _refused(archive, "must be the bundle's folder")


def test_sparse_member_is_refused_unread(tmp_path: Path) -> None:
    sparse = _file("b/sparse", 10 * 1024**3)
    sparse.pax_headers = {"GNU.sparse.major": "1", "GNU.sparse.minor": "0", "GNU.sparse.name": "b/sparse",
                          "GNU.sparse.realsize": str(10 * 1024**3)}
    sparse_map = b"1\n0\n0\n".ljust(512, b"\0")  # GNU sparse 1.0: the map leads the data; one empty extent
    sparse.size = len(sparse_map)
    archive = _raw_archive(tmp_path, (_file("b/SUMMARY.json", 2), b"{}"), (sparse, sparse_map),
                           fmt=tarfile.PAX_FORMAT)
    _refused(archive, "sparse")


def test_verify_of_an_archive_leaves_nothing_behind(bundle: Path, tmp_path: Path) -> None:
    import subprocess
    import sys

    written = publish(bundle, tmp_path / "out")
    before = set(Path(tempfile.gettempdir()).glob("campaign-verify-*"))
    done = subprocess.run([sys.executable, "-m", "campaign.cli", "verify", str(written["archive"])],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert set(Path(tempfile.gettempdir()).glob("campaign-verify-*")) == before


def test_summary_md_escapes_bundle_text_and_reads_numbers_plainly(bundle: Path, tmp_path: Path) -> None:
    import stat

    from campaign.receipts.publish import render_markdown

    data = load_report_data(bundle)
    data["gates"][0]["reasons"] = ["<script>alert(7)</script> | [x](http://evil)"]
    data["summary"]["candidates"]["spec"]["gates"]["greedy"]["reasons"] = ["<img src=x onerror=alert(8)>"]
    data["gates"][0]["metrics"] = {"<b>bold</b>": {"value": 0.0160891, "denominator": 28, "unit": "nats"},
                                   "self_identical": {"value": 7, "denominator": 8, "unit": "prompts"}}
    text = render_markdown(data)
    assert "<script>" not in text and "<img" not in text and "<b>" not in text
    assert "&lt;img src=x onerror=alert(8)&gt;" in text
    assert "0.01609 nats (n = 28)" in text and "7/8 prompts" in text and "0.0160891/28" not in text
    written = publish(bundle, tmp_path / "shared")
    for path in written.values():
        assert stat.S_IMODE(path.stat().st_mode) & 0o044 == 0o044, path  # group and others may read it


def test_an_archive_made_with_tar_dot_unpacks(bundle: Path, tmp_path: Path) -> None:
    import subprocess

    archive = tmp_path / "dot.tar.gz"
    subprocess.run(["tar", "-C", str(bundle.parent), "-czf", str(archive), f"./{bundle.name}"], check=True)
    with tarfile.open(archive) as tar:
        assert tar.getnames()[0].startswith("./")
    with unpacked_archive(archive) as unpacked:
        assert verify_bundle(unpacked, load_trusted()).files == 4
