"""Signing and verifying a receipt bundle.

The envelope ``receipt.dsse.json`` is DSSE: its payload is an in-toto Statement v1 listing every
other file of the bundle as a subject with its sha256, signed with Ed25519 over DSSE's PAE encoding.
Verification is strict: the files on disk must equal the subjects exactly, every digest must match,
a trusted key must have signed, and links, ``..``, absolute names and duplicate JSON keys are refused.
"""

from __future__ import annotations

import base64
import errno
import hashlib
import os
import re
import stat
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Iterator, Sequence

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from campaign.contracts.hashing import canonical_json, sha256_file
from campaign.contracts.secretrefs import looks_like_token
from campaign.errors import CampaignError, InputError, RunError, VerifyError
from campaign.fsutil import (
    MAX_JSON_BYTES,
    UnreadableFile,
    atomic_write_json,
    describe_mode,
    hash_regular_file,
    loads_strict,
    open_regular,
    read_bounded,
)
from campaign.signing import SigningKey, TrustedKeys

__all__ = ["ENVELOPE", "MAX_BUNDLE_BYTES", "MAX_BUNDLE_FILES", "MAX_FOLDER_BYTES", "MAX_ENVELOPE_BYTES", "MAX_FOLDER_DEPTH",
           "MAX_SIGNATURES", "PAYLOAD_TYPE", "PREDICATE_TYPE", "VerifiedBundle", "bundle_entries", "copy_bundle",
           "errors_named_as", "find_secrets", "pae", "require_bundle_folder", "sign_bundle", "verify_bundle"]

ENVELOPE = "receipt.dsse.json"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://campaign.invalid/receipt-bundle/v1"


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE pre-authentication encoding: what is actually signed."""
    kind = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


def _env_bytes(name: str, default: int) -> int:
    text = os.environ.get(name, "")
    return int(text) if text.isdigit() else default


# Bounds on what one bundle may hold, each refused before the work it would cost (docs/contracts.md's table of
# what the tool refuses lists them). A window writes a few hundred files at most (contract, lane specs and
# snapshots, a raw record file and a result per gate and lane, logs), a few folders deep.
MAX_BUNDLE_FILES = 10_000  # files, and folders apart: the walk and the manifest stop past it
MAX_FOLDER_DEPTH = 32  # a window's deepest path is contract/inputs/<set>/<file>; walked without recursion
# bytes an archive may unpack to disk, declared by its members (a bomb is refused unread)
MAX_BUNDLE_BYTES = _env_bytes("CAMPAIGN_MAX_UNPACKED_BYTES", 2 * 1024**3)
# bytes in a bundle folder, by the sizes the walk sees, before anything is hashed: a long window's raw
# records reach gigabytes, so a folder gets more room than an archive unpacked to a temporary disk; hashing
# streams, so the bound is on time (a 20 GiB sparse file is refused before it is read), never on memory.
# The window that wrote a bundle signs it whatever its size; verifying one past this needs the variable.
MAX_FOLDER_BYTES = _env_bytes("CAMPAIGN_MAX_BUNDLE_BYTES", 64 * 1024**3)
# The envelope holds the statement base64-encoded: one subject (name and sha256, ~190 bytes encoded for
# a 45-character name, ~410 for a 200-character one) per file, so MAX_BUNDLE_FILES subjects fit in 8 MiB;
# a real envelope is kilobytes. The file is never read past the cap (a sparse 4 GiB one costs nothing),
# and what it may parse into is bounded too (``_few_values``): its worst case costs ~50 MB.
MAX_ENVELOPE_BYTES = 8 << 20
# DSSE allows several signatures; one by a trusted key decides. More than this are refused before any
# is tried, so a pile of bad signatures under a trusted key id costs no time.
MAX_SIGNATURES = 16


@dataclass
class _Tree:
    files: dict[str, int] = field(default_factory=dict)  # relative name -> size seen by the walk
    empty: list[str] = field(default_factory=list)  # folders holding nothing, "name/"
    folders: list[str] = field(default_factory=list)


def _walk(bundle: Path, *, max_bytes: int | None = MAX_FOLDER_BYTES) -> _Tree:
    """Every entry under ``bundle``, walked with a stack (never recursion) and refused, before any file
    is opened, past MAX_FOLDER_DEPTH, MAX_BUNDLE_FILES or MAX_BUNDLE_BYTES. A bundle is exactly its
    manifest, so anything the manifest cannot hold is an error: a symbolic link, a hard link (its bytes
    can change through a name outside the bundle), a device, a FIFO, a socket."""
    tree, total = _Tree(), 0
    stack: list[tuple[str, str, int]] = [(str(bundle), "", 0)]
    while stack:
        folder, prefix, depth = stack.pop()
        seen = False
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    seen = True
                    total += _walk_entry(entry, prefix + entry.name, depth, tree, stack)
                    if max_bytes is not None and total > max_bytes:
                        raise VerifyError(f"{_shown(prefix + entry.name)}: the bundle holds more than "
                                          f"{max_bytes:,} bytes (CAMPAIGN_MAX_BUNDLE_BYTES); refused before "
                                          "anything is hashed")
        except OSError as exc:
            raise VerifyError(f"{_shown(prefix) or './'}: cannot list the folder: {exc.strerror}") from None
        if not seen and prefix:
            tree.empty.append(prefix)
    tree.empty.sort()
    return tree


def _walk_entry(entry: os.DirEntry[str], rel: str, depth: int, tree: _Tree,
                stack: list[tuple[str, str, int]]) -> int:
    info = entry.stat(follow_symlinks=False)
    if stat.S_ISLNK(info.st_mode):
        raise VerifyError(f"{_shown(rel)}: symbolic links are not allowed in a bundle")
    if stat.S_ISDIR(info.st_mode):
        if depth + 1 > MAX_FOLDER_DEPTH:
            raise VerifyError(f"{_shown(rel)}/: folders nested more than {MAX_FOLDER_DEPTH} deep; not a bundle")
        tree.folders.append(rel + "/")
        if len(tree.folders) > MAX_BUNDLE_FILES:
            raise VerifyError(f"{_shown(rel)}/: more than {MAX_BUNDLE_FILES:,} folders; not a bundle")
        stack.append((entry.path, rel + "/", depth + 1))
        return 0
    if not stat.S_ISREG(info.st_mode):
        raise VerifyError(f"{_shown(rel)}: not a regular file ({describe_mode(info.st_mode)})")
    if info.st_nlink > 1:
        raise VerifyError(f"{_shown(rel)}: a hard link ({info.st_nlink} names); a bundle's files have one name")
    tree.files[rel] = info.st_size
    if len(tree.files) > MAX_BUNDLE_FILES:
        raise VerifyError(f"{_shown(rel)}: more than {MAX_BUNDLE_FILES:,} files; not a bundle")
    return info.st_size


def _shown(name: str) -> str:
    """A name from the bundle as an error shows it: a control character (a newline, an escape, a carriage
    return) or an undecodable byte written as its escape, so an error stays one line that says what it is."""
    if name.isprintable():
        return name
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in name)


def _bundle_files(bundle: Path) -> list[str]:
    """Relative POSIX names of every regular file; an empty directory is an error here too. Used to sign:
    the window that wrote the bundle signs it whatever its size."""
    tree = _walk(bundle, max_bytes=None)
    if tree.empty:
        raise VerifyError(f"{_shown(tree.empty[0])}: an empty directory is not part of any bundle")
    return sorted(tree.files)


def bundle_entries(bundle: Path) -> list[str]:
    """Every folder (``name/``) and file of the bundle, sorted, walked with the verifier's bounds."""
    tree = _walk(bundle)
    return sorted([*tree.folders, *tree.files])


def _prune_empty_dirs(bundle: Path) -> None:
    """A folder a step made and left empty holds nothing to sign; removed so the bundle is its manifest.
    Deepest first, so a folder holding only empty folders goes too; no recursion."""
    folders, stack = [], [bundle]
    while stack:
        with os.scandir(stack.pop()) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    folders.append(Path(entry.path))
                    stack.append(Path(entry.path))
    for path in sorted(folders, key=lambda p: -len(p.parts)):
        if not any(path.iterdir()):
            path.rmdir()


# Shorter "secrets" would match ordinary text in raw records and block every signature.
MIN_SCANNED_SECRET = 8
# Files a window writes about what it launched (the contract's own text, lane specs, inspect snapshots, boot
# logs and launch failures, the daily's snapshot, the journal): besides the exact values the runner knows,
# no credential *shape* may appear in them (campaign.contracts.secretrefs, the detection the loader and the
# redactor use). Engine replies (raw/, gates/, SUMMARY.json's reasons) and the user's pinned inputs and lane
# files (contract/inputs/, contract/files/) are data: a model may well write "Bearer x"; they are scanned
# for the exact values only. freeze.json is left to the contract's own text (its signature is base64).
_SHAPE_SCANNED = ("contract/", "lanes/", "incumbent/", "journal.jsonl")
_DATA = ("contract/inputs/", "contract/files/", "contract/freeze.json")
_SCAN_CHUNK = 1 << 20


def find_secrets(bundle: Path, secrets: list[str]) -> list[str]:
    """Files of the bundle holding the exact bytes of a known secret, or, among the files a window writes
    about launches, a credential's shape (names only, never the value). Streamed: linear in the bundle."""
    needles = [s.encode() for s in dict.fromkeys(secrets) if len(s) >= MIN_SCANNED_SECRET]
    found = []
    for name in _bundle_files(bundle):
        shapes = name.startswith(_SHAPE_SCANNED) and not name.startswith(_DATA)
        if (needles or shapes) and _leaks(bundle / name, needles, looks_like_token if shapes else None):
            found.append(name)
    return found


def _leaks(path: Path, needles: list[bytes], shaped: Any) -> bool:
    """Whether the file holds a needle (found across chunk borders too) or, with ``shaped``, a line that
    looks like a credential (judged on whole lines; a line longer than a chunk is judged in pieces)."""
    keep = max((len(n) for n in needles), default=1) - 1
    previous, pending = b"", b""
    with open_regular(path, what="bundle file") as fd:
        while True:
            block = os.read(fd, _SCAN_CHUNK)
            window = previous + block
            if any(n in window for n in needles):
                return True
            previous = window[max(0, len(window) - keep):] if keep else b""
            if shaped is not None:
                text = pending + block
                cut = len(text) if not block or len(text) >= 2 * _SCAN_CHUNK else text.rfind(b"\n") + 1
                if cut and shaped(text[:cut].decode("utf-8", "replace")):
                    return True
                pending = text[cut:]
            if not block:
                return False


def sign_bundle(bundle: Path, key: SigningKey, predicate: dict[str, Any], *, secrets: Sequence[str] = ()) -> Path:
    """Sign every file of the bundle. ``secrets``: exact values (API keys, tokens) the runner knows; a
    bundle holding any of them is refused, unsigned, whatever redaction was supposed to have done."""
    _prune_empty_dirs(bundle)
    leaked = find_secrets(bundle, list(secrets))
    if leaked:
        raise RunError(f"refusing to sign {bundle}: a secret (a value the runner knows, or a credential's shape) "
                       f"appears in {', '.join(leaked[:5])}; "
                       "the bundle stays unsigned (remove it, and report the leak)")
    subjects = [{"name": name, "digest": {"sha256": sha256_file(bundle / name)}}
                for name in _bundle_files(bundle) if name != ENVELOPE]
    statement = {"_type": STATEMENT_TYPE, "subject": subjects, "predicateType": PREDICATE_TYPE,
                 "predicate": predicate}
    payload = canonical_json(statement)
    envelope = {"payloadType": PAYLOAD_TYPE, "payload": base64.b64encode(payload).decode(),
                "signatures": [{"keyid": key.keyid, "sig": key.sign(pae(PAYLOAD_TYPE, payload))}]}
    atomic_write_json(bundle / ENVELOPE, envelope)
    return bundle / ENVELOPE


@dataclass(frozen=True)
class VerifiedBundle:
    path: Path
    keyid: str
    files: int
    predicate: dict[str, Any]


def require_bundle_folder(bundle: Path) -> None:
    """``bundle`` is a folder, or an InputError saying what the user's path is instead."""
    try:
        info = bundle.stat()
    except (OSError, ValueError) as exc:
        raise _unreadable_path(bundle, exc) from None
    if stat.S_ISDIR(info.st_mode):
        return
    if stat.S_ISREG(info.st_mode):
        archive = bundle.name.endswith((".tar.gz", ".tgz", ".tar", ".tar.bz2", ".tar.xz"))
        raise InputError(f"{bundle}: " + ("an archive, not a bundle folder: `campaign verify` reads archives; "
                                          "for anything else unpack it first (tar -xf) and name the folder"
                                          if archive else "a file, not a bundle folder"))
    raise InputError(f"{bundle}: {describe_mode(info.st_mode)}, not a bundle folder")


def _unreadable_path(path: Path, exc: Exception) -> InputError:
    if isinstance(exc, ValueError):
        return InputError(f"{str(path)!r}: the path holds a NUL byte")
    reason = {errno.ENOENT: "no such bundle folder", errno.ELOOP: "the path is a symlink loop",
              errno.EACCES: "not readable (permission denied)", errno.ENAMETOOLONG: "the path is too long",
              errno.ENOTDIR: "the path goes through something that is not a folder"}
    return InputError(f"{path}: {reason.get(getattr(exc, 'errno', None) or 0, getattr(exc, 'strerror', str(exc)))}")


def verify_bundle(bundle: Path, trusted: TrustedKeys) -> VerifiedBundle:
    """Verify the folder ``bundle``: every bound (envelope bytes, signatures, files, folder depth, bytes) is
    checked before the work it bounds; errors name the file relative to the bundle."""
    require_bundle_folder(bundle)
    envelope_path = bundle / ENVELOPE
    if envelope_path.is_symlink():
        raise VerifyError(f"{ENVELOPE}: symbolic links are not allowed in a bundle")
    if not os.path.lexists(envelope_path):
        raise VerifyError(f"{bundle}: no {ENVELOPE}: the run did not complete, or the bundle is not signed")
    envelope, payload, statement = _read_envelope(envelope_path)
    payload_type = envelope.payloadType
    if payload_type != PAYLOAD_TYPE or statement.type != STATEMENT_TYPE:
        raise VerifyError(f"{ENVELOPE}: not an in-toto Statement v1 in a DSSE envelope")
    signer = next((s.keyid for s in envelope.signatures
                   if trusted.verify(s.keyid, s.sig, pae(payload_type, payload))), None)
    if signer is None:
        ids = ", ".join(s.keyid[:16] for s in envelope.signatures)
        raise VerifyError(f"{ENVELOPE}: no valid signature by a trusted key (signed by: {ids or 'nobody'})")
    subjects: dict[str, str] = {}
    for subject in statement.subject:
        name, digest = subject.name, subject.digest.sha256
        pure = PurePosixPath(name)
        if pure.is_absolute() or ".." in pure.parts or "\\" in name or name in ("", ENVELOPE):
            raise VerifyError(f"{ENVELOPE}: subject name {name!r} is not allowed")
        if name in subjects:
            raise VerifyError(f"{ENVELOPE}: subject {name!r} listed twice")
        subjects[name] = digest
    tree = _walk(bundle)
    on_disk = set(tree.files) - {ENVELOPE}
    if extra := sorted(on_disk - set(subjects)):
        raise VerifyError(f"{_shown(extra[0])}: file is not in the signed manifest" + _more(extra))
    # a missing file is named first: its folder, left empty, is the symptom, not the fault
    if missing := sorted(set(subjects) - on_disk):
        raise VerifyError(f"{_shown(missing[0])}: file listed in the signed manifest is missing" + _more(missing))
    if tree.empty:
        raise VerifyError(f"{_shown(tree.empty[0])}: an empty directory is not part of any bundle" + _more(tree.empty))
    for name, digest in sorted(subjects.items()):
        _check_file(bundle, name, digest)
    return VerifiedBundle(path=bundle, keyid=signer, files=len(subjects), predicate=statement.predicate)


def _read_envelope(path: Path) -> tuple[_Envelope, bytes, _Statement]:
    """The envelope, read through the bounded reader, with its counts checked before anything is tried."""
    try:
        data = read_bounded(path, MAX_ENVELOPE_BYTES, what="envelope")
    except UnreadableFile as exc:
        raise VerifyError(f"{ENVELOPE}: {exc.reason}") from None
    _few_values(data, 4 * MAX_SIGNATURES + 64, "the envelope")
    try:
        raw = loads_strict(data)
        _at_most(raw, "signatures", MAX_SIGNATURES, "signatures; more are refused before any is tried")
        envelope = _Envelope.model_validate(raw)
        payload = base64.b64decode(envelope.payload, validate=True)
        _few_values(payload, 5 * MAX_BUNDLE_FILES + 1024, "the signed statement")
        raw = loads_strict(payload)
        _at_most(raw, "subject", MAX_BUNDLE_FILES, "subjects (files); not a bundle")
        statement = _Statement.model_validate(raw)
    except (ValueError, ValidationError) as exc:  # pydantic's ValidationError is a ValueError; both named
        raise VerifyError(f"{ENVELOPE}: malformed envelope: {_first_line(exc)}") from None
    return envelope, payload, statement


def _few_values(data: bytes, bound: int, what: str) -> None:
    """Parsed JSON costs up to ~20 times its bytes (``[{},{},...]``: an object per 3 bytes; ``[1e5,...]``: a
    float per 4). The values a document can hold are bounded before it is parsed, by counting the bytes
    that open an object or a list and the commas between values (in strings too, so a count over the real
    one). An envelope holds a few (base64 has none of those bytes); a statement about four per file."""
    if (count := data.count(b"{") + data.count(b"[") + data.count(b",")) > bound:
        raise VerifyError(f"{ENVELOPE}: {what} holds {count:,} JSON values (at most {bound:,}); not a receipt, "
                          "refused unparsed")


def _at_most(raw: Any, key: str, bound: int, what: str) -> None:
    items = raw.get(key) if isinstance(raw, dict) else None
    if isinstance(items, list) and len(items) > bound:
        raise VerifyError(f"{ENVELOPE}: {len(items):,} {key}: at most {bound:,} {what}")


def _check_file(bundle: Path, name: str, digest: str) -> None:
    """One subject against its digest: a JSON file is read once, bounded, hashed and parsed strictly;
    any other file is hashed as a stream. Both through the reader that refuses anything not regular."""
    try:
        if name.endswith(".json"):
            data = read_bounded(bundle / name, MAX_JSON_BYTES, what="bundle file")
            actual = hashlib.sha256(data).hexdigest()
        else:
            data, actual = None, hash_regular_file(bundle / name, what="bundle file")
    except UnreadableFile as exc:
        raise VerifyError(f"{_shown(name)}: {exc.reason}") from None
    if actual != digest:
        raise VerifyError(f"{_shown(name)}: sha256 does not match the signed manifest (file changed)")
    if data is not None:
        try:
            loads_strict(data)
        except ValueError as exc:
            raise VerifyError(f"{_shown(name)}: {exc}") from None


class _Wire(BaseModel):
    # read from an untrusted file: exact types, nothing coerced; unknown fields tolerated (DSSE allows them)
    model_config = ConfigDict(strict=True, extra="ignore")


class _Signature(_Wire):
    keyid: str
    sig: str


class _Envelope(_Wire):
    payloadType: str
    payload: str
    signatures: list[_Signature]


class _Digest(_Wire):
    sha256: str


class _Subject(_Wire):
    name: str
    digest: _Digest


class _Statement(_Wire):
    type: str = Field(alias="_type")
    subject: list[_Subject]
    predicateType: str
    predicate: dict[str, Any] = Field(default_factory=dict)


def _first_line(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        error = exc.errors()[0]
        where = ".".join(str(p) for p in error["loc"]) or "(top)"
        words = "should be a JSON object" if error["type"] in ("model_type", "dict_type") else error["msg"]
        return f"{where}: {words}"
    return (str(exc).splitlines() or [type(exc).__name__])[0]


def _more(names: list[str]) -> str:
    return f" (and {len(names) - 1} more)" if len(names) > 1 else ""


def copy_bundle(bundle: Path, target: Path) -> None:
    """A private copy of the bundle folder, to verify and then read (nothing changes between the check and
    the use). The folder is walked with the verifier's bounds first (depth, files, bytes; a link, a FIFO or
    a device is refused, never followed or read), then each file is copied through a descriptor proven a
    regular file, no more bytes than the walk saw. Empty folders are copied too, so the copy verifies as
    the folder would."""
    require_bundle_folder(bundle)
    tree = _walk(bundle)
    target.mkdir(mode=0o700)
    for folder in sorted(tree.folders, key=len):
        (target / folder).mkdir(mode=0o700)
    for name, size in tree.files.items():
        _copy_file(bundle / name, target / name, size, name)


def _copy_file(source: Path, target: Path, size: int, name: str) -> None:
    copied = 0
    with open_regular(source, what="bundle file") as fd, open(target, "xb") as out:
        while block := os.read(fd, min(1 << 20, size + 1 - copied)):
            copied += len(block)
            if copied > size:
                raise VerifyError(f"{_shown(name)}: grew while the bundle was being copied")
            out.write(block)


@contextmanager
def errors_named_as(copy: Path, original: Path | str) -> Iterator[None]:
    """Errors raised while working on a private copy (removed by the time anyone reads the error) name
    the user's own path instead: ``copy`` and everything under it reads as ``original``."""
    try:
        yield
    except CampaignError as exc:
        olds = sorted({str(copy), str(copy.resolve())}, key=len, reverse=True)
        pattern = re.compile("(?:" + "|".join(re.escape(old) for old in olds) + r")(?![\w.-])")

        def named(text: str) -> str:
            return pattern.sub(lambda _: str(original), text)

        exc.args = tuple(named(a) if isinstance(a, str) else a for a in exc.args)
        for attr in ("path", "file"):
            if isinstance(value := getattr(exc, attr, None), str):
                setattr(exc, attr, named(value))
        raise


