"""A rank whose spans its host paces (``idle.launch_bound``): its host, its GPU, or neither.

Where stage 1 flags a rank on spans its host's launches pace, the span times say the host's
pace, by which two healthy hosts differ by more than any threshold; what its host and its GPU
each did is read from its stalls and idle time (the host's), its backward ops slower alike, and
its fastest spans of a kind (the GPU's). ``verdict._compute_suspect`` calls
``launch_bound_verdict`` for such a rank and reads its answer: a slow host, a slow GPU at what
its ops say, or why neither (for the notes).
"""

from __future__ import annotations

import math

from mapp.analysis.detect.gates import traced_iterations
from mapp.analysis.detect.idle import NOISE
from mapp.analysis.detect.peer_evidence import PeerEvidence
from mapp.analysis.detect.thresholds import CONSISTENT

__all__ = ["excess_at", "launch_bound_verdict"]


def launch_bound_verdict(row: dict, peers: PeerEvidence, *, stalled: float, handover: float, gap_excess: float,
                         busy: float, slowdown_threshold: float) -> tuple[dict, bool, bool, float] | str:
    """A rank flagged by its compute whose slowdown ``idle.launch_bound`` finds its host's: why
    that names no suspect (for the notes), else (row, launch-bound, host, stalls): a slow host,
    or, where its backward ops are slower alike and its host neither stalls nor idles longer,
    its GPU at what those ops say. ``stalled``: its extra stalls a step, returned as the verdict
    then counts them."""
    paced = "its spans paced by its host's launches"
    if len(row["iterations"] or []) < CONSISTENT * traced_iterations(peers):
        return (f"{paced}, slower in {len(row['iterations'] or [])} of {traced_iterations(peers)} "
                "traced iterations only")
    # Such a rank is a slow host only where it stalls or its launch gaps between spans are longer
    # too (a slow host is slow everywhere): two healthy processes pace their GPUs' launches inside spans
    # differently by far more than a threshold (4 H100s, megatron-core TP2 x DP2 under
    # mapp's capture, no fault, twice: one rank's spans 1.23x and 1.48x its TP peer's, its
    # gaps of 1 ms and more 1.7-2.1% of its work, its gaps at z 1.0-2.5; 20 ms of host work
    # before each microbatch: 63%; simulated slow hosts: gaps at z 78-360)
    # Where its backward ops are not slower alike, idle gaps that stand out by their z but are
    # a sliver of its work name no host: they are its host pacing the forward pass, as healthy
    # ranks differ by (4 H100s, PP2 x DP2 under mapp's capture, lognormal lengths per replica,
    # no fault: a stage-0 rank's spans 1.28x its peer's, backward ops unevenly, its gaps
    # 2.5 ms a step more at z 5.8, 1.4% of its work). Where they are slower alike, its gaps
    # are what tells its host from its GPU whatever their share (simulated hosts 10x slower
    # at launching: backward ops 1.1-1.45x alike, gaps 1.7-2.7% of their work at z 200-570).
    # A host slow enough to stretch backward ops alike (autograd launches them far faster than
    # kernels run) is slower by far more at everything it does: its gaps grow by more than its
    # backward ops do. Gaps that grow by no more are the GPU's work queued behind (2 H200s,
    # megatron-core TP2, 1.4x the layers' FLOPs on rank 1: backward ops 1.27x alike, gaps 1.29x
    # its peer's at z 38, 1.9% of its work; simulated hosts 3-20x slower: gaps 2.9x and more)
    idles = row["gap_flagged"] and (gap_excess >= peers.min_effect * busy
                                    or (bool(row.get("gpu_alike")) and _gaps_outgrow(row, gap_excess)))
    # and stalls only where its forward pass hands over to the backward are its forward
    # pass's host pacing (see above), whatever its backward ops say (4 H100s, TP2 x PP2 under
    # mapp's capture, no fault: the last stage's TP rank 1 spans 1.20x, backward ops 1.11x
    # unevenly, gaps 6.9 ms a step more, every stall of them at the hand-over); its idle
    # time then names a host only where the rest of it, beside the hand-over, outweighs that
    if stalled >= peers.min_effect * busy and handover >= CONSISTENT * stalled:
        stalled, idles = 0.0, idles and gap_excess > 2 * handover
    # Where every rank's spans are host-paced (their ops scatter beyond ``idle.NOISE``), a
    # rank's longer spans are its host's pace, by which two healthy hosts differ by far more
    # than a threshold, and they judge no GPU: its host is named only by idle time (stalls,
    # or gaps) of the threshold's share of its work (2 H100s, TP2 under mapp's capture,
    # lognormal lengths, no fault: rank 1's spans 1.69x its peer's at z 2.1, its idle time
    # 3.6% of its work: "slow host 1" 1.35x; injected sleeps and work before each microbatch
    # on launch-bound ranks stalled 36-215% of their work; a simulated host 20x slower at
    # launching idled 10.6%)
    # Unless the fastest of its spans of a kind, where its GPU and not its host sets the pace,
    # are slower by the threshold in nearly every iteration (``idle._floor``), beside a host
    # that neither stalls nor idles longer: its GPU is slow at that floor (2 H200s, megatron-core
    # TP2 under mapp's capture, 1.45x the layers' FLOPs on rank 0: the fastest tenth of its
    # layers' backward spans 1.18x its peer's in every step, its spans host-paced at 2.1x in
    # the median, 2.5 ms a step more in gaps, 0.8% of its work; "no suspect" before)
    floor = _raised_floor(row, slowdown_threshold)
    if (row.get("peers_spread") or 0.0) > NOISE and max(stalled, gap_excess) < slowdown_threshold * busy:
        if floor is None or stalled >= peers.min_effect * busy or idles:
            return (f"{paced}, as every rank's are: its extra idle time under {slowdown_threshold:.0%} of its "
                    "work, and its fastest spans not slower by the threshold beside a host that neither "
                    "stalls nor idles longer")
        return _its_gpu(row, busy, floor, by_floor=True), False, False, stalled
    if stalled < peers.min_effect * busy and not idles:
        # where its backward ops are slower alike and only its forward pass slower still, a
        # host that neither stalls nor idles longer is no cause: its GPU is (4 H200s, TP2 x
        # DP2, 1.2x the layers' FLOPs on rank 0: every backward op 1.15x its peer's, its
        # forward ops 1.77x, its gaps at z 0.8; a simulated host 10x slower at launching
        # stretched its backward ops alike too, but idled at z 78-360)
        # at what its backward ops say, its cost too: the forward pass adds its host's pace.
        # Where they are slower unevenly, at their steady floor, if raised by the threshold: a
        # host that stretches some of them leaves the GPU's pace in the rest (4 H200s, TP2 x
        # PP2 under mapp's capture, 1.8x the layers' FLOPs on rank 2: its fastest runs 1.27x its
        # TP peer's in each of four steps, its ratios 0.75-1.56x, 8 ms more stalls a step, all
        # where its forward pass hands over to the backward; "no suspect" before)
        if row.get("gpu_alike"):
            return _its_gpu(row, busy, math.exp(float(row["ops_median"]))), False, False, stalled
        if floor is None:
            return (f"{paced}, its ops slower unevenly; its host neither stalls nor idles longer, and its "
                    "fastest spans are not slower by the threshold")
        return _its_gpu(row, busy, floor, by_floor=True), False, False, stalled
    return row, True, True, stalled


def _its_gpu(row: dict, busy: float, gpu: float, *, by_floor: bool = False) -> dict:
    """``row`` read as a slow GPU at ``gpu``, its cost at that slowdown (the rest of its spans'
    excess is its host's pace); ``by_floor``: read off its ops' steady floor (``idle._floor``)."""
    return {**row, "slowdown": gpu, "excess_ns": excess_at(row, busy, gpu), "by_floor": by_floor}


def _raised_floor(row: dict, slowdown_threshold: float) -> float | None:
    """The slowdown its ops' steady floor says its GPU has (``idle._floor``), where that is the
    threshold or more; else None."""
    floor = row.get("ops_floor")
    if floor is None or not math.isfinite(float(floor)) or math.expm1(float(floor)) < slowdown_threshold:
        return None
    return math.exp(float(floor))


def _gaps_outgrow(row: dict, gap_excess: float) -> bool:
    """The rank's idle gaps grew, over its peers', by more than twice what its backward ops did
    (log-ratios), as the forward pass must to name a host (``idle.launch_bound``)."""
    base = float(row.get("gap_ns") or 0.0) - gap_excess
    if base <= 0:
        return True
    return math.log1p(gap_excess / base) > 2 * max(float(row.get("ops_median") or 0.0), 0.0)


def excess_at(row: dict, busy: float, slowdown: float) -> float:
    """The rank's excess time, no more than ``slowdown`` makes of its ``busy`` time."""
    return min(max(row["excess_ns"] or 0.0, 0.0), busy * (1 - 1 / max(slowdown, 1.0)))
