"""Small statistics of the detector (``detect._stats``), on values worked out by hand."""

from __future__ import annotations

import numpy as np
import polars as pl

from mapp.analysis.detect._stats import others_max, weighted_quantiles


def test_a_weighted_quantile_is_the_least_value_whose_running_weight_reaches_it():
    # rank 0: values 1, 2, 3 weighing 1, 1, 2 (shares 0.25, 0.5, 1.0); rank 1: 5 and 7 weighing
    # 3 and 1 (0.75, 1.0); rank 2 weighs nothing, and reads its least value
    frame = pl.DataFrame({"rank": [0, 0, 0, 1, 1, 2], "v": [3.0, 1.0, 2.0, 7.0, 5.0, 4.0],
                          "w": [2.0, 1.0, 1.0, 1.0, 3.0, 0.0]})
    got = weighted_quantiles(frame, "v", "w", ["rank"], {"q1": 0.25, "median": 0.5, "q3": 0.75}).sort("rank")
    assert got.rows() == [(0, 1.0, 2.0, 3.0), (1, 5.0, 5.0, 5.0), (2, 4.0, 4.0, 4.0)]


def test_others_max_is_the_largest_of_the_rest_of_the_group():
    group = np.array([1, 0, 1, 0, 1, 2, 2])
    value = np.array([5.0, 3.0, 9.0, 7.0, 9.0, 1.0, 4.0])
    # (a tie at the top: each of the two 9s has the other)
    assert others_max(group, value).tolist() == [9.0, 7.0, 9.0, 3.0, 9.0, 4.0, 1.0]
