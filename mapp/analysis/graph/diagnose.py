"""Mismatch findings: what the matching could not pair, as rows with a one-line text.

In the spirit of PyTorch's flight-recorder analyzer, but from traces: a collective some members
never reached (the missing ranks are the likely hang culprits), op or size mismatches inside one
instance, a rank logging one call twice, unmatched sends and receives, and matching done by call
order because the format has no ``seq``. Findings are reported, never raised.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import polars as pl

__all__ = ["Finding", "findings_frame", "group_label", "rank_list"]

SEVERITIES = ("error", "warning", "info")


@dataclass(frozen=True, slots=True, kw_only=True)
class Finding:
    """One diagnosis, possibly covering several instances or messages of the same kind.

    ``kind`` is one of: ``missing_member`` (a traced rank never reached a collective its group
    entered), ``untraced_member`` (group members with no trace file), ``op_mismatch``,
    ``size_mismatch``, ``duplicate_call`` (a rank logged the same ``seq`` twice),
    ``unmatched_send``, ``unmatched_recv``, ``p2p_size_mismatch``, ``no_peer`` (a p2p event
    without a peer or direction), ``order_matched`` (no ``seq``: matched by call order),
    ``order_unsafe`` (matched by order although ranks made different numbers of calls) and
    ``unknown_group`` (calls naming neither a group nor its members: matched across every rank
    that logged them, so not used as clock-alignment anchors).
    """

    kind: str
    severity: str
    message: str
    ranks: tuple[int, ...] = ()
    """The ranks the finding points at (missing ranks, the odd ones out, the sender...)."""
    group: str | None = None
    group_ranks: tuple[int, ...] | None = None
    op: str | None = None
    seq: int | None = None
    """First ``seq`` (or call ordinal) concerned."""
    iteration: int | None = None
    count: int = 1
    """How many instances or messages this finding stands for."""

    def line(self) -> str:
        """The finding as one line of text, e.g. ``error: rank 3 never reached ...``."""
        return f"{self.severity}: {self.message}"


def rank_list(ranks: Iterable[int], limit: int = 8) -> str:
    """``0,1,2`` or, for long lists, ``0,8,16,...,248 (32 ranks)``."""
    items = list(ranks)
    if len(items) <= limit:
        return ",".join(map(str, items))
    head = ",".join(map(str, items[: limit - 1]))
    return f"{head},...,{items[-1]} ({len(items)} ranks)"


def group_label(group: str | None, group_ranks: Sequence[int] | None) -> str:
    """A group as people read it: ``tp[0,1,2,3]``, ``dp[0,8,...,248 (32 ranks)]``, ``[4,5]``."""
    members = "?" if group_ranks is None else rank_list(group_ranks)
    return f"{group or ''}[{members}]"


def findings_frame(findings: Sequence[Finding]) -> pl.DataFrame:
    """Findings as a table (one row each), for SQL and JSON output."""
    return pl.DataFrame(
        {
            "kind": [f.kind for f in findings],
            "severity": [f.severity for f in findings],
            "message": [f.message for f in findings],
            "ranks": [list(f.ranks) for f in findings],
            "group": [f.group for f in findings],
            "group_ranks": [None if f.group_ranks is None else list(f.group_ranks) for f in findings],
            "op": [f.op for f in findings],
            "seq": [f.seq for f in findings],
            "iteration": [f.iteration for f in findings],
            "count": [f.count for f in findings],
        },
        schema={"kind": pl.String, "severity": pl.String, "message": pl.String, "ranks": pl.List(pl.Int32),
                "group": pl.String, "group_ranks": pl.List(pl.Int32), "op": pl.String, "seq": pl.Int64,
                "iteration": pl.Int32, "count": pl.Int64},
    )


def sort_findings(findings: list[Finding]) -> list[Finding]:
    """Errors first, then warnings, then information; stable within each."""
    return sorted(findings, key=lambda f: SEVERITIES.index(f.severity))
