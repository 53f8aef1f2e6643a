"""Key folders are private whatever the umask, and key files are read once, bounded, and only as regular
files: a FIFO, a device, a folder or a symlink loop in a key's place is one KeyMaterialError naming it."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest

from campaign.errors import KeyMaterialError
from campaign.signing import KEY_FILE_BYTES, config_dir, init_keys, load_public_key, load_signing_key, load_trusted


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_keys_init_under_umask_0_makes_every_missing_parent_private(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o751)
    before = mode(home)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME")
    old = os.umask(0)
    try:
        init_keys()
    finally:
        os.umask(old)
    assert config_dir() == home / ".config" / "campaign"
    assert mode(home / ".config") == 0o700 and mode(home / ".config" / "campaign") == 0o700
    assert mode(config_dir() / "signing.key") == 0o600
    assert mode(home) == before  # a folder that was there is left as it was


def test_a_deep_xdg_config_home_is_made_private_all_the_way(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "a" / "b"))
    old = os.umask(0)
    try:
        init_keys()
    finally:
        os.umask(old)
    for folder in (tmp_path / "a", tmp_path / "a" / "b", tmp_path / "a" / "b" / "campaign"):
        assert mode(folder) == 0o700, folder


def test_a_key_folder_in_the_way_of_a_file_is_one_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "file").write_text("x")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "file" / "sub"))
    with pytest.raises(KeyMaterialError, match="cannot make the key folder"):
        init_keys()


@pytest.mark.parametrize("kind, words", [
    ("fifo", "signing key is a FIFO (named pipe), not a regular file"),
    ("device", "signing key is a device, not a regular file"),
    ("folder", "signing key is a directory, not a regular file"),
    ("loop", "signing key path is a symlink loop"),
])
def test_a_signing_key_that_is_not_a_file_is_named_at_once(kind: str, words: str) -> None:
    directory = config_dir()
    directory.mkdir(parents=True)
    path = directory / "signing.key"
    if kind == "fifo":
        os.mkfifo(path, 0o600)
    elif kind == "device":
        path.symlink_to("/dev/zero")
    elif kind == "folder":
        path.mkdir(0o700)
    else:
        path.symlink_to(path.name)
    started = time.monotonic()
    with pytest.raises(KeyMaterialError) as caught:
        load_signing_key()
    assert time.monotonic() - started < 2
    assert str(caught.value) == f"{path}: {words}"


def test_a_missing_signing_key_says_how_to_make_one() -> None:
    with pytest.raises(KeyMaterialError, match="no signing key; run `campaign keys init`"):
        load_signing_key()


def test_key_files_are_read_bounded(tmp_path: Path) -> None:
    huge = tmp_path / "huge.pub"
    huge.write_bytes(b"a" * (KEY_FILE_BYTES + 1))
    with pytest.raises(KeyMaterialError, match="public key is over the 16,384-byte cap"):
        load_public_key(huge)
    zero = tmp_path / "zero.pub"
    zero.symlink_to("/dev/zero")
    with pytest.raises(KeyMaterialError, match="public key is a device"):
        load_trusted([zero])


def test_a_readable_signing_key_is_refused_on_the_descriptor_it_is_read_from() -> None:
    init_keys()
    (config_dir() / "signing.key").chmod(0o644)
    with pytest.raises(KeyMaterialError, match="signing key is readable by group or others"):
        load_signing_key()
