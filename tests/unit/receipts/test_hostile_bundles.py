"""Hostile bundles and archives (issue 30, items 5-7, 9 and 19): each bound is refused in one line before
the work it bounds, and every error names the user's own path. The big cases are built cheaply: a sparse
file (a hole costs no disk), or a header that declares what is never written."""

from __future__ import annotations

import base64
import gzip
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import pytest

from campaign.errors import InputError, VerifyError
from campaign.receipts import bundle as bundle_module
from campaign.receipts import publish as publish_module
from campaign.receipts.bundle import ENVELOPE, copy_bundle, sign_bundle, verify_bundle
from campaign.receipts.publish import publish, unpacked_archive
from campaign.signing import init_keys, load_signing_key, load_trusted

# the checks of what a command left in the temp folder see this test's own, not another worker's
pytestmark = pytest.mark.usefixtures("own_tempdir")

GIB = 1 << 30


@pytest.fixture
def small(tmp_path: Path) -> Path:
    init_keys()
    root = tmp_path / "b"
    (root / "raw" / "greedy").mkdir(parents=True)
    (root / "raw" / "greedy" / "a.jsonl").write_text('{"x": 1}\n')
    (root / "SUMMARY.json").write_text('{"status": "complete"}\n')
    sign_bundle(root, load_signing_key(), {"window": "w1"})
    return root


def _resign(bundle: Path, **envelope_changes: object) -> None:
    path = bundle / ENVELOPE
    envelope = json.loads(path.read_text())
    envelope.update(envelope_changes)
    path.write_text(json.dumps(envelope))


# ------------------------------------------------------------------------------------------- the envelope

def test_a_sparse_4_gib_envelope_is_refused_unread(small: Path) -> None:
    with open(small / ENVELOPE, "r+b") as handle:
        handle.truncate(4 * GIB)  # a hole: no disk, no memory unless someone reads it
    started = time.monotonic()
    with pytest.raises(VerifyError, match=r"receipt.dsse.json: envelope is over the 8,388,608-byte cap"):
        verify_bundle(small, load_trusted())
    assert time.monotonic() - started < 2


def test_20000_signatures_are_refused_before_any_is_tried(small: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    envelope = json.loads((small / ENVELOPE).read_text())
    keyid = envelope["signatures"][0]["keyid"]
    _resign(small, signatures=[{"keyid": keyid, "sig": base64.b64encode(bytes(64)).decode()}] * 20_000)
    tried = []
    monkeypatch.setattr(type(load_trusted()), "verify", lambda self, *args: tried.append(args) or False)
    with pytest.raises(VerifyError, match="holds 60,003 JSON values .*refused unparsed"):
        verify_bundle(small, load_trusted())
    _resign(small, signatures=[{"keyid": keyid, "sig": base64.b64encode(bytes(64)).decode()}] * 17)
    with pytest.raises(VerifyError, match="17 signatures: at most 16 signatures; more are refused before any is tried"):
        verify_bundle(small, load_trusted())
    assert tried == []


def test_a_valid_signature_among_few_bad_ones_still_verifies(small: Path) -> None:
    envelope = json.loads((small / ENVELOPE).read_text())
    good = envelope["signatures"][0]
    _resign(small, signatures=[{"keyid": good["keyid"], "sig": base64.b64encode(bytes(64)).decode()}] * 15 + [good])
    assert verify_bundle(small, load_trusted()).files == 2


@pytest.mark.parametrize("text, words", [("[" * (1 << 20), "holds 1,048,576 JSON values"),
                                         ('{"a": ' + "[" * 2000, "malformed envelope: nested too deeply")])
def test_an_envelope_nested_past_the_parser_is_one_line(small: Path, text: str, words: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    (small / ENVELOPE).write_text(text)
    monkeypatch.setattr(bundle_module, "MAX_SIGNATURES", 2000)  # lets the nesting reach the parser
    with pytest.raises(VerifyError, match=words):
        verify_bundle(small, load_trusted())


def test_a_manifest_over_the_file_cap_is_refused_before_the_walk(small: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bundle_module, "MAX_BUNDLE_FILES", 1)
    with pytest.raises(VerifyError, match="2 subject: at most 1 subjects"):
        verify_bundle(small, load_trusted())


def test_a_signed_statement_nested_too_deeply_is_one_line(small: Path) -> None:
    payload = b"[" * 20_000  # under the container bound: the parser's own limit stops it
    key = load_signing_key()
    _resign(small, payload=base64.b64encode(payload).decode(),
            signatures=[{"keyid": key.keyid, "sig": key.sign(bundle_module.pae(bundle_module.PAYLOAD_TYPE, payload))}])
    with pytest.raises(VerifyError, match="malformed envelope: nested too deeply"):
        verify_bundle(small, load_trusted())


# ------------------------------------------------------------------------------------------- the tree

def _chain(root: Path, levels: int) -> Path:
    """``levels`` folders, one inside the other, made one at a time (no recursion anywhere)."""
    path = root
    for _ in range(levels):
        path = path / "d"
        os.mkdir(path)
    (path / "leaf").write_text("x")
    return path


def _remove_chain(root: Path, levels: int) -> None:
    deepest = root.joinpath(*["d"] * levels)
    (deepest / "leaf").unlink()
    for level in range(levels, 0, -1):
        os.rmdir(root.joinpath(*["d"] * level))


def test_a_1500_level_folder_chain_is_refused_without_recursion(small: Path, tmp_path: Path) -> None:
    _chain(small / "raw", 1500)
    try:
        with pytest.raises(VerifyError, match=r"folders nested more than 32 deep"):
            verify_bundle(small, load_trusted())
        with pytest.raises(VerifyError, match=r"folders nested more than 32 deep"):
            copy_bundle(small, tmp_path / "copy")
        with pytest.raises(InputError, match=r"not archived: .*nested more than 32"):
            publish_module.archive_bundle(small, tmp_path / "out.tar.gz")
    finally:
        _remove_chain(small / "raw", 1500)


def test_a_missing_file_is_named_not_the_folder_it_left_empty(small: Path) -> None:
    (small / "raw" / "greedy" / "a.jsonl").unlink()
    with pytest.raises(VerifyError, match="raw/greedy/a.jsonl: file listed in the signed manifest is missing"):
        verify_bundle(small, load_trusted())


def test_a_fifo_in_a_bundle_is_refused_never_opened(small: Path) -> None:
    os.mkfifo(small / "raw" / "pipe")
    with pytest.raises(VerifyError, match=r"raw/pipe: not a regular file \(a FIFO"):
        verify_bundle(small, load_trusted())


def test_a_sparse_100_gib_file_in_a_bundle_is_refused_before_hashing(small: Path) -> None:
    with open(small / "raw" / "greedy" / "a.jsonl", "r+b") as handle:
        handle.truncate(100 * GIB)
    started = time.monotonic()
    with pytest.raises(VerifyError, match="more than 68,719,476,736 bytes"):
        verify_bundle(small, load_trusted())
    assert time.monotonic() - started < 2


def test_a_json_file_over_its_cap_is_refused_unread(small: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bundle_module, "MAX_JSON_BYTES", 8)
    with pytest.raises(VerifyError, match="SUMMARY.json: bundle file is over the 8-byte cap"):
        verify_bundle(small, load_trusted())


def test_a_signed_json_file_nested_too_deeply_is_one_line(tmp_path: Path) -> None:
    init_keys()
    root = tmp_path / "deep"
    root.mkdir()
    (root / "SUMMARY.json").write_text("[" * 200_000)
    sign_bundle(root, load_signing_key(), {"window": "w"})
    with pytest.raises(VerifyError, match="SUMMARY.json: nested too deeply"):
        verify_bundle(root, load_trusted())


@pytest.mark.parametrize("kind", ["archive", "file", "fifo", "missing"])
def test_a_path_that_is_not_a_bundle_folder_says_what_it_is(tmp_path: Path, kind: str) -> None:
    path = tmp_path / {"archive": "b.tar.gz", "file": "notes.txt", "fifo": "pipe", "missing": "gone"}[kind]
    if kind == "fifo":
        os.mkfifo(path)
    elif kind != "missing":
        path.write_bytes(b"x")
    words = {"archive": "an archive, not a bundle folder: `campaign verify` reads archives",
             "file": "a file, not a bundle folder", "fifo": r"a FIFO \(named pipe\), not a bundle folder",
             "missing": "no such bundle folder"}[kind]
    with pytest.raises(InputError, match=f"{path}: {words}"):
        verify_bundle(path, load_trusted())


# ------------------------------------------------------------------------------------------- archives

def _header(name: bytes, typeflag: bytes, size: int, *, field: bytes | None = None) -> bytes:
    """One raw 512-byte ustar header; ``field`` writes the size field as given (base-256, negative)."""
    block = bytearray(512)
    block[0:len(name)] = name
    block[100:108] = b"0000755\0" if typeflag == b"5" else b"0000644\0"
    block[108:116] = block[116:124] = b"0000000\0"
    block[124:136] = field if field is not None else b"%011o\0" % size
    block[136:148] = b"14000000000\0"
    block[156:157] = typeflag
    block[257:265] = b"ustar\x0000"
    block[148:156] = b" " * 8
    block[148:156] = b"%06o\0 " % sum(block)
    return bytes(block)


def _gz(tmp_path: Path, *blocks: bytes, name: str = "hostile.tar.gz") -> Path:
    path = tmp_path / name
    path.write_bytes(gzip.compress(b"".join(blocks) + bytes(1024), compresslevel=1))
    return path


def _refused(archive: Path, match: str) -> None:
    before = set(Path(tempfile.gettempdir()).glob("campaign-verify-*"))
    with pytest.raises(InputError, match=match):
        with unpacked_archive(archive):
            pass
    assert set(Path(tempfile.gettempdir()).glob("campaign-verify-*")) == before


@pytest.fixture
def no_record_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """tarfile's readers of a header record's data fail the test if reached: the refusal comes first."""
    def reached(*_: object) -> None:
        raise AssertionError("tarfile read a header record the guard should have refused")

    for name in ("_proc_gnulong", "_proc_pax", "_proc_sparse"):
        monkeypatch.setattr(tarfile.TarInfo, name, reached)


@pytest.mark.parametrize("typeflag, words", [(b"L", "GNU long-name"), (b"K", "GNU long-link"), (b"x", "pax"),
                                             (b"g", "pax global")])
def test_a_3_gib_header_record_is_refused_before_tarfile_reads_it(tmp_path: Path, typeflag: bytes, words: str,
                                                                   no_record_reads: None) -> None:
    archive = _gz(tmp_path, _header(b"b/", b"5", 0), _header(b"././@LongLink", typeflag, 3 * GIB))
    _refused(archive, f"a {words} header record of 3,221,225,472 bytes at byte 512 .*refused before it is read")


def test_a_record_just_over_the_cap_with_its_data_is_refused(tmp_path: Path, no_record_reads: None) -> None:
    size = publish_module.MAX_HEADER_RECORD + 1
    data = b"b/" + b"n" * (size - 2)
    archive = _gz(tmp_path, _header(b"b/", b"5", 0), _header(b"././@LongLink", b"L", size),
                  data + bytes(-size % 512), _header(b"b/x", b"0", 0))
    _refused(archive, "GNU long-name header record of 65,537 bytes")


def test_a_base_256_size_is_read_as_tar_reads_it(tmp_path: Path, no_record_reads: None) -> None:
    archive = _gz(tmp_path, _header(b"././@PaxHeader", b"x", 0, field=b"\x80" + (5 * GIB).to_bytes(11, "big")))
    _refused(archive, "pax header record of 5,368,709,120 bytes")


def test_a_negative_size_is_refused(tmp_path: Path) -> None:
    negative = b"\xff" + ((1 << 88) - 10 * GIB).to_bytes(11, "big")
    archive = _gz(tmp_path, _header(b"b/", b"5", 0), _header(b"b/x", b"0", 0, field=negative))
    _refused(archive, "declares a negative size")


def test_a_chain_of_small_records_is_refused(tmp_path: Path) -> None:
    record = b"b/" + b"n" * 98
    link = _header(b"././@LongLink", b"L", len(record)) + record.ljust(512, b"\0")
    archive = _gz(tmp_path, _header(b"b/", b"5", 0), link * 2000, _header(b"b/x", b"0", 0))
    _refused(archive, "more than 8 header records in a row")


def test_records_over_the_archive_total_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(publish_module, "MAX_HEADER_RECORDS_BYTES", 1000)
    records = [b"b/%d/" % i + b"/".join([b"n" * 99] * 4) for i in range(4)]
    members = [_header(b"././@LongLink", b"L", len(r)) + r.ljust(512, b"\0") + _header(r[:99], b"0", 0)
               for r in records]
    archive = _gz(tmp_path, _header(b"b/", b"5", 0), *members)
    _refused(archive, "header records over 1,000 bytes in all")


def test_an_old_gnu_sparse_member_is_refused_before_its_map(tmp_path: Path, no_record_reads: None) -> None:
    header = bytearray(_header(b"b/s", b"S", 0))
    header[482] = 1  # "isextended": a chain of sparse map blocks follows, as long as the archive says
    header[148:156] = b" " * 8
    header[148:156] = b"%06o\0 " % sum(header)
    archive = _gz(tmp_path, _header(b"b/", b"5", 0), bytes(header), b"\1" * 512 * 100)
    _refused(archive, "member 'b/s' is sparse")


def test_a_member_nested_past_the_depth_cap_is_refused(tmp_path: Path) -> None:
    member = tarfile.TarInfo("b/" + "d/" * 40 + "x")
    member.size = 1
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.addfile(member, io.BytesIO(b"x"))
    (tmp_path / "deep.tar.gz").write_bytes(buffer.getvalue())
    _refused(tmp_path / "deep.tar.gz", "nested more than 32 folders deep")


def test_the_decompressed_stream_is_capped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(publish_module, "MAX_UNPACKED_BYTES", 0)
    monkeypatch.setattr(publish_module, "STREAM_OVERHEAD", 100_000)
    archive = _gz(tmp_path, _header(b"b/", b"5", 0), *[_header(b"b/%d" % i, b"5", 0) for i in range(1000)])
    _refused(archive, "more than 100,000 bytes unpacked")


def test_a_fifo_as_the_archive_is_refused_without_waiting(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe.tar.gz")
    _refused(tmp_path / "pipe.tar.gz", r"archive is a FIFO \(named pipe\), not a regular file")


@pytest.mark.parametrize("mode", ["w:gz", "w:bz2", "w:xz", "w"])
def test_every_compression_tar_writes_unpacks(bundle: Path, tmp_path: Path, mode: str) -> None:
    archive = tmp_path / f"b.{mode}.tar"
    with tarfile.open(archive, mode, format=tarfile.GNU_FORMAT) as tar:
        tar.add(bundle, arcname=bundle.name)
    with unpacked_archive(archive) as unpacked:
        assert verify_bundle(unpacked, load_trusted()).files == 4


def test_long_names_in_pax_and_gnu_form_unpack(tmp_path: Path) -> None:
    init_keys()
    root = tmp_path / "b"
    long = root / ("n" * 120) / ("m" * 120)
    long.mkdir(parents=True)
    (long / "SUMMARY.json").write_text("{}")
    sign_bundle(root, load_signing_key(), {"window": "w"})
    for fmt in (tarfile.PAX_FORMAT, tarfile.GNU_FORMAT):
        archive = tmp_path / f"long-{fmt}.tar.gz"
        with tarfile.open(archive, "w:gz", format=fmt) as tar:
            tar.add(root, arcname="b")
        with unpacked_archive(archive) as unpacked:
            assert verify_bundle(unpacked, load_trusted()).files == 1


def test_errors_inside_an_archive_name_the_archive_not_the_temporary_folder(small: Path, tmp_path: Path) -> None:
    (small / ENVELOPE).unlink()
    archive = tmp_path / "unsigned.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(small, arcname="b")
    with pytest.raises(VerifyError) as info:
        with unpacked_archive(archive) as unpacked:
            verify_bundle(unpacked, load_trusted())
    assert str(info.value).startswith(f"{archive}/b: no {ENVELOPE}")
    assert "campaign-verify-" not in str(info.value)


# ------------------------------------------------------------------------------------------- publish

@pytest.mark.parametrize("change, where", [
    (lambda s: s.update(candidates=["spec"]), "SUMMARY.json: candidates: should be a JSON object"),
    (lambda s: s["candidates"]["spec"].update(gates={"greedy": 7}), "candidates.spec.gates.greedy: should be a JSON"),
    (lambda s: s["candidates"]["spec"].update(promotion_gates="greedy"), "promotion_gates: should be a JSON list"),
    (lambda s: s["lanes"]["base"].update(boot_seconds=[1]), "lanes.base.boot_seconds: should be a JSON object"),
    (lambda s: s.clear() or s.update(x=1) or None, None),  # every container missing: rendered empty
])
def test_a_signed_summary_of_an_unexpected_shape_is_one_line(bundle: Path, tmp_path: Path, change, where) -> None:
    summary = json.loads((bundle / "SUMMARY.json").read_text())
    change(summary)
    (bundle / "SUMMARY.json").write_text(json.dumps(summary))
    (bundle / ENVELOPE).unlink()
    sign_bundle(bundle, load_signing_key(), {"window": bundle.name})
    done = subprocess.run([sys.executable, "-m", "campaign.cli", "publish", str(bundle), "--out", str(tmp_path / "o")],
                          capture_output=True, text=True, timeout=120)
    assert "Traceback" not in done.stderr, done.stderr
    if where is None:
        assert done.returncode == 0, done.stderr
        return
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert str(bundle / "SUMMARY.json") in done.stderr.replace("\n", "") and where in done.stderr.replace("\n", "")


def test_a_gate_result_of_an_unexpected_shape_is_one_line(bundle: Path, tmp_path: Path) -> None:
    """A result without a presentation (an older bundle's) has it derived by its kind's gate, which reads its
    evidence by shape: a speed estimate that is not numbers is one line, not a figure printed from a word."""
    from campaign.window.report import publish as publish_with_gates

    path = bundle / "gates" / "greedy" / "spec.json"
    gate = json.loads(path.read_text())
    gate.update(kind="speed", details={"levels": {"1": {"estimate": {"change": "fast", "confidence": 0.95,
                                                                      "low": 0, "high": 1}}}})
    path.write_text(json.dumps(gate))
    with pytest.raises(InputError, match=r"greedy/spec.json: details.levels.1.estimate.change: should be a number"):
        publish_with_gates(bundle, tmp_path / "out")


@pytest.mark.parametrize("presentation, where", [
    ({"plots": [{"title": "t", "panels": [{"type": "pie"}]}]}, "presentation.plots.0.panels.0"),
    ({"headlines": [{"label": "x", "value": [1]}]}, "presentation.headlines.0.value"),
    ({"plots": [{"title": "t", "panels": [{"type": "bars", "categories": ["a"], "series": [{"values": ["1"]}]}]}]},
     "presentation.plots.0.panels.0.bars.series.0.values.0: should be a number"),
])
def test_a_presentation_of_an_unexpected_shape_is_one_line(bundle: Path, tmp_path: Path, presentation,
                                                           where) -> None:
    path = bundle / "gates" / "greedy" / "spec.json"
    gate = json.loads(path.read_text())
    path.write_text(json.dumps({**gate, "presentation": presentation}))
    with pytest.raises(InputError, match=re.escape(f"greedy/spec.json: {where}")):
        publish(bundle, tmp_path / "out")


def test_publish_streams_the_archive_and_it_verifies(bundle: Path, tmp_path: Path) -> None:
    written = publish(bundle, tmp_path / "out")
    assert not list((tmp_path / "out").glob(".*.tmp"))
    with unpacked_archive(written["archive"]) as unpacked:
        assert verify_bundle(unpacked, load_trusted()).files == 4


# ------------------------------------------------------------------------------------------- promote, rejudge

def test_promote_of_an_archive_says_it_is_an_archive(bundle: Path, tmp_path: Path) -> None:
    from campaign.promotion.promote import promote

    archive = publish(bundle, tmp_path / "out")["archive"]
    with pytest.raises(InputError, match=f"{archive}: an archive, not a bundle folder"):
        promote(archive, key=None, trusted=load_trusted(), dry_run=True)


@pytest.mark.parametrize("fault", ["unsigned", "chain", "fifo"])
def test_promote_refusals_name_the_user_s_folder_never_the_private_copy(small: Path, fault: str) -> None:
    from campaign.promotion.promote import promote

    if fault == "unsigned":
        (small / ENVELOPE).unlink()
    elif fault == "chain":
        _chain(small / "raw", 200)
    else:
        os.mkfifo(small / "raw" / "pipe")
    try:
        decision, steps, entry = promote(small, key=None, trusted=load_trusted(), dry_run=True)
    finally:
        if fault == "chain":
            _remove_chain(small / "raw", 200)
    (refusal,) = decision.refusals
    assert refusal.startswith("bundle does not verify: ") and "campaign-promote-" not in refusal
    assert {"unsigned": f"{small}: no {ENVELOPE}", "chain": "folders nested more than 32 deep",
            "fifo": "raw/pipe: not a regular file (a FIFO"}[fault] in refusal


def test_an_error_after_verifying_names_the_user_s_folder(small: Path) -> None:
    from campaign.promotion.promote import promote

    (small / "SUMMARY.json").write_text(json.dumps({"status": "complete", "candidates": {"spec": {}}}))
    (small / "contract").mkdir()
    (small / "contract" / "freeze.json").write_text("{}")
    (small / "contract" / "c.yaml").write_text("contract: [\n")  # signed, so it verifies; then promote reads it
    (small / ENVELOPE).unlink()
    sign_bundle(small, load_signing_key(), {"window": "w1"})
    with pytest.raises(InputError) as info:
        promote(small, key=None, trusted=load_trusted(), dry_run=True)
    assert str(info.value).startswith(f"{small}/contract/c.yaml")
    assert "campaign-promote-" not in str(info.value)


def test_errors_named_as_maps_the_copy_to_the_user_s_path(tmp_path: Path) -> None:
    from campaign.errors import ContractError
    from campaign.fsutil import UnreadableFile
    from campaign.receipts.bundle import errors_named_as

    copy = tmp_path / "private" / "bundle"
    with pytest.raises(ContractError) as info, errors_named_as(copy, "/home/u/b"):
        raise ContractError("bad", file=str(copy / "contract" / "c.yaml"), line=3, field="x")
    assert str(info.value) == "/home/u/b/contract/c.yaml:3: x: bad" and info.value.file == "/home/u/b/contract/c.yaml"
    with pytest.raises(UnreadableFile) as info, errors_named_as(copy, "/home/u/b"):
        raise UnreadableFile(copy / "SUMMARY.json", "no such file")
    assert info.value.path == "/home/u/b/SUMMARY.json"
    with pytest.raises(InputError, match=f"^{copy}2/x$"), errors_named_as(copy, "/home/u/b"):
        raise InputError(f"{copy}2/x")  # only the copy itself, not a name that starts like it


def test_rejudge_errors_name_the_source_bundle_not_the_partial_copy(tmp_path: Path) -> None:
    import shutil

    from campaign.window.rejudge import rejudge
    from tests.support.judging import signed_window

    source = signed_window(tmp_path)
    broken = tmp_path / "copy" / source.name
    shutil.copytree(source, broken)
    (broken / "lanes" / "base" / "spec.json").unlink()
    (broken / ENVELOPE).unlink()
    sign_bundle(broken, load_signing_key(), {"window": source.name})
    with pytest.raises(InputError) as info:
        rejudge(broken, key=load_signing_key(), trusted=load_trusted(), out_dir=tmp_path / "out")
    assert str(info.value).startswith(f"{broken}/lanes/base/spec.json: missing") and ".partial" not in str(info.value)
