"""Benchmark: how far a rank's input floor stands from its optimizer's, per label, on recorded jobs.

Run: ``python benchmarks/detect_floors.py DIR [DIR ...] [--min-kinds 8]`` (each ``DIR`` a corpus with a
``manifest.json``: ``tests/corpus/cases-users``, a battery made by ``tests/corpus/run_users.py``).

``data_sized.input_floors`` measures, on CPU processes recorded without input shapes, how much
slower a rank's fastest mid-sized calls are than its peers' (``input_floor``) and its optimizer's
(``param_floor``); ``data_sized.larger_inputs`` reads a floor ``INPUTS_APART`` times the
optimizer's or more as larger inputs, not a slower device. This runs stage 1 over every job
(``detector.stage_evidence``, no verdict rules) and prints, per label (the faulted rank of a
fault job, with or without calls beyond its peers'; any rank of an imbalance job), the ranks
measured and the largest ratio of the two floors: the figures ``INPUTS_APART``'s docstring
quotes.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402
from rich.progress import track  # noqa: E402
from rich.table import Table  # noqa: E402

from mapp.analysis.detect.data_sized import PARAM_KINDS  # noqa: E402
from mapp.analysis.detect.detector import stage_evidence  # noqa: E402
from mapp.analysis.detect.thresholds import Thresholds  # noqa: E402
from mapp.analysis.ingest import load_bundle  # noqa: E402


def _rows(dirs: list[str], min_kinds: int):
    jobs = []
    for d in dirs:
        manifest = Path(d) / "manifest.json"
        if manifest.exists():
            jobs += [(Path(d), c) for c in json.loads(manifest.read_text())["cases"]]
    for root, case in track(jobs, description="stage 1 over the jobs"):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ranks = stage_evidence(load_bundle(root / case["path"]), Thresholds.derive(0.1)).peers.ranks
        except Exception:   # a job mapp cannot read is no evidence either way
            continue
        if ranks.is_empty() or "input_floor" not in ranks.columns:
            continue
        culprit = ((case.get("expect") or {}).get("suspect") or {}).get("rank")
        for row in ranks.iter_rows(named=True):
            if (row["input_floor"] is None or row["param_floor"] is None or (row["param_kinds"] or 0) < PARAM_KINDS
                    or (row["input_kinds"] or 0) < min_kinds):
                continue
            if case["class"] == "fault" and row["rank"] == culprit:
                label = "faulted, calls beyond peers'" if (row.get("added") or 1.0) >= 1.1 else "faulted"
            elif case["class"] == "imbalance":
                label = "imbalance"
            else:
                label = "other"
            yield label, row["input_floor"] / row["param_floor"], f"{case['id']} r{row['rank']}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dirs", nargs="+")
    p.add_argument("--min-kinds", type=int, default=8, help="the fewest kinds of mid-sized calls a floor is over")
    args = p.parse_args()
    best: dict[str, tuple[int, float, str]] = {}
    for label, ratio, where in _rows(args.dirs, args.min_kinds):
        n, top, at = best.get(label, (0, 0.0, ""))
        best[label] = (n + 1, ratio, where) if ratio > top else (n + 1, top, at)
    table = Table(title="input floor / optimizer floor, per label")
    for col in ("label", "ranks", "largest ratio", "where"):
        table.add_column(col)
    for label, (n, top, at) in sorted(best.items()):
        table.add_row(label, str(n), f"{top:.2f}", at)
    Console().print(table)


if __name__ == "__main__":
    main()
