"""Key files are never readable by others: born 0600, whatever leftovers or umask; too-open keys refused."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from campaign.errors import KeyMaterialError
from campaign.signing import config_dir, init_keys, load_signing_key


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_force_with_a_world_writable_leftover_gives_a_private_key(tmp_path: Path) -> None:
    directory = config_dir()
    directory.mkdir(parents=True)
    for leftover in (directory / "signing.key.tmp", directory / f".signing.key.{os.getpid()}.tmp"):
        leftover.write_text("old")
        leftover.chmod(0o666)
    init_keys(force=True)
    assert mode(directory / "signing.key") == 0o600
    assert load_signing_key().keyid


def test_lax_umask_never_widens_key_files() -> None:
    old = os.umask(0)
    try:
        init_keys(force=True)
    finally:
        os.umask(old)
    assert mode(config_dir() / "signing.key") == 0o600
    assert mode(config_dir() / "signing.pub") == 0o644


def test_a_readable_redaction_key_is_refused() -> None:
    from campaign.lanes import redact

    init_keys()
    path = config_dir() / "redact.key"
    redact._KEYS.clear()
    redact._stored_key()
    assert mode(path) == 0o600
    path.chmod(0o644)
    redact._KEYS.clear()
    with pytest.raises(KeyMaterialError, match="redaction key is readable by group or others"):
        redact._stored_key()
    redact._KEYS.clear()
