"""What reaches the terminal. Text from an input (a contract, a bundle, a path, an engine's reply, an error
that quotes any of them) is data: it is never read as rich markup or emoji, and its control characters are
shown as visible escapes, so it can neither restyle nor move the terminal, and one line stays one line.

``shown(text)`` escapes one text. ``console()`` builds the one kind of console the command line prints
through: every plain string it renders, as a printed argument, a table cell, a title or a live display, is
passed through ``shown`` with markup, emoji and highlighting off. Our own styling is a ``rich.text.Text``
(``styled``), built only from fixed words and shown text.

Escaped: C0 controls and DEL (``\\x1b``, with ``\\n``, ``\\r``, ``\\t`` by name), C1 controls (``\\x9b``),
the bidi embeddings, overrides, isolates and marks (``\\u202e``), the line and paragraph separators
(``\\u2028``), and lone surrogates (a byte a path could not decode, ``\\xff``; any other as ``\\udXXX``,
which no terminal could be sent). The output holds only printable text, so ``shown`` is idempotent.
"""

from __future__ import annotations

import re
from typing import Any

from rich.console import Console
from rich.style import Style
from rich.text import Text

__all__ = ["UNSAFE", "console", "shown", "styled"]

# C0, DEL and C1; Arabic letter mark; LRM, RLM; LS, PS; LRE..RLO; LRI..PDI; surrogates
UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    if char in _NAMED:
        return _NAMED[char]
    if 0xDC80 <= code <= 0xDCFF:  # os.fsdecode's stand-in for an undecodable byte: show the byte
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def shown(text: object) -> str:
    """``text`` as it may reach a terminal: control and bidi characters as visible escapes."""
    return UNSAFE.sub(_escape, str(text))


def styled(*parts: str | tuple[str, str | Style] | Text) -> Text:
    """Our own styling: ``styled(("error:", "bold red"), " ", message)``; every string part is shown."""
    out = Text()
    for part in parts:
        if isinstance(part, Text):
            out.append_text(part)
        elif isinstance(part, tuple):
            out.append(shown(part[0]), style=part[1])
        else:
            out.append(shown(part))
    return out


class _DataConsole(Console):
    """A console for which every string is data: no markup, no emoji, no highlighting, controls escaped."""

    def render_str(self, text: str, *, style: str | Style = "", justify: Any = None, overflow: Any = None,
                   emoji: bool | None = None, markup: bool | None = None, highlight: bool | None = None,
                   highlighter: Any = None) -> Text:
        return Text(shown(text), style=style, justify=justify, overflow=overflow)


def console(*, stderr: bool = False, **options: Any) -> Console:
    """The command line's console: ``print`` and tables take data as it is, and show it safely."""
    return _DataConsole(stderr=stderr, markup=False, emoji=False, highlight=False, **options)
