"""Chrome-trace extras for the merged timeline: flow arrows and last-arriver marks.

Perfetto (and chrome://tracing) draw a flow from ``ph:"s"`` through ``ph:"t"`` steps to
``ph:"f"`` events sharing one ``id``; with ``bp:"e"`` each binds to the slice enclosing its
timestamp on the same pid/tid. So every flow event is placed at the middle of its call's slice.
- p2p: one arrow per message, send -> receive (``cat:"p2p"``, id ``2*pair_id+1``).
- collectives: one arrow per instance through its members in order of arrival, ending at the
  last arriver (``cat:"collective"``, id ``2*instance_id+2``), so the arrow points at whoever
  the others waited for; plus an instant event ``last arriver`` on that rank's lane, whose args
  say how long the first arriver waited.
Lines are encoded by polars string expressions, never one ``json.dumps`` per event.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import polars as pl

from mapp.analysis.chrome.writer import lane_ids, us_text

__all__ = ["chrome_extras"]

_CHUNK = 1 << 20


def _aligned(clock, ts: pl.Expr, rank: str) -> pl.Expr:
    """Raw ``ts`` of ``rank`` on the merged trace's clock (the same mapping as the slices)."""
    return ts if clock is None else clock.to_reference(ts, pl.col(rank))


def _flow_lines(frame: pl.DataFrame) -> pl.Series:
    """``frame``: cat, fid, ph, pid, tid, ts_ns -> encoded flow lines."""
    line = pl.concat_str([
        pl.lit('{"name":"'), pl.col("cat"), pl.lit('","cat":"'), pl.col("cat"),
        pl.lit('","ph":"'), pl.col("ph"), pl.lit('","id":'), pl.col("fid").cast(pl.String),
        pl.lit(',"pid":'), pl.col("pid").cast(pl.String), pl.lit(',"tid":'), pl.col("tid").cast(pl.String),
        pl.lit(',"ts":'), us_text(pl.col("ts_ns")), pl.lit(',"bp":"e"},\n'),
    ])
    return frame.select(line).to_series()


def _tids(bundle) -> dict[str, int]:
    lanes = bundle.scan().select("lane").unique().collect()["lane"].drop_nulls().to_list()
    return lane_ids(lanes)


def _tid(tids: dict[str, int], lane: str) -> pl.Expr:
    return pl.col(lane).replace_strict(tids, default=len(tids), return_dtype=pl.Int64)


def chrome_extras(bundle, matching, clock=None) -> Callable[[], Iterator[str]]:
    """A generator factory for ``write_chrome_trace(..., extra_lines=...)``.

    ``clock`` must be the ``ClockModel`` given to ``write_chrome_trace`` (or None for raw
    clocks) so that the flow events land inside their slices.
    """
    tids = _tids(bundle)

    def lines() -> Iterator[str]:
        yield from _p2p_lines(matching.p2p, tids, clock)
        yield from _collective_lines(matching, tids, clock)

    return lines


def _chunks(frame: pl.DataFrame) -> Iterator[pl.DataFrame]:
    for start in range(0, len(frame), _CHUNK):
        yield frame.slice(start, _CHUNK)


def _p2p_lines(p2p: pl.DataFrame, tids: dict[str, int], clock) -> Iterator[str]:
    if p2p.is_empty():
        return
    for part in _chunks(p2p):
        mid = lambda side: (pl.col(f"{side}_start_ns") + pl.col(f"{side}_end_ns")) // 2  # noqa: E731
        send = part.select(
            pl.lit("p2p").alias("cat"), (2 * pl.col("pair_id") + 1).alias("fid"), pl.lit("s").alias("ph"),
            pl.col("src").alias("pid"), _tid(tids, "send_lane").alias("tid"),
            _aligned(clock, mid("send"), "src").alias("ts_ns"),
        )
        recv = part.select(
            pl.lit("p2p").alias("cat"), (2 * pl.col("pair_id") + 1).alias("fid"), pl.lit("f").alias("ph"),
            pl.col("dst").alias("pid"), _tid(tids, "recv_lane").alias("tid"),
            _aligned(clock, mid("recv"), "dst").alias("ts_ns"),
        )
        yield "".join(_flow_lines(pl.concat([send, recv])).to_list())


def _collective_lines(matching, tids: dict[str, int], clock) -> Iterator[str]:
    members = matching.members
    if members.is_empty():
        return
    start = "start_aligned_ns" if matching.aligned else "start_ns"
    members = members.join(
        matching.collectives.filter(pl.col("n_members") > 1).select("instance_id"), on="instance_id", how="semi",
    ).sort(["instance_id", start, "rank"])
    members = members.with_columns(
        _pos=pl.int_range(pl.len()).over("instance_id"), _n=pl.len().over("instance_id"),
        _first=pl.col(start).min().over("instance_id"),
    )
    for part in _chunks(members):
        flows = part.select(
            pl.lit("collective").alias("cat"), (2 * pl.col("instance_id") + 2).alias("fid"),
            pl.when(pl.col("_pos") == 0).then(pl.lit("s"))
            .when(pl.col("_pos") == pl.col("_n") - 1).then(pl.lit("f")).otherwise(pl.lit("t")).alias("ph"),
            pl.col("rank").alias("pid"), _tid(tids, "lane").alias("tid"),
            _aligned(clock, (pl.col("start_ns") + pl.col("end_ns")) // 2, "rank").alias("ts_ns"),
        )
        yield "".join(_flow_lines(flows).to_list())
        last = part.filter(pl.col("_pos") == pl.col("_n") - 1)
        mark = pl.concat_str([
            pl.lit('{"name":"last arriver","cat":"collective","ph":"i","s":"t","pid":'),
            pl.col("rank").cast(pl.String), pl.lit(',"tid":'), _tid(tids, "lane").cast(pl.String),
            pl.lit(',"ts":'), us_text(_aligned(clock, pl.col("start_ns"), "rank")),
            pl.lit(',"args":'),
            pl.struct(
                pl.col("instance_id"), pl.col("op"), pl.col("group"),
                waited_us=(pl.col(start) - pl.col("_first")) / 1000.0,
            ).struct.json_encode(),
            pl.lit("},\n"),
        ])
        yield "".join(last.select(mark).to_series().to_list())
