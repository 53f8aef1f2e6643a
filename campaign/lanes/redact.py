"""Secrets never reach a bundle: inspect snapshots and boot logs are redacted before they are written.

Three rules, applied everywhere a lane's launch is recorded:
- env values are kept only for variables the contract declares literally, plus a short allow-list of
  harmless ones (PATH, LANG...); every other value becomes a keyed digest, so two lanes can still be
  compared (same value, same digest) without the value being guessable from the bundle;
- the value after a credential option (``--api-key X``, ``--hf-token=X``) becomes a keyed digest;
- anything shaped like a credential, by the contract loader's own detection
  (``campaign.contracts.secretrefs.credential_spans``: token prefixes, JWTs, PEM private keys, URL user
  info, Bearer and Basic values, opaque random-looking values, and the value after a credential name in
  free text such as ``HF_TOKEN=x`` or ``"api_key": "x"``), and the exact value of every ``${env:NAME}``
  the lane references, is cut out of any string, log lines included.

Every log this module writes (``RedactingLog``: lanes' boot logs, the daily's ``--log``) is created 0600.

The digest key is a random secret kept beside the signing key (``redact.key``, mode 0600): digests stay
comparable across a resumed runner and across windows of this machine, and nobody without the key can
test guesses against a bundle. Where it cannot be kept, a per-process key is used.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

from campaign.contracts.resolve import EffectiveLane
from campaign.contracts.secretrefs import (
    REF,
    credential_like,
    credential_spans,
    is_secret_name,
    open_pem_label,
    referenced_names,
)
from campaign.errors import PreflightError
from campaign.fsutil import UnreadableFile, read_bounded
from campaign.lanes.engines.registry import adapter_for
from campaign.lanes.scratch import scratch_path

__all__ = ["ENV_ALLOW", "MARK", "RedactingLog", "Redactor", "cut_credentials", "launch_secrets", "lane_secrets",
           "redactor_for"]

MARK = "<redacted>"
ENV_ALLOW = frozenset({"PATH", "HOME", "LANG", "LANGUAGE", "LC_ALL", "TZ", "TMPDIR", "HOSTNAME", "TERM",
                       "PYTHONUNBUFFERED", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES",
                       "NVIDIA_DRIVER_CAPABILITIES", "OMP_NUM_THREADS"})
_PROCESS_KEY = os.urandom(32)
_KEYS: dict[str, bytes] = {}
_MIN_EXACT = 4  # shorter "secrets" would cut ordinary words out of logs


def _stored_key() -> bytes:
    from campaign.signing import check_private, config_dir, write_private

    path = config_dir() / "redact.key"
    if str(path) in _KEYS:
        return _KEYS[str(path)]
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        if not path.exists():
            # born 0600 under a temporary name, then linked: a concurrent first use never reads half a key,
            # and a first writer wins over a second
            staged = path.with_name(f"redact.key.{os.getpid()}.new")
            write_private(staged, os.urandom(32))
            try:
                os.link(staged, path)
            except FileExistsError:
                pass
            finally:
                staged.unlink()
        key = read_bounded(path, 4096, what="redaction key")  # a FIFO or /dev/zero there is refused, not read
        if len(key) < 32:
            raise OSError(f"{path} is truncated")
    except (OSError, UnreadableFile):
        key = _PROCESS_KEY
    else:
        check_private(path, "redaction key")  # anyone who reads it can test guesses against every digest
    _KEYS[str(path)] = key
    return key


def lane_secrets(lane: EffectiveLane, environ: dict[str, str] | None = None) -> list[str]:
    """The values of every variable the lane references, as the runner's environment has them now."""
    environ = dict(os.environ) if environ is None else environ
    names = referenced_names([*lane.args, *lane.env.values()])
    return [environ[name] for name in names if environ.get(name)]


_SESSION_PREFIXES = ("XDG_",)
_SESSION_NAMES = frozenset({"DESKTOP_SESSION", "DBUS_SESSION_BUS_ADDRESS", "SESSION_MANAGER", "GDMSESSION"})


def launch_secrets(argv: Iterable[str], env: dict[str, str], extra_names: Iterable[str] = ()) -> list[str]:
    """The credential values in a launch read back from /proc or an engine: the value of every credential
    option (``--api-key X``, ``--hf-token=X``) and of every credential-named variable, plus the variables
    named in ``extra_names`` (a contract's ``api_key_env``), as the runner's environment has them."""
    found: list[str] = []
    tokens = list(argv)
    for i, token in enumerate(tokens):
        if not token.startswith("-"):
            continue
        name, eq, value = token.partition("=")
        if is_secret_name(name):
            if eq:
                found.append(value)
            elif i + 1 < len(tokens) and not tokens[i + 1].startswith("-"):
                found.append(tokens[i + 1])  # a bare flag (`--api-key-file` then `--x`) has no value
    # a desktop login's session variables (XDG_SESSION_CLASS=user, DESKTOP_SESSION=ubuntu) name a session,
    # not a credential; cutting their short values would cut ordinary words out of every command line
    found += [value for name, value in env.items() if is_secret_name(name) and value
              and not name.startswith(_SESSION_PREFIXES) and name not in _SESSION_NAMES]
    found += [os.environ[name] for name in extra_names if name and os.environ.get(name)]
    # a path (a key *file*) or a flag word is not the credential itself
    return [value for value in dict.fromkeys(found)
            if value and not value.startswith("<redacted") and credential_like(value)]


def cut_credentials(text: str) -> str:
    """``text`` with every credential shape (and every value after a credential name) replaced by MARK;
    what is already redacted stays as it is, so redacting twice changes nothing. Linear in ``text``."""
    spans = [(start, end) for start, end, _ in credential_spans(text, named=True)
             if not text.startswith("<redacted", start)]
    if not spans:
        return text
    out, last = [], 0
    for start, end in spans:  # sorted by start; overlapping spans are cut as one
        if start < last:
            if end > last:
                last = end
            continue
        out += [text[last:start], MARK]
        last = end
    out.append(text[last:])
    return "".join(out)


class Redactor:
    def __init__(self, secrets: Iterable[str] = (), *, declared_env: dict[str, str] | None = None,
                 key: bytes | None = None) -> None:
        self.secrets = sorted({s for s in secrets if len(s) >= _MIN_EXACT}, key=len, reverse=True)
        # a declared value that is itself a reference is a secret, not a literal to show
        self.declared_env = {k: v for k, v in (declared_env or {}).items() if not REF.search(v)}
        self._key = key or _stored_key()

    def digest(self, value: str) -> str:
        return f"<redacted hmac:{hmac.new(self._key, value.encode(), hashlib.sha256).hexdigest()[:16]}>"

    def text(self, text: str) -> str:
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, MARK)
        return cut_credentials(text)

    def env(self, env: dict[str, str]) -> dict[str, str]:
        out = {}
        for name, value in env.items():
            if value.startswith("<redacted"):
                out[name] = value  # redacting twice changes nothing
                continue
            kept = (self.declared_env.get(name) == value or name in ENV_ALLOW) and not is_secret_name(name)
            out[name] = self.text(value) if kept else self.digest(value)
        return out

    def argv(self, argv: list[str]) -> list[str]:
        out: list[str] = []
        secret_next = False
        for token in argv:
            if secret_next and not token.startswith("-"):
                out.append(token if token.startswith("<redacted") else
                           self.text(token) if not credential_like(token) else self.digest(token))
                secret_next = False
                continue
            secret_next = False
            if token.startswith("-") and "=" in token:
                name, value = token.split("=", 1)
                if is_secret_name(name) and credential_like(value):
                    out.append(token if value.startswith("<redacted") else f"{name}={self.digest(value)}")
                    continue
            elif token.startswith("-") and is_secret_name(token):
                secret_next = True
            out.append(self.text(token))
        return out

    def snapshot(self, snapshot: dict[str, Any]) -> dict[str, Any]:
        """An inspect snapshot with argv/env fields redacted by rule and every other string scrubbed."""
        out: dict[str, Any] = {}
        for key, value in snapshot.items():
            if key in ("argv", "launched_argv") and isinstance(value, list):
                out[key] = self.argv([str(v) for v in value])
            elif key in ("env", "launched_env") and isinstance(value, dict):
                out[key] = self.env({str(k): str(v) for k, v in value.items()})
            else:
                out[key] = self._scrub(value)
        return out

    def _scrub(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list):
            return [self._scrub(v) for v in value]
        if isinstance(value, dict):
            return {k: self._scrub(v) for k, v in value.items()}
        return value


def redactor_for(lane: EffectiveLane, engine_env: dict[str, str] | None = None) -> Redactor:
    """What the contract declares stays readable, and so does what the engine adapter itself sets (cache
    and temp folders under the lane's scratch path): both are configuration, not secrets. ``engine_env``: the
    adapter's env when the caller built it already (a boot builds it once)."""
    if engine_env is None:
        try:
            engine_env = adapter_for(lane.engine).launch_env(lane, str(scratch_path(lane)))
        except PreflightError:  # an engine without an adapter has no engine-set variables to keep
            engine_env = {}
    return Redactor(lane_secrets(lane), declared_env={**engine_env, **dict(lane.env)})


class RedactingLog:
    """A log written line by line through a redactor, so a secret an engine echoes (its command line, its
    environment) is cut before it touches the disk. Bytes in, any chunking; a partial line is held back
    until its newline (or ``max_line`` bytes) so a secret split across chunks is still caught; the lines
    of a PEM private key block are cut up to its END line (at most ``_PEM_MAX`` characters). The file is
    created 0600, and an existing one is made 0600: a log holds what an engine printed."""

    _PEM_MAX = 1 << 16

    def __init__(self, path: Path, redactor: Redactor, *, max_line: int = 1 << 20) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            os.fchmod(fd, 0o600)
        except OSError:
            pass  # not ours to change (a shared log): what we write is redacted all the same
        self._handle: IO[bytes] = os.fdopen(fd, "ab", buffering=0)
        self._redactor, self._max_line = redactor, max_line
        self._pending = b""
        self._pem: str | None = None  # the label of a private key block still open
        self._pem_cut = 0
        self._lock = threading.Lock()

    def write(self, chunk: bytes) -> None:
        with self._lock:
            data = self._pending + chunk
            cut = data.rfind(b"\n") + 1
            if cut == 0 and len(data) >= self._max_line:
                cut = len(data)
            self._pending = data[cut:]
            if cut:
                self._emit(data[:cut])

    def close(self) -> None:
        with self._lock:
            if self._handle.closed:
                return
            if self._pending:
                self._emit(self._pending)
                self._pending = b""
            self._handle.close()

    def _emit(self, data: bytes) -> None:
        text = data.decode("utf-8", errors="replace")
        if self._pem is not None:  # inside a key block an earlier line opened (its BEGIN line wrote MARK)
            end = text.find(f"-----END {self._pem}-----")
            if end == -1 and self._pem_cut + len(text) <= self._PEM_MAX:
                self._pem_cut += len(text)
                return
            text = text[end + len(self._pem) + 14:] if end != -1 else text
            self._pem = None
        self._pem, self._pem_cut = open_pem_label(text), 0
        self._handle.write(self._redactor.text(text).encode("utf-8"))
