"""Benchmark: the detector on the real profiler corpus as the profiler writes it by default.

Run: ``python benchmarks/detect_without_shapes.py [--rewrite KIND] [DIR ...]`` (default: the
committed corpora ``tests/corpus/cases``, ``cases-extra``, ``cases-gpu2``, ``cases-gpu4``).

``torch.profiler`` records input shapes only with ``record_shapes=True``; traces users bring
often have none. Every PyTorch-profiler case of the corpora is copied with its events' ``Input
Dims``, ``Input type``, ``Input Strides`` and ``Concrete Inputs`` removed, then scored as
``mapp bench detect --real`` scores it (threshold 0.1): the case's expected top suspect, or none.
Prints one table, a row per case, and the total.

``--rewrite`` copies the traces as older PyTorch versions wrote them instead: ``no-base-time``
(no ``baseTimeNanoseconds``: every ``ts`` absolute), ``no-comm-args`` (no ``Collective name``,
message sizes, group or rank arguments on any event), ``old-nccl-names`` (NCCL kernels named
``ncclKernel_<Op>_<Algo>_<Proto>_<Red>_<type>(...)``, not ``ncclDevKernel_*``), ``older-torch``
(all three); ``no-shapes`` is the default.
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
COMM_ARGS = ("Collective name", "In msg nelems", "Out msg nelems", "Group size", "dtype", "In split size",
             "Out split size", "Process Group Name", "Process Group Description", "Process Group Ranks", "Seq",
             "Rank", "Dst Rank", "Src Rank")


def _no_shapes(doc: dict) -> None:
    for event in doc["traceEvents"]:
        for key in SHAPE_ARGS:
            (event.get("args") or {}).pop(key, None)


def _no_base_time(doc: dict) -> None:
    base_us = doc.pop("baseTimeNanoseconds", 0) / 1000
    for event in doc["traceEvents"]:
        if "ts" in event:
            event["ts"] += base_us


def _no_comm_args(doc: dict) -> None:
    for event in doc["traceEvents"]:
        args = event.get("args") or {}
        if "Collective name" in args:
            for key in COMM_ARGS:
                args.pop(key, None)


def _old_nccl_names(doc: dict) -> None:
    for event in doc["traceEvents"]:
        name = event.get("name", "")
        if event.get("cat") == "kernel" and name.startswith("ncclDevKernel_"):
            # ncclDevKernel_AllReduce_Sum_f32_RING_LL(...) -> ncclKernel_AllReduce_RING_LL_Sum_f32(...):
            # the algorithm and protocol (upper case) before the reduction and type
            op, *rest = name.split("(")[0].removeprefix("ncclDevKernel_").split("_")
            algo = [p for p in rest if p.isupper()]
            event["name"] = "_".join(["ncclKernel", op, *algo, *(p for p in rest if not p.isupper())]) + \
                "(ncclDevComm*, ncclWork*)"


REWRITES = {
    "no-shapes": (_no_shapes,),
    "no-base-time": (_no_base_time,),
    "no-comm-args": (_no_comm_args,),
    "old-nccl-names": (_old_nccl_names,),
    "older-torch": (_no_base_time, _no_comm_args, _old_nccl_names),
}


def rewrite(src: Path, dst: Path, kind: str = "no-shapes") -> None:
    """Copy the traces in ``src`` to ``dst`` rewritten as ``REWRITES[kind]`` says."""
    dst.mkdir(parents=True)
    for f in sorted(src.glob("rank-*.json*")):
        opener = gzip.open if f.suffix == ".gz" else open
        with opener(f, "rt") as fh:
            doc = json.load(fh)
        for step in REWRITES[kind]:
            step(doc)
        with opener(dst / f.name, "wt") as fh:
            json.dump(doc, fh)



def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dirs", nargs="*", type=Path, help="corpus directories (default: the committed ones)")
    ap.add_argument("--rewrite", choices=sorted(REWRITES), default="no-shapes",
                    help="how the traces are rewritten before scoring (default: no-shapes)")
    args = ap.parse_args()
    dirs = args.dirs or [ROOT / "tests" / "corpus" / d for d in CORPORA]
    table = Table(title=f"real profiler traces, {args.rewrite} (threshold 0.1)", title_justify="left")
    for col in ("corpus", "case", "expected", "top suspect", "ok"):
        table.add_column(col)
    right = total = 0
    with tempfile.TemporaryDirectory(prefix="mapp-noshapes-") as tmp:
        for d in dirs:
            for case in load_corpus(d):
                if case.format != "kineto":
                    continue
                copy = Path(tmp) / d.name / case.id
                rewrite(case.directory, copy, args.rewrite)
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
