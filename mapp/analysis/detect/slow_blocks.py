"""Several peers slowed alike: a slow node's GPUs, a whole TP group, half of a DP group.

Stage 1 measures each rank against the median of its peers and its noise by how far the
peers scatter. Where a block of up to half the peers is slower alike, the median sits between
the slow and the healthy, and their scatter is the slowdown itself: each slow rank reads half
its slowdown at a z under 1 (simulated TP2 x DP2 with ranks 0 and 1 at 1.5x, megatron's TP group
inside one node: "1.23x its peers, z 0.7", no suspect). Such a block shows as a split of the
peers that holds unit after unit: every member of the block slower than every other peer in
nearly every microbatch (or iteration, where microbatches are not numbered), by the threshold
over the rest's median: a slow device is slower on every one. Only where compute does not vary
with the data, though: where it does, a replica's data moves its ranks together too (a TP group
shares its microbatches), and which of the two a block is cannot be told (``slow_blocks``).

``slow_blocks`` finds such blocks; ``peers._fit`` then leaves them out of the baseline, so the
healthy rest sets both the median and the noise (``peers._rank_iterations``' ``baseline_spread``).
Not where CPU processes share cores: there a pair of processes on the busier core is slower
together for the whole run (``shared_cpus`` says so and has its own rules).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import polars as pl

from mapp.analysis.detect.thresholds import ALIKE

__all__ = ["BLOCK_UNITS", "BLOCK_HOLDS", "Blocks", "block_note", "slow_blocks"]

BLOCK_UNITS = 8
"""Fewest units (microbatches, or iterations where microbatches are not numbered) a split must
hold over: a given block of two ranks among four is slower than the rest in one unit by chance
one time in six, in seven of eight or more about once in 41,000; some one of the six such
blocks among four ranks, about once in 7,000."""

BLOCK_HOLDS = 0.85
"""Share of the units in which every member of a block must be slower than every other peer:
seven of eight, one unit's hiccup forgiven."""


class Blocks(NamedTuple):
    """``slow_blocks``' answer: ranks in ascending order."""
    block: list[int]
    """The ranks of slow blocks of two or more peers (at most half their group)."""
    leading: list[int]
    """Every rank slower than each of its other peers in nearly every unit, alone or in a block:
    what a slow device does, and data redrawn each microbatch does not."""


def slow_blocks(ops: pl.DataFrame, group: list[str], min_effect: float) -> Blocks:
    """The slow blocks among the ranks of ``ops`` (``rank``, ``iteration``, ``microbatch``,
    ``r_adj`` against all peers, and the ``group`` columns), within each peer group: ranks, at
    most half the group, each slower than every other peer in at least ``BLOCK_HOLDS`` of the
    units they share (``BLOCK_UNITS`` or more), and by ``min_effect`` or more over the others'
    median at their median unit. A block is two ranks or more; a rank that leads so alone is
    in ``leading`` only.

    Only where compute did not vary with the data (``peers._fit`` asks): where it does, a
    replica's data and a block of its ranks slowed alike are one to the fit (``replicas.polish``
    takes what a replica's ranks share per microbatch for its data), and a block can be either
    (simulated TP4 x PP2 x DP2 on lengths of sigma 0.3, stage 0 of replica 0 at 1.3x: its lead
    handed to replica 0's other stage made replica 1's last stage a block too; judged before the
    fit, TP2 x DP2 with no fault: a replica drew longer sequences in 7 of 8 microbatches).
    """
    if ops.is_empty():
        return Blocks([], [])
    numbered = ops["microbatch"].max() is not None and ops["microbatch"].max() >= 0
    unit = ["iteration", "microbatch"] if numbered else ["iteration"]
    keys = [c for c in group if c != "rank" and c in ops.columns]
    per = ops.group_by(["rank", *keys, *unit]).agg(e=pl.col("r_adj").median()).sort([*keys, *unit, "rank"])
    cube = _cube(per, keys, unit)
    if cube is not None:    # every group the same ranks-by-units shape: all at once
        e, ranks = cube
        return Blocks(*_blocks_of(e, ranks, min_effect))
    block: list[int] = []
    lead: list[int] = []
    for _, members in (per.group_by(keys) if keys else [((), per)]):
        wide = members.pivot(on="rank", index=unit, values="e").drop_nulls().drop(unit)
        b, l = _blocks_of(wide.to_numpy()[None], np.array([[int(c) for c in wide.columns]]), min_effect)
        block += b
        lead += l
    return Blocks(sorted(block), sorted(lead))


def _cube(per: pl.DataFrame, keys: list[str], unit: list[str]) -> tuple[np.ndarray, np.ndarray] | None:
    """``per`` (sorted by group, unit, rank) as groups x units x ranks, with each group's ranks,
    where every group has the same number of ranks and every rank every unit; else None."""
    if keys:
        sizes = per.group_by(keys).agg(n=pl.col("rank").n_unique(), u=pl.struct(unit).n_unique(), rows=pl.len())
    else:
        sizes = per.select(n=pl.col("rank").n_unique(), u=pl.struct(unit).n_unique(), rows=pl.len())
    n, u = sizes["n"].unique(), sizes["u"].unique()
    if len(n) != 1 or len(u) != 1 or not (sizes["rows"] == n[0] * u[0]).all():
        return None
    g, n, u = sizes.height, int(n[0]), int(u[0])
    e = per["e"].to_numpy().reshape(g, u, n)
    ranks = per["rank"].to_numpy().reshape(g, u, n)[:, 0, :]
    return e, ranks


def _blocks_of(e: np.ndarray, ranks: np.ndarray, min_effect: float) -> tuple[list[int], list[int]]:
    """``Blocks`` of groups x units x ranks effects ``e`` (``ranks``: groups x ranks)."""
    g, u, n = e.shape
    if n < 2 or u < BLOCK_UNITS:
        return [], []
    order = np.argsort(-np.median(e, axis=1), axis=1, kind="stable")          # slowest first
    e = np.take_along_axis(e, order[:, None, :], axis=2)
    ranks = np.take_along_axis(ranks, order, axis=1)
    # for a block of the k slowest, in every unit: its least lead and the rest's greatest
    low = np.minimum.accumulate(e, axis=2)                                    # [..., k-1]: min of the first k
    high = np.maximum.accumulate(e[:, :, ::-1], axis=2)[:, :, ::-1]           # [..., k]: max of k..n-1
    best = {1: np.full(g, -np.inf), 2: np.full(g, -np.inf)}
    pick = {1: np.zeros(g, dtype=int), 2: np.zeros(g, dtype=int)}
    for k in range(1, n // 2 + 1):
        holds = np.mean(low[:, :, k - 1] > high[:, :, k], axis=1)
        gap = np.median(low[:, :, k - 1] - np.median(e[:, :, k:], axis=2), axis=1)
        ok = (holds >= BLOCK_HOLDS) & (gap >= math.log1p(min_effect))
        for least in (1, 2):
            better = ok & (k >= least) & (gap > best[least])
            best[least] = np.where(better, gap, best[least])
            pick[least] = np.where(better, k, pick[least])
    found = {least: sorted(int(r) for i in range(g) for r in ranks[i, :pick[least][i]]) for least in (1, 2)}
    return found[2], found[1]


def block_note(leading: list[int], suspects: list) -> str | None:
    """The verdict's note where two or more compute suspects lead their peers in nearly every
    microbatch (``PeerEvidence.leading``) by slowdowns within ``ALIKE`` of each other: what
    slowed them may be one thing (a node). Not for two faults that slow their ranks differently."""
    alike = [s for s in suspects if s.kind == "slow_compute" and s.rank in set(leading)]
    slowdowns = [s.slowdown for s in alike]
    if len(alike) < 2 or max(slowdowns) > ALIKE * min(slowdowns):
        return None
    ranks = sorted(s.rank for s in alike)
    listed = ", ".join(map(str, ranks[:-1])) + f" and {ranks[-1]}"
    return (f"ranks {listed} were each slower than every other peer in nearly every microbatch, alike: a "
            "block of peers slowed together, as one slow node's GPUs (a TP group) are; each is named "
            "against the healthy rest")
