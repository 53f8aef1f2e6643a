"""llama-server's scores read back from raw records: one request per prefix (since 0.3.0), or, in an older
bundle, every prefix in one request; anything else is a ScoreError naming what is missing."""

from __future__ import annotations

from typing import Any

import pytest

from campaign.errors import ScoreError
from campaign.lanes.engines.llamacpp import LlamaCppAdapter
from campaign.lanes.engines.scoring import TokenSeq

PROMPT = TokenSeq((1, 2), "ab", ("a", "b"))
CONTINUATION = TokenSeq((7, 8), "cd", ("c", "d"))
PREFIXES = [[1, 2], [1, 2, 7], [1, 2, 7, 8]]


def result(token: int, logprob: float, index: int = 0) -> dict[str, Any]:
    return {"index": index, "completion_probabilities": [
        {"id": token, "token": chr(92 + token), "logprob": logprob,
         "top_logprobs": [{"id": token, "token": chr(92 + token), "logprob": logprob},
                          {"id": 3, "token": "x", "logprob": -4.0}]}]}


RESULTS = [result(7, -0.5), result(8, -0.25), result(9, -1.0)]


def per_prefix(results: list[dict[str, Any]] = RESULTS) -> list[dict[str, Any]]:
    return [{"tags": {"part": "score", "prefix": t}, "request": {"prompt": ids}, "response": results[t]}
            for t, ids in enumerate(PREFIXES)]


def test_each_prefix_in_its_own_request_reads_back_in_order() -> None:
    positions = LlamaCppAdapter().parse_score(list(reversed(per_prefix())), PROMPT, CONTINUATION)
    assert [p.logprob for p in positions[:2]] == [-0.5, -0.25]
    assert positions[2].token == 9  # after the whole continuation: the engine's own pick


def test_an_older_bundle_with_every_prefix_in_one_request_reads_the_same() -> None:
    old = [{"tags": {"part": "score"}, "request": {"prompt": PREFIXES},
            "response": [result(9, -1.0, 2), result(7, -0.5, 0), result(8, -0.25, 1)]}]
    assert LlamaCppAdapter().parse_score(old, PROMPT, CONTINUATION) == LlamaCppAdapter().parse_score(
        per_prefix(), PROMPT, CONTINUATION)


def test_a_missing_or_foreign_prefix_is_no_score() -> None:
    with pytest.raises(ScoreError, match="a score record for each of 3 prefixes, found 2"):
        LlamaCppAdapter().parse_score(per_prefix()[:2], PROMPT, CONTINUATION)
    foreign = per_prefix()
    foreign[1]["request"]["prompt"] = [1, 2, 5]
    with pytest.raises(ScoreError, match="prefix 1: the scoring request does not hold this prefix"):
        LlamaCppAdapter().parse_score(foreign, PROMPT, CONTINUATION)
    failed = per_prefix()[:1] + [{"tags": {"part": "score", "prefix": 1}, "request": {"prompt": PREFIXES[1]},
                                  "error": "HTTP 500", "response": None}]
    with pytest.raises(ScoreError, match="found 2"):  # the live half stopped at the failed prefix
        LlamaCppAdapter().parse_score(failed, PROMPT, CONTINUATION)
