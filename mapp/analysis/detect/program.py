"""Peers without a layout: ranks that run the same program are compared with each other.

Most profiler traces carry no Megatron layout, and a plain DDP or FSDP job has none at all:
every member of the world group runs the same program on different data. So when neither the
traces nor ``--layout`` say who does the same work, it is read off the work itself:

- each rank's *program* is the set of its compute ops, by name and shape where the trace
  records shapes (a profiler's ``Input Dims``, a kernel's grid and block);
- ranks whose programs are nearly the same set (Jaccard similarity >= ``SAME_PROGRAM``; extra
  or slower work on one rank adds few new kinds of op) are peers, unless they exchange p2p
  messages: p2p partners are different pipeline stages, whatever their ops look like.

- and, where the traces record the members of their collectives' process groups, peers must
  share one of them (a world, DP or unlabelled group): ranks that never communicate together
  are different jobs or different parts of one. (A rank with no call of a known group is
  not held apart: gloo calls get their group only where their timing shows it.)
"""

from __future__ import annotations

import polars as pl

__all__ = ["SAME_PROGRAM", "program_groups"]

SAME_PROGRAM = 0.75
"""Jaccard similarity of two ranks' op sets above which they run the same program."""


def program_groups(ops: pl.DataFrame, p2p_pairs: set[tuple[int, int]], ranks: list[int],
                   groups: list[frozenset[int]] | None = None) -> tuple[pl.DataFrame, str]:
    """Group ``ranks`` by program. ``ops`` has ``rank``, ``name`` and ``shape`` (null when the
    format records none) of compute ops; ``groups`` the member sets of the process groups the
    collectives name (empty or None: unknown). Returns (``rank``, ``program``) and a description."""
    together = _together(groups or [])
    sets: dict[int, frozenset] = {r: frozenset() for r in ranks}
    if not ops.is_empty():
        keyed = ops.select("rank", key=pl.concat_str(pl.col("name"), pl.col("shape").fill_null(""), separator="|"))
        for rank, keys in keyed.unique().group_by("rank").agg("key").iter_rows():
            sets[rank] = frozenset(keys)
    found: list[list[int]] = []
    for rank in sorted(ranks):
        for members in found:
            if _jaccard(sets[rank], sets[members[0]]) >= SAME_PROGRAM and all(
                    _may_pair(rank, m, p2p_pairs, together) for m in members):
                members.append(rank)
                break
        else:
            found.append([rank])
    groups = found
    program = {r: i for i, members in enumerate(groups) for r in members}
    frame = pl.DataFrame({"rank": sorted(ranks), "program": [program[r] for r in sorted(ranks)]},
                         schema={"rank": pl.Int32, "program": pl.Int32})
    if len(groups) == 1:
        what = f"every rank runs the same program: all {len(ranks)} compared"
    else:
        sizes = sorted((len(g) for g in groups), reverse=True)
        what = f"{len(groups)} groups of ranks running the same program (sizes {', '.join(map(str, sizes))})"
    return frame, what


def _together(groups: list[frozenset[int]]) -> dict[int, set[int]] | None:
    """Each rank's fellow members over all known groups, or None when no group is known."""
    if not groups:
        return None
    out: dict[int, set[int]] = {}
    for g in groups:
        for r in g:
            out.setdefault(r, set()).update(g)
    return out


def _may_pair(a: int, b: int, p2p_pairs: set[tuple[int, int]], together: dict[int, set[int]] | None) -> bool:
    if (a, b) in p2p_pairs or (b, a) in p2p_pairs:
        return False
    # a rank none of whose calls is known to have run on a group is not known to be apart
    return together is None or a not in together or b not in together or b in together[a]


def _jaccard(a: frozenset, b: frozenset) -> float:
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)
