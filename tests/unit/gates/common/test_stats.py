"""Shared statistics pinned to known values (pure functions; no engine)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from campaign.gates.common.stats import (
    bootstrap_mean_ci,
    clopper_pearson_interval,
    clopper_pearson_upper,
    min_n_for_zero_loss,
    paired_bootstrap_ci,
    paired_changes,
)


def test_one_loss_in_100_matches_the_seed_report() -> None:
    # the frozen K=1 MTP campaign: 1 loss in 100 unique tasks, one-sided 95% bound 0.04655981145353899
    # (scipy versions differ in the last few ulps, hence rel=1e-12)
    assert clopper_pearson_upper(1, 100, 0.95) == pytest.approx(0.04655981145353899, rel=1e-12)


def test_zero_losses_in_100_is_the_closed_form() -> None:
    assert clopper_pearson_upper(0, 100) == pytest.approx(1 - 0.05 ** (1 / 100), rel=1e-12)
    assert clopper_pearson_upper(0, 100) == pytest.approx(0.0295130496, abs=1e-10)


def test_denominator_is_tasks_not_task_repeats() -> None:
    # 1 loss over 100 tasks x 2 repeats must not be scored as 1/200: the bound would look twice as good
    assert clopper_pearson_upper(1, 200) < 0.025 < clopper_pearson_upper(1, 100)


def test_upper_bound_edges_and_monotonicity() -> None:
    assert clopper_pearson_upper(10, 10) == 1.0
    bounds = [clopper_pearson_upper(k, 50) for k in range(51)]
    assert all(a < b for a, b in zip(bounds, bounds[1:-1], strict=False))
    assert clopper_pearson_upper(5, 50, 0.99) > clopper_pearson_upper(5, 50, 0.95)


def test_two_sided_interval_known_values() -> None:
    low, high = clopper_pearson_interval(1, 100, 0.95)
    assert low == pytest.approx(0.000253146, rel=1e-5)
    assert high == pytest.approx(0.0544594, rel=1e-5)
    assert clopper_pearson_interval(0, 10) == (0.0, pytest.approx(0.3084971, rel=1e-6))


@pytest.mark.parametrize("k,n", [(-1, 10), (11, 10), (0, 0)])
def test_bad_counts_are_refused(k: int, n: int) -> None:
    with pytest.raises(ValueError):
        clopper_pearson_upper(k, n)


def test_fewest_tasks_for_a_margin() -> None:
    assert min_n_for_zero_loss(0.05) == 59  # 58 tasks with 0 losses still bound at >= 0.05
    assert clopper_pearson_upper(0, 58) >= 0.05 > clopper_pearson_upper(0, 59)


def test_paired_changes_relative_and_absolute() -> None:
    assert list(paired_changes([10.0, 20.0], [11.0, 18.0])) == pytest.approx([0.1, -0.1])
    assert list(paired_changes([10.0, 20.0], [11.0, 18.0], relative=False)) == pytest.approx([1.0, -2.0])
    with pytest.raises(ValueError):
        paired_changes([1.0, 2.0], [1.0])
    with pytest.raises(ValueError):
        paired_changes([0.0], [1.0])


def test_bootstrap_is_deterministic_for_a_seed_and_moves_with_it() -> None:
    rng = np.random.default_rng(3)
    control = rng.uniform(40, 60, 30)
    candidate = control * rng.normal(1.05, 0.02, 30)
    first = paired_bootstrap_ci(control, candidate, seed=11)
    again = paired_bootstrap_ci(control, candidate, seed=11)
    other = paired_bootstrap_ci(control, candidate, seed=12)
    assert first == again
    assert (first.low, first.high) != (other.low, other.high)
    assert first.low < first.mean < first.high
    assert first.n == 30 and first.relative and first.confidence == 0.95


def test_bootstrap_agrees_with_the_t_interval_on_normal_data() -> None:
    rng = np.random.default_rng(0)
    changes = rng.normal(0.05, 0.03, 400)
    ci = bootstrap_mean_ci(changes, resamples=20_000, seed=1)
    half = 1.96 * changes.std(ddof=1) / math.sqrt(changes.size)
    assert ci.mean == pytest.approx(changes.mean())
    assert ci.low == pytest.approx(changes.mean() - half, abs=0.0006)
    assert ci.high == pytest.approx(changes.mean() + half, abs=0.0006)


def test_identical_changes_give_a_point_interval() -> None:
    # a lossless axis: every pair changes by exactly the same amount (BCa would be undefined here)
    ci = paired_bootstrap_ci([10.0, 20.0, 30.0], [11.0, 22.0, 33.0])
    assert ci.low == pytest.approx(0.1) and ci.high == pytest.approx(0.1) and ci.mean == pytest.approx(0.1)
    assert ci.as_dict()["method"] == "percentile"


def test_boot_noise_is_a_t_prediction_half_width_for_one_more_boot() -> None:
    from campaign.gates.common.stats import boot_noise

    noise = boot_noise([0.02, -0.02, 0.0], confidence=0.95)
    assert noise.sd == pytest.approx(0.02)
    assert noise.half_width == pytest.approx(4.302652729911275 * 0.02 * (4 / 3) ** 0.5)
    assert boot_noise([0.01, 0.01]).half_width == 0.0  # boots that agree add nothing
    with pytest.raises(ValueError):
        boot_noise([0.01])
