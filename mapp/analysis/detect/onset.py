"""Faults that set in midway: a rank slower from some traced iteration to the trace's end.

The detector judges a trace as a whole, and a fault must last (``CONSISTENT``: slower in nearly
every traced iteration) to be named, for noise on busy hosts comes and goes. A fault that sets in
midway (a GPU that starts to throttle, a host where another job starts, a data loader that falls
behind) lasts too, but only from its onset, and in a trace of ten iterations that slows the last
four it reads as noise: slower in 4 of 10, and where time per kind is taken over the whole trace
(``same_work``'s typical call) hardly slower at all (4 gloo processes on 2 cores, megatron-core
DP4 under the profiler, 1.5x the layers of one rank from iteration 7 of 2-11: "1.26x its peers
(at most z 2.0 in an iteration)", no suspect; 2 of 22 such faults named, ``fresh195``).

So where the whole trace names no one, the detector runs again on the trace's last iterations
alone (``TraceBundle.window``), where such a fault lasts: on a few trailing windows
(``trailing_windows``: 9, 6 and 4 of 10), each only where some rank is slower there than before
it by its per-iteration evidence (``leaning``: its compute against its peers' -- where the trace
counts calls, by the calls it adds or by that iteration's own typical calls -- and its idle time
beyond theirs). A
suspect the window names is taken only where it is one of those ranks and it is slower in every
iteration from some point to the end, ``ONSET_LEAST`` of them or more, both by the window's
verdict and by its own evidence iteration by iteration (``since_onset``): a fault that set in
lasts, while noise that happened to gather late comes and goes (megatron-core DP4 on lognormal
lengths, no fault: the last 4 of 10 alone read "slow host 1" in 3 of them, not the last; a
healthy DP4: "slow host 1" in all four by its idle time's median, as idle as its peers in the
last). The window is judged by every rule a whole trace is, so noise there meets the same bars.
The verdict says from which iteration on, and that it was judged there."""

from __future__ import annotations

import math

import polars as pl

from mapp.analysis.detect.findings import Suspect
from mapp.analysis.detect.thresholds import CONSISTENT

__all__ = ["ONSET_LEAST", "lasting_to_end", "leaning", "not_slower", "onset_note", "score", "since_onset",
           "trailing_windows"]

ONSET_LEAST = 3
"""The fewest iterations from a fault's onset to the trace's end that are judged on their own:
as many as the detector's per-iteration rules want of a whole trace (a window of one or two
iterations that stands out is what noise on busy hosts does, ``windows``)."""


def trailing_windows(n: int) -> list[int]:
    """The lengths of the trailing windows judged again in a trace of ``n`` iterations, longest
    first: each a whole trace to the detector, which names a rank slower in ``CONSISTENT`` of
    it, so from 4 on each length is the longest a fault of the previous one's length plus one
    fills to that share (4, 6, 9, 13, ...): every onset ``ONSET_LEAST`` or more iterations from
    the end fills one of them, and a trace of 10 is judged again on 3 windows, not 7. None
    reaches the whole trace."""
    sizes, run = [], ONSET_LEAST
    while True:
        m = math.floor(run / CONSISTENT)
        if m >= n:
            return sorted(sizes, reverse=True)
        sizes.append(m)
        run = m + 1


def _forms(columns: list[str]) -> list[pl.Expr]:
    """The ``score``'s forms a per (rank, iteration) table allows: by stage 1's ``effect``, and by
    the iteration's own typical calls where ``same_work`` gives them."""
    return [score(columns, typical) for typical in ((False, True) if "onset_effect" in columns else (False,))]


def _leans(per: pl.DataFrame, window: list[int]) -> pl.DataFrame:
    """Per (rank, iteration): ``lean``, its ``score`` less its median before ``window``, the
    larger of the score's two forms."""
    inside = pl.col("iteration").is_in(window)
    forms = _forms(per.columns)
    leans = [(f - f.filter(~inside).median().over("rank")).alias(f"l{k}") for k, f in enumerate(forms)]
    return per.select("rank", "iteration", *leans).select(
        "rank", "iteration", lean=pl.max_horizontal(pl.col(f"l{k}") for k in range(len(forms))))


def leaning(per: pl.DataFrame, window: list[int], threshold: float) -> list[int]:
    """The ranks whose median ``score`` over ``window`` exceeds their median before it by half
    log(1 + ``threshold``), by either of its forms (``score``), where that median before it
    is below log(1 + ``threshold``): slower after than before, and not slower than its peers
    before, as a fault that set in is (the window's own detection says whether by enough, and
    beyond its peers)."""
    if per.is_empty() or "effect" not in per.columns:
        return []
    inside = pl.col("iteration").is_in(window)
    forms = _forms(per.columns)
    before = [pl.col(f"s{k}").filter(~inside).median() for k in range(len(forms))]
    lean = per.with_columns([f.alias(f"s{k}") for k, f in enumerate(forms)]).group_by("rank").agg(
        [(pl.col(f"s{k}").filter(inside).median() - before[k]).alias(f"l{k}") for k in range(len(forms))]
        + [before[k].alias(f"b{k}") for k in range(len(forms))])
    bar = math.log1p(threshold) / 2
    # by a form in which it was not slower than its peers before the window: a rank slower
    # beyond the threshold before it too was judged by the whole trace on all its iterations
    # (larger inputs in every step that grow further late -- BERT MLM under DDP on the GPU
    # host's cores, one replica's token budget 2x: 1.6x before, 2.2x over the last 4 -- are
    # no fault that set in)
    before_cap = math.log1p(threshold)
    leans = [(pl.col(f"l{k}") >= bar) & (pl.col(f"b{k}").fill_null(0.0) < before_cap) for k in range(len(forms))]
    return sorted(lean.filter(pl.any_horizontal(leans))["rank"].to_list())


def since_onset(per: pl.DataFrame, suspect: Suspect, window: list[int], threshold: float) -> list[int]:
    """The iterations of ``window``, from its last one back, in each of which the window's verdict
    found ``suspect`` slower and its rank's ``score`` (either form) exceeds its median before the
    window by half log(1 + ``threshold``): where a fault that set in has lasted since. Both, for
    the verdict may judge iterations together (a host's idle time by its median: megatron-core
    DP4, no fault, 10 traced, the last 4 alone "slow host 1" in all four, its idle time 2.1x and
    2.2x in two of them and as its peers' in the last), and the score reads single iterations
    through the noise of a few calls (DP4 on lognormal lengths, the last 4 alone "slow host 1" in
    3 of them, the score beyond the bar in all four)."""
    if per.is_empty() or "effect" not in per.columns:
        return []
    lean = _leans(per.filter(pl.col("rank") == suspect.rank), window)
    bar = math.log1p(threshold) / 2
    slow = {int(i) for i, v in zip(lean["iteration"], lean["lean"]) if v is not None and v >= bar}
    return lasting_to_end(sorted(slow & set(suspect.iterations or [])), window)


def score(columns: list[str], typical: bool = False) -> pl.Expr:
    """A rank-iteration's slowdown against its peers as a log-ratio: its compute's, stage 1's
    ``effect`` (where ``same_work`` counts calls, each kind at the whole trace's typical call:
    the calls it adds show, exactly, a slower call hardly) or with ``typical`` the iteration's
    own typical calls (``onset_effect``: a slower call shows, through the noise of a few calls),
    plus the idle time it spends beyond its peers' as a share of its work (a host that stalls)."""
    compute = pl.coalesce("onset_effect", "effect") if typical else pl.col("effect")
    if "gap_excess_ns" not in columns or "busy_ns" not in columns:
        return compute.fill_null(0.0)
    idle = (pl.col("gap_excess_ns").cast(pl.Float64).fill_null(0.0).clip(lower_bound=0.0)
            / pl.col("busy_ns").cast(pl.Float64).clip(lower_bound=1.0))
    return compute.fill_null(0.0) + idle.log1p()


def lasting_to_end(flagged: list[int] | None, window: list[int]) -> list[int]:
    """The iterations of ``window`` from the last one back that are in ``flagged``: where a fault
    that set in has lasted since (empty where the last one is not flagged). One iteration inside
    the run may read as not slower -- on busy hosts a slowed rank now and then gets the core to
    itself (megatron-core DP4 under mapp's capture, 1.5x matmuls from iteration 7 of 2-11:
    1.20-1.46x in four, 1.03x in the fifth) -- where ``ONSET_LEAST`` + 1 flagged ones surround it:
    a run one longer than the least, with the dip left out of it."""
    mine = set(flagged or [])
    run: list[int] = []
    dip = None
    for i in reversed(window):
        if i in mine:
            run.append(i)
        elif dip is None and run:
            dip = len(run)        # flagged iterations after the dip
        else:
            break
    if dip is not None and (len(run) < ONSET_LEAST + 1 or len(run) == dip):
        run = run[:dip]           # no flagged iteration before the dip, or too short a run: strict
    return run[::-1]


def not_slower(since: list[int], window: list[int]) -> list[int]:
    """The iterations of ``window`` after the onset (``since[0]``) that ``since`` leaves out: the
    one ``lasting_to_end`` bore, or none."""
    return [i for i in window if i >= since[0] and i not in since]


def onset_note(rank: int, since: list[int], window: list[int], traced: int) -> str:
    """The verdict's note on a suspect slower in ``since`` (``since_onset``) of ``window``."""
    start = since[0]
    skipped = not_slower(since, window)
    every = (f"in every iteration since but {skipped[0]} (not slower there by its own evidence)" if skipped
             else "in every iteration since")
    return (f"rank {rank} slower from iteration {start} on, {every}: judged on iterations "
            f"{window[0]}-{window[-1]} alone ({len(window)} of the {traced} traced), as a fault that set in midway "
            "(the whole trace named no one: slower in too few of its iterations); the verdict's figures are of "
            "those iterations")
