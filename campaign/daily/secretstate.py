"""The daily's credentials in a window's private state: kept while the daily is down (a failsafe restoring it
in a bare environment needs them), removed once the window has ended with the daily proven back.

A window's ``state.json`` (0600) holds the daily's snapshot: its argv and environment as read back from
/proc or its engine, credentials included (``--api-key VALUE``, ``HF_TOKEN=VALUE``, a container's Env and
Cmd). Once the window is over nothing needs them there: the daily serves as it did. ``forget`` replaces each
value, where a launch carries credentials (``launchrefs.carried``: argv, env, a container's Entrypoint, Cmd and
Env), by a reference to the environment variable that holds it
(``${env:NAME}``: the contract's ``api_key_env`` for the daily's key, else the daily's own variable of that
value, else a variable of the runner's of that value) and lists the references under ``secrets_removed``;
a value no variable holds becomes ``${removed:N}`` and cannot come back.

``resolve`` puts the values back from an environment (a resumed window, before it stops the daily again;
a restore run by a person or a watchdog, in memory only), and ``same_words`` compares a scrubbed argv with a
running one, a reference matching any text, so `campaign status` and the restore still know the daily.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from campaign.contracts.secretrefs import is_secret_name
from campaign.daily.launchrefs import carried, rewritten
from campaign.errors import RunError

__all__ = ["KEY", "forget", "references", "refuse_unresolved", "resolve", "same_words"]

KEY = "secrets_removed"
_PLACEHOLDER = re.compile(r"\$\{(?:env:[A-Za-z_][A-Za-z0-9_]*|removed:[0-9]+)\}")


def references(snap: Mapping[str, Any] | None) -> dict[str, str | None]:
    """placeholder -> the variable that holds its value (None: no variable did) of a scrubbed snapshot."""
    found = (snap or {}).get(KEY)
    return dict(found) if isinstance(found, dict) else {}


def _replacing(old: str, new: str) -> Callable[[str], str]:
    return lambda text: text.replace(old, new)


def _name_for(value: str, snap: Mapping[str, Any], api_key_env: str | None, api_key: str | None,
              environ: Mapping[str, str]) -> str | None:
    if api_key_env and value in (api_key, environ.get(api_key_env)):
        return api_key_env
    for source in (snap.get("env") or {}, environ):
        names = sorted((name for name, held in source.items() if held == value),
                       key=lambda name: (not is_secret_name(name), name))
        if names:
            return names[0]
    return None


def forget(snap: dict[str, Any], secrets: Iterable[str], *, api_key_env: str | None, api_key: str | None,
           environ: Mapping[str, str]) -> dict[str, Any]:
    """A copy of ``snap`` with every value of ``secrets`` replaced by its reference, the longest first (a
    value holding another is cut whole); the references listed under ``secrets_removed``."""
    refs = references(snap)
    out = {key: item for key, item in snap.items() if key != KEY}
    # a reference already there (a resumed window that never stopped the daily again) is not a credential
    for value in sorted({s for s in secrets if s and not _PLACEHOLDER.search(s)}, key=len, reverse=True):
        if not any(value in text for text in carried(out)):
            continue  # the daily's key variable holds a value this daily does not carry (a key file, say)
        name = _name_for(value, snap, api_key_env, api_key, environ)
        placeholder = f"${{env:{name}}}" if name else f"${{removed:{len(refs) + 1}}}"
        refs[placeholder] = name
        out = rewritten(out, _replacing(value, placeholder))
    out[KEY] = refs
    return copy.deepcopy(out)


def resolve(snap: dict[str, Any] | None, environ: Mapping[str, str]) -> tuple[dict[str, Any] | None, list[str]]:
    """``snap`` with each reference's value put back from ``environ``, and what could not be (a variable
    unset there, or a credential no variable held) in words; a snapshot never scrubbed comes back as it is."""
    refs = references(snap)
    if snap is None or not refs:
        return snap, []
    out: dict[str, Any] = {key: item for key, item in snap.items() if key != KEY}
    left: dict[str, str | None] = {}
    for placeholder, name in refs.items():
        value = environ.get(name) if name else None
        if value:
            out = rewritten(out, _replacing(placeholder, value))
        else:
            left[placeholder] = name
    if left:
        out[KEY] = left
    missing = [name or "a credential no environment variable held (it cannot be put back)" for name in left.values()]
    return out, missing


def _pattern(word: str) -> re.Pattern[str]:
    parts = _PLACEHOLDER.split(word)
    return re.compile(".+?".join(re.escape(part) for part in parts), re.DOTALL)


def same_words(expected: list[str] | None, actual: list[str] | None, snap: Mapping[str, Any]) -> bool:
    """``actual == expected``, where a reference left in ``expected`` (a scrubbed snapshot's) matches any
    non-empty text."""
    if expected == actual:
        return True
    if not references(snap) or expected is None or actual is None or len(expected) != len(actual):
        return False
    return all(want == got or (_PLACEHOLDER.search(want) is not None and _pattern(want).fullmatch(got) is not None)
               for want, got in zip(expected, actual, strict=True))


def refuse_unresolved(snap: Mapping[str, Any], action: str) -> None:
    """A daily is never started with a reference where its credential was: the restore says which variable
    the environment lacks (the window that ended removed the value from its state)."""
    left = references(snap)
    if left:
        names = ", ".join(sorted(name or "a credential no environment variable held" for name in left.values()))
        raise RunError(f"the daily cannot be {action}: its credentials were removed from the window's private "
                       f"state when the window ended, and this environment does not hold them ({names}); set "
                       "them and run the command again, or start the daily by hand")
