"""Ed25519 keys and signatures, shared by freeze records and receipt bundles.

Keys live under ``$XDG_CONFIG_HOME/campaign`` (else ``~/.config/campaign``): ``signing.key`` (PEM,
mode 0600; a key readable by group or others is refused) and ``signing.pub`` (raw 32 bytes, hex).
The key id is the sha256 of the raw public key. Trusted public keys are ``trusted/*.pub`` there; the
local public key is trusted by default.
"""

from __future__ import annotations

import base64
import errno
import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from campaign.errors import KeyMaterialError
from campaign.fsutil import UnreadableFile, open_regular

__all__ = [
    "KEY_FILE_BYTES",
    "SigningKey",
    "TrustedKeys",
    "check_private",
    "config_dir",
    "init_keys",
    "key_id",
    "load_public_key",
    "load_signing_key",
    "load_trusted",
    "make_private_dirs",
    "read_key_file",
    "write_private",
]


# A PEM Ed25519 private key is 119 bytes, a public key 65 (hex) or 113 (PEM): a key file over 16 KiB is not
# a key, and is refused before it costs memory.
KEY_FILE_BYTES = 16 << 10


def config_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "campaign"


def make_private_dirs(directory: Path) -> None:
    """``directory`` and every missing folder above it, each created 0700 whatever the umask (under umask
    000 ``mkdir -p`` would leave ``~/.config`` 0777); folders that exist are left as they are."""
    missing = []
    probe = directory
    try:
        while not probe.is_dir():
            missing.append(probe)
            if probe.parent == probe:
                break
            probe = probe.parent
        for folder in reversed(missing):
            try:
                os.mkdir(folder, 0o700)
            except FileExistsError:
                if not folder.is_dir():
                    raise NotADirectoryError(errno.ENOTDIR, "exists and is not a directory", str(folder)) from None
                continue
            os.chmod(folder, 0o700)  # a umask like 0277 would have narrowed it below what we need
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise KeyMaterialError(f"{directory}: cannot make the key folder: {why}") from exc


def key_id(public: Ed25519PublicKey) -> str:
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()


@dataclass(frozen=True)
class SigningKey:
    private: Ed25519PrivateKey

    @property
    def public(self) -> Ed25519PublicKey:
        return self.private.public_key()

    @property
    def keyid(self) -> str:
        return key_id(self.public)

    def sign(self, message: bytes) -> str:
        return base64.b64encode(self.private.sign(message)).decode()


def write_private(path: Path, data: bytes) -> None:
    """A private file born 0600 (O_EXCL under a fresh temporary name, never chmod after), then renamed
    over ``path``: a leftover temporary file of any mode, or a lax umask, never widens it."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def check_private(path: Path, what: str) -> None:
    """Refuse a private file (a signing or redaction key) that group or others can read or write."""
    _refuse_open_mode(path.stat().st_mode, path, what)


def _refuse_open_mode(mode: int, path: Path, what: str) -> None:
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise KeyMaterialError(f"{path}: {what} is readable by group or others "
                               f"(mode {stat.S_IMODE(mode):04o}); chmod 600 it")


def read_key_file(path: Path, what: str, *, private: bool) -> bytes:
    """A key file's bytes: opened once, proven a regular file (a FIFO, a device, a folder or a symlink loop
    is named as such), its mode checked on that descriptor when ``private``, read up to KEY_FILE_BYTES."""
    try:
        with open_regular(path, what=what) as fd:
            if private:
                _refuse_open_mode(os.fstat(fd).st_mode, path, what)
            data = b""
            while len(data) <= KEY_FILE_BYTES and (block := os.read(fd, KEY_FILE_BYTES + 1 - len(data))):
                data += block
    except UnreadableFile as exc:  # its words name the path and what is wrong with it: kept as they are
        raise KeyMaterialError(str(exc)) from exc
    except OSError as exc:
        raise KeyMaterialError(f"{path}: cannot read {what}: {exc.strerror}") from exc
    if len(data) > KEY_FILE_BYTES:
        raise KeyMaterialError(f"{path}: {what} is over the {KEY_FILE_BYTES:,}-byte cap: not a key")
    return data


def init_keys(directory: Path | None = None, *, force: bool = False) -> Path:
    """Make a key pair; safe to run twice (an existing key is kept unless ``force``)."""
    directory = directory or config_dir()
    private_path = directory / "signing.key"
    if private_path.exists() and not force:
        return private_path
    make_private_dirs(directory)
    private = Ed25519PrivateKey.generate()
    pem = private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    private_path.with_suffix(".key.tmp").unlink(missing_ok=True)  # an older version's leftover
    write_private(private_path, pem)
    public_hex = private.public_key().public_bytes(serialization.Encoding.Raw,
                                                   serialization.PublicFormat.Raw).hex()
    public_path = directory / "signing.pub"
    tmp = public_path.with_name(f".signing.pub.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    try:
        os.fchmod(fd, 0o644)  # a public key is for others to read, but never to write, whatever the umask
        os.write(fd, (public_hex + "\n").encode())
    finally:
        os.close(fd)
    os.replace(tmp, public_path)
    return private_path


def load_signing_key(directory: Path | None = None) -> SigningKey:
    path = (directory or config_dir()) / "signing.key"
    if not os.path.lexists(path):
        raise KeyMaterialError(f"{path}: no signing key; run `campaign keys init`")
    data = read_key_file(path, "signing key", private=True)
    try:
        private = serialization.load_pem_private_key(data, password=None)
    except (TypeError, ValueError, UnsupportedAlgorithm) as exc:
        raise KeyMaterialError(f"{path}: cannot load signing key: {exc}") from exc
    if not isinstance(private, Ed25519PrivateKey):
        raise KeyMaterialError(f"{path}: not an Ed25519 key")
    return SigningKey(private)


def load_public_key(path: Path) -> Ed25519PublicKey:
    """A public key file: 64 hex characters (raw key) or PEM."""
    data = read_key_file(path, "public key", private=False)
    try:
        if data.lstrip().startswith(b"-----BEGIN"):
            key = serialization.load_pem_public_key(data)
            if not isinstance(key, Ed25519PublicKey):
                raise ValueError("not an Ed25519 key")
            return key
        return Ed25519PublicKey.from_public_bytes(bytes.fromhex(data.decode().strip()))
    except ValueError as exc:
        raise KeyMaterialError(f"{path}: not an Ed25519 public key: {exc}") from exc


@dataclass(frozen=True)
class TrustedKeys:
    keys: dict[str, Ed25519PublicKey]

    def verify(self, keyid: str, signature_b64: str, message: bytes) -> bool:
        public = self.keys.get(keyid)
        if public is None:
            return False
        try:
            public.verify(base64.b64decode(signature_b64, validate=True), message)
        except (InvalidSignature, ValueError):
            return False
        return True


def load_trusted(extra: list[Path] | None = None, *, include_local: bool = True) -> TrustedKeys:
    """``--trust`` files, the ``trusted/`` directory, and the local public key (by default)."""
    paths = list(extra or [])
    directory = config_dir()
    if include_local:
        if (directory / "signing.pub").exists():
            paths.append(directory / "signing.pub")
        paths.extend(sorted((directory / "trusted").glob("*.pub")))
    keys = {}
    for path in paths:
        public = load_public_key(path)
        keys[key_id(public)] = public
    return TrustedKeys(keys)
