"""The schedule simulator's rows of issue 17's "Done when": each schedule against interleaved.

    python benchmarks/schedule_sim.py [--seeds 30]

PP4 (and PP8), 2 virtual stages, 16 microbatches, stage 2 at 1.3x, jitter 0.2 unless said.
Prints one table: makespan (mean over seeds), change against interleaved in data order (mean
and worst seed), bubble ratio, distance to the lower bound, peak activations per stage, and
the `mapp schedule simulate` command that gives the row.
"""

from __future__ import annotations

import argparse

import numpy as np

from mapp.scheduling.simulate import ScheduleConfig, simulate

ROWS = [  # (pp, jitter, length sigma, schedules)
    (4, 0.0, 0.0, ("interleaved", "dpp-depth", "dpp-breadth", "dpp-adaptive")),
    (4, 0.2, 0.0, ("interleaved", "dpp-depth", "dpp-breadth", "dpp-adaptive")),
    (4, 0.2, 0.5, ("interleaved", "dpp-depth", "dpp-breadth", "dpp-adaptive")),
    (4, 0.2, 1.0, ("interleaved", "dpp-adaptive")),
    (8, 0.2, 0.5, ("interleaved", "dpp-adaptive")),
    (4, 0.2, 0.0, ("1f1b", "zb-h1")),  # one chunk per stage: not comparable with the rows above
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=30)
    seeds = parser.parse_args().seeds
    print(f"{'schedule':13s} {'pp':>2s} {'jit':>4s} {'len':>4s} {'makespan':>9s} {'vs int':>7s} {'worst':>7s} "
          f"{'bubble':>7s} {'>bound':>7s}  peak  | command")
    for pp, jitter, length, schedules in ROWS:
        base = None
        for schedule in schedules:
            vpp = 1 if schedule in ("1f1b", "zb-h1") else 2
            config = ScheduleConfig(schedule=schedule, pp=pp, vpp=vpp, microbatches=16, jitter=jitter,
                                    length_sigma=length, slow_stage=(2, 1.3))
            s = simulate(config, seed=0, seeds=seeds)
            base = base or s
            rel = np.array([a.makespan / b.makespan - 1 for a, b in zip(s.steps, base.steps)])
            command = (f"mapp schedule simulate --schedule {schedule} --pp {pp} --vpp {vpp} --microbatches 16 "
                       f"--jitter {jitter} --length-sigma {length} --slow-stage 2:1.3 --seeds {seeds}")
            print(f"{schedule:13s} {pp:2d} {jitter:4.1f} {length:4.1f} {s.makespan:9.2f} {100 * (s.makespan / base.makespan - 1):+6.2f}% "
                  f"{100 * rel.max():+6.2f}% {100 * s.bubble_ratio:6.2f}% {100 * s.gap_to_lower_bound:6.2f}%  "
                  f"{' '.join(map(str, s.peak_activations))} | {command}")


if __name__ == "__main__":
    main()
