"""Generators of credential names and credential-shaped values (hypothesis strategies), for the tests of the
credential rule and of the bundle's secret scan: classes of secrets, not the examples that were reported."""

from __future__ import annotations

import base64
import json
import random
import re
import string

from hypothesis import strategies as st

__all__ = ["ABOUT", "ALNUM", "aws_key_ids", "B64TOKEN", "B64URL", "basics", "bearers", "camel", "env_name",
           "free_literal", "google_keys", "issuer_tokens", "jwts", "literal", "NEUTRAL", "opaque_values",
           "option", "pems", "ref_name", "SECRET", "secret_words", "SHAPES", "url_userinfo", "words"]

NEUTRAL = ["model", "cache", "batch", "server", "hub", "local", "remote", "admin", "client", "service", "db",
           "llama", "vllm", "openai", "aws", "gcp", "daily", "proxy", "upstream", "my", "x", "hf", "access", "api"]
# the words issue #30 names, and their usual spellings
SECRET = ["key", "token", "secret", "pass", "password", "passwd", "auth", "authorization", "credential",
          "credentials", "private", "cookie", "session", "apikey"]
ABOUT = ["file", "path", "dir", "env", "len", "ttl", "timeout", "id", "name", "size"]
B64URL = string.ascii_letters + string.digits + "-_"
B64TOKEN = string.ascii_letters + string.digits + "-._~+/"

words = st.lists(st.sampled_from(NEUTRAL), max_size=2)


@st.composite
def secret_words(draw: st.DrawFn) -> list[str]:
    before, after = draw(words), draw(st.lists(st.sampled_from(NEUTRAL), max_size=1))
    return [*before, draw(st.sampled_from(SECRET)), *after]


def env_name(parts: list[str]) -> str:
    return "_".join(parts).upper()


def option(parts: list[str]) -> str:
    return "--" + "-".join(parts)


def camel(parts: list[str]) -> str:
    return parts[0] + "".join(p.capitalize() for p in parts[1:])


# a literal where a credential goes: anything but a flag word, a path, or an option (a value never starts '-')
literal = st.text(alphabet=string.ascii_letters + string.digits + "!#%*+-.:=@^_", min_size=1, max_size=24).filter(
    lambda v: v.lower() not in {"0", "1", "true", "false", "yes", "no", "on", "off", "bearer", "basic", "token"}
    and not v.startswith((".", "~", "-")))
# in free text (a log, a comment) a number after a credential name is left alone ("EOS token = 2")
free_literal = literal.filter(lambda v: not re.fullmatch(r"[-+]?[0-9][0-9.,]*", v))
ref_name = st.text(alphabet=string.ascii_uppercase + "_", min_size=1, max_size=12).filter(lambda n: not n[0] == "_")


@st.composite
def jwts(draw: st.DrawFn) -> str:
    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    header = {"alg": draw(st.sampled_from(["HS256", "RS256", "ES256", "none"])), "typ": "JWT"}
    claims = draw(st.dictionaries(st.sampled_from(["sub", "iss", "aud", "exp", "iat", "name"]),
                                  st.one_of(st.integers(0, 2 ** 31), st.text(string.ascii_letters, max_size=12)),
                                  min_size=1))
    signature = draw(st.binary(max_size=64))
    return ".".join([b64(json.dumps(header).encode()), b64(json.dumps(claims).encode()), b64(signature)])


@st.composite
def pems(draw: st.DrawFn) -> str:
    label = draw(st.sampled_from(["RSA PRIVATE KEY", "EC PRIVATE KEY", "PRIVATE KEY", "OPENSSH PRIVATE KEY",
                                  "ENCRYPTED PRIVATE KEY", "DSA PRIVATE KEY", "PGP PRIVATE KEY BLOCK"]))
    body = base64.b64encode(draw(st.binary(min_size=16, max_size=300))).decode()
    lines = [body[i:i + 64] for i in range(0, len(body), 64)]
    return "\n".join([f"-----BEGIN {label}-----", *lines, f"-----END {label}-----"])


@st.composite
def url_userinfo(draw: st.DrawFn) -> str:
    scheme = draw(st.sampled_from(["http", "https", "tcp", "redis", "postgres", "ftp", "git+https", "ssh"]))
    token = draw(st.text(alphabet=B64URL, min_size=1, max_size=40))
    user = draw(st.text(alphabet=string.ascii_lowercase, min_size=1, max_size=8))
    forms = [f"{user}:{token}", f":{token}"] + ([] if scheme == "ssh" else [token])  # ssh://user@box is a login
    host = draw(st.sampled_from(["box", "127.0.0.1:8080", "api.example.com", "[::1]:2376"]))
    return f"{scheme}://{draw(st.sampled_from(forms))}@{host}/{draw(st.text(string.ascii_lowercase, max_size=6))}"


@st.composite
def basics(draw: st.DrawFn) -> str:
    user = draw(st.text(alphabet=string.ascii_letters + string.digits, max_size=12))
    password = draw(st.text(alphabet=string.printable.strip(), max_size=16))
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


# any token but a plain word ("a Bearer token proxy" is prose): a digit or symbol, a capital after the
# first letter, or 20 letters
bearers = st.builds(lambda scheme, token: f"{scheme} {token}", st.sampled_from(["Bearer", "bearer", "BEARER"]),
                    st.text(alphabet=B64TOKEN, min_size=1, max_size=64).filter(
                        lambda t: not t.isalpha() or len(t) >= 20 or any(c.isupper() for c in t[1:])))
google_keys = st.builds(lambda rest: "AIza" + rest, st.text(alphabet=B64URL, min_size=35, max_size=35))
issuer_tokens = st.builds(lambda prefix, rest: prefix + rest,
                          st.sampled_from(["hf_", "sk-", "sk-proj-", "ghp_", "gho_", "github_pat_", "glpat-", "xoxb-"]),
                          st.text(alphabet=string.ascii_letters + string.digits, min_size=24, max_size=48))
aws_key_ids = st.builds(lambda rest: "AKIA" + rest, st.text(alphabet=string.ascii_uppercase + string.digits,
                                                              min_size=16, max_size=16))
# (c): random letters and digits, 40 to 64 long (an API key from any issuer), drawn uniformly (from a seed
# hypothesis picks: its own text strategy favours "0000...", which is no key)
ALNUM = string.ascii_letters + string.digits
opaque_values = st.builds(lambda seed, n: "".join(random.Random(seed).choices(ALNUM, k=n)),
                          st.integers(0, 2 ** 32), st.integers(40, 64))
SHAPES = st.one_of(jwts(), pems(), url_userinfo(), basics(), bearers, google_keys, issuer_tokens, aws_key_ids,
                   opaque_values)
