"""Benchmark: simulate a 10,240-rank job (TP8 x PP8 x DP160, 2 iterations) to v1 traces.

Run: ``python benchmarks/simulate.py [--out DIR] [--microbatches N] [--realistic] [--keep]``.
``--realistic`` turns on the realism options the detection suite uses (host ahead of the GPU,
host noise, data fetch, heavy-tailed sequence lengths, output layer).
Prints a table: ranks, events, wall s, events/s, output size, peak RSS. Each size runs in a
fresh child process so its peak RSS is its own.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CASES = [
    # (tp, pp, dp)
    (4, 4, 8),
    (8, 8, 20),
    (8, 8, 160),
]


REALISTIC = dict(host_ahead=True, host_overhead_us=60.0, host_noise_us=5.0, data_load_us=200.0,
                 seqlen_sigma=0.5, vocab_size=131072)


def _child(tp: int, pp: int, dp: int, microbatches: int, iterations: int, out: Path, realistic: bool) -> None:
    sys.path.insert(0, str(ROOT))
    from mapp.analysis.simulate import SimConfig, parse_fault, simulate

    cfg = SimConfig(tp=tp, pp=pp, dp=dp, microbatches=microbatches, iterations=iterations,
                    layers=32, hidden=4096, seed=7, faults=[parse_fault("slow_gpu:5:1.4")],
                    **(REALISTIC if realistic else {}))
    t0 = time.perf_counter()
    result = simulate(cfg, out, force=True)
    wall = time.perf_counter() - t0
    size = sum(p.stat().st_size for p in result.files)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"ranks": cfg.world_size, "events": result.events, "wall_s": wall,
                      "bytes": size, "rss": rss}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None, help="Output root (default: a temp dir).")
    ap.add_argument("--microbatches", type=int, default=16)
    ap.add_argument("--iterations", type=int, default=2)
    ap.add_argument("--only-large", action="store_true", help="Run only the 10,240-rank case.")
    ap.add_argument("--realistic", action="store_true", help="Turn on the realism options.")
    ap.add_argument("--keep", action="store_true", help="Keep the traces written.")
    ap.add_argument("--child", nargs=3, type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _child(*args.child, args.microbatches, args.iterations, args.out, args.realistic)
        return
    root = args.out or Path(tempfile.mkdtemp(prefix="mapp-sim-bench-"))
    cases = CASES[-1:] if args.only_large else CASES
    print(f"microbatches={args.microbatches} iterations={args.iterations} layers=32 hidden=4096 "
          f"format=v1, one slow GPU{', realistic' if args.realistic else ''}")
    print(f"{'ranks':>7} {'layout':>14} {'events':>11} {'wall s':>8} {'events/s':>11} "
          f"{'output MB':>10} {'peak RSS MB':>12}")
    try:
        for tp, pp, dp in cases:
            out = root / f"tp{tp}-pp{pp}-dp{dp}"
            proc = subprocess.run(
                [sys.executable, __file__, "--child", str(tp), str(pp), str(dp),
                 "--microbatches", str(args.microbatches), "--iterations", str(args.iterations),
                 "--out", str(out), *(["--realistic"] if args.realistic else [])],
                check=True, capture_output=True, text=True)
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            print(f"{r['ranks']:>7} {f'TP{tp}xPP{pp}xDP{dp}':>14} {r['events']:>11,} "
                  f"{r['wall_s']:>8.1f} {r['events'] / r['wall_s']:>11,.0f} "
                  f"{r['bytes'] / 1e6:>10,.0f} {r['rss'] / 2**20:>12,.0f}")
            if not args.keep:
                shutil.rmtree(out, ignore_errors=True)
    finally:
        if not args.keep and args.out is None:
            shutil.rmtree(root, ignore_errors=True)
    _ = resource  # peak RSS is measured in each child


if __name__ == "__main__":
    main()
