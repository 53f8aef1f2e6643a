"""Signing and verifying a receipt bundle.

The envelope ``receipt.dsse.json`` is DSSE: its payload is an in-toto Statement v1 listing every
other file of the bundle as a subject with its sha256, signed with Ed25519 over DSSE's PAE encoding.
Verification is strict: the files on disk must equal the subjects exactly, every digest must match,
a trusted key must have signed, and links, ``..``, absolute names and duplicate JSON keys are refused.
"""

from __future__ import annotations

import base64
import os
import stat
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from campaign.contracts.hashing import canonical_json, sha256_file
from campaign.errors import InputError, RunError, VerifyError
from campaign.fsutil import atomic_write_json, loads_strict
from campaign.signing import SigningKey, TrustedKeys

__all__ = ["ENVELOPE", "PAYLOAD_TYPE", "PREDICATE_TYPE", "VerifiedBundle", "find_secrets", "pae", "sign_bundle",
           "verify_bundle"]

ENVELOPE = "receipt.dsse.json"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://campaign.invalid/receipt-bundle/v1"


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE pre-authentication encoding: what is actually signed."""
    kind = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


def _bundle_files(bundle: Path) -> list[str]:
    """Relative POSIX names of every regular file. A bundle is exactly its manifest, so anything the
    manifest cannot hold is an error: a symbolic link, a hard link (its bytes can change through a name
    outside the bundle), a device, an empty directory."""
    names = []
    for root, dirs, files in os.walk(bundle, followlinks=False):
        if not dirs and not files and Path(root) != bundle:
            raise VerifyError(f"{Path(root).relative_to(bundle).as_posix()}/: an empty directory is not part "
                              "of any bundle")
        for name in dirs + files:
            full = Path(root) / name
            info = full.lstat()
            rel = full.relative_to(bundle).as_posix()
            if stat.S_ISLNK(info.st_mode):
                raise VerifyError(f"{rel}: symbolic links are not allowed in a bundle")
            if name in files and not stat.S_ISREG(info.st_mode):
                raise VerifyError(f"{rel}: not a regular file")
            if name in files and info.st_nlink > 1:
                raise VerifyError(f"{rel}: a hard link ({info.st_nlink} names); a bundle's files have one name")
            if name in files:
                names.append(rel)
    return sorted(names)


def _prune_empty_dirs(bundle: Path) -> None:
    """A folder a step made and left empty holds nothing to sign; removed so the bundle is its manifest."""
    for root, _dirs, _files in sorted(os.walk(bundle), key=lambda entry: -len(entry[0])):
        path = Path(root)
        if path != bundle and not any(path.iterdir()):
            path.rmdir()


# Shorter "secrets" would match ordinary text in raw records and block every signature.
MIN_SCANNED_SECRET = 8


def find_secrets(bundle: Path, secrets: list[str]) -> list[str]:
    """Files of the bundle holding the exact bytes of a known secret (names only, never the value)."""
    needles = [s.encode() for s in secrets if len(s) >= MIN_SCANNED_SECRET]
    if not needles:
        return []
    return [name for name in _bundle_files(bundle) if any(n in (bundle / name).read_bytes() for n in needles)]


def sign_bundle(bundle: Path, key: SigningKey, predicate: dict[str, Any], *, secrets: list[str] = ()) -> Path:
    """Sign every file of the bundle. ``secrets``: exact values (API keys, tokens) the runner knows; a
    bundle holding any of them is refused, unsigned, whatever redaction was supposed to have done."""
    _prune_empty_dirs(bundle)
    leaked = find_secrets(bundle, list(secrets))
    if leaked:
        raise RunError(f"refusing to sign {bundle}: the value of a secret appears in {', '.join(leaked[:5])}; "
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


def verify_bundle(bundle: Path, trusted: TrustedKeys) -> VerifiedBundle:
    if not bundle.is_dir():
        raise InputError(f"{bundle}: not a bundle directory")
    envelope_path = bundle / ENVELOPE
    if envelope_path.is_symlink():
        raise VerifyError(f"{ENVELOPE}: symbolic links are not allowed in a bundle")
    if not envelope_path.is_file():
        raise VerifyError(f"{bundle}: no {ENVELOPE}: the run did not complete, or the bundle is not signed")
    try:
        envelope = _Envelope.model_validate(loads_strict(envelope_path.read_bytes()))
        payload = base64.b64decode(envelope.payload, validate=True)
        statement = _Statement.model_validate(loads_strict(payload))
    except (ValueError, ValidationError) as exc:  # pydantic's ValidationError is a ValueError; both named
        raise VerifyError(f"{ENVELOPE}: malformed envelope: {_first_line(exc)}") from exc
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
    on_disk = set(_bundle_files(bundle)) - {ENVELOPE}
    if extra := sorted(on_disk - set(subjects)):
        raise VerifyError(f"{extra[0]}: file is not in the signed manifest" + _more(extra))
    if missing := sorted(set(subjects) - on_disk):
        raise VerifyError(f"{missing[0]}: file listed in the signed manifest is missing" + _more(missing))
    for name, digest in sorted(subjects.items()):
        if sha256_file(bundle / name) != digest:
            raise VerifyError(f"{name}: sha256 does not match the signed manifest (file changed)")
        if name.endswith(".json"):
            try:
                loads_strict((bundle / name).read_bytes())
            except ValueError as exc:
                raise VerifyError(f"{name}: {exc}") from exc
    return VerifiedBundle(path=bundle, keyid=signer, files=len(subjects), predicate=statement.predicate)


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
        return f"{where}: {error['msg']}"
    return str(exc).splitlines()[0]


def _more(names: list[str]) -> str:
    return f" (and {len(names) - 1} more)" if len(names) > 1 else ""


