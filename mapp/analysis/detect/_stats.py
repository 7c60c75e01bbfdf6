"""Robust statistics shared by the stages: median/MAD scales and the multiple-testing cut-off."""

from __future__ import annotations

from statistics import NormalDist

import polars as pl

__all__ = ["MAD_TO_SIGMA", "MEDIAN_SE", "z_critical", "robust_scale"]

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


def robust_scale(column: str | pl.Expr) -> pl.Expr:
    """MAD-based standard deviation of a column (expression)."""
    x = pl.col(column) if isinstance(column, str) else column
    return MAD_TO_SIGMA * (x - x.median()).abs().median()
