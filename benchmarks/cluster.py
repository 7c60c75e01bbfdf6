"""Benchmark: ingest a simulated 10,240-rank job on a local Ray cluster of 1 and 2 workers, beside
the single-process ingest, then detect and SQL on the partitioned dataset against the one file.

Run: ``python benchmarks/cluster.py [--job DIR] [--workers 1,2] [--memory-limit 1GB] [--match-only]``. Without
``--job`` it simulates TP8 x PP8 x DP160 (16 microbatches, 2 iterations, one slow GPU) into a
temporary directory first. Every step runs in a child process of its own (its peak RSS is its
own; a Ray worker reports its own). Prints two tables:

* ingest: engine, workers, wall s, events/s, the driver's peak RSS and each worker's;
* analysis: detect and a SQL aggregation over every event, on the single file and on the dataset,
  with wall s, peak RSS and whether the answers are the same.

``--large --job DIR [--windows 1,2] [--memory-limit 4GB]``: a job too large to analyse at once
(e.g. ``mapp simulate --tp 8 --pp 8 --dp 160 --microbatches 16 --iterations 16``, 57 M events):
writes its partitioned dataset if it has none (``mapp trace ingest --partitioned``, timed), then
``mapp detect --window N`` for each N and ``mapp sql --no-match --memory-limit`` over every
event, each in a child process: wall s, peak RSS, and the answer.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SQL = ("SELECT rank, cat, count(*) AS n, sum(dur_ns) AS busy, max(end_aligned_ns) AS last "
       "FROM events GROUP BY ALL ORDER BY ALL")


def _child_ingest(job: Path, workers: int) -> dict:
    from mapp.analysis.ingest import load_bundle

    started = time.perf_counter()
    if workers == 0:
        bundle = load_bundle(job, use_cache=False)
        rows, per_worker = bundle.scan().select("rank").collect().height, []
    else:
        from mapp.analysis.cluster import connect, ingest_on_cluster, match_on_cluster

        with connect(workers=workers) as engine:
            bundle, results = ingest_on_cluster(job, engine)
            parsed = time.perf_counter() - started
            match_on_cluster(bundle, engine)
        from mapp.analysis.ingest.dataset import per_worker as summary

        rows = sum(r.rows for r in results)
        per_worker = sorted((w.peak_rss for w in summary(results)), reverse=True)
    wall = time.perf_counter() - started
    return {"rows": rows, "wall_s": wall, "parse_s": parsed if workers else wall, "worker_rss": per_worker,
            "driver_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}


def _child_match(job: Path) -> dict:
    from mapp.analysis.graph import match_bundle
    from mapp.analysis.ingest import load_bundle

    bundle = load_bundle(job)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    started = time.perf_counter()
    matching = match_bundle(bundle, use_cache=False)
    return {"wall_s": time.perf_counter() - started, "instances": matching.collectives.height,
            "members": matching.members.height, "pairs": matching.p2p.height, "rss_before": before,
            "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}


def _child_analyse(job: Path, what: str, memory_limit: str) -> dict:
    from mapp.analysis.detect import detect_bundle
    from mapp.analysis.ingest import load_bundle
    from mapp.sql.database import open_database

    started = time.perf_counter()
    if what == "detect":
        verdict = detect_bundle(load_bundle(job), threshold=0.1).to_json()
        verdict.pop("timings_s")
        answer = json.dumps(verdict, sort_keys=True)
    else:
        database = open_database(job, memory_limit=memory_limit)
        table = database.query(SQL).table
        answer = hashlib.sha256(json.dumps(table.to_pylist(), default=str).encode()).hexdigest()
        database.close()
    return {"wall_s": time.perf_counter() - started, "answer": answer,
            "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}


LARGE_SQL = (
    "SELECT rank, cat, count(*) AS n, sum(dur_ns) AS busy FROM events GROUP BY ALL ORDER BY ALL",
    "SELECT iteration, r.pp, sum(e.dur_ns) AS compute FROM events e JOIN ranks r USING (rank) "
    "WHERE e.cat = 'compute' GROUP BY ALL ORDER BY ALL",
    "SELECT rank, name, dur_ns FROM events WHERE cat = 'compute' ORDER BY dur_ns DESC LIMIT 20",
)


def _child_ingest_partitioned(job: Path) -> dict:
    from mapp.analysis.ingest import ingest_partitioned

    started = time.perf_counter()
    bundle, _ = ingest_partitioned(job)
    return {"wall_s": time.perf_counter() - started, "files": len(bundle.parts),
            "bytes": sum(p.stat().st_size for p in bundle.parts),
            "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}


def _child_large(job: Path, what: str, arg: str) -> dict:
    from mapp.analysis.ingest import load_bundle

    started = time.perf_counter()
    bundle = load_bundle(job)
    if what == "detect-window":
        from mapp.analysis.detect import detect_windows

        verdict = detect_windows(bundle, window=int(arg), threshold=0.1)
        top = verdict.suspects[0] if verdict.suspects else None
        answer = "no suspect" if top is None else (f"{top.kind} {top.label()} {top.slowdown:.2f}x, "
                                                    f"{top.evidence['windows']['found_in']} of {top.evidence['windows']['of']} windows")
        rows = bundle.scan().select("rank").collect(engine="streaming").height
    else:
        from mapp.sql.database import open_database

        database = open_database(job, memory_limit=arg, match=False)
        counts = [database.query(q).table.num_rows for q in LARGE_SQL]
        rows = database.query("SELECT count(*) FROM events").rows()[0][0]
        database.close()
        answer = f"{len(LARGE_SQL)} queries, {counts} rows"
    return {"wall_s": time.perf_counter() - started, "answer": answer, "events": rows,
            "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}


def _large(job: Path, windows: str, memory_limit: str) -> None:
    from rich.console import Console
    from rich.table import Table

    mb = lambda n: f"{n / 2**20:,.0f}"  # noqa: E731
    table = Table("step", "wall s", "peak RSS MB", "answer", title=f"a job too large to analyse at once: {job}",
                  title_justify="left")
    if not (job / ".mapp" / "events").is_dir():   # (load_bundle would build the single file first)
        r = _run("ingest-partitioned", str(job))
        table.add_row(f"mapp trace ingest --partitioned ({r['files']} files, {r['bytes'] / 2**30:.1f} GiB)",
                      f"{r['wall_s']:.1f}", mb(r["rss"]), "")
    for n in windows.split(","):
        r = _run("detect-window", str(job), n)
        table.add_row(f"mapp detect --window {n} ({r['events']:,} events)", f"{r['wall_s']:.1f}", mb(r["rss"]), r["answer"])
    r = _run("sql-large", str(job), memory_limit)
    table.add_row(f"mapp sql --no-match --memory-limit {memory_limit}", f"{r['wall_s']:.1f}", mb(r["rss"]), r["answer"])
    Console(width=200).print(table)


def _run(*args: str) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", *args], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _simulate(out: Path) -> None:
    sys.path.insert(0, str(ROOT))
    from mapp.analysis.simulate import SimConfig, parse_fault, simulate

    simulate(SimConfig(tp=8, pp=8, dp=160, microbatches=16, iterations=2, layers=32, hidden=4096, seed=7,
                       faults=[parse_fault("slow_gpu:5000:1.4")]), out, force=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--job", type=Path, help="A trace directory (default: simulate the 10,240-rank job).")
    ap.add_argument("--workers", default="1,2", help="Local Ray cluster sizes to run, comma separated.")
    ap.add_argument("--memory-limit", default="1GB", help="DuckDB's memory limit for the SQL step.")
    ap.add_argument("--match-only", action="store_true",
                    help="Only match the job's communication in one process and print its peak RSS.")
    ap.add_argument("--large", action="store_true",
                    help="--job is too large to analyse at once: detect in windows, SQL without matching.")
    ap.add_argument("--windows", default="1,2", help="With --large: the --window sizes to run.")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        kind, job, *rest = args.child
        if kind == "ingest-partitioned":
            result = _child_ingest_partitioned(Path(job))
        elif kind == "detect-window":
            result = _child_large(Path(job), kind, rest[0])
        elif kind == "sql-large":
            result = _child_large(Path(job), kind, rest[0])
        elif kind == "match":
            result = _child_match(Path(job))
        elif kind == "ingest":
            result = _child_ingest(Path(job), int(rest[0]))
        else:
            result = _child_analyse(Path(job), kind, rest[0])
        print(json.dumps(result))
        return
    from rich.console import Console
    from rich.table import Table

    if args.large:
        if args.job is None:
            ap.error("--large needs --job DIR")
        _large(args.job, args.windows, args.memory_limit)
        return
    temp = None
    job = args.job
    if job is None:
        temp = Path(tempfile.mkdtemp(prefix="mapp-cluster-bench-"))
        job = temp / "job"
        _simulate(job)
    try:
        mb = lambda n: f"{n / 2**20:,.0f}"  # noqa: E731
        if args.match_only:
            r = _run("match", str(job))
            table = Table("instances", "members", "p2p pairs", "wall s", "RSS before MB", "peak RSS MB", title="matching",
                          title_justify="left")
            table.add_row(f"{r['instances']:,}", f"{r['members']:,}", f"{r['pairs']:,}", f"{r['wall_s']:.1f}",
                          mb(r["rss_before"]), mb(r["rss"]))
            Console(width=200).print(table)
            return
        ingest = Table("engine", "workers", "events", "wall s", "parse s", "events/s (parse)", "driver RSS MB",
                       "worker peak RSS MB", title="ingest", title_justify="left")
        for workers in [0, *map(int, args.workers.split(","))]:
            r = _run("ingest", str(job), str(workers))
            ingest.add_row("one process (events.parquet)" if workers == 0 else "ray (partitioned)",
                           "-" if workers == 0 else str(workers), f"{r['rows']:,}", f"{r['wall_s']:.1f}",
                           f"{r['parse_s']:.1f}", f"{r['rows'] / r['parse_s']:,.0f}", mb(r["driver_rss"]),
                           ", ".join(mb(x) for x in r["worker_rss"]) or "-")
            if workers == 0:
                single = job.parent / f"{job.name}-single-cache"
                shutil.rmtree(single, ignore_errors=True)
                shutil.copytree(job / ".mapp", single)
        Console(width=200).print(ingest)
        analysis = Table("step", "events table", "wall s", "peak RSS MB", "same answer", title="analysis",
                         title_justify="left")
        for step in ("detect", "sql"):
            answers = {}
            for layout in ("partitioned", "one file"):
                if layout == "one file":   # put the single-file cache back in place of the dataset
                    shutil.rmtree(job / ".mapp")
                    shutil.copytree(single, job / ".mapp")
                r = _run(step, str(job), args.memory_limit)
                answers[layout] = r["answer"]
                analysis.add_row(step if step == "detect" else f"sql --memory-limit {args.memory_limit}", layout,
                                 f"{r['wall_s']:.1f}", mb(r["rss"]),
                                 "" if layout == "partitioned" else str(answers["partitioned"] == r["answer"]))
            if step == "detect":   # the dataset back for the SQL step
                _run("ingest", str(job), str(max(map(int, args.workers.split(",")))))
        Console(width=200).print(analysis)
    finally:
        if temp is not None:
            shutil.rmtree(temp, ignore_errors=True)


if __name__ == "__main__":
    main()
