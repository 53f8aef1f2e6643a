"""What scoring and generation return, whatever the engine: token positions with the token's
logprob, its rank among the returned top-k, and that top-k.

Engines name tokens differently (llama-server returns ids, llama-cpp-python only text), so a token is
matched by id when both sides have one, else by its text. A logprob the engine did not return (the
token fell below its top-k) is ``None``: censored, never guessed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from campaign.errors import ScoreError

__all__ = ["Alt", "Generation", "Position", "ScoreError", "TokenSeq", "one_record"]

@dataclass(frozen=True)
class TokenSeq:
    """Tokens carried as ids and as text, so engines that take only text score the same tokens."""

    ids: tuple[int, ...]
    text: str
    pieces: tuple[str, ...] = ()  # text of each token, when known

    def __len__(self) -> int:
        return len(self.ids)

    def head(self, n: int) -> "TokenSeq":
        pieces = self.pieces[:n]
        return TokenSeq(self.ids[:n], "".join(pieces), pieces)

    def __add__(self, other: "TokenSeq") -> "TokenSeq":
        return TokenSeq(self.ids + other.ids, self.text + other.text, self.pieces + other.pieces)

    def dump(self) -> dict[str, Any]:
        return {"ids": list(self.ids), "text": self.text, "pieces": list(self.pieces)}

    @classmethod
    def load(cls, data: dict[str, Any]) -> "TokenSeq":
        return cls(tuple(int(i) for i in data["ids"]), str(data["text"]), tuple(data.get("pieces") or ()))


@dataclass(frozen=True)
class Alt:
    token: int | None
    text: str
    logprob: float

    def same(self, token: int | None, text: str) -> bool:
        if self.token is not None and token is not None:
            return self.token == token
        return self.text == text


@dataclass(frozen=True)
class Position:
    token: int | None
    text: str
    logprob: float | None  # None: below the engine's returned top-k
    top: tuple[Alt, ...] = ()

    def lookup(self, token: int | None, text: str) -> float | None:
        """The logprob of another token at this position, if the top-k holds it."""
        if self.token is not None and token == self.token or (self.token is None and text == self.text):
            if self.logprob is not None:
                return self.logprob
        for alt in self.top:
            if alt.same(token, text):
                return alt.logprob
        return None

    def rank(self, tie: float = 0.0) -> int | None:
        """1 + how many other tokens score above this one by more than ``tie``; None when censored."""
        if self.logprob is None:
            return None
        return 1 + sum(1 for alt in self.top
                       if not alt.same(self.token, self.text) and alt.logprob > self.logprob + tie)

    @property
    def floor(self) -> float | None:
        """The lowest returned logprob: a censored token's logprob is below it."""
        return min((alt.logprob for alt in self.top), default=None)

    def best(self) -> Alt | None:
        return max(self.top, key=lambda alt: alt.logprob, default=None)


@dataclass(frozen=True)
class Generation:
    """A greedy continuation with the logprobs the engine reported while generating it."""

    tokens: TokenSeq
    positions: tuple[Position, ...]
    finish: str  # length | stop | other
    extra: dict[str, Any] = field(default_factory=dict)


def one_record(records: list[dict[str, Any]], part: str) -> dict[str, Any]:
    """The single raw record tagged ``part`` (an adapter's parse_* reads what its live method wrote),
    with a usable response; anything else is a ScoreError naming what went wrong."""
    found = [r for r in records if (r.get("tags") or {}).get("part") == part]
    if len(found) != 1:
        raise ScoreError(f"expected one {part} record, found {len(found)}")
    record = found[0]
    if record.get("error") or not isinstance(record.get("response"), (dict, list)):
        raise ScoreError(f"{part} request failed: {record.get('error') or 'no response'}: "
                         f"{str(record.get('response'))[:300]}")
    return record
