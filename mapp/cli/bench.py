"""``mapp bench``: measured accuracy and speed of mapp's analyses."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich import box
from rich.table import Table

from mapp.cli._shared import DEFAULT_THRESHOLD
from mapp.cli._ui import console, guarded, progress_bar
from mapp.errors import InputError

__all__ = ["commands"]

# A command group: `mapp bench ...` (see mapp.cli.app)
commands = typer.Typer(name="bench", help="Measure mapp's analyses on simulated and recorded jobs with known answers.", no_args_is_help=True)


def _pct(value: float | None) -> str:
    if value is None:
        return "-"
    return "100%" if value == 1.0 else f"{value:.1%}"


def suite_table(rows: list[dict], title: str) -> Table:
    """A table of suite summary rows (``SuiteResult.rows``)."""
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 0, 0, 1),
                  caption="neg: negative scenarios; flagged: negatives given any suspect; mean/max: "
                  "analysis time after ingest", caption_justify="left")
    for col in ("group", "runs", "faults", "neg", "top-1", "recall", "prec", "flagged", "mean", "max"):
        if col == "group":
            table.add_column(col, no_wrap=True)
        else:
            table.add_column(col, justify="right", no_wrap=True,
                             min_width=6 if col in ("mean", "max") else len(col))
    for r in rows:
        table.add_row(r["group"], str(r["scenarios"]), str(r["faults"]), str(r["negatives"]), _pct(r["top1"]),
                      _pct(r["recall"]), _pct(r["precision"]), str(r["negatives_flagged"]),
                      f"{r['analysis_mean_s'] * 1e3:,.0f} ms", f"{r['analysis_max_s'] * 1e3:,.0f} ms",
                      style="bold" if r["group"] == "all" else None)
    return table


@commands.command("detect")
@guarded
def detect(
    scale: Annotated[str, typer.Option("--scale", help="ci (30 small scenarios), small (8-32 ranks), full (>= 300 scenarios, 8-1,024 ranks) or none (real corpus only).")] = "small",
    seed: Annotated[int, typer.Option("--seed", help="Seed of the scenario list.")] = 0,
    threshold: Annotated[float, typer.Option("--threshold", metavar="T", help="As mapp detect --threshold, the other cuts derived from it as there; a simulated scenario whose injected slowdown is weaker is detected at a lower T (half its slowdown: a 5% GPU at 0.025), so that a 5% fault can be found.")] = DEFAULT_THRESHOLD,
    real: Annotated[Path | None, typer.Option("--real", metavar="DIR", help="Also score a corpus of recorded jobs with known answers (a directory with manifest.json, e.g. tests/corpus/cases).")] = None,
) -> None:
    """Run the labelled straggler suite: simulate, detect, score; and a real-trace corpus.

    Prints precision, recall and top-1 accuracy per fault class and per scale, the negatives
    flagged (should be 0) and the analysis time (after ingest) per scenario. With --real, a
    second table scores recorded jobs (each case's source and what was injected in it).
    """
    if scale not in ("ci", "small", "full", "none"):
        raise InputError(f"--scale {scale}: must be ci, small, full or none")
    if scale == "none" and real is None:
        raise InputError("--scale none runs nothing without --real", "add --real DIR, or pick a --scale")
    cases = None
    if real is not None:
        from mapp.bench.real import load_corpus

        cases = load_corpus(real)   # a bad corpus fails before minutes of simulation
    if scale != "none":
        from mapp.bench.suite import run_suite, scenarios

        items = scenarios(scale, seed)
        with progress_bar(f"running {len(items)} scenarios", unit="scenarios") as update:
            result = run_suite(items, threshold=threshold, progress=update)
        print_suite(console, result, f"simulated: detect suite, scale {scale}, seed {seed}")
    if cases is not None:
        from mapp.bench.real import run_corpus

        with progress_bar(f"running {len(cases)} recorded jobs", unit="jobs") as update:
            results = run_corpus(cases, threshold=threshold, progress=update)
        print_real(console, results, f"real: {real} ({len(cases)} recorded jobs, threshold {threshold:g})")


def print_suite(console, result, title: str) -> None:
    """The suite's tables by fault class and by scale, then one line per missed scenario."""
    console.print(suite_table(result.rows("cls"), f"{title}: by class"))
    console.print(suite_table(result.rows("scale"), "by scale (ranks)"))
    for r in result.failures():
        sc = r.scenario
        c = sc.config
        faults = ", ".join(f"{f.kind}:{f.rank if f.rank is not None else f.ranks}:{f.strength:g}" for f in c.faults) or "none"
        console.print(f"[mapp.warning]miss[/] {sc.id} ({sc.cls}, tp{c.tp} pp{c.pp} dp{c.dp}, {faults}): "
                      f"top suspect {r.top or 'none'}{'; ' + r.error if r.error else ''}", soft_wrap=True)


def print_real(console, results, title: str) -> None:
    """One row per recorded job (its source, what was injected, expected and found), then a summary."""
    from mapp.bench.real import expected_label, summary_rows

    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 0, 0, 1))
    for col in ("case", "source", "injected", "expected", "top suspect", "ok"):
        # Ids and answers stay whole; the prose columns wrap on words in a narrow terminal.
        table.add_column(col, no_wrap=col not in ("source", "injected"))
    for r in results:
        expected = expected_label(r.case)
        found = r.error or r.top or "none"
        if r.said_below:
            weak = f"{r.weak:.0%} of its step" if r.weak is not None else f"its hit part {r.weak_part:.2f}x its peers'"
            found = f"none (below threshold; weak: {weak})"
        table.add_row(r.case.id, r.case.source, r.case.describe_injection(), expected, found,
                      "[mapp.ok]yes[/]" if r.right else "[mapp.warning]NO[/]")
    console.print(table)
    summary = Table(title="real: by class", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False,
                    padding=(0, 0, 0, 1), caption="top-1: faults whose first suspect is the injected rank and kind; "
                    "flagged: healthy/imbalance jobs given any suspect; weak: faults that slowed their rank by less than "
                    "the threshold (on CPUs its injected time, on GPUs the part it hit against its peers'), and of "
                    "those, named or said to be below the threshold",
                    caption_justify="left")
    for col in ("group", "cases", "right", "top-1", "neg", "flagged", "errors", "weak"):
        summary.add_column(col, justify="left" if col == "group" else "right", no_wrap=True)
    for row in summary_rows(results):
        summary.add_row(row["group"], str(row["cases"]), str(row["right"]), _pct(row["top1"]), str(row["negatives"]),
                        str(row["flagged"]), str(row["errors"]),
                        f"{row['weak_said']}/{row['weak']}" if row["weak"] else "-",
                        style="bold" if row["group"] == "all" else None)
    console.print(summary)
