"""What the speed rule decides, by simulation from a window's own noise.

The rule is not "the CI excludes zero": PASS needs the change at or over ``min_mean_change`` AND the CI's
low end over ``ci_lower_above``, at one of the looks after pair 2, 3, ..., ``max_boot_pairs``, each look at
its Bonferroni share. A closed form for that does not fit (the point must reach the bar, so a true change AT
the bar passes about half the time whatever the pairs), so every power statement the gate makes is read off
a simulation of exactly that rule: windows of ``2K + 1`` boots drawn from the noise this window measured,
fitted as sequential.py fits them, looked at as the gate looks.

The noise model, on log values (sign-adjusted so higher is better)::

    y[boot, prompt] = a[prompt] + b * position + (d + t[prompt]) * is_candidate + u[boot] + e[boot, prompt]

``u`` is the boot's luck (``boot_sd``), ``e`` each prompt's own noise in a boot (``prompt_sd``), ``t`` how
much the change differs from prompt to prompt (``effect_sd``). The fit is invariant to ``a`` and ``b``, so
the simulation leaves them out. ``fit_noise`` reads the three SDs from the boots a window measured.

One simulation serves every true change (common random numbers): a window's estimate at true change ``d``
is its estimate at zero plus ``d``, and its CI's width does not depend on ``d``. So per window and look the
simulation keeps two thresholds, the smallest ``d`` that passes there and the largest that fails, and the
first look where ``d`` crosses one of them decides. P(PASS), P(FAIL) and the mean pairs for any ``d`` cost
nothing more, and "the smallest change passed with 80%" is a bisection over the same windows.

Conditional power (the futility stop) is the same fit run forward from the boots already measured: the
true change drawn from the current estimate and its uncertainty, the next pairs drawn from the noise
measured, the remaining looks made as the gate would make them.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Sequence

import numpy as np

from campaign.gates.speed.sequential import BootValues, boot_design, log_values, look_confidence

__all__ = ["DesignSimulation", "Noise", "Outcome", "RuleShape", "conditional_decision", "fit_noise", "pairs_for"]

POWER = 0.8
RUNS = 1000  # simulated windows per statement: a rate's SE is 1.6 points at 50%
CONDITIONAL_RUNS = 400
PAIRS_LIMIT = 20  # the schema's most max_boot_pairs
_SEED = 20261203  # fixed: judging a bundle again gives the same statements


@dataclass(frozen=True)
class RuleShape:
    """The parts of a speed rule that decide: the bar, the CI floor, the error rate over every look, the looks,
    how many judged levels share the FAIL side (Holm's first step), and the wins the bar includes."""

    min_mean_change: float
    ci_lower_above: float
    confidence: float
    max_boot_pairs: int
    fail_levels: int = 1
    wins_needed: int | None = None

    def with_pairs(self, max_boot_pairs: int) -> RuleShape:
        return RuleShape(self.min_mean_change, self.ci_lower_above, self.confidence, max_boot_pairs,
                         self.fail_levels, self.wins_needed)


@dataclass(frozen=True)
class Noise:
    """Log SDs: a boot's shared luck, each prompt's own noise within a boot, the change's spread over prompts."""

    boot_sd: float
    prompt_sd: float
    effect_sd: float
    prompts: int

    def as_dict(self) -> dict[str, Any]:
        return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in asdict(self).items()}


@dataclass(frozen=True)
class Outcome:
    true_change: float
    pass_rate: float
    fail_rate: float
    inconclusive_rate: float
    mean_pairs: float
    runs: int

    def as_dict(self) -> dict[str, Any]:
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in asdict(self).items()}


def _t_half(alpha: float, df: np.ndarray, se: np.ndarray) -> np.ndarray:
    # imported here: scipy.stats takes half a second to import, which every command would pay at start
    from scipy import stats as sps

    return np.asarray(sps.t.ppf(1 - alpha, df)) * se


def _fit(y: np.ndarray, positions: np.ndarray, candidate: np.ndarray) -> dict[str, np.ndarray]:
    """sequential.estimate over many windows at once: ``y`` is windows x boots x prompts (log, higher better)."""
    boots, prompts = y.shape[1], y.shape[2]
    design = np.column_stack([np.ones(boots), positions.astype(float), candidate.astype(float)])
    solve = np.linalg.pinv(design)
    contrast, hat = solve[2], design @ solve
    per_prompt = np.einsum("b,sbp->sp", contrast, y)
    d = per_prompt.mean(axis=1)
    means = y.mean(axis=2)
    residuals = means - means @ hat.T
    df_boot = boots - 3
    se_boot = np.sqrt((residuals ** 2).sum(axis=1) / df_boot * float(contrast @ contrast))
    se_prompt = per_prompt.std(axis=1, ddof=1) / math.sqrt(prompts)
    se = np.hypot(se_boot, se_prompt)
    parts = np.where(se_boot > 0, se_boot ** 4 / df_boot, 0.0) + np.where(se_prompt > 0, se_prompt ** 4 / (prompts - 1), 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        df = np.where(parts > 0, se ** 4 / np.where(parts > 0, parts, 1.0), float(min(df_boot, prompts - 1)))
    return {"d": d, "se": se, "df": df, "per_prompt": per_prompt}


def _thresholds(fit: dict[str, np.ndarray], rule: RuleShape, alpha_look: float) -> tuple[np.ndarray, np.ndarray]:
    """Per window: the smallest true change (log) added to this fit that passes, and the one below which it
    fails (Holm's first step over ``fail_levels``)."""
    d, se, df = fit["d"], fit["se"], fit["df"]
    bar, floor = math.log1p(rule.min_mean_change), math.log1p(rule.ci_lower_above)
    half = _t_half(alpha_look / 2, df, se)
    pass_at = np.maximum(bar - d, floor - d + half + 1e-12)
    if rule.wins_needed and rule.wins_needed > fit["per_prompt"].shape[1]:
        pass_at = np.full_like(pass_at, np.inf)  # more wins than prompts: never met
    elif rule.wins_needed:
        ordered = -np.sort(-fit["per_prompt"], axis=1)  # largest first
        pass_at = np.maximum(pass_at, -ordered[:, rule.wins_needed - 1] + 1e-12)
    fail_below = bar - d - _t_half(alpha_look / (2 * max(1, rule.fail_levels)), df, se)
    return pass_at, fail_below


class DesignSimulation:
    """Windows of the rule's design at this noise, every true change read from the same draws."""

    def __init__(self, noise: Noise, rule: RuleShape, *, runs: int = RUNS, seed: int = _SEED) -> None:
        self.noise, self.rule, self.runs = noise, rule, runs
        pairs = max(2, rule.max_boot_pairs)
        boots, prompts = 2 * pairs + 1, max(2, noise.prompts)
        rng = np.random.default_rng(seed)
        positions = np.arange(boots)
        candidate = positions % 2 == 1
        y = (rng.normal(0.0, noise.boot_sd, (runs, boots, 1))
             + rng.normal(0.0, noise.prompt_sd, (runs, boots, prompts))
             + candidate[None, :, None] * rng.normal(0.0, noise.effect_sd, (runs, 1, prompts)))
        alpha_look = 1 - look_confidence(rule.confidence, rule.max_boot_pairs)
        passes, fails = [], []
        for k in range(2, rule.max_boot_pairs + 1):
            upto = 2 * k + 1
            p, f = _thresholds(_fit(y[:, :upto], positions[:upto], candidate[:upto]), rule, alpha_look)
            passes.append(p)
            fails.append(f)
        self._pass_at = np.stack(passes, axis=1) if passes else np.full((runs, 0), np.inf)
        self._fail_below = np.stack(fails, axis=1) if fails else np.full((runs, 0), -np.inf)

    def outcome(self, true_change: float) -> Outcome:
        if self._pass_at.shape[1] == 0:  # max_boot_pairs 1: no look, never decided
            return Outcome(true_change=true_change, pass_rate=0.0, fail_rate=0.0, inconclusive_rate=1.0,
                           mean_pairs=float(max(1, self.rule.max_boot_pairs)), runs=self.runs)
        d = math.log1p(true_change)
        passed, failed = d >= self._pass_at, d < self._fail_below
        decided = passed | failed
        any_decided = decided.any(axis=1)
        first = np.argmax(decided, axis=1)
        rows = np.arange(self.runs)
        pass_rate = float((any_decided & passed[rows, first]).mean()) if decided.size else 0.0
        fail_rate = float((any_decided & failed[rows, first]).mean()) if decided.size else 0.0
        pairs = np.where(any_decided, first + 2, max(1, self.rule.max_boot_pairs))
        return Outcome(true_change=true_change, pass_rate=pass_rate, fail_rate=fail_rate,
                       inconclusive_rate=1.0 - pass_rate - fail_rate, mean_pairs=float(pairs.mean()), runs=self.runs)

    def change_passed(self, power: float = POWER, limit: float = 4.0) -> float | None:
        """The smallest true change this design passes in ``power`` of windows; None when even ``limit``
        (+400%) does not (the prompt-to-prompt spread or the wins keep it out of reach)."""
        low, high = max(self.rule.min_mean_change, -0.99), limit
        if self.outcome(high).pass_rate < power:
            return None
        for _ in range(40):
            middle = (low + high) / 2
            low, high = (middle, high) if self.outcome(middle).pass_rate < power else (low, middle)
        return high


def pairs_for(noise: Noise, rule: RuleShape, true_change: float, *, power: float = POWER,
              start: int = 2, limit: int = PAIRS_LIMIT) -> int | None:
    """The fewest ``max_boot_pairs`` (from ``start``) whose design passes ``true_change`` in ``power`` of
    windows, with the looks that many pairs allow (more pairs, more looks, each stricter); None up to
    ``limit``."""
    def passes(pairs: int) -> bool:
        return DesignSimulation(noise, rule.with_pairs(pairs)).outcome(true_change).pass_rate >= power

    start = max(2, start)
    if start > limit or not passes(limit):
        return None
    low, high = start - 1, limit  # passes(high) holds; passes(low) is taken as not
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if passes(middle) else (middle, high)
    return high


def fit_noise(boots: Sequence[BootValues], *, higher_is_better: bool) -> Noise | None:
    """The three SDs of the model from the boots one window counted (None under 4 boots or 2 prompts):
    per-prompt fits give each prompt's change; what the fit leaves splits into the boot's shared part and
    each prompt's own; the change's spread over prompts is what its per-prompt estimates vary beyond that."""
    if len(boots) < 4 or sum(b.candidate for b in boots) < 2 or sum(not b.candidate for b in boots) < 2:
        return None
    found = log_values(boots, higher_is_better=higher_is_better)
    return None if found is None else _noise(found[0], boot_design(boots))


def _noise(y: np.ndarray, design: np.ndarray) -> Noise:
    n_boots, n_prompts = y.shape
    solve = np.linalg.pinv(design)
    coefficients = solve @ y
    residual = y - design @ coefficients
    shared = residual.mean(axis=1)
    own = residual - shared[:, None]
    df = n_boots - 3
    prompt_var = float((own ** 2).sum()) / (df * (n_prompts - 1))
    boot_var = max(0.0, float((shared ** 2).sum()) / df - prompt_var / n_prompts)
    contrast = solve[2]
    effect_var = max(0.0, float(coefficients[2].var(ddof=1)) - prompt_var * float(contrast @ contrast))
    return Noise(boot_sd=math.sqrt(boot_var), prompt_sd=math.sqrt(prompt_var), effect_sd=math.sqrt(effect_var),
                 prompts=n_prompts)


def conditional_decision(boots: Sequence[BootValues], rule: RuleShape, *, pairs_done: int, higher_is_better: bool,
                         runs: int = CONDITIONAL_RUNS, seed: int = _SEED) -> tuple[float, float] | None:
    """(P(PASS), P(FAIL)) at the looks after pairs ``pairs_done + 1`` .. ``max_boot_pairs``, from these boots
    on: the true change drawn from the current estimate and its uncertainty, each prompt's change keeping its
    measured offset, new boots from the noise measured. None when the boots cannot be fitted."""
    if len(boots) < 4 or sum(b.candidate for b in boots) < 2 or sum(not b.candidate for b in boots) < 2:
        return None
    found = log_values(boots, higher_is_better=higher_is_better)
    if found is None:
        return None
    if pairs_done >= rule.max_boot_pairs:
        return 0.0, 0.0
    y_seen, _ = found
    design = boot_design(boots)
    noise = _noise(y_seen, design)
    positions = np.array([b.position for b in boots])
    candidate = np.array([b.candidate for b in boots])
    fitted = _fit(y_seen[None], positions, candidate)
    d_now, se_now = float(fitted["d"][0]), float(fitted["se"][0])
    offsets = fitted["per_prompt"][0] - d_now
    slope = float((np.linalg.pinv(design) @ y_seen)[1].mean())
    # each prompt's level refitted under the common slope, so its new boots continue its series straight
    base = (y_seen - slope * positions[:, None] - candidate[:, None] * fitted["per_prompt"][0][None, :]).mean(axis=0)
    rng = np.random.default_rng(seed)
    truth = rng.normal(d_now, se_now, runs)
    new_positions = np.arange(2 * pairs_done + 1, 2 * rule.max_boot_pairs + 1)
    new_candidate = new_positions % 2 == 1
    fresh = (base[None, None, :] + slope * new_positions[None, :, None]
             + new_candidate[None, :, None] * (truth[:, None, None] + offsets[None, None, :])
             + rng.normal(0.0, noise.boot_sd, (runs, len(new_positions), 1))
             + rng.normal(0.0, noise.prompt_sd, (runs, len(new_positions), y_seen.shape[1])))
    y = np.concatenate([np.broadcast_to(y_seen, (runs, *y_seen.shape)), fresh], axis=1)
    all_positions, all_candidate = np.concatenate([positions, new_positions]), np.concatenate([candidate, new_candidate])
    alpha_look = 1 - look_confidence(rule.confidence, rule.max_boot_pairs)
    open_ = np.ones(runs, dtype=bool)
    passed = failed = 0
    for k in range(pairs_done + 1, rule.max_boot_pairs + 1):
        keep = all_positions <= 2 * k
        pass_at, fail_below = _thresholds(_fit(y[:, keep], all_positions[keep], all_candidate[keep]), rule, alpha_look)
        now_pass, now_fail = open_ & (pass_at <= 0), open_ & (fail_below > 0)
        passed, failed = passed + int(now_pass.sum()), failed + int(now_fail.sum())
        open_ &= ~(now_pass | now_fail)
    return passed / runs, failed / runs
