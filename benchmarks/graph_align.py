"""Graph + collective/p2p matching + clock alignment at scale, with accuracy against ground truth.

    python benchmarks/graph_align.py [--ranks 1024] [--events 20000] [--dir /tmp/mapp-bench-graph] [--no-sim]

1. Synthetic job (tp=8, pp=ranks/256, dp=32): writes the events table directly as Parquet
   (``DIR/.mapp/events.parquet``; generating 20M events as JSON and ingesting them is the
   ingest benchmark's business). Per rank and step: 6 compute events, 3 TP all-reduces, one
   p2p message to a neighbouring stage (forward on even steps, backward on odd), and a DP
   reduce-scatter + all-gather every 100 steps: ~43% communication. True times go through
   per-rank clocks with offsets up to +/-100 ms, drift up to +/-50 ppm, 1 us Gaussian reading
   jitter on every timestamp and 0.01% of collective ends logged 0.1-5 ms late (outliers).
2. The same analysis on ``mapp simulate``'s 1,024-rank job (tp=8 pp=4 dp=32), whose clocks are
   in its ``ground_truth.json``.

Each measured run happens in a fresh child process so that peak RSS is its own. Printed:
wall seconds of match, align and graph (the networkx graph of one iteration: the whole job's
millions of calls are matched in polars, not in networkx), peak RSS, whether every instance and
pair matched as constructed, and the alignment error per event (|aligned - truth on rank 0's
clock|) at the 50th/99th percentile and worst.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

TP, DP = 8, 32
STEP_US = 20_000.0
PER_STEP = 6 + 3 + 1  # compute, TP all-reduces, p2p (average)


def _clocks(world: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    return rng.uniform(-100_000.0, 100_000.0, world), rng.uniform(-50.0, 50.0, world)


def generate(directory: Path, ranks: int, events: int, seed: int = 0) -> dict:
    """Write the synthetic job's events table; return its ground truth."""
    import polars as pl
    import pyarrow.parquet as pq

    from mapp.analysis.ingest.schema import EVENTS_SCHEMA, RANKS_SCHEMA, conform

    pp = max(1, ranks // (TP * DP))
    world = TP * DP * pp
    steps = max(100, int(round(events / (PER_STEP + 0.2))))
    rng = np.random.default_rng(seed)
    offset, drift = _clocks(world, rng)
    T = 1_000_000.0 + STEP_US * np.arange(steps)[:, None]  # (steps, 1)
    stage = np.arange(world) // (TP * DP)

    def local_ns(true_us: np.ndarray, rank: np.ndarray) -> np.ndarray:
        noisy = true_us * (1 + drift[rank] * 1e-6) + offset[rank] + rng.normal(0.0, 1.0, true_us.shape)
        return np.round(noisy * 1000.0).astype(np.int64)

    # TP all-reduces: (steps, 3, world); groups are 8 consecutive ranks
    arrive = T[:, None, :] + 3000.0 + 4000.0 * np.arange(3)[None, :, None] + rng.uniform(0, 200, (steps, 3, world))
    end = arrive.reshape(steps, 3, world // TP, TP).max(axis=3, keepdims=True) + 70.0
    tp_end = np.broadcast_to(end, (steps, 3, world // TP, TP)).reshape(steps, 3, world).copy()
    late = rng.random(tp_end.shape) < 1e-4
    tp_end_logged = tp_end + late * rng.uniform(100.0, 5000.0, tp_end.shape)

    # DP reduce-scatter + all-gather every 100 steps; group = same (pp, tp), all dp
    dp_steps = np.arange(99, steps, 100)
    grid = (len(dp_steps), pp, DP, TP)
    rs_arrive = T[dp_steps][:, :, None, None] + 17000.0 + rng.uniform(0, 500, grid)
    rs_end = rs_arrive.max(axis=2, keepdims=True) + 300.0
    ag_arrive = rs_end + rng.uniform(0, 50, grid)
    ag_end = ag_arrive.max(axis=2, keepdims=True) + 300.0
    flat = lambda a: np.broadcast_to(a, grid).reshape(len(dp_steps), world)  # noqa: E731

    # p2p: even steps stage p -> p+1 (forward), odd steps p+1 -> p (backward)
    send_at = T + 15000.0 + rng.uniform(0, 100, (steps, world))
    recv_at = T + 14000.0 + rng.uniform(0, 2000, (steps, world))

    truth = {"clocks": {str(r): {"offset_us": float(offset[r]), "drift_ppm": float(drift[r])} for r in range(world)},
             "instances": 0, "pairs": 0, "layout": {"tp": TP, "pp": pp, "dp": DP}}
    cache = directory / ".mapp"
    cache.mkdir(parents=True, exist_ok=True)
    schema = conform(pl.DataFrame(), EVENTS_SCHEMA).to_arrow().schema
    block = 64
    with pq.ParquetWriter(cache / "events.parquet", schema, compression="zstd") as writer:
        for lo in range(0, world, block):
            ranks_ = np.arange(lo, min(world, lo + block))
            parts = []
            for r in ranks_:
                parts.append(_rank_frame(pl, r, steps, T, stage, pp, world, local_ns, arrive, tp_end_logged,
                                         dp_steps, flat(rs_arrive)[:, r], flat(rs_end)[:, r],
                                         flat(ag_arrive)[:, r], flat(ag_end)[:, r], send_at, recv_at, rng))
            frame = conform(pl.concat(parts), EVENTS_SCHEMA).sort(["rank", "ts_ns"])
            writer.write_table(frame.to_arrow().cast(schema), row_group_size=1 << 20)
    truth["instances"] = steps * 3 * (world // TP) + 2 * len(dp_steps) * pp * TP
    # every step, every stage boundary carries one message per (dp, tp) position
    truth["pairs"] = steps * (pp - 1) * TP * DP
    rows = [{"rank": r, "world_size": world, "tp": r % TP, "dp": (r // TP) % DP, "pp": int(stage[r]),
             "layout_tp": TP, "layout_pp": pp, "layout_dp": DP, "format": "mapp", "src_file": f"rank-{r:05d}.json"}
            for r in range(world)]
    conform(pl.DataFrame(rows), RANKS_SCHEMA).write_parquet(cache / "ranks.parquet")
    (directory / "ground_truth.json").write_text(json.dumps(truth))
    return truth


def _rank_frame(pl, r, steps, T, stage, pp, world, local_ns, arrive, tp_end, dp_steps, rs_a, rs_e, ag_a, ag_e,
                send_at, recv_at, rng):
    rank = np.full(1, r)
    cols: dict[str, list] = {k: [] for k in ("name", "cat", "lane", "start", "end", "seq", "peer", "bytes", "group")}

    def add(name, cat, lane, start, end_, seq=None, peer=None, nbytes=None, group=None):
        n = len(start)
        cols["name"].append(np.full(n, name, dtype=object))
        cols["cat"].append(np.full(n, cat, dtype=object))
        cols["lane"].append(np.full(n, lane, dtype=object))
        cols["start"].append(local_ns(start, np.full(n, r)))
        cols["end"].append(local_ns(end_, np.full(n, r)))
        cols["seq"].append(np.full(n, -1) if seq is None else seq)
        cols["peer"].append(np.full(n, -1) if peer is None else np.full(n, peer))
        cols["bytes"].append(np.full(n, -1) if nbytes is None else np.full(n, nbytes))
        cols["group"].append(np.full(n, "" if group is None else group, dtype=object))

    t = T[:, 0]
    for k in range(6):
        add("forward" if k < 3 else "backward", "compute", "compute", t + 2000.0 * k, t + 2000.0 * k + 1500.0)
    a = arrive[:, :, r]
    e = tp_end[:, :, r]
    add("all_reduce", "collective", "comm", a.ravel(), e.ravel(), seq=np.arange(steps * 3), nbytes=1 << 24, group="tp")
    seqs = np.arange(len(dp_steps))
    add("reduce_scatter", "collective", "comm", rs_a, rs_e, seq=2 * seqs, nbytes=1 << 28, group="dp")
    add("all_gather", "collective", "comm", ag_a, ag_e, seq=2 * seqs + 1, nbytes=1 << 28, group="dp")
    s = stage[r]
    span = TP * DP
    even, odd = np.arange(0, steps, 2), np.arange(1, steps, 2)
    # forward (even steps): s -> s+1 ; backward (odd steps): s -> s-1
    for steps_, direction in ((even, 1), (odd, -1)):
        if 0 <= s + direction < pp:  # this rank sends
            peer = r + direction * span
            done = np.maximum(send_at[steps_, r], recv_at[steps_, peer]) + 40.0
            add("send", "p2p", "comm", send_at[steps_, r], done, seq=np.arange(len(steps_)), peer=peer,
                nbytes=1 << 24)
        if 0 <= s - direction < pp:  # this rank receives
            peer = r - direction * span
            done = np.maximum(send_at[steps_, peer], recv_at[steps_, r]) + 40.0
            add("recv", "p2p", "comm", recv_at[steps_, r], done, seq=np.arange(len(steps_)), peer=peer,
                nbytes=1 << 24)
    start = np.concatenate(cols["start"])
    end_ = np.maximum(np.concatenate(cols["end"]), start)
    group = np.concatenate(cols["group"])
    frame = pl.DataFrame({
        "rank": np.full(len(start), r, dtype=np.int32), "ph": "X",
        "name": np.concatenate(cols["name"]).astype(str), "cat": np.concatenate(cols["cat"]).astype(str),
        "lane": np.concatenate(cols["lane"]).astype(str), "ts_ns": start, "dur_ns": end_ - start,
        "seq": np.concatenate(cols["seq"]), "peer": np.concatenate(cols["peer"]),
        "bytes": np.concatenate(cols["bytes"]), "group": group.astype(str),
    })
    tp_base, dp_base = r - r % TP, (r % TP) + TP * DP * s
    frame = frame.with_columns(
        seq=pl.when(pl.col("seq") >= 0).then(pl.col("seq")),
        peer=pl.when(pl.col("peer") >= 0).then(pl.col("peer")).cast(pl.Int32),
        bytes=pl.when(pl.col("bytes") >= 0).then(pl.col("bytes")),
        group=pl.when(pl.col("group") != "").then(pl.col("group")),
        group_ranks=pl.when(pl.col("group") == "tp").then(pl.int_ranges(tp_base, tp_base + TP, dtype=pl.Int32))
        .when(pl.col("group") == "dp").then(pl.int_ranges(dp_base, dp_base + TP * DP, TP, dtype=pl.Int32)),
    )
    # iteration = step // 100, from the true step of each event (its position in the template)
    step_of = np.concatenate([np.arange(steps)] * 6 + [np.repeat(np.arange(steps), 3), dp_steps, dp_steps]
                             + [x for x in _p2p_steps(s, pp, steps)])
    return frame.with_columns(iteration=pl.Series(step_of // 100, dtype=pl.Int32))


def _p2p_steps(s, pp, steps):
    even, odd = np.arange(0, steps, 2), np.arange(1, steps, 2)
    out = []
    for steps_, direction in ((even, 1), (odd, -1)):
        if 0 <= s + direction < pp:
            out.append(steps_)
        if 0 <= s - direction < pp:
            out.append(steps_)
    return out


def measure(directory: Path, truth_path: Path) -> dict:
    """Match, align and build one iteration's graph; return timings, peak RSS and accuracy."""
    import polars as pl

    from mapp.analysis.align import align_bundle
    from mapp.analysis.graph import build_graph, match_bundle
    from mapp.analysis.ingest import TraceBundle, load_bundle

    cache = directory / ".mapp"
    if (cache / "manifest.json").exists():
        bundle = load_bundle(directory)
    else:
        bundle = TraceBundle(directory, "mapp", cache / "events.parquet", pl.read_parquet(cache / "ranks.parquet"))
    out: dict = {}
    t = time.perf_counter()
    matching = match_bundle(bundle, use_cache=False)
    out["match_s"] = time.perf_counter() - t
    t = time.perf_counter()
    clock = align_bundle(bundle, matching)
    out["align_s"] = time.perf_counter() - t
    t = time.perf_counter()
    graph = build_graph(matching, iterations=[int(matching.collectives["iteration"].min())])
    out["graph_s"] = time.perf_counter() - t
    out["rss_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    out["graph"] = f"{graph.number_of_nodes():,} nodes / {graph.number_of_edges():,} edges"
    out["events"] = bundle.scan().select(pl.len()).collect().item()
    out["comm_calls"] = len(matching.members) + 2 * len(matching.p2p)
    out["instances"] = len(matching.collectives)
    out["complete"] = int(matching.collectives["complete"].sum())
    out["pairs"] = len(matching.p2p)
    out["problems"] = [f.line() for f in matching.findings if f.severity != "info"]
    truth = json.loads(truth_path.read_text())
    calls = bundle.scan().filter(pl.col("cat").is_in(["collective", "p2p"])).select(
        (pl.when(pl.col("cat") == "collective").then(1.0 / pl.col("group_ranks").list.len())).sum().alias("inst"),
        ((pl.col("cat") == "p2p") & pl.col("name").str.contains("send")).sum().alias("sends"),
    ).collect()
    # without a count in the ground truth: every call in a full instance, every send received
    out["expected_instances"] = truth.get("instances") or int(round(calls["inst"].item()))
    out["expected_pairs"] = truth.get("pairs") or int(calls["sends"].item())
    out["ranks"] = len(clock.ranks)
    out["components"] = len(clock.components)
    del matching, graph
    clocks = truth["clocks"]
    world = max(int(r) for r in clocks) + 1
    offset = np.array([clocks[str(r)]["offset_us"] for r in range(world)])
    drift = np.array([clocks[str(r)]["drift_ppm"] for r in range(world)]) * 1e-6
    ref = clock.reference_rank
    errors = []
    for batch in clock.apply(bundle.scan().select("rank", "ts_ns")).collect_batches() if hasattr(
            pl.LazyFrame, "collect_batches") else [clock.apply(bundle.scan().select("rank", "ts_ns")).collect()]:
        rank = batch["rank"].to_numpy()
        true = (batch["ts_ns"].to_numpy() / 1000.0 - offset[rank]) / (1 + drift[rank])
        expected = true * (1 + drift[ref]) + offset[ref]
        errors.append(np.abs(batch["ts_aligned_ns"].to_numpy() / 1000.0 - expected))
    err = np.concatenate(errors)
    out["err_p50_us"], out["err_p99_us"], out["err_max_us"] = (float(np.percentile(err, 50)),
                                                                float(np.percentile(err, 99)), float(err.max()))
    return out


def simulate_job(directory: Path) -> None:
    from mapp.analysis.ingest import load_bundle
    from mapp.analysis.simulate import SimConfig, simulate

    simulate(SimConfig(tp=8, pp=4, dp=32, microbatches=8, iterations=2, seed=11), directory)
    load_bundle(directory)


def _child(*args: str) -> dict:
    result = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True)
    if result.returncode != 0:
        sys.stderr.write(result.stderr)
        raise SystemExit(result.returncode)
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=1024)
    parser.add_argument("--events", type=int, default=20_000, help="events per rank (about)")
    parser.add_argument("--dir", type=Path, default=Path("/tmp/mapp-bench-graph"))
    parser.add_argument("--no-sim", action="store_true", help="skip the simulated 1,024-rank job")
    parser.add_argument("--_generate", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--_measure", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--_simulate", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._generate:
        truth = generate(args.dir, args.ranks, args.events)
        print(json.dumps({"instances": truth["instances"]}))
        return
    if args._simulate:
        simulate_job(args._simulate)
        print("{}")
        return
    if args._measure:
        print(json.dumps(measure(args._measure, args._measure / "ground_truth.json")))
        return

    from rich.console import Console
    from rich.table import Table

    synth = args.dir / f"synthetic-{args.ranks}x{args.events}"
    if not (synth / "ground_truth.json").exists():
        _child("--_generate", "--dir", str(synth), "--ranks", str(args.ranks), "--events", str(args.events))
    rows = [("synthetic", _child("--_measure", str(synth)))]
    if not args.no_sim:
        sim = args.dir / "simulated-1024"
        if not (sim / "ground_truth.json").exists():
            _child("--_simulate", str(sim))
        rows.append(("mapp simulate tp8 pp4 dp32", _child("--_measure", str(sim))))

    table = Table(title=f"graph + match + align ({os.cpu_count()} CPUs)")
    for column in ("job", "ranks", "events", "comm calls", "match s", "align s", "graph s (1 iter)", "total s",
                   "peak RSS GB", "instances (complete/expected)", "p2p pairs (expected)",
                   "err p50 us", "err p99 us", "err max us"):
        table.add_column(column, justify="right")
    for name, r in rows:
        table.add_row(
            name, f"{r['ranks']:,}", f"{r['events']:,}", f"{r['comm_calls']:,}", f"{r['match_s']:.1f}",
            f"{r['align_s']:.1f}", f"{r['graph_s']:.1f}", f"{r['match_s'] + r['align_s'] + r['graph_s']:.1f}",
            f"{r['rss_gb']:.2f}",
            f"{r['instances']:,} ({r['complete']:,}/{r['expected_instances'] or '-'})",
            f"{r['pairs']:,} ({r['expected_pairs'] or '-'})",
            f"{r['err_p50_us']:.3f}", f"{r['err_p99_us']:.3f}", f"{r['err_max_us']:.3f}",
        )
    Console(width=200).print(table)
    for name, r in rows:
        for line in r["problems"][:5]:
            print(f"{name}: {line}")


if __name__ == "__main__":
    main()
