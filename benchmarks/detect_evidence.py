"""Benchmark: what the detector's stages measure on real jobs, beside what was injected.

Run: ``python benchmarks/detect_evidence.py DIR [DIR ...] [--out evidence.parquet]``
(each ``DIR`` a corpus of ``tests/corpus/make_corpus.py``: ``tests/corpus/cases-fresh`` say,
or a held-out set made with ``--out``); ``--from evidence.parquet`` prints the tables again
from a table written before, without running the stages.

The verdict's constants for compute timed on shared CPUs (``shared_cpus.CONTENTION``,
``ONE_RANK_A_STAGE``, the joint rule of ``verdict._compute_suspect``), for larger inputs
(``data_sized.INPUTS_APART``) and for a GPU another
process time-slices (``time_slices.RANDOM``, ``device.NEIGHBOUR_SM_PCT``) are cut-offs between what healthy processes there
measure and what faults do. This runs the three stages over every job
of the corpora (``detector.stage_evidence``, no verdict rules), labels each rank by the job's
manifest (the injected rank of a fault job, another rank of one, a rank of a healthy or an
imbalance job) and prints, per rule, the range of the quantity its constant cuts, per label:
the figures the constants' docstrings quote, reproducible on any set. ``--out`` writes the
per-rank table (parquet) for ``mapp sql`` or DuckDB.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import polars as pl  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.progress import Progress  # noqa: E402
from rich.table import Table  # noqa: E402

from mapp.analysis.detect.data_sized import PARAM_KINDS  # noqa: E402
from mapp.analysis.detect.detector import stage_evidence  # noqa: E402
from mapp.analysis.detect.gates import keeps_waiting  # noqa: E402
from mapp.analysis.detect.thresholds import CONSISTENT, Thresholds  # noqa: E402
from mapp.analysis.detect.time_slices import MIN_SLOW_OPS  # noqa: E402
from mapp.analysis.ingest import load_bundle  # noqa: E402
from mapp.bench.real import RealCase, load_corpus  # noqa: E402
from mapp.errors import InputError  # noqa: E402

_PEER_COLUMNS = ("slowdown", "z", "flagged", "lasting", "excess_ns", "busy_ns", "gap_excess_ns", "gap_z",
                 "gap_flagged", "long_excess_ns", "steady", "input_floor", "input_kinds", "param_floor",
                 "param_kinds", "added")
_LATE_COLUMNS = ("instances", "share_last", "expected_share", "last_z", "net_ns", "net_z", "others_net_ns",
                 "net_lasting", "flagged")
_NVML_COLUMNS = ("nvml_other_sm_pct", "nvml_neighbour_samples", "nvml_samples")
_SLICE_COLUMNS = ("sum_ratio", "lasting", "slow_ops", "place_lift", "microbatch_lift", "flagged", "raw_ratio",
                  "raw_lasting")


def _role(case: RealCase, rank: int) -> str:
    if case.expect is None:
        return case.cls                      # "healthy" or "imbalance"
    return "injected rank" if rank == case.expect.get("rank") else "other rank, fault job"


def case_rows(case: RealCase, cuts: Thresholds) -> list[dict]:
    """One row per traced rank of ``case``: its stage 1 and stage 2 figures and its label
    (detected in a temporary copy: no cache is written beside the corpus)."""
    with tempfile.TemporaryDirectory(prefix="mapp-evidence-") as tmp:
        target = Path(tmp) / "job"
        shutil.copytree(case.directory, target, ignore=shutil.ignore_patterns(".mapp"))
        ev = stage_evidence(load_bundle(target), cuts)
    if ev.peers.mode == "skipped":
        return []
    late = {r["rank"]: r for r in ev.lateness.ranks.iter_rows(named=True)} if ev.lateness.ran else {}
    sliced = {r["rank"]: r for r in ev.peers.sliced.iter_rows(named=True)} if ev.peers.sliced is not None else {}
    traced = ev.peers.rank_iterations["iteration"].n_unique() if not ev.peers.rank_iterations.is_empty() else 0
    counters = {r["rank"]: r for r in ev.counters.iter_rows(named=True)} if ev.counters is not None else {}
    rows = []
    for p in ev.peers.ranks.iter_rows(named=True):
        l = late.get(p["rank"]) or {}
        rows.append({
            "job": case.id, "corpus": str(case.directory.parent), "format": case.format, "role": _role(case, p["rank"]),
            "rank": p["rank"], "ranks": ev.peers.ranks.height, "mode": ev.peers.mode, "counted": ev.peers.counted,
            "shared_cpus": ev.shared_cpus, "z_crit": ev.peers.z_crit, "traced": traced,
            "flagged_iterations": len(p["iterations"] or []),
            **{k: p.get(k) for k in _PEER_COLUMNS},
            "late_cut": ev.lateness.z_crit if ev.lateness.ran else None,
            **{f"late_{k}": l.get(k) for k in _LATE_COLUMNS},
            "keeps_waiting": keeps_waiting(l) if l else False,
            "threshold": cuts.slowdown,
            **{f"slice_{k}": (sliced.get(p["rank"]) or {}).get(k) for k in _SLICE_COLUMNS},
            **{c: (counters.get(p["rank"]) or {}).get(c.removeprefix("nvml_")) for c in _NVML_COLUMNS},
        })
    return rows


def _leaning(df: pl.DataFrame) -> pl.Expr:
    """Stage 2 leans (``verdict._compute_suspect``): last far more often than chance, or in a job
    of two ranks keeping the other waiting in nearly every step and last no less often than chance."""
    pair = (pl.col("ranks") == 2) & pl.col("keeps_waiting") & (pl.col("late_share_last") >= pl.col("late_expected_share"))
    return (pl.col("late_net_ns") > 0) & ((pl.col("late_last_z") > pl.col("late_cut")) | pair)


def _lasting() -> pl.Expr:
    """Flagged in nearly every traced iteration: the timed rules below judge only such ranks
    (``shared_cpus.above_shared_cpus`` sets the others aside first: contention comes and goes)."""
    return pl.col("flagged_iterations") >= CONSISTENT * pl.col("traced")


def _floors() -> pl.Expr:
    """Input and optimizer floors measured, over 8 kinds of mid-sized calls or more and
    ``data_sized.PARAM_KINDS`` of the optimizer's."""
    return (pl.col("input_floor").is_not_null() & pl.col("param_floor").is_not_null()
            & (pl.col("input_kinds") >= 8) & (pl.col("param_kinds") >= PARAM_KINDS))


RULES = {
    # name: (which ranks, the quantity, what the constant cuts)
    "joint rule on shared CPUs (CONTENTION 1.3x)": (
        lambda df: pl.col("shared_cpus") & ~pl.col("flagged") & _leaning(df) & (pl.col("z") > pl.col("z_crit") / 2),
        pl.col("slowdown"), "unflagged ranks stage 2 leans on: their slowdown; a rank is named jointly from 1.3x"),
    "timed alone, calls counted (CONTENTION 1.3x)": (
        lambda df: pl.col("shared_cpus") & pl.col("counted") & pl.col("flagged") & _lasting() & (pl.col("mode") != "layer peers"),
        pl.col("slowdown"), "lasting flagged ranks' slowdown by their times; under 1.3x no suspect without counted work"),
    "one rank a stage, uncounted (ONE_RANK_A_STAGE 1.55x)": (
        lambda df: pl.col("shared_cpus") & ~pl.col("counted") & pl.col("flagged") & _lasting() & (pl.col("mode") == "layer peers"),
        pl.col("slowdown"), "lasting flagged ranks' slowdown against the other stages' layers; under 1.55x no suspect"),
    "host: stalls beyond idle excess, ms": (
        lambda df: pl.col("shared_cpus") & pl.col("gap_flagged"),
        (pl.col("long_excess_ns") - pl.col("gap_excess_ns").clip(lower_bound=0)) / 1e6,
        "hosts named by idle time: stalls beyond their idle excess, ms a step"),
    "time slices: the larger lift (RANDOM 0.25)": (
        lambda df: (pl.col("slice_lasting") >= CONSISTENT) & (pl.col("slice_slow_ops") >= MIN_SLOW_OPS)
        & (pl.col("slice_sum_ratio") >= 1 + pl.col("threshold")) & pl.col("keeps_waiting"),
        pl.max_horizontal("slice_place_lift", "slice_microbatch_lift"),
        "ranks on GPUs summing slower by the threshold in nearly every step, keeping their peers waiting: "
        "the larger of their two lifts over chance; under 0.25 on both, a time-sliced GPU"),
    "steady rank waiting net below the others (STANDS_BELOW -1)": (
        lambda df: pl.col("shared_cpus") & pl.col("steady").is_not_null() & (pl.col("late_net_ns") < 0)
        & (pl.col("late_net_ns") < pl.col("late_others_net_ns")),
        pl.col("late_net_z"),
        "the job's steady rank (layers slower in every step, alone) waiting net more than the others' median: "
        "its net_z; stage 2 overrules it only under -1 (lateness.stands_out_waiting)"),
    "larger inputs: input floor / optimizer's, no added calls (INPUTS_APART 2)": (
        lambda df: _floors() & (pl.col("added").fill_null(1.0) < 1 + pl.col("threshold")),
        pl.col("input_floor") / pl.col("param_floor"),
        "ranks whose fastest mid-sized calls and optimizer's were measured (data_sized.input_floors), no calls "
        "beyond their peers': the ratio of the two floors; from 2, larger inputs whatever the optimizer's"),
    "larger inputs: the same, added calls": (
        lambda df: _floors() & (pl.col("added").fill_null(1.0) >= 1 + pl.col("threshold")),
        pl.col("input_floor") / pl.col("param_floor"),
        "as above, ranks with calls beyond their peers' (which larger_inputs never reads as inputs)"),
    "neighbour seen: other processes' SMs, % (NEIGHBOUR_SM_PCT 0)": (
        lambda df: pl.col("nvml_other_sm_pct").is_not_null(),
        pl.col("nvml_other_sm_pct"),
        "ranks whose capture sampled NVML's processes: the most of their GPU's SMs another process took in a "
        "sample; more than 0, a neighbour seen"),
}


def summary(df: pl.DataFrame) -> Table:
    table = Table(title="what the stages measure, per rule and label (min / median / max)")
    # a table written (--out) before a column was added reads as that column unmeasured
    df = df.with_columns(pl.lit(None, pl.Float64).alias(c) for c in (*_NVML_COLUMNS, "steady", "late_others_net_ns", "input_floor",
                                                                "input_kinds", "param_floor", "param_kinds", "added")
                         if c not in df.columns)
    for col in ("rule", "label", "ranks", "min", "median", "max", "jobs at the max"):
        table.add_column(col, justify="right" if col in ("ranks", "min", "median", "max") else "left")
    for name, (which, value, _) in RULES.items():
        picked = df.filter(which(df)).with_columns(v=value)
        shown = name
        for role in ("injected rank", "other rank, fault job", "healthy", "imbalance"):
            part = picked.filter(pl.col("role") == role).drop_nulls("v")
            if part.is_empty():
                continue
            top = part.sort("v").row(-1, named=True)
            table.add_row(shown, role, str(part.height), f"{part['v'].min():.3f}", f"{part['v'].median():.3f}",
                          f"{part['v'].max():.3f}", f"{top['job']} r{top['rank']}")
            shown = ""
    return table


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dirs", nargs="*", help="corpus directories (each with a manifest.json)")
    p.add_argument("--from", dest="source", help="print the tables from a per-rank table written by --out")
    p.add_argument("--threshold", type=float, default=0.1)
    p.add_argument("--out", help="write the per-rank table here (.parquet)")
    args = p.parse_args()
    console = Console(width=None if sys.stdout.isatty() else 170)   # piped: wide enough for the job names
    if args.source:
        df = pl.read_parquet(args.source)
        console.print(summary(df))
        console.print(f"{df.select('corpus', 'job').n_unique()} jobs, {df.height} ranks, from {args.source}")
        return
    if not args.dirs:
        p.error("give corpus directories, or --from a table written by --out")
    if args.out and any(Path(d).resolve() in Path(args.out).resolve().parents for d in args.dirs):
        sys.exit(f"{args.out}: inside a corpus given; write --out elsewhere")
    try:
        cases = [c for d in args.dirs for c in load_corpus(d)]
    except InputError as error:          # a folder that is no corpus: one line, not a traceback
        sys.exit(f"error: {error}")
    cuts = Thresholds.derive(args.threshold)
    rows: list[dict] = []
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("stages over the jobs", total=len(cases))
        for case in cases:
            try:
                rows += case_rows(case, cuts)
            except Exception as error:   # a damaged job is reported, the rest still measured
                console.print(f"[yellow]{case.id}: {type(error).__name__}: {error}")
            progress.advance(task)
    df = pl.DataFrame(rows, infer_schema_length=None)
    if args.out:
        out = Path(args.out)
        df.write_parquet(out)
    console.print(summary(df))
    console.print(f"{len(cases)} jobs, {df.height} ranks, threshold {args.threshold:g}"
                  + (f"; per-rank table in {args.out}" if args.out else ""))


if __name__ == "__main__":
    main()
