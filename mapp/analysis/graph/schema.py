"""The matching tables' columns, stated once: name, type and meaning.

``Matching`` holds three tables (``collectives``, ``members``, ``p2p``); this module is the one
place that says what their columns are. What is derived from it:

- the empty tables (``Matching.empty()``, and the check of a cached matching against them);
- ``mapp sql``'s ``collectives``, ``collective_members`` and ``p2p`` tables take the meaning of
  every column they share with these (``mapp.sql.schema.TABLES``), and ``mapp/sql/README.md``
  is generated from those;
- tests check that matching produces exactly these columns with these types, and that the SQL
  tables carry these types.

Columns come in three stages: ``raw`` (matching the calls), ``timing`` (per instance, from its
members' times: on each rank's raw clock, or on the reference clock once a clock is applied)
and ``aligned`` (added by ``Matching.with_clock``). All times are integer nanoseconds.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

__all__ = ["Column", "MatchingTable", "COLLECTIVES", "MEMBERS", "P2P", "MATCHING_TABLES"]


@dataclass(frozen=True, slots=True)
class Column:
    """One column: its name, its polars type and what it means."""

    name: str
    dtype: pl.DataType
    meaning: str


@dataclass(frozen=True, slots=True)
class MatchingTable:
    """One table of ``Matching``: what a row is and its columns, stage by stage."""

    name: str
    row: str
    raw: tuple[Column, ...]
    timing: tuple[Column, ...] = ()
    aligned: tuple[Column, ...] = ()

    @property
    def columns(self) -> tuple[Column, ...]:
        """Every column, in order: raw, timing, aligned."""
        return self.raw + self.timing + self.aligned

    def column(self, name: str) -> Column:
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(f"{self.name} has no column {name!r}")

    def schema(self, *, timing: bool = False, aligned: bool = False) -> dict[str, pl.DataType]:
        """Column name -> type of the table at a stage (raw only, by default)."""
        cols = self.raw + (self.timing if timing else ()) + (self.aligned if aligned else ())
        return {c.name: c.dtype for c in cols}

    def empty(self) -> pl.DataFrame:
        """The raw table with no rows."""
        return pl.DataFrame(schema=self.schema())


def _cols(*rows: tuple[str, pl.DataType, str]) -> tuple[Column, ...]:
    return tuple(Column(*row) for row in rows)


_I32, _I64, _STR, _BOOL = pl.Int32(), pl.Int64(), pl.String(), pl.Boolean()

COLLECTIVES = MatchingTable(
    "collectives", "one collective operation: the matched calls of every member",
    raw=_cols(
        ("instance_id", _I64, "id of the operation (0.. in group, seq order)"),
        ("op", _STR, "all_reduce, all_gather, ..."),
        ("group", _STR, "group label (tp, dp, ...), null when the trace names none"),
        ("group_ranks", pl.List(pl.Int32()), "members' global ranks, sorted"),
        ("seq", _I64, "the calls' seq (or call ordinal per group and op when by_order)"),
        ("by_order", _BOOL, "matched by call order (the format has no seq)"),
        ("iteration", _I32, "training iteration (the smallest of the members')"),
        ("bytes", _I64, "payload bytes (the largest of the members')"),
        ("n_members", _I32, "ranks that logged it"),
        ("n_expected", _I32, "group size"),
        ("complete", _BOOL, "every member logged it once, with one op and one size"),
        ("launch_only", _BOOL, "a member's call only launched it (the capture's grad_reduce / param_gather with "
                               "args async: true, overlapped data-parallel communication): its members do not "
                               "leave it together, and the wait for it is logged apart (grad_sync_wait, "
                               "param_sync_wait)"),
    ),
    timing=_cols(
        ("arrival_spread_ns", _I64, "last arrival - first arrival (member starts)"),
        ("last_arriver", _I32, "rank that started last (the one the others waited for)"),
        ("last_arrival_ns", _I64, "latest member start"),
        ("end_spread_ns", _I64, "last end - first end"),
    ),
)

MEMBERS = MatchingTable(
    "members", "one rank's call in a collective operation",
    raw=_cols(
        ("instance_id", _I64, "the operation (collectives.instance_id)"),
        ("rank", _I32, "global rank"),
        ("op", _STR, "op name as this rank logged it"),
        ("group", _STR, "the operation's group label (collectives.group)"),
        ("lane", _STR, "lane of the call"),
        ("bytes", _I64, "payload bytes it logged"),
        ("start_ns", _I64, "call start, own clock"),
        ("end_ns", _I64, "call end, own clock"),
    ),
    aligned=_cols(
        ("start_aligned_ns", _I64, "call start, reference clock"),
        ("end_aligned_ns", _I64, "call end, reference clock"),
    ),
)

P2P = MatchingTable(
    "p2p", "one point-to-point message: a send matched with its receive",
    raw=_cols(
        ("pair_id", _I64, "id of the message"),
        ("src", _I32, "sending rank"),
        ("dst", _I32, "receiving rank"),
        ("bytes", _I64, "payload bytes (the sender's)"),
        ("seq", _I64, "per-direction seq (or ordinal when by_order)"),
        ("by_order", _BOOL, "matched by call order (no seq)"),
        ("iteration", _I32, "training iteration"),
        ("send_name", _STR, "name of the send call"),
        ("recv_name", _STR, "name of the receive call"),
        ("send_lane", _STR, "lane of the send"),
        ("recv_lane", _STR, "lane of the receive"),
        ("send_start_ns", _I64, "send start, src's clock"),
        ("send_end_ns", _I64, "send end, src's clock"),
        ("recv_start_ns", _I64, "receive start, dst's clock"),
        ("recv_end_ns", _I64, "receive end, dst's clock"),
        ("bytes_match", _BOOL, "both sides logged the same size"),
        ("send_async", _BOOL, "the send's span is only its post (args async: true): its end is not the "
                              "delivery, so the two ends are not simultaneous and its duration is no transfer time"),
        ("recv_async", _BOOL, "the receive's span is only its post (args async: true): its end is not when "
                              "the data was in hand"),
    ),
    aligned=_cols(
        ("send_start_aligned_ns", _I64, "send start, reference clock"),
        ("send_end_aligned_ns", _I64, "send end, reference clock"),
        ("recv_start_aligned_ns", _I64, "receive start, reference clock"),
        ("recv_end_aligned_ns", _I64, "receive end, reference clock"),
    ),
)

MATCHING_TABLES: dict[str, MatchingTable] = {t.name: t for t in (COLLECTIVES, MEMBERS, P2P)}
"""``Matching``'s attribute name -> its table."""


def describe(table: MatchingTable) -> str:
    """The table as text, one column a line (for docs and ``help``)."""
    lines = [f"{table.name}: {table.row}"]
    for stage, cols in (("", table.raw), (" (timing)", table.timing), (" (once aligned)", table.aligned)):
        lines += [f"  {c.name} ({c.dtype}){stage}: {c.meaning}" for c in cols]
    return "\n".join(lines)
