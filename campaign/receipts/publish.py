"""Publishing a bundle: a static HTML report, a Markdown summary and a .tar.gz archive.

Everything is rendered from the bundle's own files (SUMMARY.json, gates/*/*.json, lanes/*), so a
report can be re-rendered later and shows nothing the bundle does not hold. The HTML needs no network:
styles inline, plots as inline SVG (matplotlib, ``plots.py``), jinja2 autoescape on. It opens with the
decision per candidate (``decision.py``).
"""

from __future__ import annotations

import bz2
import contextlib
import gzip
import io
import lzma
import os
import tarfile
import tempfile
import zlib
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO

from jinja2 import Environment, PackageLoader

from campaign.errors import InputError, VerifyError
from campaign.fsutil import atomic_write_bytes, fsync_dir, load_json_strict, open_regular, private_tempdir
from campaign.presentation import headline, quantity
from campaign.receipts.bundle import (
    MAX_BUNDLE_BYTES,
    MAX_BUNDLE_FILES,
    MAX_FOLDER_DEPTH,
    bundle_entries,
    errors_named_as,
    require_bundle_folder,
)
from campaign.receipts.decision import decisions
from campaign.receipts.plots import plots_for
from campaign.receipts.shapes import Fill, checked_gate, checked_presentation, checked_summary

__all__ = ["archive_bundle", "load_report_data", "publish", "render_html", "render_markdown", "template_environment",
           "unpacked_archive"]


SHOWN_FAILURE_CHARS = 4000  # of a lane's launch_failure.txt: its head says why; the rest is in the bundle


def load_report_data(bundle: Path, fill: Fill | None = None) -> dict[str, Any]:
    """What the report shows, read through the bounded reader and checked for shape (``shapes.py``), with
    each candidate's decision (``decisions``):
    an unexpected shape is one line naming the file and the field. A gate result carries its headlines
    and plot data; ``fill`` derives them for a result written before results carried them."""
    require_bundle_folder(bundle)
    summary_path = bundle / "SUMMARY.json"
    summary = checked_summary(load_json_strict(summary_path, what="SUMMARY.json"), summary_path)
    gates: list[dict[str, Any]] = []
    for path in sorted((bundle / "gates").glob("*/*.json")):
        gate = checked_gate(load_json_strict(path, what="gate result"), path)
        gates.append({**gate, "presentation": checked_presentation(gate, path, fill)})
    lanes = {}
    for lane_dir in sorted((bundle / "lanes").iterdir()) if (bundle / "lanes").is_dir() else []:
        failure = lane_dir / "launch_failure.txt"
        lanes[lane_dir.name] = {"failure": _head(failure) if failure.is_file() else None}
    # decided once here: the report, SUMMARY.md, the index entry and the console's lines read these
    return {"summary": summary, "gates": gates, "lanes": lanes, "bundle": bundle.name,
            "decisions": decisions(summary, gates)}


def _head(path: Path) -> str:
    """The first SHOWN_FAILURE_CHARS characters of a text file, reading no more than four bytes each."""
    with open_regular(path, what="launch failure") as fd:
        return os.read(fd, 4 * SHOWN_FAILURE_CHARS).decode("utf-8", "replace")[:SHOWN_FAILURE_CHARS]


def _table(rows: list[dict[str, Any]]) -> dict[str, Any]:
    columns: list[str] = []
    for row in rows:
        for key in row:
            if key not in columns and not isinstance(row[key], (dict, list)):
                columns.append(key)
    return {"columns": columns, "rows": [[row.get(c) for c in columns] for row in rows]}


def _detail_tables(details: dict[str, Any]) -> list[dict[str, Any]]:
    """Per-item evidence of any gate: each list of records becomes a table, in the bundle's own words."""
    tables = []
    for name, value in details.items():
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            tables.append({"name": name, **_table(value)})
        elif isinstance(value, dict) and value and all(isinstance(v, dict) for v in value.values()):
            tables.append({"name": name, **_table([{"key": k, **v} for k, v in value.items()])})
    return tables


SHARED = 0o644  # published files are for others to read; keys and private state stay 0600

_MD_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", "|": "\\|", "`": "\\`", "[": "\\[",
                             "]": "\\]", "*": "\\*", "_": "\\_", "\n": " ", "\r": " "})


def md_escape(value: Any) -> Any:
    """Bundle text in Markdown: viewers render raw HTML and links, and a pipe breaks a table row."""
    return value.translate(_MD_ESCAPES) if isinstance(value, str) else value


def template_environment(*, html: bool = True) -> Environment:
    """The package's templates (report, summary, index) with the project's escaping and filters."""
    # autoescape is on for HTML unconditionally: bundle text (model output, boot logs) is untrusted; in
    # Markdown every value printed is escaped the Markdown way
    env = Environment(loader=PackageLoader("campaign.receipts", "templates"), autoescape=html,
                      trim_blocks=True, lstrip_blocks=True, finalize=None if html else md_escape)
    env.filters["quantity"] = quantity
    env.filters["headline"] = headline
    return env


def render_html(data: dict[str, Any]) -> str:
    gates = [{**g, "tables": _detail_tables(g.get("details") or {}), "plots": plots_for(g)} for g in data["gates"]]
    return template_environment().get_template("report.html.j2").render(**_decided(data), gate_views=gates)


def render_markdown(data: dict[str, Any]) -> str:
    return template_environment(html=False).get_template("summary.md.j2").render(
        **_decided(data), headlines=_headlines(data["gates"]))


def _decided(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with its decisions (``load_report_data`` made them; report data put together by hand has none)."""
    return data if "decisions" in data else {**data, "decisions": decisions(data["summary"], data["gates"])}


def _headlines(gates: list[dict[str, Any]]) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    """Per candidate, the figures a decision rests on, with their CIs and denominators: each gate's
    headlines, as its result carries them."""
    out: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for gate in gates:
        rows = out.setdefault(str(gate.get("candidate")), [])
        rows += [(f"{gate['gate']} {h['label']}", h) for h in (gate.get("presentation") or {}).get("headlines") or []]
    return out


def archive_bundle(bundle: Path, target: Path) -> Path:
    """``target``, a .tar.gz of the bundle folder, written as a stream to a temporary file beside it and
    renamed into place (never held in memory). The folder is walked with the verifier's bounds; a link or
    anything not a regular file or folder is refused."""
    try:
        names = bundle_entries(bundle)
    except VerifyError as exc:
        raise InputError(f"{bundle}: not archived: {exc}") from None
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, SHARED)
        with os.fdopen(fd, "wb") as handle:
            with tarfile.open(fileobj=handle, mode="w:gz") as tar:
                for name in names:
                    tar.add(bundle / name, arcname=f"{bundle.name}/{name.rstrip('/')}", recursive=False)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    fsync_dir(target.parent)
    return target


def publish(bundle: Path, out_dir: Path | None = None, fill: Fill | None = None, *,
            archive_name: str | None = None, data: dict[str, Any] | None = None) -> dict[str, Path]:
    """report.html, SUMMARY.md and <bundle>.tar.gz (or ``archive_name``.tar.gz), written beside (not inside) the
    signed bundle; ``data``: the bundle's report data when the caller read it already."""
    out_dir = out_dir or bundle.parent / f"{bundle.name}.published"
    data = data if data is not None else load_report_data(bundle, fill)
    html = out_dir / "report.html"
    markdown = out_dir / "SUMMARY.md"
    atomic_write_bytes(html, render_html(data).encode(), mode=SHARED)
    atomic_write_bytes(markdown, render_markdown(data).encode(), mode=SHARED)
    archive = archive_bundle(bundle, out_dir / f"{archive_name or bundle.name}.tar.gz")
    return {"html": html, "markdown": markdown, "archive": archive}


# An archive is refused, unread, past these: a bundle is raw records and logs, not gigabytes.
MAX_UNPACKED_BYTES = MAX_BUNDLE_BYTES  # data declared by all members (CAMPAIGN_MAX_UNPACKED_BYTES)
# members: a bundle's files and folders (each at most MAX_BUNDLE_FILES), its top folder and "."; more
# could never verify, and each one unpacked is a file created
MAX_MEMBERS = 2 * MAX_BUNDLE_FILES + 2
# A header record (GNU long name or long link 'L'/'K', pax extended header 'x'/'X') holds one member's
# long name or extra fields, and tarfile reads it whole into memory as soon as it reaches it: its size
# field is checked first. A path is at most 4 KiB (PATH_MAX), so 64 KiB is 16 times any real record.
MAX_HEADER_RECORD = 64 << 10
MAX_HEADER_RECORDS_BYTES = 16 << 20  # all records of one archive (1.6 KiB for each of MAX_BUNDLE_FILES)
MAX_GLOBAL_HEADER_BYTES = 64 << 10  # pax global records ('g'), which tarfile keeps for the whole archive
MAX_HEADER_CHAIN = 8  # records before one member; tar writes at most three (pax, long name, long link)
# decompressed bytes read in all, past the declared data: headers, records and padding of MAX_MEMBERS
STREAM_OVERHEAD = 256 << 20

_RECORDS = {tarfile.GNUTYPE_LONGNAME: "GNU long-name", tarfile.GNUTYPE_LONGLINK: "GNU long-link",
            tarfile.XHDTYPE: "pax", tarfile.SOLARIS_XHDTYPE: "pax", tarfile.XGLTYPE: "pax global"}


class _Refused(Exception):
    """A header refused before tarfile reads what it announces. Never one of tarfile's own errors, which
    its reader would swallow or rename."""


class _CheckedInfo(tarfile.TarInfo):
    """tarfile's member header, checked by the archive (``_GuardedTar.check``) as soon as its 512 bytes are
    parsed and before tarfile reads the record or map it announces. ``_proc_member`` is the entry point
    tarfile's own comments name for subclasses; the ``_proc_gnusparse_*`` readers of a sparse map (whose
    length the archive states) are refused outright: a bundle has no sparse member."""

    def _proc_member(self, tar: Any) -> Any:
        tar.check(self)
        return super()._proc_member(tar)  # type: ignore[misc]  # tarfile's private hook: not in typeshed

    def _proc_gnusparse_00(self, next: tarfile.TarInfo, *_: Any) -> None:
        raise _Refused(f"member {next.name!r} is sparse; a bundle has none (refused unread)")

    _proc_gnusparse_01 = _proc_gnusparse_10 = _proc_gnusparse_00


class _GuardedTar(tarfile.TarFile):
    tarinfo = _CheckedInfo

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.records_bytes = self.global_bytes = self.chain = 0
        super().__init__(*args, **kwargs)

    def check(self, info: tarfile.TarInfo) -> None:
        where = f"at byte {info.offset:,}"
        if info.size < 0:
            raise _Refused(f"a header {where} declares a negative size")
        if info.type == tarfile.GNUTYPE_SPARSE:
            raise _Refused(f"member {info.name!r} is sparse; a bundle has none (refused unread)")
        if info.type not in _RECORDS:
            self.chain = 0
            return
        self.chain += 1
        self.records_bytes += info.size
        self.global_bytes += info.size if info.type == tarfile.XGLTYPE else 0
        if info.size > MAX_HEADER_RECORD:
            raise _Refused(f"a {_RECORDS[info.type]} header record of {info.size:,} bytes {where} (at most "
                           f"{MAX_HEADER_RECORD:,}); refused before it is read")
        if self.chain > MAX_HEADER_CHAIN:
            raise _Refused(f"more than {MAX_HEADER_CHAIN} header records in a row {where}; refused")
        if self.records_bytes > MAX_HEADER_RECORDS_BYTES or self.global_bytes > MAX_GLOBAL_HEADER_BYTES:
            raise _Refused(f"header records over {MAX_HEADER_RECORDS_BYTES:,} bytes in all (pax global ones "
                           f"over {MAX_GLOBAL_HEADER_BYTES:,}) {where}; refused")


class _Counted(io.RawIOBase):
    """The decompressed tar stream, refused past ``limit`` bytes (a gzip bomb stops there, not in memory)."""

    def __init__(self, stream: BinaryIO, limit: int) -> None:
        super().__init__()
        self._stream, self._limit, self.total = stream, limit, 0

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        want = self._limit + 1 - self.total
        data = self._stream.read(want if size is None or size < 0 else min(size, want))
        self.total += len(data)
        if self.total > self._limit:
            raise _Refused(f"more than {self._limit:,} bytes unpacked (CAMPAIGN_MAX_UNPACKED_BYTES and "
                           "headers); refused")
        return data


def _decompressed(raw: BinaryIO) -> BinaryIO:
    """gzip, bzip2, xz or plain tar, told by the first bytes (the formats ``tar -a`` writes)."""
    head = raw.read(6)
    raw.seek(0)
    # the ignores: typeshed's compressed files are BufferedIOBase, not BinaryIO; tarfile reads either
    if head.startswith(b"\x1f\x8b"):
        return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]
    if head.startswith(b"BZh"):
        return bz2.BZ2File(raw)  # type: ignore[return-value]
    if head.startswith(b"\xfd7zXZ\x00"):
        return lzma.LZMAFile(raw)  # type: ignore[return-value]
    return raw


_UNREADABLE = (OSError, tarfile.TarError, EOFError, ValueError, lzma.LZMAError, zlib.error, RecursionError)


@contextlib.contextmanager
def unpacked_archive(archive: Path) -> Iterator[Path]:
    """The bundle inside ``archive``, unpacked into a temporary folder that is always removed. The archive
    is opened once as a regular file and read as one stream, decompressed by us under a byte cap. Every
    header is checked as it is parsed, before what it announces is read: a header record (long name, pax)
    over MAX_HEADER_RECORD, a sparse member, a negative size; then every member before its data: regular
    files and directories only, no links, no absolute or ``..`` names, at most MAX_FOLDER_DEPTH folders
    deep, one top folder that is a folder, at most MAX_MEMBERS members and MAX_UNPACKED_BYTES declared in
    all (a declared size over the cap is refused without reading the data). Errors raised while the
    unpacked bundle is used name ``<archive>/<folder>``, not the temporary folder."""
    with open_regular(archive, what="archive") as fd, open(fd, "rb", closefd=False) as raw, \
            private_tempdir("campaign-verify-") as target:
        try:
            stream = _Counted(_decompressed(raw), MAX_UNPACKED_BYTES + STREAM_OVERHEAD)
            tar = _GuardedTar.open(fileobj=stream, mode="r|")
        except _Refused as exc:
            raise InputError(f"{archive}: {exc}") from None
        except _UNREADABLE as exc:
            raise InputError(f"{archive}: not a readable archive: {exc}") from None
        with tar, errors_named_as(target, archive):  # an OSError of tarfile names the temporary folder
            try:
                top = _unpack(archive, tar, target)
            except _Refused as exc:
                raise InputError(f"{archive}: {exc}") from None
            except _UNREADABLE as exc:  # tarfile's own parse errors included
                raise InputError(f"{archive}: unreadable member: {exc}") from None
        with errors_named_as(target, archive):
            yield target / top


def _unpack(archive: Path, tar: tarfile.TarFile, target: Path) -> str:
    tops: set[str] = set()
    total = count = 0
    while (member := tar.next()) is not None:
        # a stream's reader keeps every member; nothing here looks back
        tar.members.clear()  # type: ignore[attr-defined]  # tarfile's attribute, not in typeshed
        count += 1
        total += member.size
        pure = PurePosixPath(member.name)
        if not pure.parts and member.isdir():
            continue  # "." itself, as `tar -C dir -czf x.tgz .` writes it: nothing to unpack
        if pure.is_absolute() or ".." in pure.parts or not pure.parts:
            raise InputError(f"{archive}: member name {member.name!r} is not allowed")
        if member.issparse() or any(k.startswith("GNU.sparse") for k in member.pax_headers):
            raise InputError(f"{archive}: member {member.name!r} is sparse; a bundle has none")
        if not (member.isreg() or member.isdir()):
            raise InputError(f"{archive}: member {member.name!r} is not a regular file or directory")
        if len(pure.parts) == 1 and not member.isdir():
            raise InputError(f"{archive}: {member.name!r} must be the bundle's folder, not a file")
        if len(pure.parts) > MAX_FOLDER_DEPTH + 2:
            raise InputError(f"{archive}: member {member.name[:200]!r}... is nested more than {MAX_FOLDER_DEPTH} "
                             "folders deep; not a bundle")
        if count > MAX_MEMBERS:
            raise InputError(f"{archive}: more than {MAX_MEMBERS} members; not a bundle")
        if total > MAX_UNPACKED_BYTES:
            raise InputError(f"{archive}: declares more than {MAX_UNPACKED_BYTES} bytes unpacked "
                             "(CAMPAIGN_MAX_UNPACKED_BYTES); refused unread")
        tops.add(pure.parts[0])
        if len(tops) != 1:
            raise InputError(f"{archive}: expected one bundle directory, found {len(tops)}")
        tar.extract(member, target, filter="data")
    if not tops:
        raise InputError(f"{archive}: empty archive")
    return tops.pop()
