"""Robust statistics shared by the stages: median/MAD scales, the multiple-testing cut-off and the
binomial tail."""

from __future__ import annotations

from statistics import NormalDist

import numpy as np
import polars as pl

__all__ = ["MAD_TO_SIGMA", "MEDIAN_SE", "FALSE_ALARM", "z_critical", "margin", "robust_scale", "within_rank_scale", "others_max",
           "others_median", "binomial_tail"]

MAD_TO_SIGMA = 1.4826
"""MAD x this estimates the standard deviation of normally distributed data."""

MEDIAN_SE = 1.2533
"""The median of n normal draws has standard error sigma x this / sqrt(n) (sqrt(pi / 2))."""

FALSE_ALARM = 0.01
"""Chance, per analysis, of calling any one healthy rank (or link) an outlier by noise alone."""


def z_critical(tests: int, alpha: float = FALSE_ALARM) -> float:
    """One-sided normal cut-off with a Bonferroni correction over ``tests`` comparisons.

    Testing every rank (and every iteration of it) for being an outlier is many tests at once;
    dividing the false-alarm budget among them keeps the chance of any false call at ``alpha``
    whatever the scale (about 3.7 sigma for 1,024 ranks, 3.1 for 8).
    """
    tests = max(int(tests), 1)
    return NormalDist().inv_cdf(1.0 - alpha / tests)


def margin(z: float | None, cut: float) -> float:
    """How far ``z`` stands beyond the cut-off ``cut``, 0..1 (0 at or under it): the share of a
    suspect's confidence that its evidence earns (``verdict``, ``tp_waits``)."""
    if z is None or not z > cut or cut <= 0:
        return 0.0
    return max(0.0, min(1.0, 1.0 - cut / z))


def robust_scale(column: str | pl.Expr) -> pl.Expr:
    """MAD-based standard deviation of a column (expression)."""
    x = pl.col(column) if isinstance(column, str) else column
    return MAD_TO_SIGMA * (x - x.median()).abs().median()


def within_rank_scale(column: str) -> pl.Expr:
    """Robust scale of how much each rank's value varies from iteration to iteration: the noise
    of a difference between two peers, whose excesses over their median mirror each other (so
    their scatter across ranks is that difference itself, not noise)."""
    return robust_scale(pl.col(column) - pl.col(column).median().over("rank"))


def others_median(group: np.ndarray, value: np.ndarray) -> np.ndarray:
    """For each row, the median of ``value`` over the other rows of its ``group`` (groups of >= 2)."""
    order = np.lexsort((value, group))
    g, v = group[order], value[order].astype(np.float64)
    starts = np.r_[0, np.flatnonzero(np.diff(g)) + 1]
    sizes = np.diff(np.r_[starts, len(g)])
    start = np.repeat(starts, sizes)
    n = np.repeat(sizes, sizes)
    k = np.arange(len(g)) - start              # own position in the sorted group
    m = n - 1                                  # the others
    lo, hi = (m - 1) // 2, m // 2              # middle positions among the others

    def others_at(j: np.ndarray) -> np.ndarray:  # the j-th smallest of the others
        return v[start + j + (j >= k)]

    out = np.empty(len(g))
    out[order] = (others_at(lo) + others_at(hi)) / 2
    return out


def others_max(group: np.ndarray, value: np.ndarray) -> np.ndarray:
    """For each row, the largest ``value`` over the other rows of its ``group`` (groups of >= 2)."""
    order = np.lexsort((value, group))
    g, v = group[order], value[order].astype(np.float64)
    last = np.r_[np.flatnonzero(np.diff(g)), len(g) - 1]      # each group's largest, sorted last
    sizes = np.diff(np.r_[-1, last])
    top = np.repeat(v[last], sizes)
    second = np.repeat(v[last - 1], sizes)
    out = np.empty(len(g))
    out[order] = np.where(np.arange(len(g)) == np.repeat(last, sizes), second, top)
    return out


def weighted_quantiles(frame: pl.DataFrame, value: str, weight: str, by: list[str],
                       quantiles: dict[str, float]) -> pl.DataFrame:
    """Per ``by``: for each named quantile q, the least ``value`` at which the running share of
    ``weight`` (values in ascending order) reaches q. Where the weights sum to nothing every
    share is NaN, which polars orders above any number: the least value."""
    ranked = frame.sort([*by, value]).with_columns(
        _past=pl.col(weight).cum_sum().over(by) / pl.col(weight).sum().over(by))
    return ranked.group_by(by).agg(
        **{name: pl.col(value).filter(pl.col("_past") >= q).first() for name, q in quantiles.items()})


def binomial_tail(k: np.ndarray, m: np.ndarray, p: np.ndarray) -> np.ndarray:
    """P(X >= k) for X ~ Binomial(m, p), elementwise (scipy's survival function, finite for
    counts by the thousand, where C(m, j) overflows a float)."""
    from scipy.stats import binom   # (scipy.stats takes about a second to import: only when needed)

    # (signed: unsigned counts of 0 would wrap round at k - 1)
    return binom.sf(np.asarray(k, dtype=np.int64) - 1, np.asarray(m, dtype=np.int64), np.asarray(p, dtype=np.float64))
