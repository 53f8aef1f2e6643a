"""Safe YAML loading that remembers where every value came from.

A contract is data, never code: python tags, custom tags, anchors and aliases (the alias-bomb
vector), duplicate keys and oversized files are refused, each with the file and line. The node
tree is kept so a schema error found later can be pointed back at its line.

The file is read once through ``fsutil.read_bounded`` (a device, a FIFO, a directory or a symlink loop is
refused by what it is, never read forever) and parsed once: libyaml's parser (C) where PyYAML has it,
else PyYAML's own, feeding one pass that builds the node tree (for lines) and the data together and
refuses, as it goes, what a contract never holds: anchors, aliases, tags beyond the standard scalars,
duplicate keys, nesting past ``MAX_DEPTH``, non-finite floats (the canonical form would write them as
null), numbers too long to be one, NUL bytes and lone UTF-16 surrogates (no path or argument can carry
the one, no UTF-8 text the other). Each refusal names the file, the line and, for a value, the field.
"""

from __future__ import annotations

import errno
import gc
import hashlib
import math
import os
import re
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import yaml

from campaign.errors import ContractError
from campaign.fsutil import UnreadableFile, read_bounded

__all__ = ["MAX_CONTRACT_BYTES", "MAX_DEPTH", "MAX_NUMBER_CHARS", "LocatedDocument", "dotted", "load_located",
           "shown_path", "without_gc"]

MAX_CONTRACT_BYTES = 1 << 20  # a real contract is a few KB; a cap keeps a hostile file from costing memory
# A real contract nests 5-6 levels; PyYAML's parser is slow and recursive past a few hundred, so a
# hostile file is refused at the first level beyond this, while parsing, in milliseconds.
MAX_DEPTH = 32
# A number written with more characters than this is not a count, a port or a rate: it is refused before
# it is converted (YAML 1.1 sexagesimal ints like 1:2:3:... cost quadratic time to convert).
MAX_NUMBER_CHARS = 64
# A parse error found by libyaml is reworded by PyYAML's own parser (the words the tests and users know)
# when the file is at most this big; a larger one keeps libyaml's words, so an error costs no more time.
_REWORD_BYTES = 128 << 10

_T = "tag:yaml.org,2002:"
_STR, _MAP, _SEQ = _T + "str", _T + "map", _T + "seq"
_SCALAR_TAGS = {_T + t for t in ("str", "int", "float", "bool", "null", "timestamp")}
_STANDARD_TAGS = _SCALAR_TAGS | {_MAP, _SEQ}
_NUMBER_TAGS = {_T + "int", _T + "float"}
# what PyYAML's reader refuses in a YAML text (its NON_PRINTABLE), checked first so both parsers agree
_NON_PRINTABLE = re.compile("[^\x09\x0A\x0D\x20-\x7E\x85\xA0-\uD7FF\uE000-\uFFFD\U00010000-\U0010ffff]")
_NUL_OR_SURROGATE = re.compile("[\x00\ud800-\udfff]")
_LIBYAML = bool(getattr(yaml, "__with_libyaml__", False))


@contextmanager
def without_gc() -> Iterator[None]:
    """The cyclic garbage collector paused while a contract's objects are built: they make no cycles, and
    each full collection would walk every object built so far (10,000 lanes: several seconds of it)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


# control characters (C0, C1), what str.splitlines breaks at, bidirectional overrides, undecodable bytes
_UNPRINTABLE_IN_NAME = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def shown_path(path: Path | str) -> str:
    """A file's path as an error names it: one line, printable (a newline, an escape or an undecodable
    byte in a file name is written as an escape, never sent to the terminal as it is)."""
    return _UNPRINTABLE_IN_NAME.sub(lambda match: ascii(match.group())[1:-1], str(path))


def dotted(path: tuple[Any, ...]) -> str:
    """``("lanes", 0, "set", "args")`` -> ``lanes[0].set.args``."""
    out = ""
    for part in path:
        index = isinstance(part, int) and not isinstance(part, bool)
        out += f"[{part}]" if index else (f".{part}" if out else str(part))
    return out


@dataclass(frozen=True)
class LocatedDocument:
    file: str
    data: Any
    root: yaml.Node
    text: str = ""  # the file's text as read and parsed (once)
    sha256: str = ""  # of the file's bytes as read: what the freeze record pins, from the same read

    def line_for(self, path: tuple[Any, ...]) -> int | None:
        """1-based line of the deepest node found along ``path``; unknown path parts are skipped
        (pydantic inserts union tags such as the gate kind into its error locations)."""
        return self.node_at(path).start_mark.line + 1

    def node_at(self, path: tuple[Any, ...]) -> yaml.Node:
        """The deepest node found along ``path`` (its text, for a scalar: what the file says)."""
        node = self.root
        for part in path:
            child = _child(node, part)
            if child is not None:
                node = child
        return node


def _child(node: yaml.Node, part: Any) -> yaml.Node | None:
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode) and key.value == str(part):
                return value
    elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
        return node.value[part]
    return None


def load_located(path: Path) -> LocatedDocument:
    name = shown_path(path)
    text, digest = _read_contract(path, name)
    bad = _NON_PRINTABLE.search(text)
    if bad is not None:
        raise ContractError(f"character {bad.group()!a} is not allowed in YAML text (a control character)",
                            file=name, line=text.count("\n", 0, bad.start()) + 1)
    loader = yaml.CSafeLoader(text) if _LIBYAML else yaml.SafeLoader(text)
    try:
        with without_gc():
            root, data = _compose(loader, text, name)
    except yaml.MarkedYAMLError as exc:  # the parser's own: a syntax error
        if _LIBYAML:
            exc = _reworded(exc, text, name)
        mark = exc.problem_mark or exc.context_mark
        raise ContractError(_where_it_broke(exc, text), file=name,
                            line=mark.line + 1 if mark is not None else None) from None
    except yaml.YAMLError as exc:
        raise ContractError(f"YAML: {' '.join(str(exc).split())}", file=name) from None
    finally:
        loader.dispose()
    if root is None:
        raise ContractError("the file is empty", file=name, line=1)
    if not isinstance(data, dict):
        raise ContractError("the top level must be a mapping", file=name, line=1)
    return LocatedDocument(file=name, data=data, root=root, text=text, sha256=digest)


def _read_contract(path: Path, name: str) -> tuple[str, str]:
    """The contract's text and the sha256 of its bytes: one bounded read of a regular file."""
    try:
        size = os.stat(path).st_size
    except (OSError, ValueError):
        size = 0  # open_regular says what is wrong with the path
    if size > MAX_CONTRACT_BYTES:
        raise ContractError(f"file is {size} bytes, over the {MAX_CONTRACT_BYTES}-byte cap for a contract",
                            file=name, line=1)
    try:
        data = read_bounded(path, MAX_CONTRACT_BYTES, what="contract")
    except UnreadableFile as exc:
        cause = exc.__cause__
        reason = cause.strerror if isinstance(cause, OSError) and cause.errno == errno.ENOENT else exc.reason
        raise ContractError(f"cannot read: {reason}",
                            file=shown_path(exc.path)) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ContractError(f"cannot read as UTF-8 text: {exc}", file=name,
                            line=data.count(b"\n", 0, exc.start) + 1) from None
    return text, hashlib.sha256(data).hexdigest()


def _reworded(exc: yaml.MarkedYAMLError, text: str, name: str) -> yaml.MarkedYAMLError:
    """libyaml's syntax error in PyYAML's words (the ones users and tests know), from PyYAML's own pass
    over a small file; that pass may find a refusal first (libyaml scans a flow nesting whole before its
    first event, so the depth check is reached only this way), and raises it."""
    if "nesting depth" in str(exc.problem):  # libyaml's own limit (1,000 levels), far past ours
        raise ContractError(f"nested more than {MAX_DEPTH} levels deep (a contract needs about 6)", file=name,
                            line=exc.problem_mark.line + 1 if exc.problem_mark else None) from None
    if len(text) > _REWORD_BYTES:
        return exc
    loader = yaml.SafeLoader(text)
    try:
        _compose(loader, text, name)
    except yaml.MarkedYAMLError as python_exc:
        return python_exc
    finally:
        loader.dispose()
    return exc


def _compose(loader: Any, text: str, name: str) -> tuple[yaml.Node | None, Any]:
    """(root node, data) from the parser's events in one pass, refusing what a contract never holds. A
    frame of ``stack`` is [node, data, key node or None, key]: an open mapping or sequence. A plain or
    quoted string with nothing to check (most of a contract) takes the short way."""
    stack: list[list[Any]] = []
    root = data = None
    get_event, first_chars = loader.get_event, loader.yaml_implicit_resolvers
    scalar_event, scalar_node, special = yaml.ScalarEvent, yaml.ScalarNode, _NUL_OR_SURROGATE.search
    get_event()  # StreamStart
    start = get_event()
    if isinstance(start, yaml.StreamEndEvent):
        return None, None
    while True:
        event = get_event()
        kind = type(event)
        if kind is scalar_event:
            value = event.value
            if (event.tag is None and event.anchor is None and value
                    and (not event.implicit[0] or value[0] not in first_chars) and special(value) is None):
                node = scalar_node(_STR, value, event.start_mark, event.end_mark, event.style)
            else:
                node, value = _scalar(loader, event, name, stack)
        elif kind is yaml.MappingStartEvent or kind is yaml.SequenceStartEvent:
            node, value = _collection(event, kind is yaml.MappingStartEvent, name, len(stack))
        elif kind is yaml.MappingEndEvent or kind is yaml.SequenceEndEvent:
            stack.pop()[0].end_mark = event.end_mark
            continue
        elif kind is yaml.AliasEvent:
            raise ContractError("YAML anchors and aliases are not allowed in a contract", file=name,
                                line=event.start_mark.line + 1)
        else:  # the document's end
            break
        if not stack:
            root, data = node, value
        else:
            frame = stack[-1]
            if frame[1].__class__ is list:
                frame[0].value.append(node)
                frame[1].append(value)
            elif frame[2] is not None:
                frame[0].value.append((frame[2], node))
                frame[1][frame[3]] = value
                frame[2] = None
            else:
                _key(frame, node, value, text, name)
        if kind is not scalar_event:
            stack.append([node, value, None, None])
    end = get_event()
    if not isinstance(end, yaml.StreamEndEvent):
        exc = yaml.composer.ComposerError("expected a single document in the stream", start.start_mark,
                                          "but found another document", end.start_mark)
        raise ContractError(_where_it_broke(exc, text), file=name, line=end.start_mark.line + 1)
    return root, data


def _collection(event: Any, mapping: bool, name: str, depth: int) -> tuple[yaml.Node, Any]:
    line = event.start_mark.line + 1
    if event.anchor is not None:
        raise ContractError("YAML anchors and aliases are not allowed in a contract", file=name, line=line)
    if depth >= MAX_DEPTH:
        raise ContractError(f"nested more than {MAX_DEPTH} levels deep (a contract needs about 6)", file=name,
                            line=line)
    tag = event.tag if event.tag not in (None, "!") else (_MAP if mapping else _SEQ)
    if tag != (_MAP if mapping else _SEQ):
        raise ContractError(f"YAML tag {tag!r} is not allowed in a contract", file=name, line=line)
    if mapping:
        return yaml.MappingNode(tag, [], event.start_mark, None, flow_style=event.flow_style), {}
    return yaml.SequenceNode(tag, [], event.start_mark, None, flow_style=event.flow_style), []


def _scalar(loader: Any, event: Any, name: str, stack: list[list[Any]]) -> tuple[yaml.Node, Any]:
    text, line = event.value, event.start_mark.line + 1
    if event.anchor is not None:
        raise ContractError("YAML anchors and aliases are not allowed in a contract", file=name, line=line)
    tag = event.tag
    if tag is None or tag == "!":
        tag = loader.resolve(yaml.ScalarNode, text, event.implicit) if event.implicit[0] else _STR
    if tag not in _SCALAR_TAGS:
        raise ContractError(f"YAML tag {tag!r} is not allowed in a contract", file=name, line=line)
    node = yaml.ScalarNode(tag, text, event.start_mark, event.end_mark, style=event.style)
    special = _NUL_OR_SURROGATE.search(text)
    if special is not None:
        what = ("a NUL byte (\\0), which no path, argument or environment value can carry"
                if special.group() == "\x00" else
                f"a lone UTF-16 surrogate ({special.group()!a}), which is not a character and has no UTF-8 form")
        _refuse_value(stack, f"{_shown(text)} holds {what}", name, line)
    if tag == _STR:
        return node, text
    if tag in _NUMBER_TAGS and len(text) > MAX_NUMBER_CHARS:
        _refuse_value(stack, f"a number of {len(text):,} characters (more than {MAX_NUMBER_CHARS}) is not one a "
                             "contract needs", name, line)
    try:
        value = loader.yaml_constructors[tag](loader, node)
    except Exception as exc:  # noqa: BLE001 - any failure to convert an untrusted scalar is the file's
        _refuse_value(stack, f"{_shown(text)} is not a valid {tag.removeprefix(_T)}: {exc}", name, line)
    if isinstance(value, float) and not math.isfinite(value):
        _refuse_value(stack, f"{_shown(text)} is not a finite number (no engine takes one, and a canonical hash "
                             "would write it as null)", name, line)
    return node, value


def _shown(text: str) -> str:
    return ascii(text if len(text) <= 40 else text[:40] + "...")


def _refuse_value(stack: list[list[Any]], message: str, name: str, line: int) -> None:
    """A scalar refused, located by its path in the document. An open collection of ``stack`` other than
    the last holds the one after it: the last item of a list, the value of a mapping's last key. The
    scalar itself is the next item of the last one, or a key or the value of its key."""
    path: list[Any] = []
    for depth, (_, container, key_node, key) in enumerate(stack):
        innermost = depth == len(stack) - 1
        if isinstance(container, list):
            path.append(len(container) if innermost else len(container) - 1)
        elif not innermost or key_node is not None:
            path.append(key)
        else:
            message = "a key " + message
    raise ContractError(message, file=name, line=line, field=dotted(tuple(path)) or None)


def _key(frame: list[Any], node: yaml.Node, value: Any, text: str, name: str) -> None:
    """A mapping's next key: a scalar, and not one it already has."""
    if not isinstance(node, yaml.ScalarNode):
        exc = yaml.constructor.ConstructorError("while constructing a mapping", frame[0].start_mark,
                                                "found unhashable key", node.start_mark)
        raise ContractError(_where_it_broke(exc, text), file=name, line=node.start_mark.line + 1)
    if value in frame[1]:  # by the value the key becomes: `1` and `01`, `true` and `yes` are one key
        raise ContractError(f"duplicate key {node.value!r}", file=name, line=node.start_mark.line + 1)
    frame[2], frame[3] = node, value


def _where_it_broke(exc: yaml.MarkedYAMLError, text: str) -> str:
    """The parser notices a missing brace lines after it: say "near" that line, show it, and show the
    line where the unclosed thing began."""
    lines = text.splitlines()

    def shown(mark: Any) -> str:
        return lines[mark.line].strip()[:80] if mark is not None and mark.line < len(lines) else ""

    problem = exc.problem or exc.context or "cannot parse"
    message = f"YAML: {problem}"
    if exc.problem_mark is not None:
        message += f" near this line: {shown(exc.problem_mark)!r}"
    if exc.context_mark is not None and exc.problem_mark is not None and exc.context_mark.line != exc.problem_mark.line:
        what = (exc.context or "it").removeprefix("while parsing ")
        message += f"; {what} began at line {exc.context_mark.line + 1}: {shown(exc.context_mark)!r}"
    return message
