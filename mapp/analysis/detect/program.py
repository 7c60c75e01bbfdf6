"""Peers without a layout: ranks that run the same program are compared with each other.

Most profiler traces carry no Megatron layout, and a plain DDP or FSDP job has none at all:
every member of the world group runs the same program on different data. So when neither the
traces nor ``--layout`` say who does the same work, it is read off the work itself:

- each rank's *program* is the set of its compute ops, by name and shape where the trace
  records shapes (a profiler's ``Input Dims``, a kernel's grid and block and the op that
  launched it);
- ranks whose programs are nearly the same set (Jaccard similarity >= ``SAME_PROGRAM``; extra
  or slower work on one rank adds few new kinds of op) are peers, unless they exchange p2p
  messages: p2p partners are different pipeline stages, whatever their ops look like;
- or whose ops' names alone are nearly the same set: a job whose batches differ in length from
  rank to rank (dynamic padding) launches its kernels with other grids, and cuBLAS picks other
  GEMM kernels, on every rank. A DDP transformer on 2 H200s, lengths drawn lognormal per rank:
  0.15-0.21 by name and shape, 0.89-0.92 by name (2 groups of 1 rank: nothing compared);
- or whose kernels' launching ops are nearly the same set (a kernel by the CPU op that launched
  it, where the trace ties them): under autocast cuBLASLt picks a GEMM kernel of its own tile
  shape for nearly every problem size, and with dynamic padding the same DDP transformer's
  ranks shared 0.69 of their kernels' names, 28 of 89 of them ``nvjet`` GEMMs and split-K
  reductions of one rank only, every one launched by ``aten::mm`` or ``aten::addmm`` on both;

- and, where the traces record the members of their collectives' process groups, peers must
  be joined by them, directly or through other ranks (a world, DP, TP or unlabelled group):
  ranks that never communicate with each other, even by way of others, are different jobs. (A
  rank with no call of a known group is not held apart: gloo calls get their group only where
  their timing shows it, and some groups of a job may go unseen. Plain TP x DP over gloo, 4
  processes on 2 cores: the calls showed groups {0,1}, {0,2} and {1,3} but not the TP group
  {2,3}; asked to share a group with every peer, ranks 2 and 3 each stood alone, and rank 3,
  1.45x on its matmuls, had no peer to be slower than.)
"""

from __future__ import annotations

import polars as pl

from mapp.analysis.detect.added_work import launched, op_of

__all__ = ["SAME_PROGRAM", "program_groups"]

SAME_PROGRAM = 0.75
"""Jaccard similarity of two ranks' op sets above which they run the same program."""


def program_groups(ops: pl.DataFrame, p2p_pairs: set[tuple[int, int]], ranks: list[int],
                   groups: list[frozenset[int]] | None = None) -> tuple[pl.DataFrame, str]:
    """Group ``ranks`` by program. ``ops`` has ``rank``, ``name`` and ``shape`` (null when the
    format records none) of compute ops; ``groups`` the member sets of the process groups the
    collectives name (empty or None: unknown). Returns (``rank``, ``program``) and a description."""
    together = _together(groups or [])
    sets = _op_sets(ops.select("rank", key=pl.concat_str(pl.col("name"), pl.col("shape").fill_null(""), separator="|")), ranks)
    names = _op_sets(ops.select("rank", key=pl.col("name")), ranks)
    launchers = _op_sets(_launching_ops(ops), ranks)
    found: list[list[int]] = []
    for rank in sorted(ranks):
        for members in found:
            first = members[0]
            alike = max(_jaccard(sets[rank], sets[first]), _jaccard(names[rank], names[first]),
                        _jaccard(launchers[rank], launchers[first]))
            if alike >= SAME_PROGRAM and all(
                    _may_pair(rank, m, p2p_pairs, together) for m in members):
                members.append(rank)
                break
        else:
            found.append([rank])
    groups = found
    program = {r: i for i, members in enumerate(groups) for r in members}
    frame = pl.DataFrame({"rank": sorted(ranks), "program": [program[r] for r in sorted(ranks)]},
                         schema={"rank": pl.Int32, "program": pl.Int32})
    if len(ranks) == 1:
        what = "one traced rank: no peer to compare it with"
    elif len(groups) == 1:
        what = f"every rank runs the same program: all {len(ranks)} compared"
    else:
        sizes = sorted((len(g) for g in groups), reverse=True)
        what = f"{len(groups)} groups of ranks running the same program (sizes {', '.join(map(str, sizes))})"
    return frame, what


def _launching_ops(ops: pl.DataFrame) -> pl.DataFrame:
    """``rank``, ``key``: the ops that launched a rank's kernels, where the trace ties any of its
    kernels to one (kernels launched before the profiler's window have no launch of record and
    are left out), else its ops' names."""
    keyed = ops.select("rank", "name", pl.col("shape").cast(pl.String)).with_columns(tied=launched())
    return keyed.filter(pl.col("tied") | ~pl.col("tied").any().over("rank")).select("rank", key=op_of())


def _op_sets(keyed: pl.DataFrame, ranks: list[int]) -> dict[int, frozenset]:
    """Each rank's set of ``key`` values (empty for a rank without ops)."""
    sets: dict[int, frozenset] = {r: frozenset() for r in ranks}
    if not keyed.is_empty():
        for rank, keys in keyed.unique().group_by("rank").agg("key").iter_rows():
            sets[rank] = frozenset(keys)
    return sets


def _together(groups: list[frozenset[int]]) -> dict[int, int] | None:
    """Each rank's part of the job: the ranks the known groups join, directly or through
    others, share one (the smallest rank among them). None when no group is known."""
    if not groups:
        return None
    part: dict[int, int] = {}

    def find(r: int) -> int:
        while part.setdefault(r, r) != r:
            part[r] = part[part[r]]
            r = part[r]
        return r

    for g in groups:
        members = sorted(g)
        for r in members[1:]:
            a, b = find(members[0]), find(r)
            part[max(a, b)] = min(a, b)
    return {r: find(r) for r in part}


def _may_pair(a: int, b: int, p2p_pairs: set[tuple[int, int]], together: dict[int, int] | None) -> bool:
    if (a, b) in p2p_pairs or (b, a) in p2p_pairs:
        return False
    # a rank none of whose calls is known to have run on a group is not known to be apart
    return together is None or a not in together or b not in together or together[a] == together[b]


def _jaccard(a: frozenset, b: frozenset) -> float:
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)
