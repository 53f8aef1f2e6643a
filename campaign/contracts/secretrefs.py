"""Secrets stay out of contracts: a value names an environment variable of the runner instead.

``env: {HF_TOKEN: "${env:HF_TOKEN}"}`` or ``args: [--api-key, "${env:SERVE_KEY}"]``: the contract (and so
its frozen hash and the bundle's copy) holds only the reference; the value is read from the runner's
environment at launch, and every place the bundle records it is redacted. A literal that looks like a
token is refused at load, so a secret cannot be frozen into a contract by accident.
"""

from __future__ import annotations

import os
import re
from typing import Any
from collections.abc import Iterable, Mapping

__all__ = ["REF", "TOKEN_PATTERNS", "credential_like", "is_secret_name", "literal_secrets", "looks_like_token", "referenced_names",
           "secrets_anywhere",
           "substitute"]

REF = re.compile(r"\$\{env:([A-Za-z_][A-Za-z0-9_]*)\}")

# Common credential shapes (Hugging Face, OpenAI/Anthropic-style, GitHub, Slack, AWS, bearer headers).
TOKEN_PATTERNS: tuple[re.Pattern[str], ...] = (
    re.compile(r"\bhf_[A-Za-z0-9]{16,}"),
    re.compile(r"\bsk-[A-Za-z0-9_\-]{16,}"),
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}"),
    re.compile(r"\bgithub_pat_[A-Za-z0-9_]{20,}"),
    re.compile(r"\bxox[abprs]-[A-Za-z0-9\-]{10,}"),
    re.compile(r"\bAKIA[0-9A-Z]{16}\b"),
    re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._~+/\-]{16,}=*"),
)

_SECRET_WORDS = {"token", "secret", "password", "passwd", "credential", "credentials", "apikey", "auth"}


def is_secret_name(name: str) -> bool:
    """An option or variable whose value is a credential, whatever it looks like: ``--api-key``,
    ``--hf-token``, ``HF_TOKEN``, ``OPENAI_API_KEY``; not ``--tokenizer`` or ``TOKENIZERS_PARALLELISM``."""
    words = [w for w in re.split(r"[-_]+", name.lower().lstrip("-")) if w]
    return any(w in _SECRET_WORDS for w in words) or any(a == "api" and b == "key" for a, b in zip(words, words[1:]))


_FLAG_WORDS = {"0", "1", "true", "false", "yes", "no", "on", "off", ""}
# a password in a URL's userinfo: scheme://user:password@host
_URL_CREDENTIALS = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^/\s:@]+:[^/\s@]+@")


def credential_like(value: str) -> bool:
    # flags (HF_HUB_DISABLE_IMPLICIT_TOKEN=1) and file paths (--api-key-file /run/secrets/k) are not
    # credentials; any other literal is, whatever its length (a short key is still a key)
    return value.strip().lower() not in _FLAG_WORDS and not value.startswith(("/", "~", "./"))


def literal_secrets(env: Mapping[str, str | None], args: Iterable[tuple[str, str | None]]) -> list[tuple[str, str]]:
    """(where, why) for every literal credential: a secret-named variable or option with a value that is
    not a reference, or any value shaped like a token."""
    found = []
    for name, value in env.items():
        if value is not None and not REF.fullmatch(value):
            if is_secret_name(name) and credential_like(value):
                found.append((f"env.{name}", f"{name} names a credential"))
            elif looks_like_token(value):
                found.append((f"env.{name}", "the value looks like a token"))
    for option, value in args:
        if value is not None and not REF.fullmatch(value):
            if not option.startswith("#") and is_secret_name(option) and credential_like(value):
                found.append((f"args.{option}", f"{option} takes a credential"))
            elif looks_like_token(value):
                found.append((f"args.{option}", "the value looks like a token"))
    return found


def looks_like_token(text: str) -> bool:
    return any(pattern.search(text) for pattern in TOKEN_PATTERNS) or bool(_URL_CREDENTIALS.search(text))


def secrets_anywhere(data: Any, path: tuple[Any, ...] = ()) -> list[tuple[tuple[Any, ...], str]]:
    """(path, why) for every string of a contract shaped like a credential, wherever it is (a
    description, request defaults, a URL, a model path), and every literal under a credential-named key.
    Keys ending in ``_env`` name a variable, not its value."""
    found: list[tuple[tuple[Any, ...], str]] = []
    if isinstance(data, dict):
        for key, value in data.items():
            where = (*path, key)
            if isinstance(key, str) and looks_like_token(key):
                found.append((where, "a key looks like a token"))
            if (isinstance(key, str) and is_secret_name(key) and not key.lower().endswith("_env")
                    and isinstance(value, str) and not REF.fullmatch(value) and credential_like(value)):
                found.append((where, f"{key} takes a credential"))
            found += secrets_anywhere(value, where)
    elif isinstance(data, list):
        for index, value in enumerate(data):
            found += secrets_anywhere(value, (*path, index))
    elif isinstance(data, str) and looks_like_token(data):
        found.append((path, "the value looks like a token (or a password in a URL)"))
    return found


def referenced_names(values: Iterable[str]) -> list[str]:
    names: list[str] = []
    for value in values:
        for match in REF.finditer(value):
            if match.group(1) not in names:
                names.append(match.group(1))
    return names


def substitute(value: str, environ: Mapping[str, str] | None = None) -> str:
    """Replace every ``${env:NAME}``; a missing variable is a ``KeyError`` naming it."""
    environ = os.environ if environ is None else environ

    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in environ:
            raise KeyError(name)
        return environ[name]

    return REF.sub(one, value)
