"""Exact, self-contained statistics for success rates (no scipy): Wilson score interval, two-sided
Fisher exact test, Holm's correction, and the counts a comparison would need to become significant.
"""
from __future__ import annotations

import math
from fractions import Fraction

Z95 = 1.959963984540054


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval: (p + z²/2n ± z·sqrt(p(1−p)/n + z²/4n²)) / (1 + z²/n)."""
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    denom = 1 + z * z / n
    centre = p + z * z / (2 * n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return (max(0.0, (centre - half) / denom), min(1.0, (centre + half) / denom))


def fisher_exact(a: int, b: int, c: int, d: int) -> float:
    """Two-sided Fisher exact p for [[a, b], [c, d]]: sum of hypergeometric P(table) over tables
    with the same margins and P ≤ P(observed) (exact rationals, so ties are exact)."""
    r1, r2, c1 = a + b, c + d, a + c
    n = r1 + r2
    total = math.comb(n, c1)

    def prob(x: int) -> Fraction:
        return Fraction(math.comb(r1, x) * math.comb(r2, c1 - x), total)

    observed = prob(a)
    lo, hi = max(0, c1 - r2), min(r1, c1)
    p = sum((q for q in (prob(x) for x in range(lo, hi + 1)) if q <= observed), Fraction(0))
    return float(min(p, Fraction(1)))


def holm(p_values: list[float]) -> list[float]:
    """Holm–Bonferroni adjusted p-values (same order): the i-th smallest is multiplied by m − i,
    made monotone, capped at 1. Controls the chance of any false "better/worse" among m tests."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def detectable_counts(ka: int, na: int, nb: int, alpha: float = 0.05) -> tuple[int | None, int | None]:
    """How many successes of nb trials b would need — at least `up`, or at most `down` — for
    Fisher's test against a's ka/na to reach p < alpha; None where no count could (e.g. no rise
    above a baseline of 100 %)."""
    significant = [kb for kb in range(nb + 1) if fisher_exact(kb, nb - kb, ka, na - ka) < alpha]
    up = min((kb for kb in significant if kb / nb > ka / na), default=None)
    down = max((kb for kb in significant if kb / nb < ka / na), default=None)
    return up, down
