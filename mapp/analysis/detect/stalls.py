"""The verdict's rules that name a rank's host by its stalls: idle gaps of ``idle.LONG_GAP_NS``
(1 ms) and more, beyond its peers' (``long_excess_ns``).

A host that sleeps or waits (a data loader, a synchronization, work outside the model before
each microbatch) stalls; one that merely paces its GPU a little late idles in short gaps all
over, and two healthy hosts differ in that by more than any threshold. So a rank's stalls, set
beside what stage 2 says of it, can name its host where its idle time as a whole does not stand
out. ``verdict._compute_suspect`` applies these in turn, each only where no earlier rule named
the host and where its ops do not lose far more time than its gaps (on CPUs: slow compute that
also idles a little longer).
"""

from __future__ import annotations

from mapp.analysis.detect.gates import (keeps_waiting, recurring_stalls_stand, stage2_agrees, stalled_iterations,
                                       stalls_last, traced_iterations)
from mapp.analysis.detect.peer_evidence import PeerEvidence
from mapp.analysis.detect.thresholds import CONSISTENT

__all__ = ["stalls_a_real_share", "stalls_alone", "stalls_lasting", "stalls_most_of_idle"]


def stalls_lasting(row: dict, peers: PeerEvidence, late: dict | None, stalled: float, busy: float) -> list[int]:
    """The iterations a rank stalled in, where they name its host, else none: stalls a real
    share of its work beyond its peers' in nearly every iteration (``CONSISTENT``), its idle
    time standing out by half the cut-off, in a rank that stage 2 finds keeping the others
    waiting in nearly every iteration (the caller asks that stage 2 also lean). 4 H100s,
    megatron-core TP2 x DP2, a 20 ms sleep before each of 4 microbatches on rank 0: 64 ms more
    stalls a step, yet its idle time at z 2.1, for another rank's host was 30 ms a step slower
    by chance, in short gaps; rank 0 last at 60% of 600 collectives at z 4.7, net 126 ms a step.
    (Not on CPUs where its ops lose far more time than its gaps: megatron-core TP2 x DP2 under
    the profiler, each layer of rank 1 1.5x: its ops 54 ms more a step, stalls 10 ms.)

    The iterations are those it stalled in, whichever its idle time as a whole stood out in: DP4
    under mapp's capture, 4 processes on 2 cores, 19 ms of matmuls before each microbatch on
    rank 0: 32-93 ms more stalls in all four steps, its idle time flagged in one, last at all 4
    all-reduces, 63 ms a step imposed; dropped as "not lasting" before, with no note.
    """
    if not (keeps_waiting(late) and (row["gap_z"] or 0.0) > peers.z_crit / 2 and stalled >= peers.min_effect * busy):
        return []
    stalls_in = stalled_iterations(peers, row["rank"])
    return stalls_in if len(stalls_in) >= CONSISTENT * traced_iterations(peers) else []


def stalls_a_real_share(row: dict, peers: PeerEvidence, stalled: float, busy: float, slowdown_threshold: float) -> bool:
    """A rank's stalls alone are the threshold's share of its work, in nearly every iteration,
    its idle time standing out by half the cut-off: with stage 2 keeping the others waiting,
    they make a rank of more than two "impose" (megatron-core TP2 x DP2 under the profiler, 4
    processes on 2 cores, two 20 ms sleeps a step on rank 0: 27 ms more stalls a step, 46% of its
    compute, net 182 ms imposed, last at 49% of its TP pair's calls, which the layers pace). Its
    idle time must stand out by half the cut-off: a stage-0 rank of PP2 x DP2 waiting on a
    heavier last stage stalled 20 ms a step more than its DP peer, 23% of its compute, at z 1.1,
    net-imposing in 3 of 4 steps.
    """
    return (stalled >= slowdown_threshold * busy and (row["gap_z"] or 0.0) > peers.z_crit / 2
            and stalls_last(peers, row["rank"]))


def stalls_alone(peers: PeerEvidence, late: dict | None, *, big_stalls: bool, shared_cpus: bool,
                 stalled: float = 0.0) -> bool:
    """Such stalls (``stalls_a_real_share``) name the host by themselves, one rank a stage or on
    shared CPUs, where stage 2 does not contradict them (``stage2_agrees``); the stalls are then
    what it costs.

    One rank a stage, such stalls name a host where stage 2 has nothing against it, also where
    its idle time as a whole does not stand out: the stages downstream of it wait in their
    transfers, not in gaps, and on shared cores every rank's gaps scatter by tens of ms (PP4
    under the profiler, 4 processes on 2 cores, a 16 ms data-path sleep before each
    microbatch on rank 2: 36 ms more stalls a step, 45% of its work, more than its peers' in
    every step; its idle time at z 2.3, the cut-off 2.8; "no suspect" before). Its stalls are
    then what it costs, not its idle time, into which the others' scatter (32 ms injected a
    step; stalls 36 ms more than its peers', idle time 22 ms). So too on shared cores with
    peers of its own, where stage 2 agrees without keeping the others waiting in nearly every
    step, the rank's own work before each microbatch slowing its peers' cores too (DP4 under
    mapp's capture, 4 processes on 2 cores, 18 ms of matmuls before each microbatch on rank 1:
    34 ms more stalls a step, all four steps, idle time at z 2.6, net-imposing in 2 of 4)

    On shared CPUs where stage 1 counted calls, stage 2 need only find the rank not waiting on the
    others, net, more than it stalls in an iteration (``gates.recurring_stalls_stand``).

    One rank a stage, stage 2 matched by call order alone (``guessed``: gloo calls recorded with
    neither group nor size, as the profiler's defaults leave them) has nothing against it
    either: each stage's all-reduces on its groups of one were matched with the others' and with
    the embedding's (PP4 under the profiler without shapes, 4 processes on 2 cores, the 16 ms
    sleep above: rank 2 "waited" 395 ms in 8 such instances, none of them real; with shapes its
    calls were its own, stage 2 had nothing, and the host was named).
    """
    if not ((peers.mode == "layer peers" or shared_cpus) and big_stalls):
        return False
    guessed = late is not None and bool(late.get("guessed")) and peers.mode == "layer peers"
    return (late is None or guessed or stage2_agrees(late)
            or recurring_stalls_stand(peers, late, shared_cpus, stalled))


def stalls_most_of_idle(row: dict, peers: PeerEvidence, *, stalled: float, busy: float, gap_excess: float) -> bool:
    """A rank whose idle time beyond its peers' exceeds what its ops lose, by a real share of its
    work, and is most of it stalls (the caller asks it of a rank that keeps its peers waiting
    and does no extra work): a host that sleeps or waits stalls, one that paces its GPU more
    slowly idles in short gaps all over (4 H100s, TP2 x PP2 under the profiler, 1.6x the
    layers' FLOPs on rank 1: rank 2, a stage behind, idled 58 ms a step more than its TP peer,
    3.5 ms of it in stalls; the injected sleeps: nearly all).
    """
    return (stalled >= peers.min_effect * busy and gap_excess > 0 and gap_excess > max(row["excess_ns"] or 0.0, 0.0)
            and 2 * stalled >= gap_excess)
