"""Query latency of ``mapp sql`` over a large bundle, once it is loaded.

    python benchmarks/sql.py [--events 10000000] [--ranks 64] [--repeat 3] [--dir /tmp/mapp-bench-sql] [--no-align]

Writes a synthetic bundle's events table straight to Parquet (TP4 x PP4 x DP4 by default: per
rank, forward/backward compute, TP all-reduces with seq, pipeline sends/receives with seq and
an iteration marker every 1,000 events), opens the SQL schema over it (matching and clock
alignment included; the load time is reported apart), then times every named query and two
ad-hoc ones, in memory over the Parquet view and from a persisted ``--db`` file.
Prints a table: median seconds of ``--repeat`` runs, and whether it is under 2 s.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
import polars as pl
from rich.console import Console
from rich.table import Table

LIMIT_S = 2.0
_STEP = 10  # events per step: 6 compute, 3 collectives, 1 p2p
_ITERATION_EVERY = 1000


def build_bundle(directory: Path, ranks: int, events: int):
    """A ``TraceBundle`` whose events table is written directly (no trace files)."""
    from mapp.analysis.ingest.bundle import TraceBundle
    from mapp.analysis.ingest.schema import EVENTS_SCHEMA, RANKS_SCHEMA, conform

    tp, pp = 4, 4
    dp = ranks // (tp * pp)
    assert tp * pp * dp == ranks, "--ranks must be a multiple of 16"
    cache = directory / ".mapp"
    cache.mkdir(parents=True, exist_ok=True)
    per_rank = events // ranks
    steps = per_rank // _STEP
    rng = np.random.default_rng(0)
    frames = []
    for rank in range(ranks):
        t, d, p = rank % tp, (rank // tp) % dp, rank // (tp * dp)
        step = np.repeat(np.arange(steps), _STEP)
        kind = np.tile(np.arange(_STEP), steps)
        dur = np.where(kind < 6, 50_000, np.where(kind < 9, 8_000, 20_000)).astype(np.int64)
        dur = (dur * rng.lognormal(0, 0.05, len(kind))).astype(np.int64)
        ts = step.astype(np.int64) * 400_000 + kind * 36_000 + rank * 7
        iteration = (step * _STEP // _ITERATION_EVERY).astype(np.int32)
        cat = np.where(kind < 6, "compute", np.where(kind < 9, "collective", "p2p"))
        sends = p % 2 == 0
        name = np.where(kind < 3, "forward", np.where(kind < 6, "backward", np.where(kind < 9, "all_reduce",
                        "send" if sends else "recv")))
        peer_rank = t + tp * (d + dp * (p + 1 if sends else p - 1))
        group_ranks = [r for r in range(rank - t, rank - t + tp)]
        seq = np.where(kind < 6, -1, np.where(kind < 9, step * 3 + (kind - 6), step)).astype(np.int64)
        frame = pl.DataFrame({
            "rank": np.full(len(kind), rank, np.int32), "tp": t, "pp": p, "dp": d, "cp": 0, "ep": 0,
            "ph": "X", "name": name, "cat": cat, "lane": np.where(kind < 6, "compute", "comm"),
            "ts_ns": ts, "dur_ns": dur, "iteration": iteration,
            "microbatch": (step % 8).astype(np.int32),
            "seq": seq, "bytes": np.where(kind < 6, 0, 4_194_304).astype(np.int64),
        }).with_columns(
            group=pl.when(pl.col("cat") == "collective").then(pl.lit("tp")),
            group_ranks=pl.when(pl.col("cat") == "collective").then(pl.lit(group_ranks, dtype=pl.List(pl.Int32))),
            peer=pl.when(pl.col("cat") == "p2p").then(pl.lit(peer_rank, dtype=pl.Int32)),
            seq=pl.when(pl.col("seq") >= 0).then(pl.col("seq")),
        )
        marks = frame.group_by("iteration").agg(ts_ns=pl.col("ts_ns").min(), end=(pl.col("ts_ns") + pl.col("dur_ns")).max())
        marks = marks.select(
            pl.lit(rank, pl.Int32).alias("rank"), pl.lit("X").alias("ph"), pl.lit("iteration").alias("name"),
            pl.lit("iteration").alias("cat"), pl.lit("iteration").alias("lane"), "ts_ns",
            (pl.col("end") - pl.col("ts_ns")).alias("dur_ns"), "iteration",
        ).with_columns(tp=pl.lit(t), pp=pl.lit(p), dp=pl.lit(d))
        frames.append(conform(pl.concat([frame, marks], how="diagonal_relaxed"), EVENTS_SCHEMA))
    events_frame = pl.concat(frames)
    events_path = cache / "events.parquet"
    events_frame.write_parquet(events_path, compression="zstd", row_group_size=1 << 20)
    ranks_frame = conform(pl.DataFrame({
        "rank": list(range(ranks)), "world_size": ranks,
        "tp": [r % tp for r in range(ranks)], "pp": [r // (tp * dp) for r in range(ranks)],
        "dp": [(r // tp) % dp for r in range(ranks)], "cp": 0, "ep": 0,
        "layout_tp": tp, "layout_pp": pp, "layout_dp": dp, "layout_cp": 1, "layout_ep": 1, "layout_vpp": 1,
        "host": [f"node{r // 8:03d}" for r in range(ranks)], "device": "synthetic", "clock": "cuda",
        "run_id": "bench", "format": "mapp",
    }), RANKS_SCHEMA)
    return TraceBundle(directory, "mapp", events_path, ranks_frame), len(events_frame)


ADHOC = {
    "adhoc: compute per rank": "SELECT rank, sum(dur_ns) AS compute_ns FROM events WHERE cat = 'compute' GROUP BY rank",
    "adhoc: p95 by op": "SELECT name, quantile_cont(dur_ns, 0.95) AS p95 FROM events GROUP BY name",
}


def time_queries(db, repeat: int) -> dict[str, float]:
    from mapp.sql import list_queries

    jobs = {q.name: (q.sql, q.bind()) for q in list_queries()}
    jobs.update({name: (sql, None) for name, sql in ADHOC.items()})
    out = {}
    for name, (sql, params) in jobs.items():
        runs = []
        for _ in range(repeat):
            start = time.perf_counter()
            db.query(sql, params)
            runs.append(time.perf_counter() - start)
        out[name] = statistics.median(runs)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/mapp-bench-sql"))
    parser.add_argument("--no-align", action="store_true", help="skip matching's clock alignment")
    args = parser.parse_args()

    from mapp.sql import open_database

    console = Console()
    start = time.perf_counter()
    bundle, n = build_bundle(args.dir, args.ranks, args.events)
    console.print(f"bundle: {n:,} events, {args.ranks} ranks ({time.perf_counter() - start:.1f} s to write)")

    start = time.perf_counter()
    db = open_database(args.dir, align=not args.no_align, load=lambda _: bundle)
    load_view = time.perf_counter() - start
    view = time_queries(db, args.repeat)
    db.close()

    target = args.dir.parent / (args.dir.name + ".duckdb")
    target.unlink(missing_ok=True)
    start = time.perf_counter()
    db = open_database(args.dir, db=target, align=not args.no_align, load=lambda _: bundle)
    load_db = time.perf_counter() - start
    persisted = time_queries(db, args.repeat)
    db.close()

    table = Table(title=f"mapp sql: median of {args.repeat} runs over {n:,} events (load: view {load_view:.1f} s, "
                        f"--db {load_db:.1f} s)")
    table.add_column("query")
    table.add_column("view over Parquet (s)", justify="right")
    table.add_column("--db table (s)", justify="right")
    table.add_column(f"< {LIMIT_S:g} s", justify="center")
    for name in view:
        ok = min(view[name], persisted[name]) < LIMIT_S
        table.add_row(name, f"{view[name]:.3f}", f"{persisted[name]:.3f}", "yes" if ok else "no")
    console.print(table)


if __name__ == "__main__":
    main()
