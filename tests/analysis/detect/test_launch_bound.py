"""``idle.launch_bound`` on ops built by hand: whose spans its host paces, and what the ranks not
flagged say about how much every rank's ops scatter (``peers_spread``)."""

from __future__ import annotations

import random

import polars as pl

from mapp.analysis.detect.idle import NOISE, launch_bound

ITERATIONS, LAYERS = 3, 16


def _ops(r_adj_of) -> pl.DataFrame:
    """Backward ops of each rank ``r_adj_of`` is given for, ``LAYERS`` a step; ``r_adj_of(rank,
    iteration, layer)`` their log-ratio to their peers' (after the data fit)."""
    rows = []
    for rank in r_adj_of.ranks:
        for it in range(ITERATIONS):
            for layer in range(LAYERS):
                rows.append({"rank": rank, "iteration": it, "name": "layer.backward", "layer": layer,
                             "gk": hash(("layer.backward", it, layer)), "r_adj": r_adj_of(rank, it, layer)})
    return pl.DataFrame(rows).with_columns(pl.col("rank").cast(pl.Int32))


def _flagged(*ranks: int) -> pl.DataFrame:
    return pl.DataFrame([{"rank": r, "iteration": it, "flagged": True} for r in ranks for it in range(ITERATIONS)],
                        schema={"rank": pl.Int32, "iteration": pl.Int64, "flagged": pl.Boolean})


def _uneven(seed: int):
    rng = random.Random(seed)
    drawn = {(it, layer): rng.uniform(-0.6, 1.2) for it in range(ITERATIONS) for layer in range(LAYERS)}
    return lambda it, layer: drawn[it, layer]


def test_of_two_ranks_the_flagged_ones_uneven_ops_are_every_ranks_pace():
    # rank 1 flagged, its backward ops 0.55-3.3x its peer's, unevenly; rank 0, its one peer, is
    # its own baseline once the data fit leaves rank 1 out: every op of its at 0, saying nothing
    uneven = _uneven(1)

    def r_adj(rank, it, layer):
        return uneven(it, layer) if rank == 1 else 0.0
    r_adj.ranks = (0, 1)
    [row] = launch_bound(_ops(r_adj), _flagged(1), min_effect=0.05).to_dicts()
    assert row["rank"] == 1 and row["launch_bound"]
    assert row["peers_spread"] > NOISE
    assert row["peers_spread"] == row["ops_spread"]
    assert "every rank's backward ops scatter" in row["launch_why"]


def test_where_the_unflagged_ranks_have_peers_their_own_spread_stands():
    # four ranks, rank 3 flagged unevenly, ranks 0-2 steady against each other (within 1%)
    uneven, rng = _uneven(2), random.Random(3)
    steady = {(r, it, layer): rng.uniform(-0.01, 0.01) for r in range(3) for it in range(ITERATIONS)
              for layer in range(LAYERS)}

    def r_adj(rank, it, layer):
        return uneven(it, layer) if rank == 3 else steady[rank, it, layer]
    r_adj.ranks = (0, 1, 2, 3)
    [row] = launch_bound(_ops(r_adj), _flagged(3), min_effect=0.05).to_dicts()
    assert row["peers_spread"] < 0.02
    assert row["launch_why"] == "its backward ops slower unevenly"
