"""The simulation of the speed rule (power.py): it fits as sequential.py fits, reads the noise a window
measured, and its statements agree with a replay of the rule through the gate's own functions."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from campaign.gates.speed.power import (
    DesignSimulation,
    Noise,
    RuleShape,
    _fit,
    conditional_decision,
    fit_noise,
    pairs_for,
)
from campaign.gates.speed.sequential import BootValues, estimate, look, look_confidence


def window(rng: np.random.Generator, effect: float, pairs: int, noise: Noise) -> list[BootValues]:
    """The power model drawn directly: boot luck, each prompt's own noise, the change's spread over prompts."""
    per_prompt = math.log1p(effect) + rng.normal(0, noise.effect_sd, noise.prompts)
    base = rng.normal(math.log(80), 0.3, noise.prompts)
    out = []
    for position in range(2 * pairs + 1):
        y = base + rng.normal(0, noise.boot_sd) + rng.normal(0, noise.prompt_sd, noise.prompts) + 0.01 * position
        if position % 2:
            y = y + per_prompt
        out.append(BootValues(f"b{position}", position, bool(position % 2),
                              {f"p{i}": float(v) for i, v in enumerate(np.exp(y))}))
    return out


@settings(max_examples=40, deadline=None)
@given(pairs=st.integers(2, 6), prompts=st.integers(2, 9), seed=st.integers(0, 2**31))
def test_the_vectorised_fit_is_the_gates_fit(pairs: int, prompts: int, seed: int) -> None:
    boots = window(np.random.default_rng(seed), 0.03, pairs, Noise(0.03, 0.02, 0.01, prompts))
    est = estimate(boots, higher_is_better=True, confidence=0.99)
    y = np.log(np.array([[b.values[f"p{i}"] for i in range(prompts)] for b in boots]))
    fit = _fit(y[None], np.arange(len(boots)), np.arange(len(boots)) % 2 == 1)
    assert fit["d"][0] == pytest.approx(est.log_change, abs=1e-12)
    assert fit["se"][0] == pytest.approx(est.se, rel=1e-9, abs=1e-15)
    assert fit["df"][0] == pytest.approx(est.df, rel=1e-9)


def replay(effect: float, noise: Noise, rule: RuleShape, runs: int, seed: int) -> dict[str, float]:
    """The rule through sequential.estimate and look, window by window, as the gate applies it."""
    rng = np.random.default_rng(seed)
    counts = {"PASS": 0, "FAIL": 0}
    confidence = look_confidence(rule.confidence, rule.max_boot_pairs)
    for _ in range(runs):
        boots = window(rng, effect, rule.max_boot_pairs, noise)
        for pairs in range(2, rule.max_boot_pairs + 1):
            est = estimate(boots[:2 * pairs + 1], higher_is_better=True, confidence=confidence)
            decided = look(est, min_mean_change=rule.min_mean_change, ci_lower_above=rule.ci_lower_above)
            if decided.verdict:
                counts[decided.verdict] += 1
                break
    return {k: v / runs for k, v in counts.items()}


@pytest.mark.parametrize("effect", [0.0, 0.05, 0.12])
def test_the_simulated_rates_agree_with_a_replay_of_the_rule(effect: float) -> None:
    noise, rule = Noise(0.03, 0.04, 0.02, 5), RuleShape(0.05, 0.0, 0.95, 4)
    simulated = DesignSimulation(noise, rule, runs=2000).outcome(effect)
    replayed = replay(effect, noise, rule, runs=500, seed=int(effect * 100))
    assert simulated.pass_rate == pytest.approx(replayed["PASS"], abs=0.06)
    assert simulated.fail_rate == pytest.approx(replayed["FAIL"], abs=0.06)


def test_a_true_change_at_the_bar_passes_about_half_the_time_at_one_look_more_over_several() -> None:
    quiet = Noise(0.01, 0.01, 0.0, 8)
    one_look = DesignSimulation(quiet, RuleShape(0.05, 0.0, 0.95, 2)).outcome(0.05)
    assert 0.4 <= one_look.pass_rate <= 0.6  # the estimate must reach the bar: a coin toss at the bar
    design = DesignSimulation(quiet, RuleShape(0.05, 0.0, 0.95, 8))
    assert design.outcome(0.05).pass_rate > one_look.pass_rate + 0.1  # seven looks: seven tosses
    detectable = design.change_passed()
    assert detectable is not None and 0.05 < detectable < 0.08
    # a not-worse form passes an unchanged lane in most windows at the same noise
    noninferior = DesignSimulation(Noise(0.01, 0.01, 0.0, 8), RuleShape(-0.03, -0.03, 0.95, 8))
    assert noninferior.outcome(0.0).pass_rate >= 0.8


def test_an_aa_window_passes_under_the_nominal_rate_at_a_zero_bar() -> None:
    outcome = DesignSimulation(Noise(0.04, 0.05, 0.0, 4), RuleShape(0.0, 0.0, 0.95, 4), runs=4000).outcome(0.0)
    assert outcome.pass_rate <= 0.025 and outcome.fail_rate <= 0.025


def test_more_pairs_for_a_smaller_change_and_none_out_of_reach() -> None:
    noise, rule = Noise(0.04, 0.03, 0.0, 6), RuleShape(0.05, 0.0, 0.95, 4)
    big, small = pairs_for(noise, rule, 0.25), pairs_for(noise, rule, 0.10)
    assert big is not None and small is not None and big < small
    # the change's spread over prompts does not shrink with pairs: a small change stays out of reach
    assert pairs_for(Noise(0.01, 0.01, 0.4, 4), rule, 0.10) is None


def test_the_noise_is_read_back_from_boots() -> None:
    rng = np.random.default_rng(3)
    truth = Noise(0.05, 0.02, 0.08, 40)
    fits = [fit_noise(window(rng, 0.1, 8, truth), higher_is_better=True) for _ in range(30)]
    assert np.mean([f.boot_sd for f in fits]) == pytest.approx(0.05, rel=0.25)
    assert np.mean([f.prompt_sd for f in fits]) == pytest.approx(0.02, rel=0.1)
    assert np.mean([f.effect_sd for f in fits]) == pytest.approx(0.08, rel=0.15)
    assert fit_noise(window(rng, 0.1, 1, truth), higher_is_better=True) is None  # 3 boots: no scatter


def test_conditional_power_is_high_for_a_clear_change_and_low_when_no_pair_could_decide() -> None:
    rule = RuleShape(0.05, 0.0, 0.95, 6)
    clear = window(np.random.default_rng(4), 0.30, 2, Noise(0.08, 0.01, 0.0, 6))
    p_pass, p_fail = conditional_decision(clear, rule, pairs_done=2, higher_is_better=True)
    assert p_pass > 0.8 and p_fail < 0.05
    hopeless = window(np.random.default_rng(5), 0.0, 2, Noise(0.005, 0.005, 0.35, 6))
    p_pass, p_fail = conditional_decision(hopeless, rule, pairs_done=2, higher_is_better=True)
    assert p_pass + p_fail < 0.1
    assert conditional_decision(clear, rule, pairs_done=6, higher_is_better=True) == (0.0, 0.0)


def test_wins_over_more_prompts_than_counted_never_pass_and_never_crash() -> None:
    noise = Noise(0.02, 0.02, 0.0, 4)
    assert DesignSimulation(noise, RuleShape(0.05, 0.0, 0.95, 4, wins_needed=5)).outcome(0.5).pass_rate == 0.0
    boots = window(np.random.default_rng(6), 0.3, 2, noise)
    assert conditional_decision(boots, RuleShape(0.05, 0.0, 0.95, 4, wins_needed=5), pairs_done=2,
                                higher_is_better=True)[0] == 0.0


def test_one_pair_is_never_decided() -> None:
    outcome = DesignSimulation(Noise(0.02, 0.02, 0.0, 4), RuleShape(0.05, 0.0, 0.95, 1)).outcome(0.5)
    assert (outcome.pass_rate, outcome.fail_rate, outcome.inconclusive_rate) == (0.0, 0.0, 1.0)
