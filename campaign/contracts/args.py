"""Command-line arguments as an ordered list of (option, value) pairs, so lanes can be merged and diffed.

``["-m", "x.gguf", "--spec-draft-n-max", "4", "--metrics"]`` becomes
``[("-m", "x.gguf"), ("--spec-draft-n-max", "4"), ("--metrics", None)]``. ``--opt=value`` is split.
Leading positional words keep their place under the names ``#0``, ``#1``, ...
"""

from __future__ import annotations

import re

__all__ = ["ArgPairs", "arg_axis_keys", "axis_key", "last_values", "merge_args", "parse_args", "render_args"]

ArgPairs = list[tuple[str, str | None]]
_NUMBER = re.compile(r"^-\.?\d")


def _is_option(token: str) -> bool:
    return token.startswith("-") and len(token) > 1 and not _NUMBER.match(token)


def parse_args(tokens: list[str]) -> ArgPairs:
    pairs: ArgPairs = []
    i = 0
    positional = 0
    while i < len(tokens):
        token = tokens[i]
        if _is_option(token):
            if token.startswith("--") and "=" in token:
                name, value = token.split("=", 1)
                pairs.append((name, value))
                i += 1
                continue
            if i + 1 < len(tokens) and not _is_option(tokens[i + 1]):
                pairs.append((token, tokens[i + 1]))
                i += 2
                continue
            pairs.append((token, None))
        else:
            pairs.append((f"#{positional}", token))
            positional += 1
        i += 1
    return pairs


def render_args(pairs: ArgPairs) -> list[str]:
    out: list[str] = []
    for name, value in pairs:
        if name.startswith("#"):
            out.append(value or "")
        elif value is not None and _is_option(value) and name.startswith("--"):
            out.append(f"{name}={value}")  # a dash-led value as its own word would read as a flag
        else:
            out.append(name)
            if value is not None:
                out.append(value)
    return out


def merge_args(base: ArgPairs, changes: dict[str, str | bool | None]) -> ArgPairs:
    """Apply a lane's changes: a value replaces the option in place (or appends it), ``None`` removes
    it, ``True`` makes it a bare flag."""
    merged = list(base)
    for name, value in changes.items():
        if not _is_option(name):
            raise ValueError(f"{name!r} is not an option (it must start with '-')")
        present = [i for i, (n, _) in enumerate(merged) if n == name]
        if value is None or value is False:
            merged = [p for p in merged if p[0] != name]
            continue
        rendered = None if value is True else str(value)
        if present:
            merged[present[0]] = (name, rendered)
            for i in reversed(present[1:]):
                del merged[i]
        else:
            merged.append((name, rendered))
    return merged


def axis_key(option: str) -> str:
    """``--spec-draft-n-max`` and ``spec-draft-n-max`` both name the axis ``args.spec-draft-n-max``."""
    return "args." + option.lstrip("-")


def last_values(tokens: list[str]) -> dict[str, str | None]:
    """Each option's value as the engine reads it: the last one given wins."""
    return dict(parse_args(tokens))


def arg_axis_keys(tokens: list[str]) -> dict[str, list[str | None]]:
    """Arguments as axis keys with every value each was given, in order, for the static (contract) and
    the runtime (launched argv) one-axis checks alike."""
    keys: dict[str, list[str | None]] = {}
    for name, value in parse_args(tokens):
        keys.setdefault(axis_key(name) if not name.startswith("#") else f"args.{name}", []).append(value)
    return keys
