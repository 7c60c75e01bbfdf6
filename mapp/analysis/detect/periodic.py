"""Faults that recur every few iterations: a rank slower at one iteration in K, as its peers in the others.

Jobs do some work only every few steps: a checkpoint, an evaluation, a log flush. A fault in
that work slows its rank in those steps alone (a rank whose storage is slow stalls in each
checkpoint's write while its peers wait in the collective that ends the save), and over a whole
trace it reads as noise: slower in 3 of 8 iterations, where a fault must last (``CONSISTENT``). A
DDP language model saving a ``torch.distributed.checkpoint`` every third step, one rank's writer
sleeping 300 ms first (4 gloo processes on 2 cores): 265-356 ms more idle in each of its three
checkpoint steps at z 80-107, as idle as its peers in the other five, "no suspect".

Noise on busy hosts comes and goes at random; such a fault keeps time. So where the whole trace
names no one (and no fault set in midway, ``onset``), a rank slower than its peers by the
threshold (``onset.score``, by the whole trace's typical calls) in each iteration of one period
-- every K-th traced iteration (K of 2 or more) from one of the first K to the trace's end,
``ONSET_LEAST`` of them or more, alike (the least at half the greatest or more) -- and in none of
the others even half as slow as in the least of those has them judged on their own
(``TraceBundle.window``), by every rule a whole trace is. A suspect of that verdict is taken only
where it is that rank, a slow host, slower in every one of them; rank 0 is not judged so, for it
coordinates such work (``COORDINATOR``). Work done every few steps differs between ranks by its
data too (one replica's evaluation shard 4x its peers', every third step of a fine-tune under
DDP: "slow compute 1" on those steps, an imbalance), while a stall in it (a slow disk, a
blocking write) is its host's.
"""

from __future__ import annotations

import math

import polars as pl

from mapp.analysis.detect.onset import ONSET_LEAST, score

__all__ = ["COORDINATOR", "periodic_windows", "periodic_note"]


COORDINATOR = 0
"""The rank that coordinates work done every few steps, whose stalls in it are its role's: the
checkpoint's planner and metadata writer (``torch.distributed.checkpoint``'s coordinator rank,
0 by default), the logger, the evaluator that gathers the others' results. A DDP language model
saving a DCP checkpoint every second or third step, no fault, 4 processes on 4 of the lent GPU
host's cores: rank 0 idle 30-45% of its work more than its peers in each checkpoint step, alike,
as its peers in the others, in three healthy runs of three ("slow host 0" on those steps). Not
judged by its period, so a slow disk on rank 0 itself goes unnamed by this route."""


def periodic_windows(per: pl.DataFrame, threshold: float) -> list[tuple[int, list[int]]]:
    """``(rank, iterations)`` for each rank of ``per`` (stage 1's per (rank, iteration) evidence)
    slower than its peers by the threshold in the iterations of one period and no others, and
    not slower in the rest (the module's docstring); ordered by rank."""
    if per.is_empty() or "effect" not in per.columns:
        return []
    traced = sorted(int(i) for i in per["iteration"].drop_nulls().unique().to_list())
    if len(traced) < 2 * ONSET_LEAST - 1:   # the shortest period (K = 2) spans this many
        return []
    # (by stage 1's effect, each kind at the whole trace's typical call, not the iteration's own:
    # with a few calls a kind an iteration that one scatters by 0.4-1.2 on every rank of 4 on 2
    # busy cores, where the slow disk's rank read 0.9-1.2 in its checkpoint steps and under 0.1
    # in the others by the whole trace's)
    scored = per.select("rank", "iteration", s=score(per.columns))
    bar = math.log1p(threshold)
    found = []
    for (rank,), g in sorted(scored.group_by("rank"), key=lambda kv: kv[0][0]):
        if rank == COORDINATOR:
            continue
        ranked = sorted(zip(g["s"].fill_null(0.0), (int(i) for i in g["iteration"])), reverse=True)
        # slower by the threshold in each of the period's iterations, and in none of the others
        # even half as much as in the least of them (noise on busy hosts lifts a rank's score
        # past the threshold now and then, far less than a stall of the period's): the period's
        # iterations are the rank's slowest, so only its splits by score with that gap are tried
        for m in range(ONSET_LEAST, len(ranked)):
            least, next_ = ranked[m - 1][0], ranked[m][0]
            if least < bar:
                break
            window = sorted(i for _, i in ranked[:m])
            # and alike, the least of its beats at half the greatest or more: the same work stalls
            # each time (a DCP save's coordinator, no fault, 4 processes on 2 cores: 0.54, 0.10 and
            # 0.20 in its three checkpoint steps; a slow disk's rank: 1.20, 0.92, 1.15)
            if next_ < least / 2 and least >= ranked[0][0] / 2 and _is_period(window, traced):
                found.append((int(rank), window))
                break
    return found


def _is_period(window: list[int], traced: list[int]) -> bool:
    """Whether ``window`` is every K-th iteration of ``traced`` (K >= 2) from one of the first K
    to the end."""
    k = window[1] - window[0]
    return k >= 2 and window[0] in traced[:k] and window == [
        i for i in traced if i >= window[0] and (i - window[0]) % k == 0]


def periodic_note(rank: int, iterations: list[int], traced: int) -> str:
    """The verdict's note on a suspect slower in the ``iterations`` of one period (``periodic_windows``)."""
    k = iterations[1] - iterations[0]
    listed = ", ".join(str(i) for i in iterations)
    return (f"rank {rank} slower every {k} iterations ({listed}) and as fast as its peers in the others: judged on "
            f"those {len(iterations)} of the {traced} traced alone, as a fault that recurs (work done every few steps, "
            "a checkpoint or an evaluation; the whole trace named no one: slower in too few of its iterations); "
            "the verdict's figures are of those iterations")
