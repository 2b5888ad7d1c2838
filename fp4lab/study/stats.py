"""Statistics of paired seeds, in plain Python: mean and standard error, Student's t (two-sided p-values and
quantiles, through the regularized incomplete beta function), Holm's step-down adjustment, the sample size of
a paired t-test (``seeds_needed``) with its inverse (``detectable_difference``), and the exact two-sided p-value of
Wilcoxon's signed-rank test (``signed_rank_p``), a check of the t-test that heavy tails cannot sway.
"""

from __future__ import annotations

import math
from statistics import NormalDist


def mean_se(values: list[float]) -> tuple[float, float, int]:
    """(mean, standard error, n); SE is NaN below two values."""
    n = len(values)
    if n == 0:
        return math.nan, math.nan, 0
    m = sum(values) / n
    if n < 2:
        return m, math.nan, n
    var = sum((v - m) ** 2 for v in values) / (n - 1)
    return m, math.sqrt(var / n), n


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularized incomplete beta function (modified Lentz)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        m2 = 2 * m
        for num in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def _ibeta(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_two_sided_p(t: float, df: int) -> float:
    """Two-sided p-value of Student's t with ``df`` degrees of freedom: ``I_{df / (df + t^2)}(df / 2, 1 / 2)``."""
    if not math.isfinite(t):
        return 0.0 if not math.isnan(t) else math.nan
    return _ibeta(df / 2.0, 0.5, df / (df + t * t))


def t_quantile(q: float, df: int) -> float:
    """The ``q`` quantile (q > 0.5) of Student's t with ``df`` degrees of freedom, by bisection of the p-value."""
    lo, hi, target = 0.0, 1e6, 2.0 * (1.0 - q)
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if t_two_sided_p(mid, df) > target else (lo, mid)
    return 0.5 * (lo + hi)


def holm(ps: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the order given: the i-th smallest p times (m - i + 1), made
    non-decreasing in that order and capped at 1."""
    order = sorted(range(len(ps)), key=lambda i: ps[i])
    out, running = [math.nan] * len(ps), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(ps) - rank) * ps[i]))
        out[i] = running
    return out


def _z(alpha: float, power: float) -> tuple[float, float]:
    """Standard normal quantiles z(1 - alpha/2) and z(power) of the sample-size formula."""
    return NormalDist().inv_cdf(1 - alpha / 2), NormalDist().inv_cdf(power)


def seeds_needed(sd: float, delta: float = 0.3, alpha: float = 0.05, power: float = 0.8) -> int | None:
    """Paired seeds for a two-sided paired t-test at level ``alpha`` to detect ``delta`` with probability ``power``
    when the per-seed differences have standard deviation ``sd``: Guenther's (1981) correction of the normal
    approximation, ``n = ceil(((z(1 - alpha/2) + z(power)) * sd / delta)^2 + z(1 - alpha/2)^2 / 2)``, at least 2
    (None for an sd that is not finite)."""
    if not math.isfinite(sd) or not delta > 0 or not 0 < alpha < 1 or not 0 < power < 1:
        return None
    za, zb = _z(alpha, power)
    return max(2, math.ceil(((za + zb) * sd / delta) ** 2 + za * za / 2))


def detectable_difference(sd: float, n: int, alpha: float = 0.05, power: float = 0.8) -> float | None:
    """The difference (in the unit of ``sd``) that ``n`` paired seeds detect with probability ``power`` in a
    two-sided paired t-test at level ``alpha``: ``seeds_needed`` solved for delta, ``(z(1 - alpha/2) + z(power)) *
    sd / sqrt(n - z(1 - alpha/2)^2 / 2)``; None for an sd that is not finite or too few seeds for the formula."""
    if not math.isfinite(sd) or not 0 < alpha < 1 or not 0 < power < 1:
        return None
    za, zb = _z(alpha, power)
    room = n - za * za / 2
    return (za + zb) * sd / math.sqrt(room) if room > 0 else None


def signed_rank_p(values: list[float]) -> float:
    """Exact two-sided p-value of Wilcoxon's signed-rank test that ``values`` (paired differences) are symmetric
    about 0. Zeros are dropped; the others are ranked by magnitude, tied magnitudes sharing their mean rank; the
    statistic is the rank sum of the positive values, and its null distribution is that of every one of the 2^n
    sign assignments, counted exactly (a sum over half-ranks). p = min(1, 2 * min(P(T <= t), P(T >= t))); NaN
    without a nonzero value or with a value that is not finite."""
    nz = [v for v in values if v != 0]
    if not nz or not all(math.isfinite(v) for v in nz):
        return math.nan
    mags = sorted(abs(v) for v in nz)
    rank2: dict[float, int] = {}  # twice the mean rank of each magnitude: an integer
    i = 0
    while i < len(mags):
        j = i
        while j < len(mags) and mags[j] == mags[i]:
            j += 1
        rank2[mags[i]] = i + j + 1  # 2 * mean of ranks i + 1 .. j
        i = j
    twos = [rank2[abs(v)] for v in nz]
    t2 = sum(r for v, r in zip(nz, twos) if v > 0)
    ways = [1] + [0] * sum(twos)  # ways[s]: sign assignments whose doubled positive rank sum is s
    for r in twos:
        for s in range(len(ways) - 1, r - 1, -1):
            ways[s] += ways[s - r]
    total = 2 ** len(nz)
    below = sum(ways[: t2 + 1]) / total
    above = sum(ways[t2:]) / total
    return min(1.0, 2 * min(below, above))
