"""The result of matching: collective instances, their members, p2p pairs and findings."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

import polars as pl

from mapp.analysis.graph import _cache, _load
from mapp.analysis.graph.collectives import instance_timing, match_collectives
from mapp.analysis.graph.diagnose import Finding, findings_frame, sort_findings
from mapp.analysis.graph.p2p import match_p2p
from mapp.analysis.graph.schema import COLLECTIVES, MEMBERS, P2P

__all__ = ["Matching", "match_bundle", "match_calls", "match_events"]


class ClockLike(Protocol):
    def to_reference(self, ts: pl.Expr, rank: pl.Expr) -> pl.Expr: ...


@dataclass(slots=True)
class Matching:
    """Communication matched across ranks. All times are integer nanoseconds.

    ``collectives`` (one row per collective operation), ``members`` (one row per rank's call in
    one) and ``p2p`` (one row per message, a send matched with its receive): their columns,
    types and meanings are stated once, in ``mapp.analysis.graph.schema`` (``COLLECTIVES``,
    ``MEMBERS``, ``P2P``). ``collectives`` carries the timing columns, on each rank's raw clock
    or, once a clock is applied (``aligned``), on the reference clock; ``members`` and ``p2p``
    then also carry their ``*_aligned_ns`` columns.
    ``findings``: :class:`Finding` rows, errors first.
    """

    collectives: pl.DataFrame
    members: pl.DataFrame
    p2p: pl.DataFrame
    findings: list[Finding] = field(default_factory=list)
    aligned: bool = False

    @classmethod
    def empty(cls) -> "Matching":
        """No communication: the three tables with their raw columns and types and no rows
        (``schema``; matching adds the timing columns to ``collectives``)."""
        return cls(COLLECTIVES.empty(), MEMBERS.empty(), P2P.empty())

    def findings_frame(self) -> pl.DataFrame:
        """The findings as a table."""
        return findings_frame(self.findings)

    def with_clock(self, clock: ClockLike) -> "Matching":
        """A copy with aligned times added and instance timing recomputed on the reference clock."""
        members = self.members.with_columns(
            start_aligned_ns=clock.to_reference(pl.col("start_ns"), pl.col("rank")),
            end_aligned_ns=clock.to_reference(pl.col("end_ns"), pl.col("rank")),
        )
        p2p = self.p2p.with_columns(
            **{f"{side}_{edge}_aligned_ns": clock.to_reference(pl.col(f"{side}_{edge}_ns"), pl.col(rank))
               for side, rank in (("send", "src"), ("recv", "dst")) for edge in ("start", "end")}
        )
        collectives = _with_timing(self.collectives, members, "start_aligned_ns", "end_aligned_ns")
        return replace(self, collectives=collectives, members=members, p2p=p2p, aligned=True)


_TIMING = [c.name for c in COLLECTIVES.timing]


def _with_timing(collectives: pl.DataFrame, members: pl.DataFrame, start: str, end: str) -> pl.DataFrame:
    timing = instance_timing(members, start, end)
    base = collectives.drop([c for c in _TIMING if c in collectives.columns])
    return base.join(timing, on="instance_id", how="left")


def match_events(
    collective_calls: pl.DataFrame, p2p_calls: pl.DataFrame, traced_ranks: Sequence[int],
    world_size: int | None = None,
) -> Matching:
    """Match already-loaded calls (columns of ``_load.COLLECTIVE_COLUMNS`` / ``P2P_COLUMNS``)."""
    traced = set(int(r) for r in traced_ranks)
    instances, members, found_c = match_collectives(collective_calls, traced, world_size)
    pairs, found_p = match_p2p(p2p_calls, traced)
    instances = _with_timing(instances, members, "start_ns", "end_ns")
    return Matching(instances, members, pairs, sort_findings(found_c + found_p))


def match_bundle(bundle, *, use_cache: bool = True) -> Matching:
    """Match every collective and p2p call of a :class:`~mapp.analysis.ingest.TraceBundle`.

    Reads only the communication events (and only the columns needed) from the events table.
    The result is kept in ``DIR/.mapp/matching/`` and reused while the events table is unchanged.
    """
    if use_cache and (cached := _from_cache(bundle)) is not None:
        return cached
    scan = bundle.scan()
    calls_c = _load.collective_events(scan).collect()
    calls_p = _load.p2p_events(scan)
    return match_calls(bundle, calls_c, calls_p, use_cache=use_cache)


def unmatched(bundle) -> Matching:
    """No call matched (``mapp sql --no-match``): the tables that matching gives, with their
    columns and no rows, at no cost however large the bundle."""
    none = bundle.scan().head(0)
    return match_events(_load.collective_events(none).collect(), _load.p2p_events(none), [])


def match_calls(bundle, collective_calls: pl.DataFrame, p2p_calls: pl.DataFrame, *, use_cache: bool = True) -> Matching:
    """Match a bundle's calls read elsewhere (``_load.comm_calls`` on a cluster's workers, in
    the order of ``bundle.parts``) and keep the result as :func:`match_bundle` does."""
    matching = match_events(collective_calls, p2p_calls, bundle.ranks["rank"].to_list(), bundle.world_size)
    if use_cache:
        _cache.store(bundle, matching)
    return matching


def _from_cache(bundle) -> Matching | None:
    """The cached matching, if its files are whole and each table is of the right kind (a
    cache whose files were swapped or damaged is matched again)."""
    found = _cache.load(bundle)
    if found is None:
        return None
    tables, findings = found
    empty = Matching.empty()
    for name, table in tables.items():
        if any(table.schema.get(column) != dtype for column, dtype in getattr(empty, name).schema.items()):
            return None
    return Matching(tables["collectives"], tables["members"], tables["p2p"], findings=findings)
