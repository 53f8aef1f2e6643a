"""The speed comparison over interleaved boots, and when it may stop.

The boot is the unit whose luck is shared: every prompt of one boot runs on the same warm-up, the same
page cache and the same neighbours, so a CI over prompts alone once called an identical lane +8% faster.
The window boots the control and each candidate in turn (control, candidate, control, candidate, ...,
control), so each candidate boot is bracketed by two control boots.

The model, on the log of each prompt's value (its median request; negated where lower is better)::

    y[boot, prompt] = a[prompt] + b * position[boot] + d * is_candidate[boot] + u[boot] + e[boot, prompt]

``b`` takes a steady drift across the window out; ``u`` is the boot's luck. Averaged over the prompts
(every boot measures the same prompts), ordinary least squares on the boot means gives ``d`` and its
standard error from the boots' own scatter around the fit: control and candidate boots both count, so
``2k + 1`` boots of ``k`` pairs leave ``2k - 2`` degrees of freedom. How much the change itself differs from
prompt to prompt (one prompt's speculation hits, another's misses) is added in quadrature, with the
degrees of freedom combined by Welch-Satterthwaite. Both terms hold the prompts' own noise once each, so
the CI is a little conservative, never narrow.

Repeated looks: after each pair (from the second on) the estimate is looked at, and the gate may stop
with PASS or FAIL, or stop pairing when no number of pairs could decide (``reachable``: the change
varies so much from prompt to prompt that the bar and zero stay inside the CI however small the boot
term gets; it ends INCONCLUSIVE, saying so). Each look uses a Bonferroni share of the error rate (``1 - confidence`` over the looks
that ``max_boot_pairs`` allows), so the chance of a false PASS over every look together stays at most
``1 - confidence`` whatever the stopping. With several judged levels, PASS needs every level (an
intersection: no share needed) and FAIL any one, so the FAIL side is shared by Holm's step-down over the
levels (``holm_rejected``). What the rule decides at a given true change, and the futility stop by
conditional power, are simulated in power.py; benchmarks/speed_power.py measures both error rates.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from campaign.gates.common.stats import percentile

__all__ = ["BootValues", "Estimate", "Look", "estimate", "holm_rejected", "look", "look_confidence", "looks_allowed",
           "p_below_bar", "reachable"]

@dataclass(frozen=True)
class BootValues:
    """One boot of one lane: its place in the window's order and each prompt's value."""

    key: str
    position: int
    candidate: bool
    values: dict[str, float]


@dataclass(frozen=True)
class Estimate:
    """The change (candidate over control, positive = better) and its CI at one look's confidence."""

    change: float  # exp(d) - 1: the geometric mean change over prompts, drift taken out
    low: float
    high: float
    log_change: float
    se: float
    se_boot: float
    se_prompt: float
    df: float
    confidence: float
    boots: int
    candidate_boots: int
    prompts: int
    per_prompt: dict[str, float]  # each prompt's change, the same fit on that prompt alone

    def as_dict(self) -> dict[str, Any]:
        return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in asdict(self).items()}


def looks_allowed(max_boot_pairs: int) -> int:
    """Looks after pair 2, 3, ..., max: one pair leaves no degree of freedom for the boots' scatter."""
    return max(1, max_boot_pairs - 1)


def look_confidence(confidence: float, max_boot_pairs: int) -> float:
    return 1 - (1 - confidence) / looks_allowed(max_boot_pairs)


def log_values(boots: Sequence[BootValues], *, higher_is_better: bool,
               min_columns: int = 2) -> tuple[np.ndarray, list[str]] | None:
    """The log of each boot's value (boots x prompts, signed so that up is better) over the prompts every
    boot measured, and those prompts; None when they are under ``min_columns`` (2: the prompts' scatter is
    part of the CI; 1 for a pooled percentile per class, whose CI rests on the boots)."""
    prompts = sorted(set.intersection(*(set(p for p, v in b.values.items() if v > 0) for b in boots))) if boots else []
    if len(prompts) < max(1, min_columns):
        return None
    sign = 1.0 if higher_is_better else -1.0
    return sign * np.log(np.array([[b.values[p] for p in prompts] for b in boots])), prompts


def tail_value(samples: Sequence[float], percent: int, need: int) -> float | None:
    """The nearest-rank percentile of one boot's samples pooled over a row (every value reported was
    observed); None under ``need`` samples, too few to have any past the percentile."""
    return percentile(samples, percent) if len(samples) >= need else None


def boot_design(boots: Sequence[BootValues]) -> np.ndarray:
    """The model's design: a level, the boot's position (drift) and whether it is the candidate."""
    return np.column_stack([np.ones(len(boots)), [float(b.position) for b in boots],
                            [1.0 if b.candidate else 0.0 for b in boots]])


def estimate(boots: Sequence[BootValues], *, higher_is_better: bool, confidence: float,
             min_columns: int = 2) -> Estimate | None:
    """The fit over the prompts every boot measured; None when the boots leave no degree of freedom
    (fewer than two candidate boots or two control boots, or under four boots) or share under
    ``min_columns`` prompts (a pooled percentile per class: one class is enough, its CI the boots' alone)."""
    candidates = [b for b in boots if b.candidate]
    controls = [b for b in boots if not b.candidate]
    if len(candidates) < 2 or len(controls) < 2 or len(boots) < 4:
        return None
    found = log_values(boots, higher_is_better=higher_is_better, min_columns=min_columns)
    if found is None:
        return None
    y, prompts = found  # boots x prompts
    design = boot_design(boots)
    # (X'X)^-1 X': its third row gives d, one linear contrast of the boots applied to each prompt
    solve = np.linalg.pinv(design)
    contrast = solve[2]
    per_prompt = contrast @ y
    d = float(per_prompt.mean())
    boot_means = y.mean(axis=1)
    residuals = boot_means - design @ (solve @ boot_means)
    df_boot = len(boots) - 3
    se_boot = math.sqrt(float(residuals @ residuals) / df_boot * float(contrast @ contrast))
    se_prompt = float(per_prompt.std(ddof=1)) / math.sqrt(len(prompts)) if len(prompts) > 1 else 0.0
    se = math.hypot(se_boot, se_prompt)
    df = _satterthwaite((se_boot, df_boot), (se_prompt, len(prompts) - 1)) if len(prompts) > 1 else float(df_boot)
    # imported here: scipy.stats takes half a second to import, which every command would pay at start
    from scipy import stats as sps

    half = float(sps.t.ppf(1 - (1 - confidence) / 2, df)) * se
    return Estimate(change=math.expm1(d), low=math.expm1(d - half), high=math.expm1(d + half), log_change=d,
                    se=se, se_boot=se_boot, se_prompt=se_prompt, df=df, confidence=confidence, boots=len(boots),
                    candidate_boots=len(candidates), prompts=len(prompts),
                    per_prompt={p: math.expm1(float(v)) for p, v in zip(prompts, per_prompt, strict=True)})


def _satterthwaite(*terms: tuple[float, int]) -> float:
    total = sum(se ** 2 for se, _ in terms) ** 2
    parts = sum(se ** 4 / df for se, df in terms if df > 0 and se > 0)
    return total / parts if parts > 0 else float(min(df for _, df in terms))


@dataclass(frozen=True)
class Look:
    """What one look decides: PASS or FAIL (clear: stop), or None (go on, or INCONCLUSIVE at the last)."""

    verdict: str | None
    reason: str


def look(est: Estimate, *, min_mean_change: float, ci_lower_above: float) -> Look:
    """PASS when the bar is met (change at least ``min_mean_change`` and CI low above ``ci_lower_above``);
    FAIL when even the CI's high end is below the bar; otherwise undecided."""
    if est.change >= min_mean_change and est.low > ci_lower_above:
        return Look("PASS", "met")
    if est.high < min_mean_change:
        return Look("FAIL", f"not met: even the CI's high end is below {min_mean_change:+.0%}")
    return Look(None, "undecided")


def reachable(est: Estimate, *, min_mean_change: float, ci_lower_above: float) -> tuple[bool, bool]:
    """(could PASS, could FAIL) with more boot pairs. More pairs shrink the boot term toward zero, never the
    prompt term: the CI can get no narrower than the prompt term's, at the change as estimated now. The
    prompt term is taken at the low end of its own 90% interval (four prompts leave three degrees of
    freedom, and a boot's noise inflates it early), so a comparison stops for futility only when even a
    generous reading leaves the bar and zero both inside the CI. Stopping for futility ends INCONCLUSIVE:
    it never makes a PASS or a FAIL, so the error rates of the looks stand."""
    # imported here: scipy.stats takes half a second to import, which every command would pay at start
    from scipy import stats as sps

    df = max(est.prompts - 1, 1)
    generous = est.se_prompt * math.sqrt(sps.chi2.ppf(0.10, df) / df)
    floor = float(sps.norm.ppf(1 - (1 - est.confidence) / 2)) * generous
    bar, low = math.log1p(min_mean_change), math.log1p(ci_lower_above)
    return (est.log_change >= bar and est.log_change - floor > low), est.log_change + floor < bar


def p_below_bar(est: Estimate, min_mean_change: float) -> float:
    """One-sided p of "the change is at least the bar": small when even the CI's high end is below it. A look
    FAILs a level alone at p < (1 - look confidence) / 2, which is the CI's high end below the bar."""
    if est.se <= 0:
        return 0.0 if est.log_change < math.log1p(min_mean_change) else 1.0
    # imported here: scipy.stats takes half a second to import, which every command would pay at start
    from scipy import stats as sps

    return float(sps.t.cdf((est.log_change - math.log1p(min_mean_change)) / est.se, est.df))


def holm_rejected(p_values: Mapping[Any, float], alpha: float) -> set[Any]:
    """Holm's step-down: the smallest p against alpha / m, the next against alpha / (m - 1), ..., stopping at
    the first that misses. The chance of any false rejection stays at most alpha over the m hypotheses."""
    rejected: set[Any] = set()
    ordered = sorted(p_values.items(), key=lambda item: item[1])
    for rank, (key, p) in enumerate(ordered):
        if p > alpha / (len(ordered) - rank):
            break
        rejected.add(key)
    return rejected
