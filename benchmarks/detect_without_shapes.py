"""Benchmark: the detector on the real profiler corpus as the profiler writes it by default.

Run: ``python benchmarks/detect_without_shapes.py [DIR ...]`` (default: the committed corpora
``tests/corpus/cases``, ``cases-extra``, ``cases-gpu2``, ``cases-gpu4``).

``torch.profiler`` records input shapes only with ``record_shapes=True``; traces users bring
often have none. Every PyTorch-profiler case of the corpora is copied with its events' ``Input
Dims``, ``Input type``, ``Input Strides`` and ``Concrete Inputs`` removed, then scored as
``mapp bench detect --real`` scores it (threshold 0.1): the case's expected top suspect, or none.
Prints one table, a row per case, and the total.
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from mapp.bench.real import load_corpus, run_case  # noqa: E402

CORPORA = ["cases", "cases-extra", "cases-gpu2", "cases-gpu4"]
SHAPE_ARGS = ("Input Dims", "Input type", "Input Strides", "Concrete Inputs")


def strip_shapes(src: Path, dst: Path) -> None:
    """Copy the traces in ``src`` to ``dst`` without the argument fields ``record_shapes`` adds."""
    dst.mkdir(parents=True)
    for f in sorted(src.glob("rank-*.json*")):
        opener = gzip.open if f.suffix == ".gz" else open
        with opener(f, "rt") as fh:
            doc = json.load(fh)
        for event in doc["traceEvents"]:
            for key in SHAPE_ARGS:
                (event.get("args") or {}).pop(key, None)
        with opener(dst / f.name, "wt") as fh:
            json.dump(doc, fh)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dirs", nargs="*", type=Path, help="corpus directories (default: the committed ones)")
    args = ap.parse_args()
    dirs = args.dirs or [ROOT / "tests" / "corpus" / d for d in CORPORA]
    table = Table(title="real profiler traces without shapes (threshold 0.1)", title_justify="left")
    for col in ("corpus", "case", "expected", "top suspect", "ok"):
        table.add_column(col)
    right = total = 0
    with tempfile.TemporaryDirectory(prefix="mapp-noshapes-") as tmp:
        for d in dirs:
            for case in load_corpus(d):
                if case.format != "kineto":
                    continue
                copy = Path(tmp) / d.name / case.id
                strip_shapes(case.directory, copy)
                result = run_case(dataclasses.replace(case, directory=copy), threshold=0.1)
                expected = "none" if case.expect is None else f"{'/'.join(case.expect['kinds'])} {case.expect['rank']}"
                total += 1
                right += bool(result.right)
                table.add_row(d.name, case.id, expected, result.top or result.error or "none",
                              "yes" if result.right else "NO")
    Console().print(table)
    print(f"{right} of {total} right")


if __name__ == "__main__":
    main()
