"""The fit over interleaved boots: it recovers a constructed change, takes a steady drift out, and its
error rates hold over repeated looks (seeded simulations; the full power study is benchmarks/speed_power.py)."""

from __future__ import annotations

import numpy as np
import pytest

from campaign.gates.speed.sequential import (
    BootValues,
    estimate,
    holm_rejected,
    look,
    look_confidence,
    looks_allowed,
    p_below_bar,
    reachable,
)

PROMPTS = [f"p{i}" for i in range(6)]


def boots(effect: float, pairs: int, *, rng: np.random.Generator | None = None, boot_sd: float = 0.0,
          prompt_sd: float = 0.0, drift: float = 0.0) -> list[BootValues]:
    """control@0, candidate@0, control@1, ..., control@pairs on log values around 100 per prompt."""
    rng = rng or np.random.default_rng(0)
    base = {p: 100.0 * (1 + 0.1 * i) for i, p in enumerate(PROMPTS)}
    out = []
    for position in range(2 * pairs + 1):
        candidate = position % 2 == 1
        luck = rng.normal(0, boot_sd) if boot_sd else 0.0
        values = {p: v * np.exp(drift * position + luck + (np.log1p(effect) if candidate else 0.0)
                                + (rng.normal(0, prompt_sd) if prompt_sd else 0.0)) for p, v in base.items()}
        out.append(BootValues(f"b{position}", position, candidate, values))
    return out


def test_a_constructed_change_is_recovered_with_the_drift_taken_out() -> None:
    rng = np.random.default_rng(1)
    est = estimate(boots(0.20, 3, rng=rng, boot_sd=0.01, prompt_sd=0.005, drift=0.03), higher_is_better=True,
                   confidence=0.95)
    assert est is not None and est.boots == 7 and est.candidate_boots == 3 and est.prompts == 6
    assert est.change == pytest.approx(0.20, abs=0.03)
    assert est.low < est.change < est.high and est.low > 0.1
    assert set(est.per_prompt) == set(PROMPTS)


def test_lower_is_better_turns_the_sign() -> None:
    est = estimate(boots(-0.5, 2, rng=np.random.default_rng(2), boot_sd=0.01), higher_is_better=False,
                   confidence=0.95)
    assert est.change == pytest.approx(1.0, abs=0.1)  # half the TTFT: +100%


def test_too_few_boots_give_no_estimate() -> None:
    assert estimate(boots(0.2, 1), higher_is_better=True, confidence=0.95) is None  # 3 boots, 0 df


def test_looks_share_the_error_rate() -> None:
    assert looks_allowed(4) == 3 and look_confidence(0.95, 4) == pytest.approx(1 - 0.05 / 3)
    assert looks_allowed(2) == 1 and look_confidence(0.9, 2) == pytest.approx(0.9)


def simulate(effect: float, *, runs: int, max_pairs: int, seed: int) -> dict[str, int]:
    """Sequential runs as the window makes them: look after each pair from the second, stop when decided."""
    rng = np.random.default_rng(seed)
    counts = {"PASS": 0, "FAIL": 0, "INCONCLUSIVE": 0}
    confidence = look_confidence(0.95, max_pairs)
    for _ in range(runs):
        sequence = boots(effect, max_pairs, rng=rng, boot_sd=0.04, prompt_sd=0.03, drift=0.01)
        verdict = "INCONCLUSIVE"
        for pairs in range(2, max_pairs + 1):
            est = estimate(sequence[:2 * pairs + 1], higher_is_better=True, confidence=confidence)
            decided = look(est, min_mean_change=0.0, ci_lower_above=0.0)
            if decided.verdict:
                verdict = decided.verdict
                break
        counts[verdict] += 1
    return counts


def test_identical_lanes_pass_at_most_at_the_nominal_rate_over_every_look() -> None:
    # a bar at +0% is the hardest case: any CI low above zero is a PASS. 95% two-sided: 2.5% one-sided.
    counts = simulate(0.0, runs=600, max_pairs=4, seed=3)
    assert counts["PASS"] / 600 <= 0.025 + 0.015, counts  # nominal plus ~2.4 binomial SEs


def test_a_large_change_is_found_in_most_runs() -> None:
    counts = simulate(0.25, runs=200, max_pairs=4, seed=4)
    assert counts["PASS"] / 200 >= 0.8, counts


def test_holm_shares_the_fail_side_over_levels() -> None:
    # two levels each below the bar at p 0.02: alone each FAILs at 0.025, shared neither does (0.0125 first)
    assert holm_rejected({1: 0.02, 4: 0.02}, 0.025) == set()
    assert holm_rejected({1: 0.01, 4: 0.02}, 0.025) == {1, 4}  # 0.01 <= 0.0125, then 0.02 <= 0.025
    assert holm_rejected({1: 0.01, 4: 0.2}, 0.025) == {1}
    assert holm_rejected({1: 0.02}, 0.025) == {1}


def test_p_below_bar_agrees_with_the_ci_high_end() -> None:
    est = estimate(boots(0.0, 3, rng=np.random.default_rng(5), boot_sd=0.01), higher_is_better=True,
                   confidence=0.95)
    assert est.high < 0.05  # the CI's high end under the bar: FAIL alone at 2.5% one-sided
    assert p_below_bar(est, 0.05) < 0.025
    assert p_below_bar(est, est.high) == pytest.approx(0.025, abs=1e-6)  # the bar at the CI's end: p is its tail


def test_a_fail_at_one_of_two_levels_keeps_the_stated_rate_only_when_shared() -> None:
    """Two independent A/A levels at a 0% bar: FAIL at either is a false FAIL. Alone each level holds its
    2.5%; any-of-two doubles it; Holm's share brings it back."""
    rng = np.random.default_rng(11)
    runs, alpha, each, shared = 2000, 0.025, 0, 0
    for _ in range(runs):
        p = {}
        for level in (1, 4):
            est = estimate(boots(0.0, 3, rng=rng, boot_sd=0.03, prompt_sd=0.02), higher_is_better=True,
                           confidence=0.95)
            p[level] = p_below_bar(est, 0.0)
        each += any(v <= alpha for v in p.values())
        shared += bool(holm_rejected(p, alpha))
    assert each / runs > 0.035, each  # about 5%: twice the stated rate
    assert shared / runs <= 0.025 + 0.011, shared  # nominal plus 3 binomial SEs


def _with_per_prompt_change(changes: list[float], pairs: int, boot_sd: float = 0.01) -> list[BootValues]:
    """The true change differs by prompt (speculation helps a prompt that repeats its input, not another)."""
    out = []
    rng = np.random.default_rng(5)
    for boot in boots(0.0, pairs, rng=rng, boot_sd=boot_sd):
        if boot.candidate:
            boot = BootValues(boot.key, boot.position, True,
                              {p: v * (1 + c) for (p, v), c in zip(boot.values.items(), changes, strict=True)})
        out.append(boot)
    return out


def test_futility_when_the_change_varies_so_much_by_prompt_that_no_pair_could_decide() -> None:
    # +30% on half the prompts, -25% on the rest: about +0% overall, the prompt term alone spans the bar and 0
    est = estimate(_with_per_prompt_change([0.3, -0.25] * 3, 2), higher_is_better=True, confidence=0.98)
    assert reachable(est, min_mean_change=0.05, ci_lower_above=0.0) == (False, False)


def test_no_futility_while_a_verdict_stays_within_reach() -> None:
    clear_win = estimate(_with_per_prompt_change([0.25, 0.35] * 3, 2, boot_sd=0.15), higher_is_better=True,
                         confidence=0.98)
    assert clear_win.low < 0  # undecided now: the boots scatter too much after two pairs
    assert reachable(clear_win, min_mean_change=0.05, ci_lower_above=0.0) == (True, False)
    no_win = estimate(_with_per_prompt_change([0.0, 0.01] * 3, 2, boot_sd=0.15), higher_is_better=True,
                      confidence=0.98)
    assert no_win.high > 0.05  # undecided now, but more pairs would show it below the bar
    assert reachable(no_win, min_mean_change=0.05, ci_lower_above=0.0) == (False, True)
