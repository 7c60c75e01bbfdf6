"""Benchmark: the detector on jobs the labelled suite does not draw, in both trace formats.

Run: ``python benchmarks/detect_formats.py [--seeds N]``.

The suite (``mapp bench detect``) writes mapp's own format. The traces users bring from
production Megatron jobs are often the original MegatronApp tracer's, and the misses reported
on real traces were imbalance taken for GPUs (a PP2 x DP32 job on heavy-tailed lengths, a PP4 x
DP2 job with a heavier last stage). Per format and seed this simulates:

- negatives: PP2 x DP32 on lognormal lengths (sigma 1.0), TP2 x PP2 x DP8 (sigma 0.8), PP4 x DP2
  with a heavier last (1.2x) or first (1.3x) stage, DP8 (sigma 0.8); the right answer is no
  suspect of any kind;
- positives: a 1.3x GPU in PP2 x DP32, PP4 x DP2, TP2 x PP2 x DP4 (lengths sigma 0.8) and DP2
  (sigma 0.3); the right answer is that rank first, as slow compute;
- with the layers traced (the original tracer's default granularity) and sequences of one
  length: DP2 healthy, and a 1.3x GPU in DP2 and DP4;
- a slow node, several GPUs at 1.3x alike (a TP group in TP2 x DP2 and in TP4 x PP2 x DP2 on
  lengths sigma 0.3, two of DP4), right when every one is named and the first named is one of
  them; and TP2 x DP2, TP4 x DP2 on uneven lengths, right with no suspect.

Host overhead and noise, jitter and iterations are drawn per job from the suite's ranges.
Prints one table: per format and class, the jobs, how many are right, and the wrong answers.

``--suite small`` (or ``ci``, ``full``) also runs the labelled suite's own scenarios (``mapp bench
detect --scale ...``, seed 0; those of one model chunk a stage: the original tracer has no
interleaved schedule) written in the MegatronApp format, and prints a second table: per class,
the jobs, how many are right (a fault's first suspect it; a negative without a suspect) and the
suspects that are no injected fault. ``--seeds 0`` runs that one alone.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from mapp.analysis.detect import detect_bundle  # noqa: E402
from mapp.analysis.ingest import load_bundle  # noqa: E402
from mapp.analysis.simulate import SimConfig, parse_fault, simulate  # noqa: E402
from mapp.bench.suite import run_suite, scenarios  # noqa: E402

NEGATIVES = {
    "PP2 x DP32, lengths sigma 1.0": dict(tp=1, pp=2, dp=32, layers=4, microbatches=8, seqlen_sigma=1.0),
    "TP2 x PP2 x DP8, lengths sigma 0.8": dict(tp=2, pp=2, dp=8, layers=4, microbatches=4, seqlen_sigma=0.8),
    "PP4 x DP2, last stage 1.2x": dict(tp=1, pp=4, dp=2, layers=8, microbatches=8, faults=["stage_imbalance:3:1.2"]),
    "PP4 x DP2, first stage 1.3x": dict(tp=1, pp=4, dp=2, layers=8, microbatches=8, faults=["stage_imbalance:0:1.3"]),
    "DP8, lengths sigma 0.8": dict(tp=1, pp=1, dp=8, layers=4, microbatches=4, seqlen_sigma=0.8),
}
# Jobs with the layers traced (the original tracer's default granularity "full"), sequences of
# one length: a DP-only job, whose gradient reduction that tracer does not record (no collective
# at all), beside its healthy twin. Drawn after the rows above, from their own generator, so that
# those rows' draws stay as they were.
LAYERS_TRACED = {  # (slow rank or None, layout)
    "DP2, layers traced": (None, (1, 1, 2)),
    "1.3x GPU, DP2, layers traced": (1, (1, 1, 2)),
    "1.3x GPU, DP4, layers traced": (2, (1, 1, 4)),
}
# A slow node: several GPUs slowed alike (megatron keeps a TP group inside a node), up to half
# of their peers, where the median sits between slow and healthy (``detect.slow_blocks``).
# Drawn last, from their own generator, so that the rows above keep their draws.
SLOW_NODES = {  # (layout, slowed ranks or (), lengths sigma)
    "1.3x node (TP group), TP2 x DP2": ((2, 1, 2), (0, 1), 0.0),
    "1.3x node (TP group), TP4 x PP2 x DP2": ((4, 2, 2), (0, 1, 2, 3), 0.3),
    "1.3x node (2 GPUs), DP4": ((1, 1, 4), (1, 2), 0.0),
    "TP2 x DP2, lengths sigma 0.5": ((2, 1, 2), (), 0.5),
    "TP4 x DP2, lengths sigma 0.8": ((4, 1, 2), (), 0.8),
}
POSITIVES = {  # (layout, slow rank, lengths sigma)
    "1.3x GPU, PP2 x DP32": ((1, 2, 32), 37, 0.8),
    "1.3x GPU, PP4 x DP2": ((1, 4, 2), 5, 0.3),
    "1.3x GPU, TP2 x PP2 x DP4": ((2, 2, 4), 9, 0.8),
    "1.3x GPU, DP2": ((1, 1, 2), 1, 0.3),
}


def _config(rng: random.Random, fmt: str, seed: int, fields: dict) -> SimConfig:
    faults = [parse_fault(f) for f in fields.pop("faults", [])]
    return SimConfig(hidden=4096, seq_length=2048, iterations=rng.choice((2, 3)), host_ahead=True,
                     host_overhead_us=rng.choice((30.0, 60.0, 100.0)), host_noise_us=rng.choice((2.0, 5.0, 10.0)),
                     data_load_us=100.0, jitter_sigma=rng.choice((0.01, 0.02, 0.03)), format=fmt, seed=seed,
                     faults=faults, **fields)


def _verdict(cfg: SimConfig, work: Path):
    simulate(cfg, work, force=True)
    return detect_bundle(load_bundle(work), threshold=0.1)


def _suite_in_megatronapp_format(scale: str) -> Table:
    """The labelled suite's scenarios of one model chunk a stage, in the MegatronApp format."""
    items = [dataclasses.replace(sc, config=dataclasses.replace(sc.config, format="megatronapp"))
             for sc in scenarios(scale, 0) if sc.config.vpp == 1]
    by_class: dict[str, list[int]] = {}
    for r in run_suite(items).results:
        right = (r.false == 0) if r.scenario.negative else r.top1
        row = by_class.setdefault(r.scenario.cls, [0, 0, 0])
        row[0] += 1
        row[1] += int(right and r.error is None)
        row[2] += r.false
    table = Table(title=f"the suite's {scale} scenarios in the MegatronApp format (threshold 0.1)", title_justify="left")
    for col in ("class", "jobs", "right", "suspects no fault"):
        table.add_column(col, justify="left" if col == "class" else "right")
    for cls, (n, right, false) in by_class.items():
        table.add_row(cls, str(n), str(right), str(false))
    total = [sum(v[i] for v in by_class.values()) for i in range(3)]
    table.add_row("all", *(str(x) for x in total))
    return table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=4, help="seeds per format and class (default 4)")
    ap.add_argument("--suite", choices=("none", "ci", "small", "full"), default="none",
                    help="also run the labelled suite's scenarios in the MegatronApp format (default none)")
    args = ap.parse_args()
    if args.suite != "none":
        Console(width=160).print(_suite_in_megatronapp_format(args.suite))
    if args.seeds == 0:
        return
    rng = random.Random(7)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "job"
        for fmt in ("megatronapp", "mapp"):
            for name, fields in NEGATIVES.items():
                wrong = []
                for seed in range(args.seeds):
                    v = _verdict(_config(rng, fmt, seed, dict(fields)), work)
                    if v.suspects:
                        wrong.append(f"seed {seed}: {v.suspects[0].kind} {v.suspects[0].label()}")
                rows.append((fmt, "negative", name, args.seeds, args.seeds - len(wrong), "; ".join(wrong)))
            for name, ((tp, pp, dp), rank, sigma) in POSITIVES.items():
                wrong = []
                for seed in range(args.seeds):
                    fields = dict(tp=tp, pp=pp, dp=dp, layers=4, microbatches=8, seqlen_sigma=sigma,
                                  faults=[f"slow_gpu:{rank}:1.3"])
                    v = _verdict(_config(rng, fmt, seed, fields), work)
                    top = v.suspects[0] if v.suspects else None
                    if top is None or (top.kind, top.rank) != ("slow_compute", rank):
                        wrong.append(f"seed {seed}: " + (f"{top.kind} {top.label()}" if top else "none"))
                rows.append((fmt, "1.3x GPU", name, args.seeds, args.seeds - len(wrong), "; ".join(wrong)))
        rng = random.Random(11)
        for fmt in ("megatronapp", "mapp"):
            for name, (rank, (tp, pp, dp)) in LAYERS_TRACED.items():
                wrong = []
                for seed in range(args.seeds):
                    fields = dict(tp=tp, pp=pp, dp=dp, layers=4, microbatches=8,
                                  faults=[f"slow_gpu:{rank}:1.3"] if rank is not None else [])
                    cfg = dataclasses.replace(_config(rng, fmt, seed, fields), per_layer=True)
                    v = _verdict(cfg, work)
                    top = v.suspects[0] if v.suspects else None
                    if rank is None and top is not None:
                        wrong.append(f"seed {seed}: {top.kind} {top.label()}")
                    elif rank is not None and (top is None or (top.kind, top.rank) != ("slow_compute", rank)):
                        wrong.append(f"seed {seed}: " + (f"{top.kind} {top.label()}" if top else "none"))
                rows.append((fmt, "negative" if rank is None else "1.3x GPU", name, args.seeds,
                             args.seeds - len(wrong), "; ".join(wrong)))
        rng = random.Random(13)
        for fmt in ("megatronapp", "mapp"):
            for name, ((tp, pp, dp), slowed, sigma) in SLOW_NODES.items():
                wrong = []
                for seed in range(args.seeds):
                    fields = dict(tp=tp, pp=pp, dp=dp, layers=4, microbatches=8, seqlen_sigma=sigma,
                                  faults=[f"slow_gpu:{r}:1.3" for r in slowed])
                    v = _verdict(_config(rng, fmt, seed, fields), work)
                    named = {s.rank for s in v.suspects if s.kind == "slow_compute"}
                    top = v.suspects[0] if v.suspects else None
                    if not slowed and top is not None:
                        wrong.append(f"seed {seed}: {top.kind} {top.label()}")
                    elif slowed and (top is None or top.rank not in slowed or not named >= set(slowed)):
                        wrong.append(f"seed {seed}: " + (", ".join(f"{s.kind} {s.label()}" for s in v.suspects)
                                                         or "none"))
                rows.append((fmt, "slow node" if slowed else "negative", name, args.seeds,
                             args.seeds - len(wrong), "; ".join(wrong)))
    table = Table(title="detector on jobs outside the suite (threshold 0.1)", title_justify="left")
    for col in ("format", "class", "job", "runs", "right", "wrong answers"):
        table.add_column(col, justify="right" if col in ("runs", "right") else "left")
    for row in rows:
        table.add_row(*(str(x) for x in row))
    Console(width=160).print(table)


if __name__ == "__main__":
    main()
