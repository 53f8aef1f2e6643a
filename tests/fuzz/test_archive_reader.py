"""Fuzzing the archive reader: what `campaign verify BUNDLE.tar.gz` does (receipts.publish.unpacked_archive,
then verify_bundle on what it unpacked). Raw 512-byte tar headers written by hand (every typeflag, GNU long
names 'L'/'K', PAX 'x'/'g' records, sizes in octal, base-256 and garbage, names of any bytes), data shorter
or far longer than declared (a 1 GiB header record costs ~1 MB of gzip: members of compressed zeros, or a
hole in a sparse file), truncated and garbage streams, and a real bundle's archive with bytes changed.

Property: the archive is verified or refused with a one-line CampaignError, within 5 s and 200 MB, and the
temporary folder it unpacked into is gone either way."""

from __future__ import annotations

import bz2
import functools
import gzip
import io
import lzma
import os
import tarfile
from pathlib import Path
from typing import Any

from hypothesis import example, given
from hypothesis import strategies as st

from tests.fuzz.harness import check_outcome, run_bounded, scratch
from tests.fuzz.samples import make_bundle

MIB = 1 << 20
_ZERO_MIB_GZ = gzip.compress(bytes(MIB), compresslevel=9)  # ~1 KB; gzip members concatenate


def open_archive(path: Path) -> dict[str, Any]:
    """In the child: what `campaign verify ARCHIVE` does."""
    from campaign.receipts.bundle import verify_bundle
    from campaign.receipts.publish import unpacked_archive
    from campaign.signing import load_trusted

    with unpacked_archive(path) as target:
        verified = verify_bundle(target, load_trusted())
    return {"files": verified.files}


def check_archive(path: Path, evidence: str = "") -> None:
    check_outcome(run_bounded(lambda: open_archive(path)), may_pass=True, what=f"verify of archive {path}",
                  evidence=evidence or f"{path.name}: {_head(path)!r}")


def _head(path: Path) -> bytes:
    with open(path, "rb") as handle:
        return handle.read(1200)


def describe(parts: list[Any]) -> str:
    """Each member as (name, typeflag, size field, checksum field, data): what a reader needs to rebuild it."""
    shown = []
    for header, data in parts:
        shown.append((header[:100].rstrip(b"\0"), header[156:157], header[124:136], header[148:156],
                      header[257:265], data if not isinstance(data, bytes) or len(data) < 80 else data[:80] + b"..."))
    return repr(shown)


# ---------------------------------------------------------------- raw headers

def _octal(value: int, width: int) -> bytes:
    return (b"%0*o" % (width - 1, value))[-(width - 1):] + b"\0"


def encode_size(size: int, form: str, junk: bytes) -> bytes:
    if form == "octal":
        return _octal(size, 12) if size < 8 ** 11 else b"77777777777\0"
    if form == "base256":
        return b"\x80" + (size % (1 << 88)).to_bytes(11, "big")
    if form == "base256-negative":
        return b"\xff" + (((1 << 88) - size) % (1 << 88)).to_bytes(11, "big")
    if form == "spaces":
        return b" " * 12
    return (junk * 12)[:12]


def raw_header(name: bytes, typeflag: bytes, size_field: bytes, *, linkname: bytes = b"", mode: bytes = b"0000644\0",
               magic: bytes = b"ustar\x0000", prefix: bytes = b"", checksum: str = "good") -> bytes:
    block = bytearray(512)
    block[0:100] = name[:100].ljust(100, b"\0")
    block[100:108] = mode[:8].ljust(8, b"\0")
    block[108:116] = b"0000000\0" * 1
    block[116:124] = b"0000000\0"
    block[124:136] = size_field[:12].ljust(12, b"\0")
    block[136:148] = b"14000000000\0"
    block[156:157] = typeflag[:1] or b"\0"
    block[157:257] = linkname[:100].ljust(100, b"\0")
    block[257:265] = magic[:8].ljust(8, b"\0")
    block[345:500] = prefix[:155].ljust(155, b"\0")
    block[148:156] = b" " * 8
    if checksum == "good":
        block[148:156] = b"%06o\0 " % sum(block)
    elif checksum == "bad":
        block[148:156] = b"%06o\0 " % ((sum(block) + 1) % 8 ** 6)
    return bytes(block)


TYPEFLAGS = [b"0", b"\0", b"5", b"1", b"2", b"3", b"4", b"6", b"7", b"L", b"K", b"x", b"g", b"S", b"D", b"M", b"V",
             b"N", b"A", b"\xff"]
HEADER_RECORDS = {b"L", b"K", b"x", b"g"}
NAMES = [b"b", b"b/", b"b/SUMMARY.json", b"b/x", b"b/../../x", b"/tmp/x", b"./b/x", b"", b"\xff\xfe", b"b/\x1b[2J",
         b"b/a\nb", b"b/[/x]", b"." * 100, b"a" * 100, b"b/" + b"d/" * 49]


@st.composite
def pax_records(draw: st.DrawFn) -> bytes:
    records = b""
    for _ in range(draw(st.integers(0, 4))):
        key = draw(st.sampled_from([b"path", b"linkpath", b"size", b"uid", b"hdrcharset", b"GNU.sparse.major",
                                    b"GNU.sparse.map", b"GNU.sparse.size", b"mtime", b"comment", b"", b"\xff"]))
        value = draw(st.one_of(st.binary(max_size=20), st.sampled_from([b"-1", b"99999999999999999999", b"b/x",
                                                                       b"BINARY", b"1e400", b"nan"])))
        body = b" " + key + b"=" + value + b"\n"
        length = len(body) + len(str(len(body) + 3))
        length = len(body) + len(str(length))
        form = draw(st.sampled_from(["right", "right", "zero", "huge", "negative", "junk"]))
        records += {"right": b"%d" % length, "zero": b"0", "huge": b"999999999999", "negative": b"-5",
                    "junk": b"x"}[form] + body
    return records


@st.composite
def members(draw: st.DrawFn) -> list[Any]:
    """(header bytes, data) pairs; data is bytes, or ("zeros", n) for n bytes of zeros made cheaply."""
    out: list[Any] = []
    if draw(st.booleans()):  # most start like a bundle: its folder first
        out.append((raw_header(b"b/", b"5", _octal(0, 12), mode=b"0000755\0"), b""))
    for _ in range(draw(st.integers(1, 4))):
        typeflag = draw(st.sampled_from(TYPEFLAGS))
        name = draw(st.one_of(st.sampled_from(NAMES), st.binary(max_size=100)))
        huge = typeflag in HEADER_RECORDS and draw(st.booleans())
        if huge:
            size = draw(st.sampled_from([MIB, 64 * MIB, 300 * MIB, 1024 * MIB]))
        else:
            size = draw(st.one_of(st.integers(0, 2048), st.sampled_from([8 ** 11 - 1, 8 ** 11, 10 * 1024 ** 3,
                                                                         2 ** 63, 2 ** 80])))
        form = draw(st.sampled_from(["octal", "octal", "base256", "base256-negative", "spaces", "junk"]))
        field = encode_size(size, form, draw(st.binary(min_size=1, max_size=3)))
        header = raw_header(name, typeflag, field, linkname=draw(st.sampled_from([b"", b"/etc/passwd", b"b/x"])),
                            magic=draw(st.sampled_from([b"ustar\x0000", b"ustar  \0", b"\0" * 8, b"xxxxxxxx"])),
                            checksum=draw(st.sampled_from(["good", "good", "good", "bad", "spaces"])))
        if huge:
            data: Any = ("zeros", size)
        elif typeflag in (b"x", b"g"):
            data = draw(pax_records())
        elif size <= 2048:
            data = draw(st.one_of(st.binary(min_size=size, max_size=size), st.binary(max_size=size)))
        else:
            data = draw(st.binary(max_size=1024))  # far less than declared
        out.append((header, data))
        if typeflag in HEADER_RECORDS and draw(st.booleans()):  # the member the record describes
            out.append((raw_header(b"b/y", b"0", _octal(2, 12)), b"{}"))
    return out


def _blocks(data: bytes) -> bytes:
    return data + bytes(-len(data) % 512)


def write_archive(path: Path, parts: list[Any], compression: str, end_blocks: bool) -> None:
    if compression == "gz":  # zeros as concatenated gzip members of 1 MiB each
        with open(path, "wb") as out:
            for header, data in parts:
                if isinstance(data, tuple):
                    out.write(gzip.compress(header, compresslevel=1))
                    full, rest = divmod(data[1], MIB)
                    out.write(_ZERO_MIB_GZ * full + gzip.compress(bytes(rest) + bytes(-rest % 512), compresslevel=1))
                else:
                    out.write(gzip.compress(header + _blocks(data), compresslevel=1))
            if end_blocks:
                out.write(gzip.compress(bytes(1024), compresslevel=1))
        return
    with open(path, "wb") as out:  # plain tar; zeros as a hole (a sparse file costs no disk)
        for header, data in parts:
            out.write(header)
            if isinstance(data, tuple):
                out.seek(data[1] + (-data[1] % 512), 1)
            else:
                out.write(_blocks(data))
        out.write(bytes(1024) if end_blocks else b"")
        out.truncate()
    if compression in ("bz2", "xz"):
        raw = path.read_bytes()
        path.write_bytes(bz2.compress(raw) if compression == "bz2" else lzma.compress(raw))


@given(parts=members(), compression=st.sampled_from(["gz", "gz", "tar", "bz2", "xz"]), end_blocks=st.booleans())
def test_raw_headers(parts: list[Any], compression: str, end_blocks: bool) -> None:
    if compression in ("bz2", "xz") and any(isinstance(data, tuple) and data[1] > MIB for _, data in parts):
        compression = "tar"  # compressing a hole's zeros would cost the parent the time
    path = scratch("archive-") / "hostile.tar.gz"
    write_archive(path, parts, compression, end_blocks)
    check_archive(path, f"{compression}, end blocks {end_blocks}: {describe(parts)}")


@example(size=1024 * MIB, typeflag=b"L", compression="gz").via("a 1 GiB GNU long name (issue #30 item 6)")
@example(size=1024 * MIB, typeflag=b"x", compression="gz").via("a 1 GiB PAX header (issue #30 item 6)")
@given(size=st.sampled_from([300 * MIB, 1024 * MIB]), typeflag=st.sampled_from(sorted(HEADER_RECORDS)),
       compression=st.sampled_from(["gz", "tar"]))
def test_huge_header_records(size: int, typeflag: bytes, compression: str) -> None:
    parts = [(raw_header(b"b/", b"5", _octal(0, 12), mode=b"0000755\0"), b""),
             (raw_header(b"././@LongLink", typeflag, _octal(size, 12)), ("zeros", size)),
             (raw_header(b"b/x", b"0", _octal(2, 12)), b"{}")]
    path = scratch("archive-") / "bomb.tar.gz"
    write_archive(path, parts, compression, end_blocks=True)
    check_archive(path, f"{compression}: a {typeflag!r} header record of {size} bytes")


# ---------------------------------------------------------------- streams

@given(data=st.binary(max_size=2048), wrap=st.sampled_from(["none", "gz", "bz2", "xz", "gz-truncated"]))
def test_garbage_streams(data: bytes, wrap: str) -> None:
    if wrap == "gz":
        data = gzip.compress(data)
    elif wrap == "gz-truncated":
        data = gzip.compress(data)[: max(1, len(data) // 2)]
    elif wrap == "bz2":
        data = bz2.compress(data)
    elif wrap == "xz":
        data = lzma.compress(data)
    path = scratch("archive-") / "garbage.tar.gz"
    path.write_bytes(data)
    check_archive(path)


def _real_archive() -> bytes:
    """A real bundle's tar (uncompressed), as publish archives it, signed with this test's key: made once per
    key, so every example edits the same bytes (hypothesis replays an example's draws against them)."""
    return _archive_for(os.environ.get("XDG_CONFIG_HOME", ""))


@functools.lru_cache(maxsize=4)
def _archive_for(config: str) -> bytes:
    from campaign.receipts.publish import archive_bundle

    folder = scratch("real-")
    bundle = make_bundle(folder)
    archive = archive_bundle(bundle, folder / "b.tar.gz")
    return gzip.decompress(archive.read_bytes())


@given(data=st.data(), edit=st.sampled_from(["flip", "truncate", "insert-header", "zero-block", "gz-truncate"]))
def test_a_real_archive_changed(data: st.DataObject, edit: str) -> None:
    raw = bytearray(_real_archive())
    if edit == "flip":
        for _ in range(data.draw(st.integers(1, 4), label="flips")):
            at = data.draw(st.integers(0, len(raw) - 1), label="offset")
            raw[at] ^= data.draw(st.integers(1, 255), label="xor")
    elif edit == "truncate":
        del raw[data.draw(st.integers(0, len(raw) - 1), label="length"):]
    elif edit == "insert-header":
        at = 512 * data.draw(st.integers(0, len(raw) // 512), label="block")
        header, body = data.draw(members(), label="members")[-1]
        raw[at:at] = header + (_blocks(body) if isinstance(body, bytes) else b"")
    elif edit == "zero-block":
        at = 512 * data.draw(st.integers(0, len(raw) // 512 - 1), label="block")
        raw[at:at + 512] = bytes(512)
    packed = gzip.compress(bytes(raw), mtime=0)
    if edit == "gz-truncate":
        packed = packed[:data.draw(st.integers(1, len(packed) - 1), label="length")]
    path = scratch("archive-") / "changed.tar.gz"
    path.write_bytes(packed)
    check_archive(path)


def test_the_real_archive_verifies() -> None:
    path = scratch("archive-") / "real.tar.gz"
    path.write_bytes(gzip.compress(_real_archive()))
    outcome = run_bounded(lambda: open_archive(path))
    assert outcome.kind == "ok", outcome.describe()


def test_a_tar_with_a_deep_folder_chain() -> None:
    """Item 7 through an archive: 1,200 nested folders unpacked, then walked by verify."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        name = "b"
        for _ in range(1200):
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
            name += "/d"
    path = scratch("archive-") / "deep.tar.gz"
    path.write_bytes(buffer.getvalue())
    check_archive(path)
