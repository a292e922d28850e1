"""Paired measurements: a ratio with a bootstrap interval, next to the noise floor of the same
method. Used by the overhead micro-benchmarks, `diag bench overhead` and the GPU lane.

Why paired: on a shared host (or a GPU shared by servers) the speed drifts by more than the few
per cent being measured. Timing A and B back to back, in alternating order (ABBA...), and taking
the ratio within each pair cancels the drift; the median of those ratios, with a bootstrap 95 %
interval over the pairs, says how sure the figure is. The same method applied to A against A
(nothing switched) gives the noise floor: a difference inside it cannot be told from noise;
`neighbours` finds those pairs among the windows of the alternating pairs themselves.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable, Hashable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

LEVEL = 0.95
RESAMPLES = 2000


def order(pairs: int) -> list[tuple[str, str]]:
    """The order of each pair: AB, BA, AB, ... (alternating cancels a steady drift)."""
    return [("A", "B") if i % 2 == 0 else ("B", "A") for i in range(pairs)]


def neighbours(states: Sequence[Hashable], values: Sequence[float]) -> tuple[list[float],
                                                                             list[float]]:
    """The noise floor's pairs from the windows as they ran: two adjacent windows in the same
    state (nothing switched between them), each window in one pair at most, taken in turn
    (earlier, later), (later, earlier), ... as the measured pairs alternate their order.

    Why: in alternating pairs (AB, BA, AB, ...) every pair ends in the state the next one starts
    in, so the same windows give a floor pair at each boundary (B|B, A|A) with no window spent
    on it; timing A, A in windows of their own halved the measured pairs a time budget allows.
    Returns (a, b): the floor is b/a per pair."""
    if len(states) != len(values):
        raise ValueError(f"{len(states)} states for {len(values)} windows")
    a: list[float] = []
    b: list[float] = []
    i = 0
    while i + 1 < len(values):
        if states[i] == states[i + 1]:
            first, second = (values[i], values[i + 1]) if len(a) % 2 == 0 else \
                (values[i + 1], values[i])
            a.append(first)
            b.append(second)
            i += 2
        else:
            i += 1
    return a, b


def ratios(base: Sequence[float], other: Sequence[float]) -> list[float]:
    """other_i / base_i for each pair (pairs with a non-positive base are dropped)."""
    if len(base) != len(other):
        raise ValueError(f"unpaired samples: {len(base)} and {len(other)}")
    return [o / b for b, o in zip(base, other, strict=True) if b > 0]


def bootstrap(values: Sequence[float], stat: Callable[[Sequence[float]], float] = statistics.median,
              resamples: int = RESAMPLES, level: float = LEVEL,
              seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of `stat` over `values` (seeded: the same data, the same
    interval)."""
    if not values:
        raise ValueError("no values")
    rng = random.Random(seed)
    n = len(values)
    est = sorted(stat([values[rng.randrange(n)] for _ in range(n)]) for _ in range(resamples))
    lo = est[int((1 - level) / 2 * resamples)]
    hi = est[min(resamples - 1, int((1 + level) / 2 * resamples))]
    return lo, hi


@dataclass(frozen=True)
class Ratio:
    """The median of paired ratios with its interval; `pairs` says how many went into it."""

    ratio: float
    lo: float
    hi: float
    pairs: int

    def within(self, floor: Ratio) -> bool:
        """Whether this ratio differs from 1 by no more than the noise floor does (the floor's
        interval made symmetric around 1): a difference the method also shows with nothing
        changed cannot be told from noise."""
        half = max(abs(floor.hi - 1.0), abs(1.0 - floor.lo))
        return abs(self.ratio - 1.0) <= half

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def text(self) -> str:
        return f"{self.ratio:.3f} ({self.lo:.3f}-{self.hi:.3f}, {self.pairs} pairs)"


def paired_ratio(base: Sequence[float], other: Sequence[float], seed: int = 0) -> Ratio:
    """The median of other/base over the pairs, with its bootstrap 95 % interval."""
    r = ratios(base, other)
    if not r:
        raise ValueError("no pairs with a positive base")
    lo, hi = bootstrap(r, seed=seed)
    return Ratio(statistics.median(r), lo, hi, len(r))


def difference(base: Sequence[float], other: Sequence[float],
                      seed: int = 0) -> tuple[float, float, float]:
    """The median of other - base over the pairs, with its interval (e.g. ns added per call)."""
    if len(base) != len(other) or not base:
        raise ValueError(f"unpaired or empty samples: {len(base)} and {len(other)}")
    d = [o - b for b, o in zip(base, other, strict=True)]
    lo, hi = bootstrap(d, seed=seed)
    return statistics.median(d), lo, hi
