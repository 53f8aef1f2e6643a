"""A daily's launch kept for rollback holds references, never credential values.

The rollback record (``rollback/<seq>.json``) is the previous daily's whole launch: its argv, env and, for a
container, its engine config. Each credential value in it (``lanes.redact.launch_secrets``: the value of a
credential option or variable, and the daily's key named by ``api_key_env``) is written as ``${env:NAME}``,
NAME a variable of the runner's environment holding that very value (the same-named variable first, then
``api_key_env``, then any); the rollback resolves them from its own environment. A credential that no
variable holds is refused before anything is touched: the user exports it, as they started the daily with it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from campaign.errors import RunError

__all__ = ["REFS_KEY", "carried", "from_references", "rewritten", "to_references"]

REFS_KEY = "secret_refs"  # the names a record refers to, so a rollback resolves only those


# where a launch carries its credentials: the argv, the env's values, a container's Entrypoint, Cmd and Env;
# never a path, an image or a label, which a short credential's text could match by chance
_CONFIG_WORDS = ("Entrypoint", "Cmd", "Env")


def carried(launch: Mapping[str, Any]) -> Iterator[str]:
    """The texts of a launch (a process's or a container daily's snapshot) that may hold a credential."""
    yield from launch.get("argv") or []
    yield from (launch.get("env") or {}).values()
    config = launch.get("config") or {}
    for key in _CONFIG_WORDS:
        words = config.get(key)
        yield from words if isinstance(words, list) else []


def rewritten(launch: Mapping[str, Any], change: Callable[[str], str]) -> dict[str, Any]:
    """A copy of ``launch`` with ``change`` applied to each text ``carried`` names, and to nothing else."""
    out = dict(launch)
    if isinstance(out.get("argv"), list):
        out["argv"] = [change(word) for word in out["argv"]]
    if isinstance(out.get("env"), dict):
        out["env"] = {name: change(value) for name, value in out["env"].items()}
    if isinstance(out.get("config"), dict):
        out["config"] = {key: [change(word) for word in words] if key in _CONFIG_WORDS and isinstance(words, list)
                         else words for key, words in out["config"].items()}
    return out


def _holder(value: str, launch: dict[str, Any], environ: Mapping[str, str]) -> str | None:
    preferred = [name for name, held in (launch.get("env") or {}).items() if held == value]
    preferred.append(launch.get("api_key_env") or "")
    return next((name for name in preferred if name and environ.get(name) == value), None) or next(
        (name for name in sorted(environ) if environ[name] == value), None)


def to_references(launch: dict[str, Any], environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``launch`` with each credential value replaced by a reference to the variable that holds it; RunError
    naming where a credential no variable holds stands (never its value)."""
    from campaign.lanes.redact import launch_secrets

    environ = os.environ if environ is None else environ
    env = launch.get("env") or {}
    names: dict[str, str] = {}
    for value in launch_secrets(launch.get("argv") or [], env, [launch.get("api_key_env") or ""]):
        if not any(value in text for text in carried(launch)):
            continue  # the daily's key variable holds a value this launch does not carry
        name = _holder(value, launch, environ)
        if name is None:
            where = next((f"env {key}" for key, held in env.items() if held == value), "its command line")
            raise RunError(f"the daily's credential in {where} is in no variable of this environment; the rollback "
                           "record keeps references, never values: export it (as the daily was started with it) "
                           "and promote again")
        names[value] = name
    if not names:
        return launch

    def refer(text: str) -> str:
        for value in sorted(names, key=len, reverse=True):  # a value inside a longer one after it
            text = text.replace(value, "${env:" + names[value] + "}")
        return text

    return {**rewritten(launch, refer), REFS_KEY: sorted(set(names.values()))}


def from_references(record: dict[str, Any], environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The launch a rollback record refers to, each of its references resolved from ``environ`` now."""
    environ = os.environ if environ is None else environ
    names = [str(name) for name in record.get(REFS_KEY) or []]
    missing = [name for name in names if not environ.get(name)]  # set but empty: no credential either
    if missing:
        raise RunError(f"the rollback record refers to ${{env:{missing[0]}}}, which is not set in this environment: "
                       "export it (the value the previous daily ran with) and run `campaign rollback` again")

    def resolve(text: str) -> str:
        for name in names:
            text = text.replace("${env:" + name + "}", environ[name])
        return text

    return rewritten({k: v for k, v in record.items() if k != REFS_KEY}, resolve)
