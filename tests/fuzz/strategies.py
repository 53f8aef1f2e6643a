"""Hostile values the fuzz tests share: texts that break terminals and markup, YAML scalars written raw (what
a YAML dumper would never emit: non-finite numbers, YAML 1.1 booleans, lone surrogates in escapes, tags,
anchors), JSON values, and file names."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

import yaml
from hypothesis import strategies as st

__all__ = ["RAW_YAML_TOKENS", "SPECIAL_PATHS", "Raw", "file_names", "hostile_texts", "json_values",
           "nasty_scalars", "special_path", "to_yaml", "walk_paths", "yaml_quoted"]

# Pieces of text with a meaning to a terminal, to rich (markup, emoji codes, highlighting), to YAML, or
# to a reader of one line.
HOSTILE_PIECES = [
    "[/x]", "[/]", "[bold]", "[bold red]OK verified[/]", "[link=file:///etc/passwd]x[/link]", "\\[", ":b:",
    ":smile:", "a:b:", "\x1b[2J", "\x1b[31m", "\x1b]8;;http://x\x07", "\x1b", "\r", "\n", "\r\n", "\t", "\x00",
    "\x08", "\x7f", "\x85", "\x9b", "\u2028", "\u2029", "\u202e", "\u2066", "\u200f", "\ufeff", "\U0001F600",
    "é", "e\u0301", "\u0130", "ß", "İ", "%s", "{0}", "{}", "${env:HOME}", "${file:x}", "'", '"', "\\", "..",
    "../", "/", "~", "-", "--", "*", "#", "&a", "!!python/object", "- ", ": ", "? ", "|", ">", "@", "`",
    "verified: ok", "error:", "x" * 300,
]

hostile_texts = st.one_of(
    st.text(max_size=40),
    st.lists(st.one_of(st.sampled_from(HOSTILE_PIECES), st.text(max_size=8)), min_size=1, max_size=6).map("".join),
)


class Raw(str):
    """A YAML scalar written into the document as is (not through the dumper)."""


RAW_YAML_TOKENS = [
    ".nan", ".NaN", ".inf", "-.inf", "+.inf", ".Inf", "yes", "no", "on", "off", "y", "n", "Yes", "NO", "true",
    "false", "~", "null", "Null", '"\\ud800"', '"\\udfff"', '"a\\udc80b"', '"\\U0010ffff"', '"\\u202e"',
    '"\\0"', '"\\e[2J"', '"\\x85"', '"\\L"', '"\\P"', "0x10", "0o777", "0777", "0b101", "1_000", "1e400",
    "-1e400", "1e-400", "99999999999999999999999", "-99999999999999999999999", "0.0000001", "1:30",
    "190:20:30", "2001-12-14t21:59:43.10-05:00", "2002-12-14", '"99999999999999999999999h"', "0.0000001ms",
    '"0-4000000000"', "0-4000000000", "4000000000", "-1", "0", "-0", "1.0", "1e3", "'[/x]'", '"[bold]x"',
    "':b:'", "!!binary aGVsbG8=", "!!python/object:os.system x", "!!str 1", "!!int '1'", "!!float x",
    "!!set {a: null}", "!!omap [a: 1]", "!!timestamp 2001-01-01", "&anchor x", "*alias", "<<", "=", "'a''b'",
    '"\\x00"', "''", '""', "'  '", "[]", "{}", "[[[[[[[[]]]]]]]]", "{a: {b: {c: {}}}}", "? a", "1" * 5000,
    "0." + "1" * 5000, "[" * 40 + "]" * 40, "{a: " * 40 + "1" + "}" * 40, "%TAG ! tag:x", "---", "...",
    # deep nesting as text: the parent never builds (or recurses into) the structure
    "[" * 1000 + "]" * 1000, "[" * 100_000 + "]" * 100_000, "{a: " * 5000 + "1" + "}" * 5000, "[" * 200_000,
]

nasty_scalars = st.one_of(
    st.none(), st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.sampled_from([0, -1, 2**31, 2**63, 2**64 + 1, 10**4000]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30), hostile_texts,
    st.sampled_from(RAW_YAML_TOKENS).map(Raw),
    st.sampled_from([2_000, 100_000, 1_000_000]).map(lambda n: "a" * n),  # under the 1 MiB cap
    st.sampled_from(["ab:", "a@", "http://", "https://a", "Bearer ", "%40", "x:y@"]).map(lambda p: p * 40_000),
)

json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.sampled_from([10**400, -(10**4000), 2**64]),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=30), hostile_texts,
)
json_values = st.recursive(json_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=5), st.dictionaries(st.text(max_size=10), inner, max_size=5)), max_leaves=25)

# File names: one path component (no "/" and no NUL, at most 255 bytes on Linux).
file_names = st.one_of(
    st.text(st.characters(blacklist_characters="/\x00", blacklist_categories=("Cs",)), min_size=1, max_size=40),
    st.lists(st.sampled_from([p for p in HOSTILE_PIECES if "/" not in p and "\x00" not in p]),
             min_size=1, max_size=4).map("".join),
).filter(lambda n: n not in (".", "..") and 0 < len(n.encode()) <= 255)

SPECIAL_PATHS = ["missing", "nul", "newline", "dotdot", "loop", "self-loop", "fifo", "directory", "dev-zero",
                 "dev-null", "dev-urandom", "proc-environ", "proc-mem", "too-long-name", "too-long-path", "empty",
                 "socket", "dangling-link", "not-a-dir", "sparse-huge", "bad-utf8", "link-to-fifo",
                 "link-to-dev-zero", "hidden-in-dotdot", "root"]


def special_path(kind: str, where: Path) -> str:
    """A path of the named kind, made under ``where`` (a FIFO, a loop, a socket...) where it must exist."""
    base = where / "special"
    base.mkdir(exist_ok=True)
    if kind == "missing":
        return str(base / "no-such-file.yaml")
    if kind == "nul":
        return str(base / "a\x00b.yaml")
    if kind == "newline":
        path = base / "line\nbreak.yaml"
        path.write_text("contract: x\n")
        return str(path)
    if kind == "dotdot":
        return str(base / ".." / ".." / ".." / ".." / ".." / ".." / ".." / "etc" / "hostname")
    if kind == "hidden-in-dotdot":
        return str(base / "x" / ".." / "y.yaml")
    if kind == "loop":
        os.symlink(base / "loop-b", base / "loop-a")
        os.symlink(base / "loop-a", base / "loop-b")
        return str(base / "loop-a")
    if kind == "self-loop":
        os.symlink(base / "self", base / "self")
        return str(base / "self")
    if kind in ("fifo", "link-to-fifo"):
        os.mkfifo(base / "fifo")
        if kind == "link-to-fifo":
            os.symlink(base / "fifo", base / "fifo-link")
            return str(base / "fifo-link")
        return str(base / "fifo")
    if kind == "directory":
        (base / "dir.yaml").mkdir()
        return str(base / "dir.yaml")
    if kind in ("dev-zero", "link-to-dev-zero"):
        if kind == "link-to-dev-zero":
            os.symlink("/dev/zero", base / "zero.yaml")
            return str(base / "zero.yaml")
        return "/dev/zero"
    if kind == "dev-null":
        return "/dev/null"
    if kind == "dev-urandom":
        return "/dev/urandom"
    if kind == "proc-environ":
        return "/proc/self/environ"
    if kind == "proc-mem":
        return "/proc/self/mem"
    if kind == "too-long-name":
        return str(base / ("n" * 300))
    if kind == "too-long-path":
        return str(base / "/".join(["d" * 200] * 30))
    if kind == "empty":
        return ""
    if kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(base / "sock"))  # left bound: the test's folder is removed with it
        sock.close()
        return str(base / "sock")
    if kind == "dangling-link":
        os.symlink(base / "nowhere", base / "dangling")
        return str(base / "dangling")
    if kind == "not-a-dir":
        (base / "plain").write_text("x")
        return str(base / "plain" / "c.yaml")
    if kind == "sparse-huge":
        with open(base / "sparse.yaml", "wb") as handle:
            handle.truncate(4 << 30)
        return str(base / "sparse.yaml")
    if kind == "bad-utf8":
        (base / "bad.yaml").write_bytes(b"contract: \xff\xfe\x80 x\n")
        return str(base / "bad.yaml")
    if kind == "root":
        return "/"
    raise ValueError(kind)


def yaml_quoted(text: str) -> str:
    """``text`` as a YAML double-quoted scalar that reads back as exactly ``text``: controls, YAML's own line
    breaks (NEL, LS, PS) and the BOM escaped; everything else, astral characters included, as itself (JSON's
    surrogate-pair escapes are two lone surrogates to YAML)."""
    out = []
    for char in text:
        code = ord(char)
        if char in '"\\':
            out.append("\\" + char)
        elif code < 0x20 or 0x7f <= code <= 0x9f or char in "\u2028\u2029\ufeff" or 0xD800 <= code <= 0xDFFF:
            out.append(f"\\u{code:04x}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def to_yaml(document: Any, *, flow: bool | None = False, unicode: bool = True) -> str:
    """``document`` as YAML text, each ``Raw`` value (key or value) written as its token, unquoted."""
    tokens: list[str] = []

    def swap(node: Any) -> Any:
        if isinstance(node, Raw):
            tokens.append(str(node))
            return f"RAWTOKEN{len(tokens) - 1}X"
        if isinstance(node, dict):
            return {swap(k): swap(v) for k, v in node.items()}
        if isinstance(node, list):
            return [swap(v) for v in node]
        return node

    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # the C emitter: a 1 MB scalar in milliseconds
    text = yaml.dump(swap(document), Dumper=dumper, default_flow_style=flow, allow_unicode=unicode,
                     sort_keys=False, width=4096)
    for index in reversed(range(len(tokens))):  # RAWTOKEN1X before RAWTOKEN10X could eat its prefix
        text = text.replace(f"RAWTOKEN{index}X", tokens[index])
    return text


def walk_paths(node: Any) -> list[tuple[Any, ...]]:
    """Every path into a document of dicts and lists (the root is ``()``), without recursion."""
    found: list[tuple[Any, ...]] = []
    stack: list[tuple[tuple[Any, ...], Any]] = [((), node)]
    while stack:
        prefix, current = stack.pop()
        found.append(prefix)
        if isinstance(current, dict):
            stack.extend(((*prefix, key), value) for key, value in reversed(list(current.items())))
        elif isinstance(current, list):
            stack.extend(((*prefix, index), value) for index, value in reversed(list(enumerate(current))))
    return found
