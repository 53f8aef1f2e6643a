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

__all__ = ["MAX_CONTRACT_BYTES", "LocatedDocument", "load_located"]

MAX_CONTRACT_BYTES = 1 << 20  # a real contract is a few KB; a cap keeps a hostile file from costing memory

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
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
                raise ContractError("YAML anchors and aliases are not allowed in a contract",
                                    file=name, line=event.start_mark.line + 1)
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
        mark = exc.problem_mark or exc.context_mark
        raise ContractError(f"YAML: {exc.problem or exc.context}", file=name,
                            line=mark.line + 1 if mark else None) from exc
    except yaml.YAMLError as exc:
        raise ContractError(f"YAML: {exc}", file=name) from exc
    if not isinstance(data, dict):
        raise ContractError("the top level must be a mapping", file=name, line=1)
    return LocatedDocument(file=name, data=data, root=root)


def _check_nodes(node: yaml.Node, name: str) -> None:
    stack = [node]
    while stack:
        current = stack.pop()
        if current.tag not in _STANDARD_TAGS:
            raise ContractError(f"YAML tag {current.tag!r} is not allowed in a contract", file=name,
                                line=current.start_mark.line + 1)
        if isinstance(current, yaml.MappingNode):
            seen: set[str] = set()
            for key, value in current.value:
                if isinstance(key, yaml.ScalarNode):
                    if key.value in seen:
                        raise ContractError(f"duplicate key {key.value!r}", file=name,
                                            line=key.start_mark.line + 1)
                    seen.add(key.value)
                stack.extend((key, value))
        elif isinstance(current, yaml.SequenceNode):
            stack.extend(current.value)
