"""The ledger: which lane is daily, promoted from which bundle, and what is kept for rollback.

Append-only JSONL at ``$XDG_STATE_HOME/campaign/ledger.jsonl``. Each entry carries the sha256 of the
previous line (a chain: an edited or deleted entry breaks every later one) and an Ed25519 signature.
The previous daily's full launch (its environment may hold secrets) is kept beside it in
``rollback/<seq>.json``, mode 0600; the ledger holds only its digest and a redacted view.
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
from campaign.errors import InputError, VerifyError
from campaign.fsutil import JsonlAppender, atomic_write_bytes, load_json_strict, read_jsonl
from campaign.signing import SigningKey, TrustedKeys
from campaign.window.state import state_root

__all__ = ["Ledger", "shown_argv"]


def shown_argv(argv: list[str], env: dict[str, str]) -> list[str]:
    """A daily's command line as the ledger shows it: credential values redacted (the private rollback
    launch, 0600, keeps them for the restore)."""
    from campaign.lanes.redact import Redactor, launch_secrets

    return Redactor(launch_secrets(argv, env)).argv(list(argv))


class Ledger:
    def __init__(self, path: Path | None = None) -> None:
        self.path = path or state_root() / "ledger.jsonl"

    def entries(self) -> list[dict[str, Any]]:
        return read_jsonl(self.path) if self.path.exists() else []

    def verify(self, trusted: TrustedKeys) -> list[dict[str, Any]]:
        entries, previous = [], None
        lines = self.path.read_bytes().splitlines() if self.path.exists() else []
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
        lines = self.path.read_bytes().splitlines() if self.path.exists() else []
        lines = [l for l in lines if l.strip()]
        entry: dict[str, Any] = {"seq": len(lines) + 1, "kind": kind, "at": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                                       time.gmtime()),
                                 "who": f"{getpass.getuser()}@{socket.gethostname()}",
                                 "prev_sha256": sha256_bytes(lines[-1]) if lines else None, **fields}
        if rollback_launch is not None:
            private = self.path.parent / "rollback" / f"{entry['seq']}.json"
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
        entry = next((e for e in self.entries() if e["seq"] == seq), None)
        # a file without its ledger line is a crashed append's leftover, not this entry's launch
        if entry is None or "rollback" not in entry or not private.exists():
            raise InputError(f"ledger entry {seq} keeps no rollback launch")
        data = private.read_bytes()
        if hashlib.sha256(data).hexdigest() != entry["rollback"]["launch_sha256"]:
            raise VerifyError(f"{private}: the kept rollback launch changed since it was recorded")
        return load_json_strict(private)


def load_json_line(line: bytes, path: Path, number: int) -> dict[str, Any]:
    from campaign.fsutil import loads_strict

    try:
        return loads_strict(line)
    except ValueError as exc:
        raise VerifyError(f"{path}:{number}: unreadable ledger entry: {exc}") from exc
