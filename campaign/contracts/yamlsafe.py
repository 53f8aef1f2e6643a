"""Safe YAML loading that remembers where every value came from.

A contract is data, never code: python tags, custom tags, anchors and aliases (the alias-bomb
vector), duplicate keys and oversized files are refused, each with the file and line. The node
tree is kept so a schema error found later can be pointed back at its line.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from campaign.errors import ContractError

__all__ = ["MAX_CONTRACT_BYTES", "MAX_DEPTH", "LocatedDocument", "load_located"]

MAX_CONTRACT_BYTES = 1 << 20  # a real contract is a few KB; a cap keeps a hostile file from costing memory
# A real contract nests 5-6 levels; PyYAML's parser is slow and recursive past a few hundred, so a
# hostile file is refused at the first level beyond this, while parsing, in milliseconds.
MAX_DEPTH = 32

_STANDARD_TAGS = {
    "tag:yaml.org,2002:" + t for t in ("str", "int", "float", "bool", "null", "map", "seq", "timestamp")
}


@dataclass(frozen=True)
class LocatedDocument:
    file: str
    data: Any
    root: yaml.Node

    def line_for(self, path: tuple[Any, ...]) -> int | None:
        """1-based line of the deepest node found along ``path``; unknown path parts are skipped
        (pydantic inserts union tags such as the gate kind into its error locations)."""
        node = self.root
        for part in path:
            child = _child(node, part)
            if child is not None:
                node = child
        return node.start_mark.line + 1


def _child(node: yaml.Node, part: Any) -> yaml.Node | None:
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode) and key.value == str(part):
                return value
    elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
        return node.value[part]
    return None


def load_located(path: Path) -> LocatedDocument:
    name = str(path)
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise ContractError(f"cannot read: {exc.strerror}", file=name) from exc
    if size > MAX_CONTRACT_BYTES:
        raise ContractError(f"file is {size} bytes, over the {MAX_CONTRACT_BYTES}-byte cap for a contract",
                            file=name, line=1)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ContractError(f"cannot read as UTF-8 text: {exc}", file=name) from exc
    try:
        depth = 0
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
                raise ContractError("YAML anchors and aliases are not allowed in a contract",
                                    file=name, line=event.start_mark.line + 1)
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                depth += 1
                if depth > MAX_DEPTH:
                    raise ContractError(f"nested more than {MAX_DEPTH} levels deep (a contract needs about 6)",
                                        file=name, line=event.start_mark.line + 1)
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
        loader = yaml.SafeLoader(text)
        try:
            root = loader.get_single_node()
            if root is None:
                raise ContractError("the file is empty", file=name, line=1)
            _check_nodes(root, name)
            data = loader.construct_document(root)
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as exc:
        raise ContractError(_where_it_broke(exc, text), file=name,
                            line=(exc.problem_mark or exc.context_mark).line + 1
                            if (exc.problem_mark or exc.context_mark) else None) from exc
    except RecursionError as exc:  # a nesting the depth check did not see (a block-style ladder)
        raise ContractError(f"nested too deeply to read (over {MAX_DEPTH} levels)", file=name) from exc
    except yaml.YAMLError as exc:
        raise ContractError(f"YAML: {exc}", file=name) from exc
    if not isinstance(data, dict):
        raise ContractError("the top level must be a mapping", file=name, line=1)
    return LocatedDocument(file=name, data=data, root=root)


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


def _key_identity(key: yaml.ScalarNode) -> Any:
    try:
        value = yaml.constructor.SafeConstructor().construct_object(key)
    except yaml.YAMLError:
        return ("text", key.value)
    try:
        hash(value)
    except TypeError:
        return ("text", key.value)
    return value  # compared as the loaded dict will compare it: 1, 01 and true are one key there


def _check_nodes(node: yaml.Node, name: str) -> None:
    stack = [node]
    while stack:
        current = stack.pop()
        if current.tag not in _STANDARD_TAGS:
            raise ContractError(f"YAML tag {current.tag!r} is not allowed in a contract", file=name,
                                line=current.start_mark.line + 1)
        if isinstance(current, yaml.MappingNode):
            seen: set[Any] = set()
            for key, value in current.value:
                if isinstance(key, yaml.ScalarNode):
                    # by the value the key becomes, not its text: `1` and `01`, `true` and `yes` are one key
                    identity = _key_identity(key)
                    if identity in seen:
                        raise ContractError(f"duplicate key {key.value!r}", file=name,
                                            line=key.start_mark.line + 1)
                    seen.add(identity)
                stack.extend((key, value))
        elif isinstance(current, yaml.SequenceNode):
            stack.extend(current.value)
