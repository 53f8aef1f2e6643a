"""A table of kinds that fills itself: each class registers under its kind where it is defined, and the table's
reader imports the package the kinds live in. Gates (``gates.base.register``) and engine adapters
(``lanes.engines.base.register``) both use it."""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

__all__ = ["add_kind", "import_every_module"]


def add_kind(table: dict[str, type], kind: str, cls: type) -> None:
    """``cls`` is ``kind``'s class in ``table``; a second class for the same kind is a bug, said at import."""
    if table.get(kind, cls) is not cls:
        raise TypeError(f"kind {kind!r} is registered twice: {table[kind].__name__} and {cls.__name__}")
    table[kind] = cls


def import_every_module(package: ModuleType) -> None:
    """Import each public module under ``package``, so every class in it has registered its kind. A private
    module (``_name``: a sandbox's child process) defines no kind and is left alone."""
    for found in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
        if not found.name.rsplit(".", 1)[1].startswith("_"):
            importlib.import_module(found.name)
