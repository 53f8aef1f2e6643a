"""``${model:ROLE}`` in a lane's args and env, and the draft-model flags that must use it.

A reference is a whole value (an argument, the value after ``--opt=``, an env value), or a whole string
value at a named key of a JSON object argument, as vLLM takes its drafter:
``--speculative-config '{"method":"eagle3","model":"${model:draft}","num_speculative_tokens":3}'``. It is
replaced by the path the engine sees that role's model at, the JSON text otherwise kept byte for byte
(the path JSON-escaped). Anything else (a path built around a reference, one in a JSON key or list, one
spelled with escapes) is refused: the engine would read a model nobody pinned.

Each engine names the flags (and env variables) through which it reads a draft model
(``contracts.engines``): their value must be a ``${model:ROLE}`` of a pinned model, and a flag that
fetches a drafter from a hub at boot is refused outright.
"""

from __future__ import annotations

import json
from typing import Any

from campaign.contracts.args import parse_args
from campaign.contracts.engines import ENGINES
from campaign.contracts.model import MODEL_REF
from campaign.fsutil import loads_strict

__all__ = ["draft_problems", "model_refs", "option_values", "substitute_arg", "substitute_value"]


def option_values(args: list[str]) -> list[tuple[str, str | None]]:
    """``parse_args``'s pairs, with a short option's ``-x=value`` split too, as ``substitute_arg`` splits it at
    launch: a reference or a drafter written ``-md=...`` is checked as the engine will read it."""
    pairs = []
    for name, value in parse_args(args):
        if value is None and name.startswith("-") and "=" in name:
            name, value = name.split("=", 1)
        pairs.append((name, value))
    return pairs


def model_refs(value: str) -> list[tuple[str, str | None]]:
    """(role, JSON key path or None for a whole value) of each ``${model:ROLE}`` in ``value``; a reference
    anywhere else is a ValueError saying where it may stand."""
    if MODEL_REF.search(value) is None:
        return []
    whole = MODEL_REF.fullmatch(value)
    if whole:
        return [(whole.group(1), None)]
    try:
        document = loads_strict(value) if value.lstrip().startswith("{") else None
    except ValueError:
        document = None
    if not isinstance(document, dict):
        raise ValueError(f"{value[:80]!r}: ${{model:ROLE}} must be a whole value (an argument, the value after "
                         "'=', an env value) or a whole string at a key of a JSON object argument: a path built "
                         "around it names a model nobody pinned")
    found: list[tuple[str, str | None]] = []
    _walk(document, "", found)
    if len(found) != len(MODEL_REF.findall(value)):
        raise ValueError(f"{value[:80]!r}: write each ${{model:ROLE}} plainly (no escapes) as a JSON string value")
    return found


def _walk(node: Any, prefix: str, found: list[tuple[str, str | None]]) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if MODEL_REF.search(key):
                raise ValueError(f"${{model:ROLE}} in the JSON key {key[:60]!r}: it belongs in a value")
            _walk(value, f"{prefix}{key}" if not prefix else f"{prefix}.{key}", found)
    elif isinstance(node, list):
        if any(MODEL_REF.search(json.dumps(item)) for item in node):
            raise ValueError(f"${{model:ROLE}} in a JSON list at {prefix or 'the top'}: it belongs at a named key")
    elif isinstance(node, str) and MODEL_REF.search(node):
        match = MODEL_REF.fullmatch(node)
        if not match or not prefix:
            raise ValueError(f"{node[:80]!r} at JSON key {prefix!r}: ${{model:ROLE}} must be the whole string")
        found.append((match.group(1), prefix))


def substitute_value(value: str, paths: dict[str, str]) -> str:
    """``value`` with each ``${model:ROLE}`` replaced by ``paths[ROLE]`` (JSON-escaped inside a JSON
    argument); ``model_refs`` has vetted where each stands."""
    if MODEL_REF.search(value) is None:
        return value
    if MODEL_REF.fullmatch(value):
        return paths[MODEL_REF.fullmatch(value).group(1)]  # type: ignore[union-attr]
    return MODEL_REF.sub(lambda match: json.dumps(paths[match.group(1)])[1:-1], value)


def substitute_arg(token: str, paths: dict[str, str]) -> str:
    """One argv token: ``--opt=${model:x}`` keeps its option."""
    option, eq, rest = token.partition("=")
    if eq and token.startswith("-") and not MODEL_REF.search(option):
        return f"{option}={substitute_value(rest, paths)}"
    return substitute_value(token, paths)


def _option_name(name: str, engine: str) -> str:
    facts = ENGINES[engine]
    return name.replace("_", "-") if facts.underscores_are_dashes and name.startswith("--") else name


def draft_problems(engine: str, args: list[str], env: dict[str, str],
                   roles: set[str]) -> list[tuple[str, str, str]]:
    """(``args`` or ``env``, the option or variable as written, what is wrong) for each draft model the
    lane hands its engine that is not a ``${model:ROLE}`` of one of ``roles``."""
    facts, problems = ENGINES[engine], []
    for name, value in option_values(args):
        option = _option_name(name, engine)
        if option in facts.hub_draft_options:
            problems.append(("args", name, f"{name} fetches a draft model at boot, which nothing can pin: "
                                           "download it, pin it under `models:` and pass ${model:ROLE}"))
        elif option in facts.draft_options:
            problems += [("args", name, why) for why in [_whole_ref(name, value, roles)] if why]
        elif option in dict(facts.draft_json_keys):
            problems += [("args", name, why) for why in [_json_ref(name, value, dict(facts.draft_json_keys)[option],
                                                                   roles)] if why]
    for variable, value in env.items():
        if variable in facts.hub_draft_env:
            problems.append(("env", variable, f"{variable} fetches a draft model at boot, which nothing can pin"))
        elif variable in facts.draft_env:
            problems += [("env", variable, why) for why in [_whole_ref(variable, value, roles)] if why]
    return problems


def _advice(roles: set[str]) -> str:
    return (f"pin it under `models:` (path, sha256; a directory also sha256_manifest) and write ${{model:ROLE}} "
            f"(pinned roles: {', '.join(sorted(roles)) or 'none'})")


def _whole_ref(name: str, value: str | None, roles: set[str]) -> str:
    match = MODEL_REF.fullmatch(value or "")
    if match and match.group(1) in roles:
        return ""
    return f"{name} {str(value)[:80]!r} is a draft model that is not pinned: {_advice(roles)}"


def _json_ref(name: str, value: str | None, key: str, roles: set[str]) -> str:
    try:
        document = loads_strict(value or "")
    except ValueError:
        return f"{name} {str(value)[:80]!r} is not a JSON object, so its draft model ({key!r}) cannot be checked"
    if not isinstance(document, dict):
        return f"{name} {str(value)[:80]!r} is not a JSON object, so its draft model ({key!r}) cannot be checked"
    if key not in document:
        return ""  # a method without a separate model (ngram, suffix, mtp)
    drafter = document[key]
    match = MODEL_REF.fullmatch(drafter) if isinstance(drafter, str) else None
    if match and match.group(1) in roles:
        return ""
    return f"{name} key {key!r} {str(drafter)[:80]!r} is a draft model that is not pinned: {_advice(roles)}"
