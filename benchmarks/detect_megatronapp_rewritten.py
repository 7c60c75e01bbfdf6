"""Benchmark: the detector on real GPU runs written in the original MegatronApp tracer's records.

Run: ``python benchmarks/detect_megatronapp_rewritten.py [DIR ...]`` (default: the committed
corpora that hold megatron-core GPU runs under mapp's capture: ``tests/corpus/cases-fresh``,
``cases-gpu2``, ``cases-gpu2-hog``, ``cases-gpu4-mapp``, ``cases-prod``, ``cases-sched``).

No run of the original tracer is in the corpus; ``tests/corpus/to_megatronapp.py`` rewrites each
GPU run made under mapp's capture into the records the original writes (its module doc says
which, and what it cannot give). Each case is scored as ``mapp bench detect --real`` scores it
(threshold 0.1: the expected top suspect, or none), in the original's records and, beside it,
in mapp's own, to show what the format's records leave the detector. Prints one table, a row
per case, and the totals.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "corpus"))

from rich.console import Console  # noqa: E402
from rich.progress import track  # noqa: E402
from rich.table import Table  # noqa: E402

from mapp.bench.real import load_corpus, run_case  # noqa: E402
from to_megatronapp import convert_set  # noqa: E402

CORPORA = ["cases-fresh", "cases-gpu2", "cases-gpu2-hog", "cases-gpu4-mapp", "cases-prod", "cases-sched"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dirs", nargs="*", type=Path, help="corpus directories (default: the committed ones)")
    args = ap.parse_args()
    dirs = args.dirs or [ROOT / "tests" / "corpus" / d for d in CORPORA]
    table = Table(title="real GPU runs in the original MegatronApp tracer's records (threshold 0.1)",
                  title_justify="left")
    for col in ("corpus", "case", "expected", "original's records", "ok", "mapp's records", "ok "):
        table.add_column(col)
    right = {"ma": 0, "mapp": 0}
    total = 0
    with tempfile.TemporaryDirectory(prefix="mapp-ma-") as tmp:
        for d in dirs:
            sources = {c.id: c for c in load_corpus(d)}
            out = Path(tmp) / d.name
            convert_set(d, out)
            cases = load_corpus(out) if (out / "manifest.json").is_file() else []
            for case in track(cases, description=f"{d.name}", transient=True):
                source = sources[case.id.removesuffix("-ma")]
                ma, own = run_case(case, threshold=0.1), run_case(source, threshold=0.1)
                expected = "none" if case.expect is None else f"{'/'.join(case.expect['kinds'])} {case.expect['rank']}"
                total += 1
                right["ma"] += bool(ma.right)
                right["mapp"] += bool(own.right)
                table.add_row(d.name, source.id, expected, ma.top or ma.error or "none", "yes" if ma.right else "NO",
                              own.top or own.error or "none", "yes" if own.right else "NO")
    Console(width=200).print(table)
    print(f"original's records: {right['ma']} of {total} right; mapp's records: {right['mapp']} of {total}")


if __name__ == "__main__":
    main()
