"""Per-token scores, the common shape every adapter returns for prompt scoring and generation logprobs."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["TokenScore"]


@dataclass(frozen=True)
class TokenScore:
    """One token and what the server said about it, given every token before it.

    ``logprob`` is None where the server gives none (the first prompt token has no context).
    ``rank`` is 1 for the server's top choice; None when the server did not say and the token is not
    among ``top`` (the top-k alternatives as (token id, logprob), best first).
    """

    token_id: int
    logprob: float | None
    rank: int | None = None
    text: str | None = None
    top: tuple[tuple[int, float], ...] = field(default_factory=tuple)
