"""One analysis of a bundle, built once per command and handed to every consumer.

``analyse(bundle)`` matches communication (cached beside the events) and solves every rank's
clock; the Chrome export, the detector, the SQL schema and the report take the ``Analysis``
instead of each deriving the same again. One failure policy for all of them: alignment is
best effort, so a model that cannot be solved leaves times unaligned with a note saying why;
matching failing is a bug and is not hidden.
"""

from __future__ import annotations

from dataclasses import dataclass

from mapp.analysis.align import ClockModel, align_bundle
from mapp.analysis.graph import Matching, match_bundle, unmatched
from mapp.analysis.ingest.bundle import TraceBundle

__all__ = ["Analysis", "analyse"]


@dataclass(frozen=True, slots=True)
class Analysis:
    """A bundle, its matched communication and its clock model.

    ``matching`` carries aligned times when ``clock`` is set; ``notes`` say why it is not.
    """

    bundle: TraceBundle
    matching: Matching
    clock: ClockModel | None
    notes: tuple[str, ...] = ()


def analyse(bundle: TraceBundle, *, align: bool = True, match: bool = True) -> Analysis:
    """Match ``bundle``'s collectives and p2p and, unless ``align`` is False, align its clocks.
    ``match=False`` matches nothing (and so aligns nothing): for bundles whose communication is
    too large to match in memory, where only the events are wanted."""
    if not match:
        return Analysis(bundle, unmatched(bundle), None, (
            "communication not matched (--no-match): collectives, collective_members and p2p are empty, "
            "*_aligned_ns columns are null",))
    matching = match_bundle(bundle)
    if not align:
        return Analysis(bundle, matching, None, ("times are not aligned (--no-align): *_aligned_ns columns are null",))
    try:
        clock = align_bundle(bundle, matching)
    except Exception as error:  # best effort (see the module's docstring): said, not raised
        first = str(error).splitlines()[0][:160] if str(error) else ""
        return Analysis(bundle, matching, None, (f"clock alignment failed ({type(error).__name__}: {first}); "
                                                 "times are not aligned",))
    return Analysis(bundle, matching.with_clock(clock), clock)
