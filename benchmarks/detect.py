"""Benchmark: straggler detection speed at scale, and accuracy on the labelled suite.

Run: ``python benchmarks/detect.py [--suite full|small|ci|none] [--repeat N] [--seqlen SIGMA]``.

1. Speed: simulates TP8 x PP8 x DP16 (1,024 ranks) x 2 iterations with one slow GPU, ingests it
   (not timed), then times ``detect_bundle`` (best of ``--repeat``), split into its steps:
   reading the events table, matching, clock alignment, the three stages and the verdict.
   The target is analysis after ingest <= 1 s.
2. Accuracy: runs the seeded scenario suite and prints the per-class and per-scale tables
   (the same as ``mapp bench detect --scale full``).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from mapp.analysis.detect import detect_bundle  # noqa: E402
from mapp.analysis.ingest import load_bundle  # noqa: E402
from mapp.analysis.simulate import SimConfig, parse_fault, simulate  # noqa: E402
from mapp.report.theme import THEME  # noqa: E402

CASES = [(8, 2, 8), (8, 4, 16), (8, 8, 16)]  # (tp, pp, dp): 128, 512, 1,024 ranks


def speed(console: Console, repeat: int, seqlen: float = 0.0) -> None:
    title = "detect_bundle time after ingest (2 iterations, best of %d%s)" % (
        repeat, f", lognormal lengths sigma {seqlen}" if seqlen else "")
    table = Table(title=title, title_justify="left")
    for col in ("ranks", "events", "read", "match + align", "layout", "stage 1", "stage 2", "stage 3", "verdict", "total",
                "top suspect"):
        table.add_column(col, justify="right")
    with tempfile.TemporaryDirectory(prefix="mapp-bench-detect-") as tmp:
        for tp, pp, dp in CASES:
            world = tp * pp * dp
            slow = world // 3
            cfg = SimConfig(tp=tp, pp=pp, dp=dp, layers=pp, hidden=1024, seq_length=1024, microbatches=8,
                            iterations=2, seed=7, seqlen_sigma=seqlen, faults=[parse_fault(f"slow_gpu:{slow}:1.2")])
            out = Path(tmp) / f"job{world}"
            simulate(cfg, out)
            bundle = load_bundle(out)
            events = bundle.scan().select("rank").collect().height
            best = None
            for _ in range(repeat):
                start = time.perf_counter()
                verdict = detect_bundle(bundle)
                total = time.perf_counter() - start
                if best is None or total < best[0]:
                    best = (total, verdict)
            total, verdict = best
            t = verdict.timings_s
            top = verdict.suspects[0] if verdict.suspects else None
            label = f"{top.kind} {top.label()}" + (" ok" if top and top.rank == slow else " WRONG") if top else "none"
            ms = lambda k: f"{t.get(k, 0) * 1e3:,.0f} ms"  # noqa: E731
            table.add_row(f"{world:,}", f"{events:,}", ms("read"), ms("match and align"), ms("layout"), ms("peers"),
                          ms("lateness"), ms("bandwidth"), ms("verdict"), f"{total * 1e3:,.0f} ms", label)
    console.print(table)


def accuracy(console: Console, scale: str) -> None:
    from mapp.bench.suite import run_suite, scenarios
    from mapp.cli.bench import print_suite

    items = scenarios(scale, 0)
    start = time.perf_counter()
    result = run_suite(items)
    wall = time.perf_counter() - start
    print_suite(console, result, f"suite {scale} (seed 0), {len(items)} scenarios in {wall:,.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="full", choices=("full", "small", "ci", "none"))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seqlen", type=float, default=0.0, metavar="SIGMA",
                        help="lognormal sequence lengths per (replica, microbatch): stage 1 then fits the "
                             "replicas' data (default 0: equal lengths)")
    args = parser.parse_args()
    console = Console(width=140, theme=THEME)
    speed(console, args.repeat, args.seqlen)
    if args.suite != "none":
        accuracy(console, args.suite)


if __name__ == "__main__":
    main()
