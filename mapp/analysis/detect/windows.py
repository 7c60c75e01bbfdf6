"""Detection a few iterations at a time, for traces too large to analyse at once.

``detect_windows(bundle, window=N)`` runs the whole detector (matching, clock alignment, the
three stages) on each run of ``N`` traced iterations in turn and merges the verdicts. Every
step of the detector works within an iteration (a collective instance, a p2p message and a
pipeline schedule never span two), so a window loses nothing but the statistics pooled over
more iterations; memory follows the window's events, not the job's. The windows are
independent, so an engine may run them side by side (``mapp detect --engine ray``): only
their verdicts travel.

Merging, as the detector judges iterations: a suspect must be found in nearly every window
(``CONSISTENT``), or, for a fault that came and went, in two windows or more: one window that
stands out is what noise does on busy hosts (measured on the recorded CPU jobs of
``tests/corpus``: single windows named healthy ranks at 1.2-1.5x), and many windows are many
chances for it; those are listed in the notes. Each suspect says in how many windows it was
found; its slowdown and its cost per iteration are the median over those windows, ranked by the
time it cost the whole trace. A window should hold two iterations or more: the detector's own
checks across iterations (a flag that lasts, launch gaps judged together) need them, and with
one iteration per window only the merge stands between noise and a verdict. A window is not
searched for a fault that set in inside it (``onset``): the merge judges faults across windows.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import Any

import polars as pl

from mapp.analysis.detect.detector import detect_bundle
from mapp.analysis.detect.thresholds import CONSISTENT
from mapp.analysis.detect.findings import Imbalance, StageStatus, Suspect, Verdict
from mapp.errors import InputError

__all__ = ["detect_windows", "iteration_windows", "merge_verdicts"]


def iteration_windows(bundle, window: int) -> list[tuple[int, ...]]:
    """The bundle's traced iterations in runs of ``window`` (the last one may be shorter)."""
    if window < 1:
        raise InputError(f"--window {window}: must be at least 1 (iterations per window)")
    iterations = bundle.traced_iterations()
    if not iterations:
        raise InputError("--window: these traces record no iterations, so they cannot be analysed a few at a time",
                         "run mapp detect without --window")
    return [tuple(iterations[i:i + window]) for i in range(0, len(iterations), window)]


def detect_windows(bundle, *, window: int, threshold: Any, layout: Any = None,
                   run: Callable[[list[tuple[int, ...]]], list[Verdict]] | None = None,
                   progress: Callable[[int, int], None] | None = None) -> Verdict:
    """Detect on each window of ``window`` iterations and merge (see the module doc).

    ``run``: maps the windows to their verdicts elsewhere (a cluster); by default they run
    here, one after the other, ``progress(done, total)`` after each."""
    windows = iteration_windows(bundle, window)
    if run is not None:
        verdicts = run(windows)
    else:
        verdicts = []
        for done, its in enumerate(windows, 1):
            verdicts.append(detect_bundle(bundle.window(its), threshold=threshold, layout=layout, onsets=False))
            if progress is not None:
                progress(done, len(windows))
    return merge_verdicts(verdicts, windows)


def merge_verdicts(verdicts: Sequence[Verdict], windows: Sequence[Sequence[int]]) -> Verdict:
    """One verdict from the verdicts of consecutive windows of one job."""
    if len(verdicts) == 1:
        return verdicts[0]
    first = verdicts[0]
    suspects, hiccups = [], []
    for s in _merge_suspects(verdicts, windows):
        (suspects if _lasting(s, len(verdicts)) else hiccups).append(s)
    named = {s.rank for s in suspects} | {s.peer for s in suspects if s.peer is not None}
    victims = sorted({r for v in verdicts for r in v.victims} - named)
    sizes = sorted({len(w) for w in windows})
    notes = [f"analysed in {len(windows)} windows of {'-'.join(map(str, sorted({sizes[0], sizes[-1]})))} iterations "
             "(--window): a suspect is one found in nearly every window, or in two or more"]
    if hiccups:
        notes.append("in one window only (taken for noise): " + "; ".join(
            f"{s.kind.replace('_', ' ')} {s.label()} {s.slowdown:.3f}x in {s.evidence['windows']['found_in']} of "
            f"{len(verdicts)}" for s in hiccups))
    for v in verdicts:
        notes += [n for n in v.notes if n not in notes]
    timings: dict[str, float] = {}
    for v in verdicts:
        for k, t in v.timings_s.items():
            timings[k] = timings.get(k, 0.0) + t
    iteration = [v.iteration_ns for v in verdicts if v.iteration_ns is not None]
    # a rank below the threshold in some window and named in none: listed once, its slowest reading
    below: dict[tuple, Suspect] = {}
    for v in verdicts:
        for b in v.below:
            if (b.rank, b.peer) not in {(s.rank, s.peer) for s in suspects} and (
                    _key(b) not in below or b.slowdown > below[_key(b)].slowdown):
                below[_key(b)] = b
    return Verdict(
        suspects=suspects, imbalance=_merge_imbalance(verdicts), stages=_merge_stages(verdicts),
        layout=first.layout, layout_sizes=first.layout_sizes, traced=first.traced, unrecorded=first.unrecorded,
        victims=victims, grid=_merge_grid(verdicts, named, set(victims)),
        iteration_ns=statistics.median(iteration) if iteration else None,
        threshold=first.threshold, thresholds=first.thresholds, timings_s=timings, notes=notes,
        below=list(below.values()),
    )


def _key(s: Suspect) -> tuple:
    return s.kind, s.rank, s.peer, tuple(s.group or ())


def _merge_suspects(verdicts: Sequence[Verdict], windows: Sequence[Sequence[int]]) -> list[Suspect]:
    found: dict[tuple, list[tuple[int, Suspect]]] = {}
    for w, v in enumerate(verdicts):
        for s in v.suspects:
            found.setdefault(_key(s), []).append((w, s))
    merged = []
    for hits in found.values():
        ss = [s for _, s in hits]
        strongest = max(ss, key=lambda s: s.excess_ns)
        iterations = sorted({i for w, s in hits for i in (s.iterations or windows[w])})
        evidence = {**strongest.evidence, "windows": {"found_in": len(hits), "of": len(verdicts),
                                                      "iterations": iterations}}
        merged.append(Suspect(
            rank=strongest.rank, kind=strongest.kind, peer=strongest.peer, group=strongest.group,
            coords=strongest.coords, confidence=max(s.confidence for s in ss),
            slowdown=statistics.median(s.slowdown for s in ss), iterations=iterations,
            excess_ns=statistics.median(s.excess_ns for s in ss),
            iteration_ns=statistics.median(s.iteration_ns for s in ss) if all(s.iteration_ns for s in ss) else None,
            evidence=evidence,
        ))
    # what it cost the trace: per affected iteration, times the iterations it struck
    merged.sort(key=lambda s: (-s.excess_ns * len(s.iterations), -s.confidence))
    return merged


def _lasting(s: Suspect, windows: int) -> bool:
    found = s.evidence["windows"]["found_in"]
    return found >= CONSISTENT * windows or found >= 2


def _merge_imbalance(verdicts: Sequence[Verdict]) -> list[Imbalance]:
    """Workload imbalance is a property of the job: what most windows found, as the first of
    them said it."""
    seen: dict[tuple, list[Imbalance]] = {}
    for v in verdicts:
        for i in v.imbalance:
            seen.setdefault((i.kind, i.evidence.get("stage")), []).append(i)
    return [found[0] for found in seen.values() if 2 * len(found) > len(verdicts)]


def _merge_stages(verdicts: Sequence[Verdict]) -> list[StageStatus]:
    out = []
    for i, stage in enumerate(verdicts[0].stages):
        runs = [v.stages[i] for v in verdicts if i < len(v.stages)]
        ran = sum(s.ran for s in runs)
        detail = next((s.detail for s in runs if s.detail), None)
        out.append(StageStatus(name=stage.name, ran=ran > 0, reason=None if ran else stage.reason,
                               detail=f"ran in {ran} of {len(verdicts)} windows" + (f"; the first: {detail}" if detail else "")))
    return out


def _merge_grid(verdicts: Sequence[Verdict], flagged: set[int], victims: set[int]) -> pl.DataFrame:
    grids = [v.grid for v in verdicts if not v.grid.is_empty()]
    if not grids:
        return verdicts[0].grid
    both = pl.concat([g.select("rank", "tp", "pp", "dp", "slowdown", "share_last") for g in grids], how="vertical_relaxed")
    grid = both.group_by("rank").agg(pl.col("tp", "pp", "dp").first(), pl.col("slowdown", "share_last").median())
    return grid.with_columns(
        role=pl.when(pl.col("rank").is_in(list(flagged))).then(pl.lit("suspect"))
        .when(pl.col("rank").is_in(list(victims))).then(pl.lit("victim")).otherwise(pl.lit("ok"))
    ).select(verdicts[0].grid.columns).sort("rank")
