"""Benchmark: the detector on many recorded corpora at once, saved and compared run to run.

Run: ``python benchmarks/detect_real.py DIR [DIR ...] [--workers N] [--save FILE] [--compare FILE]``
(default: every committed corpus under ``tests/corpus``).

Each ``DIR`` is a corpus as ``mapp bench detect --real`` takes it (a ``manifest.json`` there or
one level down: a committed set, or a ``make_corpus.py`` run directory holding one set per run).
Every case is detected at threshold 0.1 in a temporary copy and scored as ``mapp bench detect
--real`` scores it, several at once (``--workers``, default 2). Prints a table by class and
source (CPU processes or GPUs, mapp's capture or the profiler), then every case that is wrong.

``--save FILE`` writes one JSON line per case (its directory, id, expected and top suspect,
right or not); ``--compare FILE`` reads such a file from an earlier run (another commit, say)
and lists every case both runs scored whose answer changed, "fixed" or "broken", with the
totals of both on the cases they share: a detector change is judged on every job at once, not
one directory at a time.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402
from rich.progress import Progress  # noqa: E402
from rich.table import Table  # noqa: E402

from mapp.bench.real import RealCase, load_corpus, result_record, run_case  # noqa: E402
from mapp.errors import InputError  # noqa: E402


def _default_dirs() -> list[Path]:
    return sorted(p for p in (ROOT / "tests" / "corpus").glob("cases*") if (p / "manifest.json").is_file())


def _score(case: RealCase) -> dict:
    return result_record(run_case(case, threshold=0.1))


def _group(record: dict) -> str:
    where = "GPU" if record["source"].startswith("GPU") else "CPU"
    return f"{record['class']}, {where}, {record['format'] or '?'}"


def _read(path: Path) -> dict[str, dict]:
    try:
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        return {r["key"]: r for r in rows}
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise InputError(f"{path}: not a file of saved results ({type(error).__name__}: {error})",
                         "pass a file written by --save") from None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dirs", nargs="*", type=Path, help="corpus directories (default: tests/corpus/cases*)")
    ap.add_argument("--workers", type=int, default=2, help="cases detected at once (default 2)")
    ap.add_argument("--save", type=Path, help="write one JSON line per case here")
    ap.add_argument("--compare", type=Path, help="a file written by --save: list the cases whose answer changed")
    args = ap.parse_args()
    console = Console()
    try:
        before = _read(args.compare) if args.compare else None
        if args.save and args.save.exists() and args.compare and args.save.resolve() == args.compare.resolve():
            raise InputError(f"--save {args.save} is the file --compare reads", "save to another file")
        cases = [c for d in (args.dirs or _default_dirs()) for c in load_corpus(d)]
    except InputError as error:
        console.print(f"[red]error:[/] {error}")
        raise SystemExit(2) from None
    records = []
    with ProcessPoolExecutor(max(1, args.workers)) as pool, Progress(console=console, transient=True) as progress:
        task = progress.add_task(f"detecting {len(cases)} recorded jobs", total=len(cases))
        for record in pool.map(_score, cases, chunksize=1):
            records.append(record)
            progress.advance(task)
    if args.save:
        args.save.write_text("".join(json.dumps(r) + "\n" for r in records))

    table = Table(title=f"real corpora: {len(records)} recorded jobs (threshold 0.1)", title_justify="left")
    for col in ("class, machine, format", "jobs", "right", "share"):
        table.add_column(col, justify="left" if col.startswith("class") else "right")
    jobs, right = Counter(_group(r) for r in records), Counter(_group(r) for r in records if r["right"])
    for key in sorted(jobs):
        table.add_row(key, str(jobs[key]), str(right[key]), f"{right[key] / jobs[key]:.1%}")
    total = sum(r["right"] for r in records)
    table.add_row("all", str(len(records)), str(total), f"{total / max(len(records), 1):.1%}", style="bold")
    console.print(table)
    for r in records:
        if not r["right"]:
            console.print(f"wrong {r['id']} ({r['dir']}): expected {r['expected']}, got {r['error'] or r['top'] or 'none'}"
                          + (" (weak, said below threshold)" if r["said_below"] else ""), soft_wrap=True)
    if before is not None:
        common = [r for r in records if r["key"] in before]
        console.print(f"compared with {args.compare}: {len(common)} jobs in both, right "
                      f"{sum(before[r['key']]['right'] for r in common)} then, {sum(r['right'] for r in common)} now")
        for r in common:
            old = before[r["key"]]
            if old["right"] != r["right"] or old["top"] != r["top"]:
                change = "fixed" if r["right"] and not old["right"] else "broken" if old["right"] else "changed"
                console.print(f"{change} {r['id']} ({r['dir']}): {old['top'] or 'none'} -> {r['top'] or 'none'}",
                              soft_wrap=True)


if __name__ == "__main__":
    main()
