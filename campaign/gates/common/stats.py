"""Statistics the gates share: exact binomial bounds and a paired bootstrap.

Both are deterministic: Clopper-Pearson is exact (the beta distribution, no approximation), and the
bootstrap draws from a seeded generator, so re-judging a bundle gives the same numbers.

``paired_bootstrap_ci(control, candidate, relative=True, confidence=0.95, resamples=10_000, seed=0)``
is the entry point for gates that compare per-item numbers between two lanes (speed, latency):
it pairs item i of control with item i of candidate, takes each pair's change, and returns a
``BootstrapCI`` for the mean change.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Sequence

import numpy as np

__all__ = ["BootNoise", "BootstrapCI", "boot_noise", "bootstrap_mean_ci", "clopper_pearson_interval",
           "clopper_pearson_upper", "min_n_for_zero_loss", "paired_bootstrap_ci", "paired_changes", "percentile", "widen"]


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (no interpolation: every reported value was observed)."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100.0 * len(ordered)))
    return ordered[rank - 1]


def _check_counts(k: int, n: int) -> None:
    if n <= 0 or k < 0 or k > n:
        raise ValueError(f"need 0 <= k <= n and n > 0, got k={k}, n={n}")


def _check_confidence(confidence: float) -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")


def clopper_pearson_upper(k: int, n: int, confidence: float = 0.95) -> float:
    """One-sided exact upper bound on a proportion after ``k`` events in ``n`` trials.

    ``n`` is the number of independent units (unique tasks), never units x repeats.
    1 in 100 at 0.95 gives 0.0465598...; 0 in 100 gives 1 - 0.05**(1/100) = 0.0295130...
    """
    _check_counts(k, n)
    _check_confidence(confidence)
    if k == n:
        return 1.0
    # imported here: scipy.stats takes half a second to import, which every command would pay at start
    from scipy.stats import beta

    return float(beta.ppf(confidence, k + 1, n - k))


def clopper_pearson_interval(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Two-sided exact interval at ``confidence`` (alpha split equally between the tails)."""
    _check_counts(k, n)
    _check_confidence(confidence)
    # imported here: scipy.stats takes half a second to import, which every command would pay at start
    from scipy.stats import beta

    alpha = 1.0 - confidence
    low = 0.0 if k == 0 else float(beta.ppf(alpha / 2, k, n - k + 1))
    high = 1.0 if k == n else float(beta.ppf(1 - alpha / 2, k + 1, n - k))
    return low, high


def min_n_for_zero_loss(margin: float, confidence: float = 0.95) -> int:
    """The fewest units for which 0 events gives an upper bound below ``margin``."""
    _check_confidence(confidence)
    if not 0.0 < margin < 1.0:
        raise ValueError(f"margin must be in (0, 1), got {margin}")
    n = max(1, math.ceil(math.log(1 - confidence) / math.log(1 - margin)))
    while clopper_pearson_upper(0, n, confidence) >= margin:
        n += 1
    return n


@dataclass(frozen=True)
class BootstrapCI:
    """A two-sided percentile bootstrap interval for the mean of paired changes."""

    mean: float  # the observed mean change (point estimate)
    low: float
    high: float
    n: int  # number of pairs (the denominator)
    confidence: float
    resamples: int
    seed: int
    relative: bool  # True: changes are candidate/control - 1; False: candidate - control
    method: str = "percentile"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def paired_changes(control: Sequence[float], candidate: Sequence[float], *, relative: bool = True) -> np.ndarray:
    """Per-pair change: ``candidate/control - 1`` (relative) or ``candidate - control``."""
    ctrl = np.asarray(control, dtype=float)
    cand = np.asarray(candidate, dtype=float)
    if ctrl.shape != cand.shape or ctrl.ndim != 1:
        raise ValueError(f"control and candidate must be equal-length 1-D sequences, got {ctrl.shape} and {cand.shape}")
    if not (np.all(np.isfinite(ctrl)) and np.all(np.isfinite(cand))):
        raise ValueError("control and candidate must be finite numbers")
    if relative:
        if np.any(ctrl <= 0):
            raise ValueError("a relative change needs every control value > 0")
        return cand / ctrl - 1.0
    return cand - ctrl


def bootstrap_mean_ci(changes: Sequence[float] | np.ndarray, *, confidence: float = 0.95, resamples: int = 10_000,
                      seed: int = 0, relative: bool = False) -> BootstrapCI:
    """Percentile bootstrap of the mean of ``changes`` from a seeded ``numpy`` generator.

    Percentile, not BCa: BCa is undefined when every change is equal (a lossless axis), which is a
    result gates must be able to report."""
    _check_confidence(confidence)
    values = np.asarray(changes, dtype=float)
    if values.ndim != 1 or values.size == 0:
        raise ValueError("need at least one change")
    if resamples < 100:
        raise ValueError(f"resamples must be >= 100, got {resamples}")
    rng = np.random.default_rng(seed)
    n = values.size
    means = np.empty(resamples)
    chunk = max(1, 2_000_000 // n)  # bounded memory for large n
    for start in range(0, resamples, chunk):
        stop = min(resamples, start + chunk)
        means[start:stop] = values[rng.integers(0, n, size=(stop - start, n))].mean(axis=1)
    alpha = 1.0 - confidence
    low, high = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    return BootstrapCI(mean=float(values.mean()), low=float(low), high=float(high), n=int(n),
                       confidence=confidence, resamples=resamples, seed=seed, relative=relative)


def paired_bootstrap_ci(control: Sequence[float], candidate: Sequence[float], *, relative: bool = True,
                        confidence: float = 0.95, resamples: int = 10_000, seed: int = 0) -> BootstrapCI:
    """CI for the mean per-item change from ``control`` to ``candidate`` (item i paired with item i).

    With ``relative=True`` a change of +0.05 means the candidate's number is 5% higher. Resampling is
    over pairs, so per-item difficulty cancels out. Deterministic for a given ``seed``."""
    changes = paired_changes(control, candidate, relative=relative)
    return bootstrap_mean_ci(changes, confidence=confidence, resamples=resamples, seed=seed, relative=relative)


@dataclass(frozen=True)
class BootNoise:
    """How far one more boot of the same server may land from the mean of ``boots`` measured boots.

    Every prompt of one boot shares that boot's luck (memory placement, thread placement, the box's
    state), so a CI over prompts cannot see it; only repeated boots can. ``half_width`` is the
    two-sided t prediction half-width for a single new boot against the mean of the measured ones:
    ``t(boots - 1) * sd * sqrt(1 + 1/boots)``. Few boots give few degrees of freedom and a wide term,
    which is the honest price of not knowing the box's boot-to-boot spread."""

    boots: int
    sd: float  # sample SD of the boots' mean changes from their common mean
    half_width: float
    confidence: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def boot_noise(boot_effects: Sequence[float], *, confidence: float = 0.95) -> BootNoise:
    """``boot_effects``: each boot's mean per-prompt change from the mean of all boots (>= 2 boots)."""
    from scipy.stats import t

    _check_confidence(confidence)
    values = np.asarray(boot_effects, dtype=float)
    if values.ndim != 1 or values.size < 2:
        raise ValueError("boot noise needs at least two boots")
    k = int(values.size)
    sd = float(values.std(ddof=1))
    half = float(t.ppf(1 - (1 - confidence) / 2, k - 1)) * sd * math.sqrt(1 + 1 / k)
    return BootNoise(boots=k, sd=sd, half_width=half, confidence=confidence)


def widen(ci: BootstrapCI, extra_half_width: float) -> tuple[float, float]:
    """``ci`` with an independent error term added in quadrature on each side of its mean."""
    low = ci.mean - math.hypot(ci.mean - ci.low, extra_half_width)
    high = ci.mean + math.hypot(ci.high - ci.mean, extra_half_width)
    return low, high
