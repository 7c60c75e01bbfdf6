"""Ingest and merge throughput: mapp's v1 reader vs. a stdlib json.load baseline.

    python benchmarks/ingest.py [--ranks 16] [--events 200000] [--dir /tmp/mapp-bench-ingest]

Generates N ranks x M events of v1 traces (a realistic mix of compute, collective and p2p
events), then measures, each in a fresh child process so peak RSS is its own:

- mapp ingest: files -> events table (Parquet cache), the path every command takes;
- mapp merge: events table -> one Chrome JSON trace;
- baseline: ``json.load`` each file and append every field to Python lists, which is how the
  original MegatronApp aggregator holds events.

Prints a table: events/s, wall seconds and peak RSS per stage, and the Parquet size.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table


def generate(directory: Path, ranks: int, events: int) -> int:
    """Write ``ranks`` v1 files of ``events`` events each; return the total bytes."""
    from mapp import trace_format

    directory.mkdir(parents=True, exist_ok=True)
    tp = 4 if ranks % 4 == 0 else 1
    layout = {"tp": tp, "pp": 1, "dp": ranks // tp, "cp": 1, "ep": 1}
    total = 0
    for rank in range(ranks):
        coords = {"tp": rank % tp, "pp": 0, "dp": rank // tp, "cp": 0, "ep": 0}
        tp_group = [rank - rank % tp + i for i in range(tp)]
        lines = [trace_format.HEADER]
        lines += [trace_format.encode_event(e) for e in trace_format.metadata_events(rank, ranks, layout, coords)]
        ts = 1000.0 + rank * 0.5
        for i in range(events):
            it, kind = divmod(i, 10)
            if kind < 6:
                lines.append(
                    f'{{"ph":"X","name":"{"forward" if kind < 3 else "backward"}","cat":"compute","pid":{rank},'
                    f'"tid":"compute","ts":{ts:.3f},"dur":850.125,"args":{{"iteration":{it // 100},'
                    f'"microbatch":{it % 8},"chunk":0,"layer":{i % 24}}}}},\n'
                )
            elif kind < 9:
                lines.append(
                    f'{{"ph":"X","name":"all_reduce","cat":"collective","pid":{rank},"tid":"comm",'
                    f'"ts":{ts:.3f},"dur":35.5,"args":{{"iteration":{it // 100},"group":"tp",'
                    f'"group_ranks":{json.dumps(tp_group, separators=(",", ":"))},"seq":{i},'
                    f'"bytes":4194304,"dtype":"bf16"}}}},\n'
                )
            else:
                lines.append(
                    f'{{"ph":"X","name":"send","cat":"p2p","pid":{rank},"tid":"comm","ts":{ts:.3f},'
                    f'"dur":12.25,"args":{{"iteration":{it // 100},"peer":{(rank + 1) % ranks},'
                    f'"seq":{it},"bytes":2097152,"microbatch":{it % 8}}}}},\n'
                )
            ts += 100.0
        path = directory / trace_format.file_name(rank)
        with open(path, "w") as f:
            f.writelines(lines)
        total += path.stat().st_size
    return total


def _stage_mapp_ingest(directory: str) -> dict:
    from mapp.analysis.ingest import load_bundle

    bundle = load_bundle(directory, use_cache=False)
    import pyarrow.parquet as pq

    return {"events": pq.ParquetFile(bundle.events_path).metadata.num_rows,
            "parquet_bytes": bundle.events_path.stat().st_size}


def _stage_mapp_merge(directory: str) -> dict:
    from mapp.analysis.ingest import load_bundle
    from mapp.analysis.chrome import write_chrome_trace

    bundle = load_bundle(directory)
    result = write_chrome_trace(bundle, Path(directory) / "merged.json")
    return {"events": result.events}


def _stage_baseline(directory: str) -> dict:
    """How the original aggregates: json.load each whole file, keep every event in Python
    lists, then one global sort by time."""
    events: list[tuple] = []
    for path in sorted(Path(directory).glob("rank-*.json")):
        with open(path) as f:
            text = f.read().rstrip().rstrip(",") + "]"
        for event in json.loads(text):
            if event.get("ph") != "X":
                continue
            args = event.get("args", {})
            events.append((event["ts"], event["pid"], event["name"], event["cat"], event["dur"],
                           args.get("iteration"), args.get("seq"), args.get("bytes")))
    events.sort(key=lambda e: e[0])
    return {"events": len(events)}


STAGES = {"ingest": _stage_mapp_ingest, "merge": _stage_mapp_merge, "baseline": _stage_baseline}


def _child(stage: str, directory: str) -> None:
    if stage != "baseline":  # import cost is not ingest cost (the readers' DuckDB included)
        import mapp.analysis.ingest.bundle  # noqa: F401
        import mapp.analysis.ingest.mapp_v1  # noqa: F401
        import mapp.analysis.chrome  # noqa: F401
        import pyarrow.parquet  # noqa: F401
    start = time.perf_counter()
    result = STAGES[stage](directory)
    result["wall_s"] = time.perf_counter() - start
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(result))


def run_stage(stage: str, directory: Path) -> dict:
    output = subprocess.run(
        [sys.executable, __file__, "--child", stage, "--dir", str(directory)],
        check=True, capture_output=True, text=True,
    ).stdout
    return json.loads(output.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=16)
    parser.add_argument("--events", type=int, default=200_000, help="events per rank")
    parser.add_argument("--dir", type=Path, default=Path("/tmp/mapp-bench-ingest"))
    parser.add_argument("--child", choices=list(STAGES))
    args = parser.parse_args()
    if args.child:
        _child(args.child, str(args.dir))
        return

    console = Console()
    if args.dir.exists():
        shutil.rmtree(args.dir)
    with console.status("generating traces"):
        start = time.perf_counter()
        size = generate(args.dir, args.ranks, args.events)
        os.sync()  # the stages should not pay for the kernel writing the generated files back
    console.print(f"generated {args.ranks} x {args.events:,} events, {size / 1e6:.0f} MB "
                  f"in {time.perf_counter() - start:.1f} s  (cpus: {os.cpu_count()})")
    results = {}
    for stage in ("ingest", "merge", "baseline"):
        with console.status(f"running {stage}"):
            results[stage] = run_stage(stage, args.dir)

    parquet_mb = results["ingest"]["parquet_bytes"] / 1e6
    table = Table(title=f"ingest benchmark: {args.ranks} ranks x {args.events:,} events")
    for column in ("stage", "events", "wall s", "events/s", "peak RSS MB"):
        table.add_column(column, justify="right" if column != "stage" else "left")
    labels = {"ingest": "mapp ingest (v1 -> events table)", "merge": "mapp merge (-> Chrome JSON)",
              "baseline": "baseline json.load + lists"}
    for stage, result in results.items():
        rate = result["events"] / result["wall_s"]
        table.add_row(labels[stage], f"{result['events']:,}", f"{result['wall_s']:.2f}", f"{rate:,.0f}",
                      f"{result['peak_rss_mb']:.0f}")
    console.print(table)
    speedup = (results["ingest"]["events"] / results["ingest"]["wall_s"]) / (
        results["baseline"]["events"] / results["baseline"]["wall_s"])
    budget = 2 * parquet_mb + 300
    console.print(f"Parquet events table: {parquet_mb:.1f} MB; RSS budget 2x Parquet + 300 MB = {budget:.0f} MB; "
                  f"ingest peak {results['ingest']['peak_rss_mb']:.0f} MB")
    console.print(f"ingest speed-up over the json.load baseline: {speedup:.1f}x")


if __name__ == "__main__":
    main()
