"""Benchmark: the detector on many recorded corpora at once, saved and compared run to run.

Run: ``python benchmarks/detect_real.py DIR [DIR ...] [--workers N] [--save FILE] [--compare FILE]
[--without first|last|slowed]``
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
one directory at a time. A case is the same case by its trace directory, or else by its
corpus directory's name and its id (the committed corpora of another worktree).

``--without first|last|slowed`` scores every case with one rank's trace left out of its copy
(rank 0, the last rank, or the rank the case slowed -- the last rank where it slowed none), as
where a job was profiled on some of its ranks: where the missing rank is the one the case
expects, it is right only with no suspect (no traced rank blamed for waiting on it).

Then, for the CPU fault jobs named right whose manifest measured the injected time a step
(``injected_ms_per_step``: the sleep or extra work the job timed), what the verdict costed a
step against it, by the suspect's kind and whether the job is a pipeline. Not on GPUs: there the
job times its injected GPU work on its host as launched (0.2 ms a step for a DDP rank's 1.5x
matmuls on 2 H200s), not as it ran.
"""

from __future__ import annotations

import argparse
import json
import statistics
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


def _left_out(case: RealCase, which: str | None) -> int | None:
    """The rank ``--without`` leaves out of ``case``."""
    if which is None:
        return None
    lay = case.layout
    world = (int(lay["tp"]) * int(lay["pp"]) * int(lay["dp"]) if all(lay.get(k) for k in ("tp", "pp", "dp"))
             else sum(1 for p in case.directory.iterdir() if p.name.endswith((".json", ".json.gz"))))
    last = world - 1
    if which == "first":
        return 0
    if which == "slowed" and case.expect is not None:
        return int(case.expect["rank"])
    return last


def _score(job: tuple[RealCase, str | None]) -> dict:
    case, which = job
    without = _left_out(case, which)
    return {**result_record(run_case(case, threshold=0.1, without=without)), "without": without}


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


def _same(records: list[dict], before: dict[str, dict]) -> list[tuple[dict, dict]]:
    """(now, then) for every case both runs scored: by trace directory, else by corpus name and id."""
    by_name = {(Path(r["dir"]).name, r["id"]): r for r in before.values()}
    pairs = []
    for r in records:
        old = before.get(r["key"]) or by_name.get((Path(r["dir"]).name, r["id"]))
        if old is not None:
            pairs.append((r, old))
    return pairs


def _cost_table(records: list[dict]) -> Table | None:
    """Cost / injected time a step of the CPU fault jobs named right whose manifest measured it
    (on GPUs the job's host timed its GPU work as launched: the module doc)."""
    rows: dict[str, list[tuple[float, bool]]] = {}
    for r in records:
        injected, cost = r.get("injected_ms_per_step"), r.get("cost_ms")
        if (not r["right"] or r["class"] != "fault" or not injected or cost is None
                or not r["source"].startswith("CPU")):
            continue
        key = f"{r['top'].split()[0]}, {'pipeline' if r['pipeline'] else 'no pipeline'}"
        rows.setdefault(key, []).append((cost / injected, bool(r["iteration_ms"]) and cost > r["iteration_ms"]))
    if not rows:
        return None
    table = Table(title="cost a step / injected time a step (fault jobs named right)", title_justify="left")
    for col in ("suspect, job", "jobs", "median", "lowest", "highest", "over its step"):
        table.add_column(col, justify="left" if col.startswith("suspect") else "right")
    for key in sorted(rows):
        ratios = [x for x, _ in rows[key]]
        table.add_row(key, str(len(ratios)), f"{statistics.median(ratios):.2f}", f"{min(ratios):.2f}",
                      f"{max(ratios):.2f}", str(sum(over for _, over in rows[key])))
    return table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dirs", nargs="*", type=Path, help="corpus directories (default: tests/corpus/cases*)")
    ap.add_argument("--workers", type=int, default=2, help="cases detected at once (default 2)")
    ap.add_argument("--save", type=Path, help="write one JSON line per case here")
    ap.add_argument("--compare", type=Path, help="a file written by --save: list the cases whose answer changed")
    ap.add_argument("--without", choices=["first", "last", "slowed"],
                    help="leave one rank's trace out of every case (see the module doc)")
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
        for record in pool.map(_score, [(c, args.without) for c in cases], chunksize=1):
            records.append(record)
            progress.advance(task)
    if args.save:
        args.save.write_text("".join(json.dumps(r) + "\n" for r in records))

    title = f"real corpora: {len(records)} recorded jobs (threshold 0.1)" + (
        f", each without its {args.without} rank's trace" if args.without else "")
    table = Table(title=title, title_justify="left")
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
    if (costs := _cost_table(records)) is not None:
        console.print(costs)
    if before is not None:
        common = _same(records, before)
        console.print(f"compared with {args.compare}: {len(common)} jobs in both, right "
                      f"{sum(old['right'] for _, old in common)} then, {sum(r['right'] for r, _ in common)} now")
        for r, old in common:
            if old["right"] != r["right"] or old["top"] != r["top"]:
                change = "fixed" if r["right"] and not old["right"] else "broken" if old["right"] else "changed"
                console.print(f"{change} {r['id']} ({r['dir']}): {old['top'] or 'none'} -> {r['top'] or 'none'}",
                              soft_wrap=True)


if __name__ == "__main__":
    main()
