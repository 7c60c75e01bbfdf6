"""Reading only the communication events (and only the columns matching needs) from a bundle."""

from __future__ import annotations

import polars as pl

COLLECTIVE_COLUMNS = ["rank", "name", "lane", "ts_ns", "dur_ns", "iteration", "group", "group_ranks", "seq", "bytes"]
P2P_COLUMNS = ["rank", "name", "lane", "ts_ns", "dur_ns", "iteration", "peer", "seq", "bytes", "expect"]


def collective_events(scan: pl.LazyFrame) -> pl.LazyFrame:
    """Timed collective calls, one row per call on one rank."""
    return scan.filter((pl.col("cat") == "collective") & (pl.col("ph") == "X")).select(COLLECTIVE_COLUMNS)


def p2p_events(scan: pl.LazyFrame) -> pl.LazyFrame:
    """Timed point-to-point calls; ``expect`` is the name of the matching call on the peer, when
    the format records it (MegatronApp does, in ``args``) and the event has no ``seq``."""
    expect = (
        pl.when(pl.col("seq").is_null())
        .then(pl.col("args").str.json_path_match("$.expect"))
        .otherwise(pl.lit(None, pl.String))
        .alias("expect")
    )
    return (
        scan.filter((pl.col("cat") == "p2p") & (pl.col("ph") == "X"))
        .select(*P2P_COLUMNS[:-1], "args")
        .with_columns(expect)
        .select(P2P_COLUMNS)
    )


def first_event_ns(scan: pl.LazyFrame) -> pl.DataFrame:
    """Per rank, the timestamp of its first event (``rank``, ``t0_ns``): where offsets are stated."""
    return scan.group_by("rank").agg(t0_ns=pl.col("ts_ns").min()).sort("rank").collect()
