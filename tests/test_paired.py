"""The paired method's statistics (diag.paired): pairing order, paired ratios, the bootstrap
interval, and the noise-floor comparison. Expected values follow from how the data is built."""

from __future__ import annotations

import random

import pytest

from diag import paired


def test_order_alternates_so_a_steady_drift_cancels():
    assert paired.order(4) == [("A", "B"), ("B", "A"), ("A", "B"), ("B", "A")]


def test_ratios_need_pairs():
    assert paired.ratios([2.0, 4.0], [3.0, 2.0]) == [1.5, 0.5]
    assert paired.ratios([0.0, 2.0], [1.0, 2.0]) == [1.0]  # a zero base is no pair
    with pytest.raises(ValueError, match="unpaired"):
        paired.ratios([1.0], [1.0, 2.0])


def test_bootstrap_of_a_constant_is_that_constant_and_seeded():
    assert paired.bootstrap([3.0] * 10) == (3.0, 3.0)
    data = [random.Random(1).gauss(10, 1) for _ in range(30)]
    assert paired.bootstrap(data, seed=5) == paired.bootstrap(data, seed=5)
    with pytest.raises(ValueError):
        paired.bootstrap([])


def test_interval_narrows_with_more_pairs():
    rng = random.Random(2)
    small = [rng.gauss(1.0, 0.05) for _ in range(10)]
    big = [rng.gauss(1.0, 0.05) for _ in range(400)]
    lo_s, hi_s = paired.bootstrap(small)
    lo_b, hi_b = paired.bootstrap(big)
    assert hi_b - lo_b < hi_s - lo_s


def test_pairing_sees_5_percent_under_a_drift_ten_times_larger():
    """Each pair shares the host's speed of the moment (drifting by +-50 %); B costs 5 % more.
    The paired ratio finds 1.05 and its interval excludes 1; the same method on A against A
    (the noise floor) includes 1."""
    rng = random.Random(3)
    a, b, a2 = [], [], []
    speed = 1.0
    for _ in range(40):
        speed = min(1.5, max(0.5, speed + rng.gauss(0, 0.1)))
        a.append(speed * rng.gauss(1.0, 0.005))
        b.append(speed * 1.05 * rng.gauss(1.0, 0.005))
        a2.append(speed * rng.gauss(1.0, 0.005))
    r = paired.paired_ratio(a, b)
    floor = paired.paired_ratio(a, a2)
    assert r.pairs == 40
    assert r.lo <= 1.05 <= r.hi and r.lo > 1.0
    assert floor.lo <= 1.0 <= floor.hi
    assert not r.within(floor)
    assert paired.paired_ratio(a2, a).within(floor)


def test_difference_is_the_median_of_pairwise_differences():
    d, lo, hi = paired.difference([1.0, 2.0, 3.0], [1.5, 2.5, 3.5])
    assert (d, lo, hi) == (0.5, 0.5, 0.5)


def test_within_the_floor():
    floor = paired.Ratio(1.0, 0.99, 1.01, 20)
    assert paired.Ratio(1.0, 0.995, 1.005, 20).within(floor)
    assert not paired.Ratio(1.05, 1.03, 1.07, 20).within(floor)
    assert paired.Ratio(1.0, 0.995, 1.005, 20).to_dict() == \
        {"ratio": 1.0, "lo": 0.995, "hi": 1.005, "pairs": 20}


def test_neighbours_pairs_each_boundary_of_alternating_pairs_once():
    """AB|BA|AB: the boundaries B|B and A|A are the floor's pairs (nothing switched between
    them); each window in one pair at most; the order alternates like the measured pairs'."""
    states = ["A", "B", "B", "A", "A", "B"]
    values = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    a, b = paired.neighbours(states, values)
    assert (a, b) == ([2.0, 5.0], [3.0, 4.0])  # (earlier, later), then (later, earlier)
    # three in a row make one pair, not two sharing a window
    assert paired.neighbours(["A", "A", "A"], [1.0, 2.0, 3.0]) == ([1.0], [2.0])
    # states that change at every window: no floor pair at all
    assert paired.neighbours(["A", "B", "A", "B"], [1.0, 2.0, 3.0, 4.0]) == ([], [])
    with pytest.raises(ValueError):
        paired.neighbours(["A"], [1.0, 2.0])
