"""Secrets stay out of contracts: a value names an environment variable of the runner instead.

``env: {HF_TOKEN: "${env:HF_TOKEN}"}`` or ``args: [--api-key, "${env:SERVE_KEY}"]``: the contract (and so
its frozen hash and the bundle's copy) holds only the reference; the value is read from the runner's
environment at launch, and every place the bundle records it is redacted. ``${env:NAME}`` is the one way to
pass a secret. A literal credential is refused at load and at freeze, with its file, line and field, by
three tests that do not depend on knowing the issuer:

(a) Names. Any key, variable, option or mapping key whose words (cut at ``-``, ``_``, ``.`` and camelCase)
    include key, token, secret, pass/password/passwd/passphrase/pwd, auth/authorization, credential(s),
    private, cookie or session (and one-word forms: apikey, accesskey, privatekey, authtoken...) takes a
    credential (glued too: ``APITOKEN``, ``PGPASSWORD``; and pat, dsn), and only a reference, a flag word
    (``1``, ``true``, ``off``) or a plain path (``/``, ``~``, ``./``; no random or hex part) may stand there,
    in a URL's query parameter of such a name too; a number is a literal, and so is a hex key. Not credential names: a name whose last word says it is
    *about* the credential (``--api-key-file``, ``api_key_env``, ``--session-len``, ``TOKEN_TTL``,
    ``eos_token_id``: file, path, dir, env, name, header, len, size, count, max, ttl, timeout, type, url,
    id... see ABOUT_WORDS), ``token`` after bos/eos/pad/stop... (a vocabulary token), and words that only
    contain a secret word (``--tokenizer``, ``TOKENIZERS_PARALLELISM``, ``max_tokens``: "tokens" is a count,
    ``--ssl-keyfile``). An option written as one argv word counts too: ``--api-key=X``, ``"--api-key X"``.
(b) Shapes, anywhere (a description, a model path, a URL, a header, a key, a comment): a JWT, a PEM
    private key block, user info in a URL of any form (``https://TOKEN@host``, ``http://:pw@host``,
    ``tcp://u:p@h``; only ``ssh://user@box``, a login name, is allowed), ``Bearer`` followed by anything but
    a reference (any length), ``Basic`` followed by base64 of ``user:password``, and well-known issuer
    prefixes (hf_, sk-, ghp_, github_pat_, glpat-, xox?-, AKIA/ASIA, AIza, sk_live_, shpat_, dop_v1_, key-,
    dapi); in a contract, 32 or more hex digits where no digest is expected (``hex_token``).
(c) Opaque values, anywhere: a run of 20 or more base64/base64url letters and digits that reads like
    random text (see ``opaque``: an AWS secret access key, a random API key); hex (digests, commit ids,
    UUIDs) is not opaque.

The same detection feeds the redactor (``campaign.lanes.redact``): boot logs, inspect snapshots and the
daily's log cut these shapes, plus the value after a credential name in free text (``HF_TOKEN=x``,
``"api_key": "x"``). Every pattern here is linear in its input (``benchmarks/patterns.py``): a contract
field of a megabyte costs milliseconds, not minutes.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import itertools
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import yaml

from campaign.errors import ContractError

__all__ = ["ABOUT_WORDS", "REF", "REMEDY", "SECRET_WORDS", "TOKEN_PATTERNS", "credential_like", "credential_spans",
           "is_secret_name", "literal_secrets", "looks_like_token", "name_words", "named_values", "opaque",
           "open_pem_label", "raw_text_secrets", "reference_only", "referenced_names", "refuse_secrets_in_text",
           "secrets_anywhere", "substitute", "token_shape", "hex_token"]

REF = re.compile(r"\$\{env:([A-Za-z_][A-Za-z0-9_]*+)\}")

# (a) Names. A name is cut into words at '-', '_', '.', spaces and camelCase ("XApiKey" -> x, api, key).
SECRET_WORDS = frozenset({
    "key", "apikey", "accesskey", "secretkey", "privatekey", "signingkey",
    "token", "authtoken", "accesstoken", "refreshtoken", "idtoken", "sessiontoken", "bearer", "jwt",
    "secret", "secrets", "clientsecret",
    "pass", "password", "passwords", "passwd", "passphrase", "pwd", "pw",
    "auth", "authorization", "credential", "credentials", "cred", "creds",
    "private", "cookie", "cookies", "session", "sessionid",
    "pat", "dsn",  # GITHUB_PAT (a personal access token), SENTRY_DSN (its key is in the URL)
})
# A word glued from a prefix and one of these is a credential name too: APITOKEN, HFTOKEN, DBPASSWORD,
# MYSQLPWD, PGPASSWORD (not eostoken, padtoken: a vocabulary word before "token"; not monkey, bypass: "key"
# and "pass" end too many ordinary words to count glued)
GLUED_SECRET_ENDS = ("token", "password", "passwd", "passphrase", "pwd", "secret", "apikey", "accesskey",
                     "secretkey", "privatekey", "credential", "credentials")
# A last word that makes the name *about* a credential, not the credential: --api-key-file, api_key_env,
# --session-len, TOKEN_TTL. ("tokens" is not a secret word at all: max_tokens is a count.)
ABOUT_WORDS = frozenset({
    "file", "files", "path", "dir", "directory", "filename", "env", "var", "name", "header", "len", "length",
    "size", "count", "num", "max", "min", "limit", "ttl", "timeout", "expiry", "expires", "type", "mode",
    "kind", "format", "url", "uri", "endpoint", "host", "port", "id", "ids", "threshold", "budget", "map",
    "dtype", "rate", "policy",
})
_SCHEMES = frozenset({"bearer", "basic", "token"})  # "Bearer ${env:K}" is a reference with its scheme word
_FLAG_WORDS = frozenset({"0", "1", "true", "false", "yes", "no", "on", "off", "none", "null", ""})
# "token" after one of these names a vocabulary token (eos_token, pad_token), not a credential
VOCABULARY_WORDS = frozenset({"bos", "eos", "eot", "eog", "pad", "unk", "sep", "cls", "mask", "stop", "start",
                              "end", "special", "image", "audio", "video", "think", "fim", "added"})
# words of a name: "XAPIKey" -> XAPI, Key; backtracking here is bounded by _MAX_NAME, so it stays linear
_NAME_WORD = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
_MAX_NAME = 128  # a longer "name" (a run of letters in a log) is not a name: bounded work per word


def name_words(name: str) -> list[str]:
    """The lower-case words of a name, cut at '-', '_', '.', spaces and camelCase; [] past 128 characters."""
    return [] if len(name) > _MAX_NAME else [word.lower() for word in _NAME_WORD.findall(name)]


def is_secret_name(name: str) -> bool:
    """An option, variable or key whose value is a credential, whatever it looks like: ``--api-key``,
    ``--hf-token``, ``HF_TOKEN``, ``OPENAI_API_KEY``, ``DB_PASS``, ``request_defaults.authorization``,
    ``X-Api-Key``; not ``--tokenizer``, ``TOKENIZERS_PARALLELISM``, ``max_tokens``, ``--api-key-file`` or
    ``--session-len`` (see ABOUT_WORDS)."""
    words = name_words(name)
    if not words or words[-1] in ABOUT_WORDS:
        return False
    secret = [i for i, w in enumerate(words) if (w in SECRET_WORDS or _glued_secret(w))
              and not (w == "token" and i > 0 and words[i - 1] in VOCABULARY_WORDS)]
    return bool(secret) or any(a + b in SECRET_WORDS for a, b in itertools.pairwise(words))


def _glued_secret(word: str) -> bool:
    for end in GLUED_SECRET_ENDS:
        if len(word) > len(end) and word.endswith(end):
            return not (end == "token" and word[:-len(end)] in VOCABULARY_WORDS)
    return False


def credential_like(value: str) -> bool:
    """Whether a value in a credential-named place is a literal credential: anything but a reference
    (``${env:NAME}``, alone or after a scheme word: ``Bearer ${env:K}``), a flag word (``1``, ``true``,
    ``off``) or a path (``/run/secrets/k``, ``~/.key``, ``./k``). A short key is still a key."""
    if reference_only(value):
        return False
    text = value.strip()
    return text.lower() not in _FLAG_WORDS and not _plain_path(text)


_PATH_CHARS = re.compile(r"[A-Za-z0-9._~/-]++")


def _plain_path(text: str) -> bool:
    """A path as people write one (``/run/secrets/hf``, ``~/.key``, ``./k``): a key that starts with ``/``
    (base64 may) is not one: a character no path is written with (``+``, ``=``), or a part of it that
    reads as a random key or a long hex run."""
    if not text.startswith(("/", "~", "./", "../")) or not _PATH_CHARS.fullmatch(text):
        return False
    return not any(opaque(part) or (len(part) >= 32 and _HEX.fullmatch(part)) for part in text.split("/"))


def reference_only(value: str) -> bool:
    """``${env:NAME}``, alone or after a scheme word (``Bearer ${env:K}``), spaces aside."""
    text = value.strip()
    if "${env:" not in text:
        return False
    rest = REF.sub("", text).strip()
    return not rest or rest.lower() in _SCHEMES


# (b) Shapes. Linear by construction (benchmarks/patterns.py; tests/unit/contracts/test_pattern_linearity.py):
# every pattern starts at a literal or just after a character outside its body (the lookbehind), and every
# repeat is possessive, so no two attempts read the same run and no attempt gives characters back.
_RUN = "A-Za-z0-9_-"
TOKEN_PATTERNS: tuple[re.Pattern[str], ...] = (
    re.compile(rf"(?<![{_RUN}])hf_[A-Za-z0-9]{{16,}}+"),                         # Hugging Face
    re.compile(rf"(?<![{_RUN}])sk-[{_RUN}]{{16,}}+"),                            # OpenAI, Anthropic
    re.compile(rf"(?<![{_RUN}])gh[pousr]_[A-Za-z0-9]{{20,}}+"),                  # GitHub
    re.compile(rf"(?<![{_RUN}])github_pat_[A-Za-z0-9_]{{20,}}+"),
    re.compile(rf"(?<![{_RUN}])glpat-[{_RUN}]{{20,}}+"),                         # GitLab
    re.compile(rf"(?<![{_RUN}])xox[abprs]-[A-Za-z0-9-]{{10,}}+"),                # Slack
    re.compile(rf"(?<![{_RUN}])(?:AKIA|ASIA)[0-9A-Z]{{16}}+(?![{_RUN}])"),       # AWS access key id
    re.compile(rf"(?<![{_RUN}])AIza[{_RUN}]{{35}}+(?![{_RUN}])"),                # Google API key
    re.compile(rf"(?<![{_RUN}])eyJ[{_RUN}]{{8,}}+\.[{_RUN}]{{2,}}+\.[{_RUN}]*+"),  # JWT (JWS, JWE)
    # issuers whose tokens are hex or plain alphanumerics after a prefix (the opacity test spares hex)
    re.compile(rf"(?<![{_RUN}])(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{{16,}}+"),     # Stripe secret, restricted
    re.compile(rf"(?<![{_RUN}])whsec_[A-Za-z0-9]{{16,}}+"),                       # Stripe webhook secret
    re.compile(rf"(?<![{_RUN}])shp(?:at|ca|pa|ss)_[a-fA-F0-9]{{32}}+"),           # Shopify
    re.compile(rf"(?<![{_RUN}])do[opr]_v1_[a-f0-9]{{64}}+"),                      # DigitalOcean
    re.compile(rf"(?<![{_RUN}])key-[0-9a-zA-Z]{{32}}+(?![{_RUN}])"),              # Mailgun
    re.compile(rf"(?<![{_RUN}])dapi[0-9a-f]{{32}}+(?![{_RUN}])"),                 # Databricks
    # Bearer, any length, of a value that is not a plain word: a digit or symbol in it, a capital after its
    # first letter, or 20 letters ("a Bearer token proxy" is prose; a plain word under a credential name,
    # `authorization: Bearer hunter`, is caught by the name)
    re.compile(r"(?i)(?<![A-Za-z0-9])bearer[ \t]++((?=[A-Za-z]*+[0-9._~+/=-]|[A-Za-z](?-i:[a-z]*+[A-Z])|[A-Za-z]{20})"
               r"[A-Za-z0-9._~+/=-]++)"),
)
# a pattern runs only where its literal start is in the text at all (a fast substring search); lower-cased
# text for the case-blind ones
_TRIGGERS: tuple[tuple[str, ...], ...] = (("hf_",), ("sk-",), ("gh",), ("github_pat_",), ("glpat-",), ("xox",),
                                          ("AKIA", "ASIA"), ("AIza",), ("eyJ",),
                                          ("sk_live_", "sk_test_", "rk_live_", "rk_test_"), ("whsec_",), ("shp",),
                                          ("_v1_",), ("key-",), ("dapi",), ("bearer",))
_BASIC = re.compile(r"(?i)(?<![A-Za-z0-9])basic[ \t]++([A-Za-z0-9+/=]++)")
_TOKEN_CHECKS = tuple((pattern, triggers, bool(pattern.flags & re.IGNORECASE))
                      for pattern, triggers in zip(TOKEN_PATTERNS, _TRIGGERS, strict=True))
_ANY_TRIGGER = re.compile("|".join(re.escape(t) for triggers in _TRIGGERS[:-1] for t in triggers)
                          + r"|(?i:bearer|basic)|-----BEGIN |://")
_PEM = re.compile(r"-----BEGIN ([A-Z0-9 ]{0,48}+)-----")
_AUTHORITY = re.compile(r"[^/?#\s\"'<>\\`|]*+")
_SCHEME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+.-")
_LOGIN_SCHEMES = frozenset({"ssh", "sftp"})  # ssh://user@box: a login name, never with a password


def _basic_credential(value: str) -> bool:
    """``Basic`` followed by base64 of ``user:password`` (the word "basic" in prose is not); the base64 ends
    at its padding (``Og==/m``: a path goes on after it)."""
    end = len(value.partition("=")[0])
    while end < len(value) and value[end] == "=":
        end += 1
    for candidate in dict.fromkeys([value, value[:end]]):
        try:
            if b":" in base64.b64decode(candidate + "=" * (-len(candidate) % 4), validate=True):
                return True
        except (binascii.Error, ValueError):
            continue
    return False


def _userinfo_spans(text: str) -> Iterator[tuple[int, int, str]]:
    """``scheme://userinfo@host``: any user info (``TOKEN@``, ``:pw@``, ``user:pw@``) except a login name
    alone on ssh; one pass, each authority read once."""
    i = text.find("://")
    while i != -1:
        start = i + 3
        end = _AUTHORITY.match(text, start).end()  # type: ignore[union-attr]  # it matches "": never None
        at = text.rfind("@", start, end)
        if at != -1:
            userinfo = text[start:at]
            j = i
            while j > 0 and i - j < 32 and text[j - 1] in _SCHEME_CHARS:
                j -= 1
            scheme = text[j:i].lower().rsplit("+", 1)[-1]
            if (scheme not in _LOGIN_SCHEMES or ":" in userinfo) and not reference_only(userinfo):
                yield start, at, "a credential in a URL (user info before '@')"
        i = text.find("://", max(end, start))


# a URL's query parameter: `?api_key=X`, `&token=X`; the name is judged as any credential name
_QUERY = re.compile(r"[?&;]([A-Za-z0-9_.-]++)=([^&#\s\"'<>]++)")


def _query_spans(text: str) -> list[tuple[int, int, str]]:
    """The value of each query parameter whose name takes a credential (``?api_key=X``, ``&access_token=X``),
    unless it is a reference. Linear: each attempt starts at a ``?``, ``&`` or ``;`` and reads on."""
    return [(*m.span(2), f"a URL's {m.group(1)} parameter holds a credential") for m in _QUERY.finditer(text)
            if is_secret_name(m.group(1)) and credential_like(m.group(2)) and not m.group(2).startswith("${")]


def _pem_blocks(text: str) -> Iterator[tuple[int, int, str, bool]]:
    """(start, end, label, closed) of each PEM private key block, through its END line, or to the end of
    the text when it has none. One pass: the search resumes after each block."""
    position = 0
    while (match := _PEM.search(text, position)) is not None:
        label = match.group(1)
        if "PRIVATE" not in label and "SECRET" not in label:
            position = match.end()
            continue
        end = text.find(f"-----END {label}-----", match.end())
        if end == -1:
            yield match.start(), len(text), label, False
            return
        position = end + len(label) + 14
        yield match.start(), position, label, True


def open_pem_label(text: str) -> str | None:
    """The label of a PEM private key block that begins in ``text`` and does not end there (a log written
    line by line cuts the lines that follow, up to its END)."""
    return next((label for _s, _e, label, closed in _pem_blocks(text) if not closed), None)


# (c) Opaque values: a long run of base64/base64url/alphanumeric characters that reads like random text.
_LONG_WORD = re.compile(r"(?<![A-Za-z0-9+/_.-])[A-Za-z0-9+/_.-]{20,}+={0,2}+")
_SEGMENT = re.compile(r"[A-Za-z0-9]++")
_UNIT = re.compile(r"[A-Z][a-z]++|[a-z]++|[A-Z]++|[0-9]++")
_HEX = re.compile(r"[0-9a-f]++|[0-9A-F]++")
OPAQUE_MIN = 20


def opaque(word: str) -> bool:
    """Random-looking: at least 20 letters and digits (hex runs of 8 or more left out: digests, commit ids,
    UUIDs are not secrets), at most one separator (- _ /) in eight, two or more of upper, lower and digit, and the
    character class changing every 3 characters or sooner on average (random base64 changes about every 1.8;
    names, words and model ids every 4 to 8); 3.5 from 40 letters on. Rates: docs/secrets.md."""
    segments = _SEGMENT.findall(word)
    kept = [s for s in segments if len(s) < 8 or not _HEX.fullmatch(s)]
    letters = sum(map(len, kept))
    if letters < OPAQUE_MIN:
        return False
    if sum(word.count(c) for c in "-_/.") > letters / 8:  # names are cut by these; "+" is base64
        return False
    joined = "".join(kept)  # letters and digits only: a digit is there unless it is all letters
    if (joined.lower() != joined) + (joined.upper() != joined) + (not joined.isalpha()) < 2:
        return False
    units = sum(len(_UNIT.findall(s)) for s in kept)
    return letters / units <= (3.0 if letters < 40 else 3.5)


# Names whose value is a model or a file (`--model`, `--tokenizer`, `--served-model-name`, `served_name`,
# `model.path`): a Hugging Face id (`OpenGVLab/InternVL3-8B`) changes case as often as a random key, so the
# opacity test is not applied there; the shapes still are.
NAMES_A_MODEL = frozenset({"model", "tokenizer", "name", "path", "dir", "repo", "revision", "checkpoint", "file"})


# In a name (a model id, a file name, a served name) a random key still shows as one long run of letters and
# digits with no separator; names cut theirs at - _ . / every few characters (Meta-Llama-3.1-8B-Instruct)
NAME_SEGMENT_MIN = 24
_NAME_SEGMENT = re.compile(rf"(?<![A-Za-z0-9])[A-Za-z0-9]{{{NAME_SEGMENT_MIN},}}+")


def names_a_model(name: str) -> bool:
    words = name_words(name)
    return bool(words) and words[-1] in NAMES_A_MODEL


def credential_spans(text: str, *, named: bool = False, opaque_values: bool = True) -> list[tuple[int, int, str]]:
    """(start, end, what) of every credential shape in ``text``, sorted: known token prefixes, JWTs,
    Bearer values, Basic credentials, PEM private keys, URL user info, opaque values; with ``named``, also
    the value after a credential name in free text (``HF_TOKEN=x``, ``"api_key": "x"``, ``--api-key x``).
    Linear in the length of ``text``."""
    spans: list[tuple[int, int, str]] = []
    if _ANY_TRIGGER.search(text) is not None:  # most strings hold no shape's start at all: one quick look
        lowered = text.lower()
        for pattern, triggers, blind in _TOKEN_CHECKS:
            haystack = lowered if blind else text
            if any(trigger in haystack for trigger in triggers):
                spans += [(*m.span(m.lastindex or 0), "token") for m in pattern.finditer(text)]
        if "basic" in lowered:
            spans += [(*m.span(1), "Basic credential") for m in _BASIC.finditer(text)
                      if _basic_credential(m.group(1))]
        if "-----BEGIN " in text:
            spans += [(start, end, "a PEM private key") for start, end, _label, _closed in _pem_blocks(text)]
        if "://" in text:
            spans += _userinfo_spans(text)
            spans += _query_spans(text)
    if opaque_values and len(text) >= OPAQUE_MIN:
        spans += [(m.start(), m.end(), "opaque value") for m in _LONG_WORD.finditer(text) if opaque(m.group())]
    elif len(text) >= NAME_SEGMENT_MIN:  # a name: only a long run with no separator in it is judged
        spans += [(m.start(), m.end(), "opaque value") for m in _NAME_SEGMENT.finditer(text) if opaque(m.group())]
    if named:
        spans += named_values(text)
    return sorted(spans)


_WHAT = {"token": "the value looks like a token", "Basic credential": "the value looks like a token (Basic)",
         "a PEM private key": "the value looks like a token (a PEM private key)",
         "opaque value": "the value looks like a token (a long random-looking value)"}


def token_shape(text: str, *, under: str | None = None) -> str | None:
    """Why ``text`` holds a credential by its shape alone, or None; ``under``: the key or option it is the
    value of (a model's name is not judged by its opacity)."""
    spans = credential_spans(text, opaque_values=under is None or not names_a_model(under))
    if not spans:
        return None
    what = spans[0][2]
    return _WHAT.get(what, what)


def looks_like_token(text: str) -> bool:
    return bool(credential_spans(text))


# a credential name, then its value: `--api-key x` (an option), `HF_TOKEN=x`, `"api_key": "x"`, `key: x`
_NAMED = re.compile(r"(?<![A-Za-z0-9_.-])(?:(--?[A-Za-z][A-Za-z0-9_.-]*+)[ \t]++(?=[^\s-])"
                    r"|(-{0,2}+[A-Za-z][A-Za-z0-9_.-]*+)[\"']?+[ \t]*+[=:])"
                    r"[ \t]*+\[?+[\"']?+([^\s\"',;})\]&?]++)")
_NUMBER = re.compile(r"[-+]?[0-9][0-9.,]*+")


def named_values(text: str) -> list[tuple[int, int, str]]:
    """Spans of the value after a credential name in free text (a log line, a comment): ``HF_TOKEN=x``,
    ``"api_key": "x"``, ``--api-key x``. A reference, a flag word, a path, a number (``EOS token = 2``) or
    a scheme word (``Authorization: Bearer``: the Bearer shape cuts what follows) is not cut. Linear: each
    attempt starts at the beginning of a name and consumes what it reads."""
    found = []
    for match in _NAMED.finditer(text):
        name, value = match.group(1) or match.group(2), match.group(3)
        if (is_secret_name(name) and credential_like(value) and value.lower() not in _SCHEMES
                and not _NUMBER.fullmatch(value) and not value.startswith("${")):
            found.append((match.start(3), match.end(3), f"{name.lstrip('-')} names a credential"))
    return found


def _split_option(option: str) -> tuple[str, str | None]:
    """``--api-key=X`` and ``--api-key X`` written as one argv word: (name, inline value)."""
    for i, char in enumerate(option):
        if char == "=" or char.isspace():
            return option[:i], option[i + 1:].strip()
    return option, None


def _literal(value: Any) -> bool:
    """A value written in the contract where a credential goes: a string that is not a reference (nor a
    flag word, nor a path), or a number (``--api-key: 123456`` is a key)."""
    if isinstance(value, bool) or value is None:
        return False
    if isinstance(value, (int, float)):
        return True
    return isinstance(value, str) and credential_like(value)


def literal_secrets(env: Mapping[str, str | None], args: Iterable[tuple[str, str | None]]) -> list[tuple[str, str]]:
    """(where, why) for every literal credential in a lane's env and args: a credential-named variable or
    option with a value that is not a reference, or any value shaped like a credential."""
    found = []
    for name, value in env.items():
        if value is None:
            continue
        if is_secret_name(name) and credential_like(value):
            found.append((f"env.{name}", f"{name} names a credential"))
        elif why := token_shape(value, under=name):
            found.append((f"env.{name}", why))
    for option, value in args:
        name, inline = _split_option(option) if option.startswith("-") else (option, None)
        for written in (inline, value):
            if written is None:
                continue
            if name.startswith("-") and is_secret_name(name) and credential_like(written):
                found.append((f"args.{option}", f"{name} takes a credential"))
            elif why := token_shape(written, under=name):
                found.append((f"args.{option}", why))
    return found


def _argv_secrets(items: list[Any], path: tuple[Any, ...]) -> list[tuple[tuple[Any, ...], str]]:
    """A list read as argv: ``[--api-key, X]``, ``[--api-key=X]``, ``["--api-key X"]``."""
    found = []
    for index, item in enumerate(items):
        if not (isinstance(item, str) and item.startswith("-")):
            continue
        name, inline = _split_option(item)
        if not is_secret_name(name):
            continue
        if inline is not None:
            if credential_like(inline):
                found.append(((*path, index), f"{name} takes a credential"))
        elif index + 1 < len(items) and _literal(items[index + 1]) and not str(items[index + 1]).startswith("-"):
            found.append(((*path, index + 1), f"{name} takes a credential"))
    return found


def secrets_anywhere(data: Any, path: tuple[Any, ...] = (), under: str | None = None) -> list[tuple[tuple[Any, ...], str]]:
    """(path, why) for every credential in a contract, wherever it is: any string shaped like one (a
    description, request defaults, a header, a URL, a model path, a key), a literal under a
    credential-named key (``authorization``, ``X-Api-Key``, ``DB_PASS``; not ``api_key_env``, which names a
    variable), and the value of a credential option in any argv list."""
    found: list[tuple[tuple[Any, ...], str]] = []
    if isinstance(data, dict):
        for key, value in data.items():
            where = (*path, key)
            if isinstance(key, str) and (why := token_shape(key)):
                found.append((where, f"a key {why.removeprefix('the value ')}"))
            if isinstance(key, str) and is_secret_name(key) and _literal(value):
                found.append((where, f"{key} takes a credential"))
            found += secrets_anywhere(value, where, key if isinstance(key, str) else None)
    elif isinstance(data, list):
        found += _argv_secrets(data, path)
        for index, value in enumerate(data):
            option = data[index - 1] if index and isinstance(data[index - 1], str) and data[index - 1].startswith("-") else None
            found += secrets_anywhere(value, (*path, index), _split_option(option)[0] if option else under)
    elif isinstance(data, str) and (why := token_shape(data, under=under) or hex_token(data, under=under)):
        found.append((path, why))
    return found


# A hex run as long as a token (32 digits: an auth token, a Mailgun or Shopify key without its prefix), a
# letter and a digit in it: in a contract a digest stands where one is expected, under a digest's name or
# labelled as one (`sha256:...`, an image's `@sha256:...`); a path may hold a folder named by a digest (a
# Hugging Face cache's snapshots/<commit>/), a name (served_name, served_model) may not
_HEX_RUN = re.compile(r"(?<![A-Za-z0-9])(?:[0-9a-f]{32,}+|[0-9A-F]{32,}+)(?![A-Za-z0-9])")
DIGEST_WORDS = frozenset({"sha256", "sha512", "sha1", "sha", "digest", "digests", "hash", "checksum", "revision",
                          "commit", "rev", "pin", "image"})
_NAMES_A_FILE = frozenset({"path", "dir", "directory", "file", "model", "tokenizer", "checkpoint", "repo"})
_DIGEST_LABEL = re.compile(r"(?:sha256|sha512|sha1|sha)[:=]$", re.IGNORECASE)


def hex_token(text: str, *, under: str | None = None) -> str | None:
    """Why ``text`` holds a hex token, or None: a hex run of 32 or more digits where no digest is expected."""
    words = name_words(under) if under else []
    last = words[-2] + words[-1] if len(words) > 1 and words[-1].isdigit() else (words[-1] if words else "")
    if last in DIGEST_WORDS or ("/" in text and last in _NAMES_A_FILE):  # "sha256" is the words sha, 256
        return None
    for match in _HEX_RUN.finditer(text):
        run = match.group()
        if run.isdigit() or run.isalpha() or _DIGEST_LABEL.search(text[max(0, match.start() - 7):match.start()]):
            continue
        return "the value looks like a token (a long hex value where no digest is expected)"
    return None


_COMMENT_START = re.compile(r"(?m)(?:^|(?<=[ \t]))#")


def _scalar_spans(root: Any) -> list[tuple[int, int]]:
    """(start, end) character offsets of every scalar of a YAML node tree, sorted: a '#' inside one (a quoted
    string, a block scalar) is text, not a comment."""
    spans, stack = [], [root] if root is not None else []
    while stack:
        node = stack.pop()
        if isinstance(node, yaml.MappingNode):
            stack += [part for pair in node.value for part in pair]
        elif isinstance(node, yaml.SequenceNode):
            stack += node.value
        elif isinstance(node, yaml.ScalarNode):
            spans.append((node.start_mark.index, node.end_mark.index))
    return sorted(spans)


def _comments(text: str, root: Any) -> list[tuple[int, int]]:
    """(start, end) of each comment of a YAML text: a '#' at a line's start or after a blank, outside every
    scalar of ``root`` (when given), to the end of its line. One pass; each '#' is placed by bisection."""
    scalars = _scalar_spans(root)
    starts = [start for start, _end in scalars]
    found: list[tuple[int, int]] = []
    for match in _COMMENT_START.finditer(text):
        at = match.start()
        if found and at < found[-1][1]:
            continue  # a '#' inside a comment already found
        index = bisect.bisect_right(starts, at) - 1
        if index >= 0 and scalars[index][0] <= at < scalars[index][1]:
            continue
        end = text.find("\n", at)
        found.append((at, len(text) if end == -1 else end))
    return found


def raw_text_secrets(text: str, root: Any = None) -> tuple[int, str, str] | None:
    """The first credential in a contract file's own text, comments included: (line, field, why), field
    ``comment`` when it lies in a comment. The file's bytes are copied into every bundle, so a token in
    ``# old key: sk-...`` leaks as surely as one in a value. Shapes anywhere; in comments, also a
    credential-named value (``# password: x``). ``root``: the YAML node tree, so that a '#' inside a quoted
    or block scalar is not taken for a comment."""
    comments = _comments(text, root)
    starts = [start for start, _end in comments]

    def in_comment(position: int) -> bool:
        index = bisect.bisect_right(starts, position) - 1
        return index >= 0 and position < comments[index][1]

    # values and keys are checked as the data they are (secrets_anywhere, with what each is the value of);
    # the text outside them is YAML's punctuation and the comments
    hits = []
    for start, end in comments:
        comment = text[start:end]
        spans = credential_spans(comment)
        if spans:
            hits.append((start + spans[0][0], "comment", _WHAT.get(spans[0][2], spans[0][2])))
            break
        # prose names credentials all the time ("# token: none needed, the model is public"); a named value
        # counts only where it ends the comment, as a value written there would
        named = [hit for hit in named_values(comment) if not comment[hit[1]:].strip()]
        if named:
            hits.append((start + named[0][0], "comment", named[0][2]))
            break
    if not hits:
        return None
    start, field, why = min(hits)
    return text.count("\n", 0, start) + 1, field, why


REMEDY = ("write \"${env:NAME}\" and set NAME in the runner's environment, so the secret is neither frozen "
          "nor copied into bundles")


def refuse_secrets_in_text(text: str, file: str, root: Any = None) -> None:
    """A ``ContractError`` (file, line, field ``comment``) for the first credential in a contract file's
    text: its bytes are what freeze pins and every bundle copies, comments and all. ``root``: the YAML node
    tree of that text (``LocatedDocument.root``)."""
    hit = raw_text_secrets(text, root)
    if hit is not None:
        line, field, why = hit
        where = "a comment" if field == "comment" else "the file's text"
        raise ContractError(f"{why}, in {where}: remove it (the file's bytes are copied into every bundle); "
                            + REMEDY, file=file, line=line, field=field)


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
