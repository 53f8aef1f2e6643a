"""An unknown field's nearest known one ("did you mean max_tokens?"), for the loader's one-line error.

The known names are those of the model at the unknown field's place, found by walking the contract's
types along pydantic's error location (through optionals, lists, mappings and the union tags it inserts).
Bounded: a name is compared by its first ``MAX_NAME`` characters, against at most the fields of the
models that place can hold."""

from __future__ import annotations

import difflib
import types
import typing
from typing import Any

from pydantic import BaseModel

__all__ = ["did_you_mean", "known_fields"]

MAX_NAME = 64


def _members(annotation: Any) -> list[Any]:
    """The types a value of ``annotation`` may be, Annotated and unions opened."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _members(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return [member for arg in typing.get_args(annotation) for member in _members(arg)]
    return [annotation]


def _tag(model: type[BaseModel]) -> Any:
    kind = model.model_fields.get("kind")
    return kind.default if kind is not None else None


def _step(annotation: Any, part: Any) -> list[Any]:
    """The types found one location part below ``annotation``."""
    found: list[Any] = []
    for member in _members(annotation):
        origin, args = typing.get_origin(member), typing.get_args(member)
        if isinstance(member, type) and issubclass(member, BaseModel):
            if isinstance(part, str) and part in member.model_fields:
                found.append(member.model_fields[part].annotation)
            elif part in (member.__name__, _tag(member)):  # a union member pydantic named in the location
                found.append(member)
        elif origin in (list, tuple, set, frozenset) and isinstance(part, int) and args:
            found.append(args[0])
        elif origin is dict and len(args) == 2 and isinstance(part, str):
            found.append(args[1])
    return found


def known_fields(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """The field names the model(s) at ``loc`` (the unknown field's parent) take."""
    current: list[Any] = [model]
    for part in loc:
        below = [found for annotation in current for found in _step(annotation, part)]
        # a union tag pydantic inserts (gates.0.greedy.x) names a member, not a field: keep the place
        current = below or current
    names: list[str] = []
    for annotation in current:
        for member in _members(annotation):
            if isinstance(member, type) and issubclass(member, BaseModel):
                names += [name for name in member.model_fields if name not in names]
    return names


def did_you_mean(name: object, known: list[str]) -> str:
    """`` (did you mean max_tokens?)``, or nothing when no known name is close."""
    if not isinstance(name, str) or not known:
        return ""
    close = difflib.get_close_matches(name[:MAX_NAME], known, n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""
