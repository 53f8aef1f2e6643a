"""The ledger: which lane is daily, promoted from which bundle, and what is kept for rollback.

Append-only JSONL at ``$XDG_STATE_HOME/campaign/ledger.jsonl``. Each entry carries the sha256 of the
previous line (a chain: an edited or deleted entry breaks every later one) and an Ed25519 signature.
The previous daily's full launch is kept beside it in ``rollback/<seq>.json``, mode 0600, each credential
in it a ``${env:NAME}`` reference (``launchrefs``); the ledger holds only its digest and a redacted view.
"""

from __future__ import annotations

import getpass
import hashlib
import os
import socket
import time
from pathlib import Path
from typing import Any

from campaign.contracts.hashing import canonical_json, sha256_bytes
from campaign.daily.launchrefs import from_references, to_references
from campaign.daily.state import state_root
from campaign.errors import InputError, VerifyError
from campaign.fsutil import JsonlAppender, atomic_write_bytes, loads_strict, read_bounded, read_jsonl
from campaign.signing import SigningKey, TrustedKeys

__all__ = ["LEDGER_BYTES", "ROLLBACK_BYTES", "Ledger", "shown_argv"]

# An entry is one to a few KB (a redacted argv, digests, a signature): 64 MiB is tens of thousands of
# promotions. A kept rollback launch is a daily's argv and environment (the kernel holds those to a few MB).
LEDGER_BYTES = 64 << 20
ROLLBACK_BYTES = 16 << 20


def shown_argv(argv: list[str], env: dict[str, str]) -> list[str]:
    """A daily's command line as the ledger shows it: credential values redacted (the private rollback
    launch, 0600, keeps them for the restore)."""
    from campaign.lanes.redact import Redactor, launch_secrets

    return Redactor(launch_secrets(argv, env)).argv(list(argv))


class Ledger:
    def __init__(self, path: Path | None = None) -> None:
        self.path = path or state_root() / "ledger.jsonl"

    def _read(self) -> bytes:
        """The ledger's bytes, read bounded (none while it does not exist)."""
        if not os.path.lexists(self.path):
            return b""
        return read_bounded(self.path, LEDGER_BYTES, what="ledger")

    def entries(self) -> list[dict[str, Any]]:
        """Every entry; a torn last line (a crash mid-append, no newline after it) is not one yet."""
        if not os.path.lexists(self.path):
            return []
        return read_jsonl(self.path, limit=LEDGER_BYTES, what="ledger")

    def verify(self, trusted: TrustedKeys) -> list[dict[str, Any]]:
        entries, previous = [], None
        lines = self._read().splitlines()
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            entry = load_json_line(line, self.path, number)
            body = {k: v for k, v in entry.items() if k != "signature"}
            if entry.get("prev_sha256") != previous:
                raise VerifyError(f"{self.path}:{number}: ledger chain broken (an entry was changed or removed)")
            sig = entry.get("signature") or {}
            if not trusted.verify(str(sig.get("keyid")), str(sig.get("sig")), canonical_json(body)):
                raise VerifyError(f"{self.path}:{number}: ledger entry signature invalid or by an untrusted key")
            previous = sha256_bytes(line)
            entries.append(entry)
        return entries

    def append(self, key: SigningKey, kind: str, fields: dict[str, Any],
               rollback_launch: dict[str, Any] | None = None) -> dict[str, Any]:
        lines = [line for line in self._read().splitlines() if line.strip()]
        entry: dict[str, Any] = {"seq": len(lines) + 1, "kind": kind, "at": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                                       time.gmtime()),
                                 "who": f"{getpass.getuser()}@{socket.gethostname()}",
                                 "prev_sha256": sha256_bytes(lines[-1]) if lines else None, **fields}
        if rollback_launch is not None:
            private = self.path.parent / "rollback" / f"{entry['seq']}.json"
            rollback_launch = to_references(rollback_launch)  # references, never credential values
            data = canonical_json(rollback_launch)
            private.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            atomic_write_bytes(private, data)
            os.chmod(private, 0o600)
            entry["rollback"] = {"launch_sha256": hashlib.sha256(data).hexdigest(),
                                 "argv": shown_argv(rollback_launch["argv"], rollback_launch.get("env") or {}),
                                 "exe_sha256": rollback_launch.get("exe_sha256")}
        entry["signature"] = {"keyid": key.keyid, "sig": key.sign(canonical_json(entry))}
        with JsonlAppender(self.path) as out:
            out.append(entry)
        return entry

    def rollback_launch(self, seq: int) -> dict[str, Any]:
        private = self.path.parent / "rollback" / f"{seq}.json"
        entry = next((e for e in self.entries() if e.get("seq") == seq), None)
        # a file without its ledger line is a crashed append's leftover, not this entry's launch
        if entry is None or "rollback" not in entry or not private.exists():
            raise InputError(f"ledger entry {seq} keeps no rollback launch")
        data = read_bounded(private, ROLLBACK_BYTES, what="rollback launch")
        if hashlib.sha256(data).hexdigest() != entry["rollback"]["launch_sha256"]:
            raise VerifyError(f"{private}: the kept rollback launch changed since it was recorded")
        try:  # the bytes just checked, not a second read of the file
            record = loads_strict(data)
        except ValueError as exc:
            raise VerifyError(f"{private}: not valid JSON: {exc}") from exc
        return from_references(record)


def load_json_line(line: bytes, path: Path, number: int) -> dict[str, Any]:
    try:
        return loads_strict(line)
    except ValueError as exc:
        raise VerifyError(f"{path}:{number}: unreadable ledger entry: {exc}") from exc
