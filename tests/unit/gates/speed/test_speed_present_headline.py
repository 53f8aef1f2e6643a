"""The speed gate's headline words: each judged level's change with its CI and pairs, the deciding level first,
the bar once, and whole levels only (a headline is never cut inside a CI)."""

from __future__ import annotations

from campaign.gates.speed.present import headline_words
from campaign.gates.speed.spec import SpeedRule
from campaign.presentation import HEADLINE_CHARS


def _level(change: float, low: float, high: float, verdict: str) -> dict:
    return {"verdict": verdict, "judged": True, "looks": [{"pairs": 2}],
            "estimate": {"change": change, "low": low, "high": high, "confidence": 0.98, "boots": 5, "prompts": 4}}


def test_the_deciding_level_first_whole_levels_only_and_the_bar_once() -> None:
    rule = SpeedRule(min_mean_change=0.05)
    levels = {"1": _level(0.1, -0.2, 0.4, "INCONCLUSIVE"), "4": _level(-0.3, -0.5, -0.1, "FAIL")}
    result = {"verdict": "FAIL", "reasons": ["C1 ..."], "details": {"levels": levels}}
    assert headline_words(rule, result) == "C4 -30.0% [-50.0%, -10.0%], 2 pairs; C1 +10.0% [-20.0%, +40.0%], 2 pairs; bar +5%"
    many = {str(n): _level(0.1, -0.2, 0.4, "INCONCLUSIVE") for n in (1, 2, 4, 8, 16)}
    words = headline_words(rule, {**result, "verdict": "INCONCLUSIVE", "details": {"levels": many}})
    assert words is not None and words.endswith(" more; bar +5%") and len(f"INCONCLUSIVE {words}") <= HEADLINE_CHARS
    assert all(part.endswith("2 pairs") for part in words.split("; ")[:-2])  # every level shown whole
    unjudged = {**result, "reasons": ["instrument: the speed numbers cannot be judged", "C4: the control moved"]}
    assert headline_words(rule, unjudged) is None  # the instrument's problem is the headline
