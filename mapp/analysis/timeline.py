"""The merged timeline of a job: match communication, align clocks, write one Chrome trace.

This is what ``mapp trace merge`` (and ``mapp demo``) do, as one call over plain data.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mapp.analysis.align import CLOCK_FILE, ClockModel
from mapp.analysis.chrome import MergeResult, chrome_extras, write_chrome_trace
from mapp.analysis.graph import Matching
from mapp.analysis.ingest.bundle import TraceBundle
from mapp.analysis.run import Analysis, analyse

__all__ = ["Timeline", "merge_timeline"]


@dataclass(frozen=True, slots=True)
class Timeline:
    """What a merge produced: the written trace, the matching, and the clock model (if aligned)."""

    merged: MergeResult
    matching: Matching
    clock: ClockModel | None
    clock_path: Path | None


def merge_timeline(
    bundle: TraceBundle,
    out_path: Path,
    *,
    align: bool = True,
    progress: Callable[[int, int], None] | None = None,
    analysis: Analysis | None = None,
) -> Timeline:
    """Write the merged Chrome trace with flow arrows and last-arriver marks, on the reference
    clock with its offsets in ``clock.json`` (unless ``align`` is False: raw clocks, no
    ``clock.json``). ``analysis``: the bundle's, when the command already has it."""
    if analysis is None:
        analysis = analyse(bundle, align=align)
    clock, matching = analysis.clock, analysis.matching
    clock_path = clock.write(bundle.cache_dir / CLOCK_FILE) if clock is not None else None
    merged = write_chrome_trace(bundle, out_path, clock=clock,
                                extra_lines=chrome_extras(bundle, matching, clock), progress=progress)
    return Timeline(merged, matching, clock, clock_path)
