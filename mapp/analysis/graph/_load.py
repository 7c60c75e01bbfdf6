"""Reading only the communication events (and only the columns matching needs) from a bundle."""

from __future__ import annotations

import polars as pl

from mapp.analysis.ingest.schema import LAUNCH_NAMES

COLLECTIVE_COLUMNS = ["rank", "name", "lane", "ts_ns", "dur_ns", "iteration", "group", "group_ranks", "seq", "bytes",
                      "async"]
P2P_COLUMNS = ["rank", "name", "lane", "ts_ns", "dur_ns", "iteration", "peer", "seq", "bytes", "async", "expect"]
_BASE = P2P_COLUMNS[:-2]


def comm_calls(paths: list[str]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The collective and p2p calls of some of the events table's files: what matching reads,
    selected where the files are (a cluster worker) so that only these rows travel."""
    scan = pl.scan_parquet(paths, hive_partitioning=False)
    return collective_events(scan).collect(), p2p_events(scan)


def collective_events(scan: pl.LazyFrame) -> pl.LazyFrame:
    """Timed collective calls, one row per call on one rank. ``async``: the call only launches
    the operation (megatron-core's overlapped gradient reduction and parameter gather as the
    capture records them: ``LAUNCH_NAMES`` with ``"async": true`` in ``args``), so its end is not
    the operation's. (Another asynchronous collective's span lasts until its handle's wait.)"""
    return scan.filter((pl.col("cat") == "collective") & (pl.col("ph") == "X")).select(
        *COLLECTIVE_COLUMNS[:-1], (_is_async() & pl.col("name").is_in(LAUNCH_NAMES)).alias("async"))


def _is_async() -> pl.Expr:
    """``args`` says ``"async": true``; only the ``args`` that mention it are parsed."""
    mentions = pl.col("args").str.contains('"async"', literal=True).fill_null(False)
    return (
        pl.when(mentions).then(pl.col("args").str.json_path_match("$.async") == "true")
        .otherwise(pl.lit(False)).fill_null(False).alias("async")
    )


def p2p_events(scan: pl.LazyFrame) -> pl.DataFrame:
    """Timed point-to-point calls. ``async``: the call's span is only its post (``"async": true``
    in ``args``: megatron's overlapped p2p as the capture records it, MegaDPP's sends), so its end
    is not the message's delivery. ``expect`` is the name of the matching call on the peer, when
    the format records it (MegatronApp does, in ``args``) and the event has no ``seq``. Only the
    ``args`` that mention ``async`` are parsed for it, and all of them only when a call lacks a
    ``seq``."""
    p2p = scan.filter((pl.col("cat") == "p2p") & (pl.col("ph") == "X"))
    is_async = _is_async()
    calls = p2p.select(*_BASE, is_async).collect()
    if calls["seq"].null_count() == 0:
        return calls.with_columns(pl.lit(None, pl.String).alias("expect"))
    expect = (
        pl.when(pl.col("seq").is_null())
        .then(pl.col("args").str.json_path_match("$.expect"))
        .otherwise(pl.lit(None, pl.String))
        .alias("expect")
    )
    return p2p.select(*_BASE, is_async, expect).select(P2P_COLUMNS).collect()
