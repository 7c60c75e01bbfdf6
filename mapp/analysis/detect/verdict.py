"""Verdicts: the three stages' evidence combined into ranked suspects and workload imbalance.

A *suspect* is a rank (or link) whose own behaviour explains lost time: slow compute (stage 1:
its self time beats its peers'), a slow host (idle launch gaps on its timeline), a slow link or
NIC (stage 3). Stage 2 corroborates (a culprit arrives last and makes others wait) and stands
in for stage 1 when no layout is known (``stage2_alone``). Ranks that only wait are *victims*,
never suspects. Whatever slows every peer of a stage alike (a heavier last stage) or every rank
of a replica alike on some microbatches (long sequences) is *imbalance*: reported, never a
faulty GPU (``imbalance``).

Confidence: 0.5 for passing a stage's outlier test at all, up to +0.3 as its z-score clears
the cut-off (1 - cut/z), up to +0.19 when a second, independent stage agrees. Suspects are
ranked by estimated cost to the job, then confidence.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import polars as pl

from mapp.analysis.detect._stats import margin, robust_scale
from mapp.analysis.detect.added_work import (added_cost_ns, added_evidence, added_slivers, added_slowdown, adds_work,
                                             does_extra_work, launched_evidence, launches_more)
from mapp.analysis.detect.bandwidth import COUNTED, BandwidthEvidence
from mapp.analysis.detect.busy_neighbour import busy_neighbours
from mapp.analysis.detect.data_sized import looped_by_data
from mapp.analysis.detect.findings import Imbalance, Overruled, StageStatus, Suspect, Verdict
from mapp.analysis.detect.gates import (keeps_waiting, overruled_line, overruled_why, stage2_agrees,
                                        stalled_iterations, traced_iterations)
from mapp.analysis.detect.host_paced import excess_at, launch_bound_verdict
from mapp.analysis.detect.imbalance import heavy_replicas, suspects_stages, workload_imbalance
from mapp.analysis.detect.lateness import LatenessEvidence, as_evidence
from mapp.analysis.detect.link_ends import link_ends, links_beside_a_busy_host, own_slowness
from mapp.analysis.detect.layout import LayoutInfo, middle_stages
from mapp.analysis.detect.p2p_windows import WINDOWED
from mapp.analysis.detect.peer_evidence import PeerEvidence
from mapp.analysis.detect.shared_cpus import (CONTENTION, FAR_MORE, above_shared_cpus, counted_first,
                                               late_above_contention, layers_by_contention, slowest_other, stands_out,
                                               typical_slowdown)
from mapp.analysis.detect.stage2_alone import late_stand_ins, late_suspect, lasting_stand_ins
from mapp.analysis.detect.stalls import stalls_a_real_share, stalls_alone, stalls_lasting, stalls_most_of_idle
from mapp.analysis.detect.thresholds import CONSISTENT
from mapp.analysis.detect.time_slices import sliced_suspects
from mapp.analysis.detect.tp_waits import tp_group_alike, tp_pace_suspects, tp_victims

# (the findings' types are re-exported: ``verdict`` was their home before ``findings``)
__all__ = ["Suspect", "Imbalance", "StageStatus", "Verdict", "Combined", "combine", "paced_pairs"]


LINK_COST = 1 / 10
"""A slow link is a suspect only when its transfers' excess is at least this share of
``min_effect`` of the iteration (0.33% at ``--threshold 0.1``): transfers are a small part of
most iterations, so even a link twice as slow as its like costs the job little, but a healthy
link that differs by chance costs it less still."""


class Combined(NamedTuple):
    """What ``combine`` makes of the stages' evidence."""

    suspects: list[Suspect]
    """Ranked: most costly first."""
    imbalance: list[Imbalance]
    victims: list[int]
    grid: pl.DataFrame
    below: list[Suspect]
    """Would-be suspects slower than their peers by less than the threshold."""
    overruled: list[Overruled]
    """One per candidate that a gate (``gates.overruled_why`` and the like) set aside, and why."""


def combine(peers: PeerEvidence, lateness: LatenessEvidence, bandwidth: BandwidthEvidence, layout: LayoutInfo,
            *, slowdown_threshold: float, imbalance_threshold: float, iteration_ns: float | None,
            shared_cpus: bool = False, tp_pace: pl.DataFrame | None = None,
            neighbours: dict[int, dict] | None = None) -> Combined:
    """Suspects (ranked), imbalance, victims, the per-rank grid, the would-be suspects below the
    threshold and the candidates overruled, from the stages' evidence.

    ``slowdown_threshold``: the suspects' cut (``Thresholds.slowdown``); it also chooses which
    slowdown a rank doing extra work is given (``added_work.added_slowdown``).
    ``imbalance_threshold``: a pipeline stage computing more than (1 + this) x the lightest is
    imbalance (``Thresholds.imbalance``).
    ``tp_pace``: where the tracer's spans hold waits for TP peers that no collective record
    stands for (the MegatronApp tracer's barriers), each TP rank's pace against its peers
    (``tp_waits.tp_pace``); None where every wait is recorded.
    ``neighbours``: ranks on whose GPU NVML saw another process computing (``device.neighbours``).
    """
    coords = {r["rank"]: {a: r[a] for a in ("tp", "pp", "dp")} for r in layout.ranks.iter_rows(named=True)}
    late = {r["rank"]: r for r in lateness.ranks.iter_rows(named=True)} if lateness.ran else {}
    suspects: list[Suspect] = []
    overruled: list[Overruled] = []
    if peers.mode != "skipped":
        replica = _replica_waits(peers, late, coords)
        for row in peers.ranks.iter_rows(named=True):
            s = _compute_suspect(row, peers, late.get(row["rank"]), lateness.z_crit, coords, iteration_ns,
                                 slowdown_threshold, overruled, shared_cpus, row["rank"] in replica,
                                 untraced=bool(layout.unrecorded))
            if s is not None:
                suspects.append(s)
        if shared_cpus:
            suspects = above_shared_cpus(suspects, peers, slowdown_threshold, overruled,
                                         _last_stage(layout) if peers.mode == "layer peers" else frozenset(),
                                         _middle_stages(layout), coords, late)
        if peers.mode == "program peers" and lateness.ran:
            stand_ins = late_stand_ins(peers, lateness, layout, {s.rank for s in suspects}, coords, iteration_ns,
                                       slowdown_threshold)
            stand_ins = late_above_contention(stand_ins, peers, overruled) if shared_cpus else stand_ins
            suspects += lasting_stand_ins(stand_ins, lateness, overruled)
        suspects = added_slivers(suspects, peers.min_effect, slowdown_threshold, iteration_ns, overruled)
    elif lateness.ran:
        # Stage 2 alone (the MegatronApp tracer writes no compute where PP is 1: TP x DP jobs
        # record only their TP mappings and the optimizer). A rank last far more often than
        # chance that keeps the others waiting in nearly every iteration is the culprit, however
        # its net wait compares across ranks: where every group is a pair, the culprit's and its
        # victim's mirror each other and set the scale (TP2 x DP2, a 1.5x GPU, simulated: last at
        # 96 of 96 TP reductions, net z 1.3). Its cost then says whether it is above the threshold.
        for row in lateness.ranks.iter_rows(named=True):
            if row["flagged"] or (row["last_z"] > lateness.z_crit and keeps_waiting(row)):
                suspects.append(late_suspect(row, None, peers, lateness, coords, iteration_ns,
                                             "stage 1 could not run: slow compute or slow host"))
    # a neighbour time-slicing a rank's GPU: its median op no slower, its sum slower, at random
    # places (``time_slices``)
    sliced, waited_on = _waited_on(peers, late, coords)
    suspects = sliced_suspects(sliced, suspects, waited_on, coords, iteration_ns, neighbours,
                               measured_waits=peers.mode != "layer peers")
    suspects = _mirrored_pair(suspects, peers, lateness, overruled)
    if tp_pace is not None:
        suspects = tp_pace_suspects(tp_pace, suspects, coords, iteration_ns, peers.min_effect)
        suspects = tp_group_alike(suspects, peers, coords, lateness, tp_pace, overruled)
    if bandwidth.ran:
        hosts = {s.rank: s for s in suspects if s.kind == "slow_host"}
        computing = {s.rank: s for s in suspects if s.kind == "slow_compute"}
        for f in bandwidth.findings:
            # A slow host launches its transfers late too; where a trace's p2p span starts before
            # the launch (MegatronApp's batched p2p), its links look slow for that reason alone.
            # Not a link whose fastest transfers are slower: a late launch makes the other side
            # wait, it does not slow the transfer once both are there (``bandwidth._raised_floors``);
            # nor one that moves more than its like links (``traffic.added_traffic``)
            late_launch = [hosts[r] for r in f.ranks if r in hosts] if f.kind != "slow_nic" and not own_slowness(f) else []
            if late_launch:
                late_launch[0].evidence.setdefault("slow_links_explained", []).extend(f.observations)
                continue
            # One direction's messages in flight longer (``p2p_windows``) where their receiver
            # computes slower: its messages wait for it to take them, its windows open all the
            # while (a user's GPipe PP2 x DP2, a stage-1 rank computing 4.5x: the messages to it
            # in flight 18x the other directions' a step, 41% of the step, beside it 1.29x)
            into = [computing[r] for r in _receivers(f) if r in computing]
            if into:
                into[0].evidence.setdefault("slow_links_explained", []).extend(f.observations)
                continue
            # A link whose slow transfers add under LINK_COST x ``min_effect`` of the iteration
            # is not what slows the job, however much slower it is (4 H100s, healthy: an 8 KB
            # all-reduce 5x slower on launch latency, 0.2% of the iteration; one of two NVLink
            # pairs 1.2x slower, 0.07%. Injected: 128 MB more per pipeline exchange, 4.8x and
            # 1.4%; a simulated pipeline link at 2x, 0.85%)
            # (one whose extra transfers were all posted asynchronously has no cost to weigh: a GPU
            # rank's batched p2p under the profiler, 4 H200s, PP2 x DP2, 512 MB more per exchange
            # on link 1-3, 31.5x its like link's bytes, and no transfer time in the trace)
            untimed = all(o.get("compared") in COUNTED and o.get("timed") is False for o in f.observations)
            if iteration_ns and f.excess_ns < LINK_COST * peers.min_effect * iteration_ns and not untimed:
                continue
            suspects.append(_link_suspect(f, bandwidth, coords, iteration_ns))
        suspects = link_ends(suspects, overruled, coords)
    if shared_cpus and not suspects:
        # a process slowed by a busy thread beside it, where no rule named anyone (``busy_neighbour``)
        suspects = busy_neighbours(peers, coords, iteration_ns)
    # most costly first over the traced iterations: a rank far slower in one iteration of four
    # costs the job less than one slower by less in all four (4 H200s, megatron-core TP2 x DP2
    # under mapp's capture, 1.2x the layers' FLOPs on rank 1: its TP peer 1.70x in the first
    # traced iteration alone, 104 ms; rank 1 1.56x in all four, 68 ms each)
    traced = traced_iterations(peers) if peers.mode != "skipped" else 0
    suspects.sort(key=lambda s: (-_spread_cost(s, traced), -s.confidence))
    if shared_cpus:
        suspects = counted_first(suspects)
    imbalance = workload_imbalance(peers, imbalance_threshold, layout)
    suspects = heavy_replicas(suspects, peers, layout, imbalance)
    # a rank slower in one iteration of several, and not by far, is noise, not a fault
    passing = [s for s in suspects if not s.evidence.pop("lasting", True)]
    overruled += [Overruled(s.rank, f"rank {s.rank} ({s.kind.replace('_', ' ')}) {s.slowdown:.2f}x in "
                            f"{len(s.iterations)} of {traced} traced iterations: not a suspect (slower in some "
                            "iterations only, and not by far: noise, not a fault)") for s in passing]
    suspects = [s for s in suspects if s not in passing]
    waiting = []
    if tp_pace is not None:
        suspects, waiting = tp_victims(suspects, lateness, overruled, tp_pace)
    # ``--threshold``: a suspect is slower than (1 + t) x its peers; those under it are no one's
    # culprit, so they make no victims and no mark in the grid either
    below = [s for s in suspects if s.slowdown == s.slowdown and s.slowdown < 1 + slowdown_threshold]
    suspects = [s for s in suspects if s not in below]
    if shared_cpus:
        suspects = links_beside_a_busy_host(suspects, overruled)
    if not suspects:
        overruled += _under_the_cut_off(peers, below, overruled, slowdown_threshold)
        if not shared_cpus:
            overruled += _hosts_under_the_threshold(peers, late, below, overruled, iteration_ns, slowdown_threshold)
        else:
            overruled += _kept_waiting_on_shared_cpus(lateness, peers, below, overruled) if not imbalance else []
    imbalance = suspects_stages(imbalance, suspects, layout)
    flagged = {s.rank for s in suspects} | {s.peer for s in suspects if s.peer is not None}
    victims = sorted(set(_victims(lateness, suspects, layout)) | set(waiting))
    grid = _grid(layout, peers, lateness, flagged, set(victims))
    return Combined(suspects, imbalance, victims, grid, below, overruled)


def _mirrored_pair(suspects: list[Suspect], peers: PeerEvidence, lateness: LatenessEvidence,
                   overruled: list[Overruled]) -> list[Suspect]:
    """Two traced ranks each computing slower than the other cannot both be right: each is
    slower on ops of its own, so they are not doing alike work (or the trace holds a sample of
    its events), and with no collective matched stage 2 cannot say which one the other waits
    for. Neither is named. (HTA's public ``trace_filter`` traces, 2 of a 128-rank job's ranks with
    a sample of their events, no process group recorded: rank 0 1.73x its peer, rank 1 1.17x.)"""
    compute = [s for s in suspects if s.kind == "slow_compute"]
    if not peers.pairs or lateness.ran or len(compute) != 2 or peers.ranks.height != 2:
        return suspects
    for s in compute:
        overruled.append(Overruled(s.rank, f"rank {s.rank} computes {s.slowdown:.2f}x its peer: not a suspect (each "
                                           "of the two ranks reads slower than the other, on ops of its own: "
                                           "their work is not alike, and no collective matched says who waits)"))
    return [s for s in suspects if s not in compute]


def _said(named: list[Suspect], overruled: list[Overruled]) -> set[int]:
    """The ranks a verdict already speaks of: named (below the threshold too, a link's both
    ends) or overruled with a note."""
    return {s.rank for s in named} | {s.peer for s in named if s.peer is not None} | {o.rank for o in overruled}


def _under_the_cut_off(peers: PeerEvidence, named: list[Suspect], overruled: list[Overruled],
                       threshold: float) -> list[Overruled]:
    """Where no rank is a suspect, one line per rank whose compute read beyond the threshold but
    in no iteration clear of the comparison's noise (stage 1 never flagged it, its z never over
    the cut-off), where nothing else says why it is no suspect: the grid shows its number, the
    verdict no suspect, and the user asks why (4 processes on 2 cores, megatron-core PP2 x DP2,
    1.35x the layers on rank 1: 1.26x over four steps, 1.77x in the first at z 2.7 under the
    cut-off 3.2; no suspect and, before, no note)."""
    if peers.mode == "skipped" or peers.ranks.is_empty() or "z" not in peers.ranks.columns:
        return []
    said = _said(named, overruled)
    lines = []
    for row in peers.ranks.iter_rows(named=True):
        r, slowdown, z = row["rank"], row["slowdown"], row["z"]
        if (row["flagged"] or r in said or slowdown is None or z is None or not slowdown >= 1 + threshold
                or not 0 < z <= peers.z_crit):
            continue
        # (where its data ran the program's loops about that much more often, that says why too)
        why = (f"; its data ran the program's loops {row['data_scale']:.2f}x as often, more calls of each of their ops"
               if looped_by_data(row, threshold) else "")
        lines.append(Overruled(r, f"rank {r} computes {slowdown:.2f}x its peers (at most z {z:.1f} in an iteration, "
                                  f"under the cut-off {peers.z_crit:.1f}): not a suspect (within the noise of the "
                                  f"comparison{why})"))
    return lines


def _kept_waiting_on_shared_cpus(lateness: LatenessEvidence, peers: PeerEvidence, named: list[Suspect],
                                 overruled: list[Overruled]) -> list[Overruled]:
    """Where no rank is a suspect on shared CPUs (and ``combine`` reports no imbalance, which
    would be what they waited for), one line per rank that stage 2 flags (last far more often
    than chance) and finds keeping the others waiting in nearly every step (``keeps_waiting``),
    and that nothing else speaks of: on shared cores a process that the scheduler gives less
    time than its peers holds them up without being slower at its own work (the CPU's form of a
    GPU another job time-slices), so it is no suspect, but the user who asks who held the job
    up is told (4 gloo processes on 4 cores, DP4 under the profiler, another process spinning
    half of every 20 ms on rank 1's core: last at 29 of 32 all-reduces, 99 ms net a step
    imposed, its matmuls 1.38x its peers' by their sum and 1.06x by its typical call; "no
    suspect" and no word of it, before)."""
    if not lateness.ran or lateness.ranks.is_empty():
        return []
    said = _said(named, overruled)
    traced = max(traced_iterations(peers), 1) if peers.mode != "skipped" else 1
    lines = []
    for row in lateness.ranks.filter(pl.col("flagged")).sort("rank").iter_rows(named=True):
        r = row["rank"]
        if r in said or not keeps_waiting(row):
            continue
        lines.append(Overruled(r, f"rank {r} kept the others waiting at the collectives (last at {row['last']} of "
                                  f"{row['instances']}; they waited {row['net_ns'] / traced / 1e6:.1f} ms a step for it "
                                  "in all, net of its own waits): not a "
                                  "suspect (on shared CPUs, its own work no slower than its peers' by the threshold: "
                                  "the cores gave it less time, as another process on its core or a busy machine "
                                  "would)"))
    return lines


_NOTED = 0.01
"""The least share of the step a host's extra idle time must cost for ``_hosts_under_the_threshold``
to say it: two healthy hosts pacing their GPUs differ by a few tenths of a percent (2 H200s, DP2
under the profiler, no fault: 2.4 ms of a 583 ms step, 0.8 ms of it in stalls)."""


def _hosts_under_the_threshold(peers: PeerEvidence, late: dict[int, dict], named: list[Suspect],
                               overruled: list[Overruled], iteration_ns: float | None,
                               threshold: float) -> list[Overruled]:
    """Where no rank is a suspect, one line per rank whose host stands out as one that stalls
    (its idle time beyond its peers' over the cut-off, at least ``_NOTED`` of the step and half
    of it in stalls, stage 2 finding it keeping the others waiting in nearly every iteration)
    but costs its step too little to be named: the user who injected or suspects a slow host is
    told where it is and why it is no suspect (2 H200s, megatron-core DP2 under the profiler, a
    19 ms sleep in rank 0's data path before each of 5 microbatches: its GPU idled 18 ms a step
    more than its peer's, the GPU's queue hiding the rest, 2.6% of a 706 ms step; "no suspect"
    and, before, no note). Not on shared CPUs, where a descheduled process stalls by chance."""
    if (peers.mode == "skipped" or peers.ranks.is_empty() or "gap_z" not in peers.ranks.columns
            or not iteration_ns):
        return []
    said = _said(named, overruled)
    lines = []
    for row in peers.ranks.iter_rows(named=True):
        r = row["rank"]
        gap, stalled, z = row["gap_excess_ns"] or 0.0, row.get("long_excess_ns") or 0.0, row["gap_z"] or 0.0
        if (r in said or row["flagged"] or row["gap_flagged"] or not gap > 0 or not stalled > 0
                or not z > peers.z_crit or not keeps_waiting(late.get(r)) or gap >= threshold * iteration_ns
                or gap < _NOTED * iteration_ns or stalled < 0.5 * gap):
            continue
        lines.append(Overruled(r, f"rank {r}'s host idles {gap / 1e6:.1f} ms a step more than its peers "
                                  f"({stalled / 1e6:.1f} ms in stalls of 1 ms or more), keeping them waiting in "
                                  f"nearly every iteration: {gap / iteration_ns:.1%} of the {iteration_ns / 1e6:.0f} "
                                  f"ms step, under the threshold {threshold:.0%}: not a suspect"))
    return lines


def _waited_on(peers: PeerEvidence, late: dict[int, dict], coords: dict) -> tuple[pl.DataFrame | None, set[int]]:
    """What ``time_slices.sliced_suspects`` judges: where each rank's slowed ops land
    (``peers.sliced``), and the ranks whose lost time is their peers' too. Those are the ranks
    stage 2 finds keeping the others waiting in nearly every iteration; with one rank a
    pipeline stage, where no collective says who waits on whom, the rank of the stage that
    computes the most: the pipeline waits on it, and a neighbour slowing a stage that still
    computes less than another fills slack. 2 H200s, megatron-core PP2 under mapp's capture, a
    neighbour on one stage's GPU (nine jobs): its layers summed 1.14-1.68x the other stage's same
    layers in every step (healthy stages 1.01-1.04x), its median layer about as fast, and its
    stage then computed the most in each; at the one collective a step (the embedding's
    gradients, first and last stage) the first stage is last whatever its speed."""
    if peers.mode != "layer peers":
        return peers.sliced, {r for r, row in late.items() if keeps_waiting(row)}
    if peers.stages is None or peers.stages.is_empty():
        return peers.sliced, set()
    heaviest = int(peers.stages.sort("compute_ns").row(-1, named=True)["pp"])
    return peers.sliced, {r for r, c in coords.items() if c.get("pp") == heaviest}


def _spread_cost(s: Suspect, traced: int) -> float:
    """What ``s`` costs the job per traced iteration: its cost in the iterations it was slow in,
    times their share of the ``traced`` ones (all of them where either is unknown)."""
    n = len(s.iterations)
    return s.excess_ns * (min(n / traced, 1.0) if traced and n else 1.0)


def _traced(peers: PeerEvidence, rank: int) -> list[int]:
    """The iterations in which stage 1 compared ``rank``."""
    per = peers.rank_iterations
    if per.is_empty():
        return []
    return sorted(int(i) for i in per.filter(pl.col("rank") == rank)["iteration"].unique().to_list())


def _slower_iterations(peers: PeerEvidence, rank: int) -> list[int]:
    """The iterations in which ``rank`` computed slower than its peers (its effect above 0)."""
    per = peers.rank_iterations
    if per.is_empty() or "effect" not in per.columns:
        return []
    return sorted(int(i) for i in per.filter((pl.col("rank") == rank) & (pl.col("effect") > 0))["iteration"].to_list())


def _steadily_slower(peers: PeerEvidence, rank: int, coords: dict) -> bool:
    """Whether ``rank``'s busy time over its stage-mates' median leads, from one traced iteration
    to the next, by at least twice its own scatter (the median log ratio against its
    ``_stats.robust_scale``). A slowed rank leads by about as much each step; a replica
    that draws other lengths each step leads by what it draws (``transformers.Trainer``, DDP8 on
    lognormal lengths padded per batch, no fault: rank 1 1.68, 2.03, 1.07 and 1.11x its peers,
    last at a third of the all-reduces, "slow compute 1" 1.6x jointly; the ranks the two stages
    named jointly and right, megatron-core DP4 and TP2 layer faults: 1.13-1.25x, 1.14-1.19x,
    1.41-1.54x)."""
    per = peers.rank_iterations
    if per.is_empty() or "busy_ns" not in per.columns:
        return True
    stage = pl.Series([coords.get(r, {}).get("pp") for r in per["rank"].to_list()], dtype=pl.Int64)
    ratio = (per.with_columns(stage=stage)
             .with_columns(lr=(pl.col("busy_ns") / pl.col("busy_ns").median().over("stage", "iteration")).log())
             .filter((pl.col("rank") == rank) & pl.col("lr").is_finite()).select("lr"))
    if ratio.height < 2:
        return True
    lead, scatter = ratio.select(pl.col("lr").median(), robust_scale("lr").alias("s")).row(0)
    return lead >= 2 * scatter


def paced_pairs(peers: PeerEvidence, lateness: LatenessEvidence, suspects: list[Suspect]) -> list[str]:
    """Notes for a job of two ranks in which one kept the other waiting in nearly every iteration
    yet is no suspect: its extra idle time was nearly all in short gaps (under ``idle.LONG_GAP_NS``),
    a host pacing its work a little more slowly, which the pair rule of ``_compute_suspect``
    does not name. Said, so that a user who sees the peer wait knows what was weighed."""
    if peers.mode == "skipped" or peers.ranks.height != 2 or not lateness.ran:
        return []
    named = {s.rank for s in suspects}
    late = {r["rank"]: r for r in lateness.ranks.iter_rows(named=True)}
    out = []
    for row in peers.ranks.iter_rows(named=True):
        rank, own = row["rank"], late.get(row["rank"])
        if rank in named or not keeps_waiting(own):
            continue
        busy = row["busy_ns"] or 0.0
        gap = max(row["gap_excess_ns"] or 0.0, 0.0)
        if gap < peers.min_effect * busy or max(row.get("long_excess_ns") or 0.0, 0.0) >= peers.min_effect * busy:
            continue
        waited = own["net_ns"] / max(traced_iterations(peers), 1) / 1e6
        out.append(f"rank {rank} kept its peer waiting {waited:.1f} ms an iteration; it idled {gap / 1e6:.1f} ms "
                   "more between its ops, nearly all in gaps under 1 ms: a host pacing its work more slowly, as two "
                   "healthy processes can differ, with no stall and no slower work: not a suspect")
    return out


def _replica_waits(peers: PeerEvidence, late: dict, coords: dict) -> set[int]:
    """The ranks of a pipeline whose stage 2 speaks through their replica: another stage of
    the same replica (same dp and tp), not slower than its own peers, keeps its data-parallel
    peers waiting in nearly every iteration and is last no less often than chance.

    A slow stage makes the stages before and after it wait at their point-to-point transfers,
    and they, not it, then reach their stage's all-reduce last: 4 H200s, megatron-core PP2 x
    DP2 under the profiler, 1.5x the layers' FLOPs on rank 2 (stage 1 of replica 0): rank 0, its
    stage 0, last at all 4 of its all-reduces, 184 ms net imposed, its compute 1.00x; rank 2 at
    its own all-reduces last at 2 of 4, net 0.05 ms waited."""
    if not coords or any(c.get(a) is None for c in coords.values() for a in ("tp", "pp", "dp")) \
            or max(c["pp"] for c in coords.values()) < 1:
        return set()
    slow = {r["rank"] for r in peers.ranks.iter_rows(named=True) if r["flagged"] or r.get("gap_flagged")}
    leaning = {r for r, row in late.items()
               if r not in slow and keeps_waiting(row) and stage2_agrees(row)}
    return {r for r, c in coords.items() if any(
        p != r and coords[p]["dp"] == c["dp"] and coords[p]["tp"] == c["tp"] and coords[p]["pp"] != c["pp"]
        for p in leaning if p in coords)}


STALLS_SHARE = 0.5
"""Between two GPU ranks, the least share of a rank's extra idle time in stalls (gaps of
``idle.LONG_GAP_NS`` or more) for that idle time alone to name its host."""


def _compute_suspect(row: dict, peers: PeerEvidence, late: dict | None, late_cut: float, coords: dict,
                     iteration_ns: float | None, slowdown_threshold: float,
                     overruled: list[Overruled] | None = None, shared_cpus: bool = False,
                     replica: bool = False, untraced: bool = False) -> Suspect | None:
    busy = row["busy_ns"] or 0.0
    # Where the stages were compared on a part of their work (``peers.scope``: the ops every
    # stage calls as often), its idle time is weighed against all of it, not that sliver (a
    # user's PP4, a stage repeating its forward under ``no_grad``: 0.4 ms of ops compared, 225 ms
    # of work a step; its 1.9 ms more stalls read as a host's real share, and its 16 ms of
    # passes beyond its peers' as a host's time)
    if peers.scope is not None:
        busy = max(busy, row.get("all_work_ns") or 0.0)
    gap_excess = max(row["gap_excess_ns"] or 0.0, 0.0)
    # A slow host shows as idle launch gaps; they count when they are a real share of the
    # rank's work (its launch delays inside spans stretch those too: see _host_slowdown).
    # (a rank whose spans are slower and whose gaps grew by a sliver is a slow GPU: a slower
    # kernel also delays the launches queued behind it a little)
    # On CPUs no launch stretches an op: a rank whose ops lose far more time than its gaps is
    # slow compute that also idles a little longer, not a slow host (megatron-core under mapp's
    # capture on 4 processes sharing 2 cores, each layer of rank 2 stretched 1.5x: 26.5 ms more
    # in its spans a step, 6.2 ms more idle, gaps at z 4.5). A process whose core is merely
    # busier stretches its ops and the framework's time between them alike (the same job's
    # profiler trace, no fault: 6.4 ms more in ops, 4.6 ms more idle)
    on_cpu = shared_cpus and (row["excess_ns"] or 0.0) > FAR_MORE * gap_excess
    stalled = max(row.get("long_excess_ns") or 0.0, 0.0)
    # On shared CPUs, where stage 1 counted calls, its stalls are those that recur at one place of
    # its program (``idle._recurring``): a process descheduled midway idles wherever it was, and
    # those gaps name no host (TP2 x DP2, no fault, beside a fifth busy process: a rank's gaps
    # 26.6 ms a step more than its TP peer's at z 8.2, none of them recurring)
    recurring = not (shared_cpus and peers.counted) or stalled >= peers.min_effect * busy
    # Between two GPU ranks, idle time alone names a host where most of it is stalls: a host that
    # sleeps or waits stalls, while two healthy hosts pacing their GPUs' launches differ by more
    # than any threshold in short gaps all over (2 H200s, megatron-core TP2 under the profiler:
    # no fault, one rank's GPU idling 329 ms a step more, 6% of it in stalls, the step 595 ms
    # where three reruns took 460-504; lognormal lengths, 121 ms, 17%; injected sleeps and work
    # before each microbatch: 68-106%)
    # Stalls that by themselves cost the step more than the threshold are no pacing whatever
    # else idles: where both hosts launch slower than their GPUs run, the rank that never waits
    # shows its GPU's idle time in short gaps, its peer spins in the collectives instead (2
    # H200s, a user's FSDP2 job under autocast, a 25 ms sleep before each step of rank 0: 55 ms
    # more idle a step, 26.5 ms of it in stalls, 30% of an 88 ms step, "no suspect")
    stalls_cost = iteration_ns is not None and stalled >= slowdown_threshold * iteration_ns
    paced = (not shared_cpus and peers.ranks.height == 2 and not row["flagged"]
             and stalled < STALLS_SHARE * gap_excess and not stalls_cost)
    host = (bool(row["gap_flagged"]) and gap_excess >= peers.min_effect * busy and not on_cpu and recurring
            and not paced)
    corroborated = late is not None and late["net_z"] > late_cut and late["last_z"] > late_cut
    # Two independent stages that each lean the same way are evidence together: a rank whose
    # compute stands out by half the cut-off and that stage 2 finds keeping the others waiting
    # (where work varies between microbatches, the spread of healthy ranks hides a slow GPU
    # from stage 1 alone).
    # (stage 2 "leans" when the rank is last far more often than chance and imposes more
    # waiting than it suffers; a flag of stage 1 in only some iterations lasts when it does)
    leans = late is not None and late["last_z"] > late_cut and late["net_ns"] > 0
    # Not on shared CPUs, where the two are not independent: a process whose core is busier is
    # slower at everything, its ops and its arrivals alike (megatron-core TP2 x PP2 under mapp's
    # capture, 4 processes on 2 cores, no fault: rank 0's spans 1.19x its TP peer's at z 1.7,
    # last at 63% of its calls at z 3.2)
    # In a job of two ranks stage 2 leans where the rank keeps the other waiting in nearly every
    # iteration and is last no less often than chance: with a collective or two a step, being
    # last "far more often than chance" cannot be shown (simulated DP2, a 1.3x GPU on lengths
    # varying per microbatch: last at all 4 all-reduces, last_z 2.0, 75 ms net a step imposed;
    # its compute 1.21x at z 1.5, the data's scatter hiding it from stage 1 alone)
    pair_leans = (peers.ranks.height == 2 and keeps_waiting(late)
                  and late["share_last"] >= late["expected_share"])
    # On shared CPUs the two lean together beyond what contention makes a healthy process
    # (``CONTENTION``): megatron-core TP2 under mapp's capture, 2 processes on 2 CPUs, each layer
    # of rank 1 doing 1.67x the forward's matmuls: its spans 1.74x its peer's at z 2.1 (two
    # ranks' z-scores scatter), last at 74% of 156 calls and keeping its peer waiting in every
    # step, "no suspect" before. Unflagged ranks leaning so in healthy and imbalanced jobs on
    # shared CPUs (942 jobs, ``benchmarks/detect_evidence.py``): at most 1.19x, the example above
    beyond_contention = not shared_cpus or float(row["slowdown"]) >= CONTENTION
    # And only a rank slower steadily: the rule is for one whose peers scatter, not one whose own
    # lead swings from step to step by as much as it leads (``_steadily_slower``)
    joint = (not row["flagged"] and (leans or pair_leans) and (row["z"] or 0.0) > peers.z_crit / 2
             and beyond_contention and float(row["slowdown"]) - 1 >= peers.min_effect
             and _steadily_slower(peers, row["rank"], coords))
    if joint or (row["flagged"] and leans):
        # (named jointly, with no iteration flagged on its own: the iterations it computed slower in)
        row = {**row, "flagged": True, "lasting": True,
               "iterations": row["iterations"] or _slower_iterations(peers, row["rank"])}
    # a host by its stalls in nearly every iteration, keeping the others waiting (``stalls``)
    if not host and not on_cpu and not paced and leans and (lasting := stalls_lasting(row, peers, late, stalled, busy)):
        host = True
        row = {**row, "iterations": lasting, "lasting": True}
    # Between two ranks a z-score of idle time says nothing (two values always sit one spread
    # apart), so the gap rule cannot flag; a rank whose idle launch gaps exceed its peer's by a
    # real share of its work and that arrives last at the collectives far more often than
    # chance is the slow host (measured: a 20 ms data-path sleep in a 86 ms DDP step on 2 GPUs,
    # last in 24 of 24 all-reduces, its gaps 20.3 ms longer per iteration). Unless its ops
    # account for more of the lost time than its gaps do: then it is slow compute that also
    # launches a little late (extra work before each microbatch, seen as ops in a profiler
    # trace: 45 ms of extra compute per iteration beside 4.9 ms of longer gaps)
    # A rank that calls ops more often than its peers (``added_work``) launches more too: on a
    # fast GPU its extra kernels finish before the host has launched the next, and the GPU idles
    # (2 H100s, TP2: extra GEMMs in each layer of rank 1, 1.12x its peer's kernel time and
    # 40 ms more idle a step). Its gaps are its extra work's, not a slow host's.
    # (in a job of two ranks, who waits for whom in every iteration says which leans, also
    # where most collectives are paced by other things and its share of being last says
    # nothing; with more ranks a pair's net waiting is no such answer: healthy 4-rank jobs had
    # a rank net-imposing in every iteration at 1.07x)
    # The idle time that names a host here is its stalls (gaps of LONG_GAP_NS or more): a host
    # that merely paces its GPU launches a little late all over, and two healthy processes
    # differ in that by far more than a threshold (2 H100s, megatron-core TP2 under the
    # profiler, no fault, 3 runs: one rank's GPU idled 11-62 ms a step more in gaps of 50-500
    # us, at random which rank, its peer waiting; the injected sleeps: 20-24 ms more, in one gap)
    extra = does_extra_work(row, peers.min_effect)
    # a rank that does work beyond its peers' launches more too: its gaps are that work's where
    # its ops lose more time than its gaps do (megatron-core TP2 x DP2 on 4 shared cores, extra
    # matmuls in each layer of rank 1, its profiler trace without shapes: 79.7 ms more compute a
    # step, 11.7 ms more idle)
    # Between two GPU ranks, where a host is named by stalls that stand out against their own
    # steadiness (``same_work``), its stalls are that work's too whatever their size: it
    # launches each extra call late (a pair of H100s, extra GEMMs in each layer of rank 1: 40 ms
    # more idle a step, more than the GEMMs' own time)
    # With more GPU ranks too, where its extra idle time is no stalls but short gaps all over, as
    # launching more kernels makes it (4 H200s, megatron-core DP4 under the profiler, 1.3x the
    # layers' FLOPs on rank 0: 1.28x on the GEMMs it calls more often, 26 ms more a step, its
    # gaps 75 ms more a step at z 4.6, none of it in gaps of 1 ms or more); a host that sleeps
    # or waits stalls
    launches = not shared_cpus and (peers.ranks.height == 2 or stalled < peers.min_effect * busy)
    its_work = extra and ((row["excess_ns"] or 0.0) > gap_excess or launches)
    if its_work:
        host = False
    # Calls are counted, not timed: a rank that calls ops more often than its peers in nearly
    # every iteration, at a real cost, does more work however its times scatter. One that stage
    # 1 did not flag on its times is named so provided it is not the one kept waiting (last at
    # the collectives no less often than chance; for one it flagged, see ``gates.overruled_why``). On
    # shared CPUs who is last is as much chance as the times are, and no healthy rank there was
    # seen calling any op more often than its peers (FSDP, plain DDP, megatron-core): plain DDP,
    # 2.5x the forward's matmuls on one of 4 processes on 2 cores beside a fifth busy one, last
    # at 1 of 5 all-reduces
    guessed = late is not None and bool(late.get("guessed"))
    adds = (adds_work(row, peers.min_effect, shared_cpus=shared_cpus, threshold=slowdown_threshold)
            and (late is None or guessed or shared_cpus or late["share_last"] >= late["expected_share"]))
    counted = not row["flagged"] and adds
    # On shared CPUs counted work is evidence for the gates also where stage 1 flagged the rank
    # on its times, for stage 2's arrivals there are as noisy as those times (plain DDP, 1.5x the
    # forward's matmuls on one of 4 processes on 2 cores: its compute 1.19x at z 12, last at 3
    # of 5 all-reduces, yet waiting 16 ms more than it made the others wait). On GPUs a rank
    # flagged on its times that does extra work passes the gates by it (``gates.overruled_why``)
    counted_work = counted or (adds and shared_cpus)
    if counted:
        # (in the iterations it traced: its added calls were counted in nearly every one)
        row, extra = {**row, "flagged": True, "iterations": row["iterations"] or _traced(peers, row["rank"])}, True
    # a host by its stalls alone, or by stalls that are most of its extra idle time (``stalls``)
    big_stalls = stalls_a_real_share(row, peers, stalled, busy, slowdown_threshold)
    imposes = leans or (keeps_waiting(late) and (peers.ranks.height == 2 or big_stalls))
    if not host and not on_cpu and stalls_alone(peers, late, big_stalls=big_stalls, shared_cpus=shared_cpus,
                                                   stalled=stalled):
        row = {**row, "iterations": stalled_iterations(peers, row["rank"]), "lasting": True,
               "by_stalls": stalled > gap_excess}
        host, gap_excess = True, max(gap_excess, stalled)
    if (peers.pairs and imposes and not host and not extra
            and stalls_most_of_idle(row, peers, stalled=stalled, busy=busy, gap_excess=gap_excess)):
        host = True
    # A rank that is a suspect by its compute (or with stage 2) and idles longer than its peers
    # in nearly every iteration by the z of its idle time is a slow host that also launches late
    # inside its spans, even where its idle time alone is too small a share to name it
    # (not on CPUs where its ops lose far more time than its gaps: above)
    if (row["flagged"] and not host and not its_work and not on_cpu and row.get("gap_idle")
            and gap_excess >= peers.min_effect * busy):
        host = True
    # On spans timed on the GPU, a slowdown that its backward ops do not share alike is its
    # host's slow launches (``idle.launch_bound``): host time, which like idle time names a
    # host only when it lasts (flagged in nearly every iteration; on a healthy 4-GPU job one
    # rank's Python, at times a little slower, stretched one iteration's forward pass by 40%)
    # Stalls only where its forward pass hands over to the backward, in a rank whose backward
    # ops are slower alike, are its forward pass's host pacing, not a host that sleeps or waits:
    # launching work added to the forward, its host falls behind its GPU and catches up there,
    # while the backward ops say how much slower its GPU's work is (4 H200s, TP2 x PP2, 1.5x the
    # layers' FLOPs on rank 3: backward ops 1.22x alike, 4.4 ms more stalls a step, 94% of them
    # before `output_layer.backward`; 2 H200s, TP2, the same on rank 1: 1.23x, 7.9 ms, 98%).
    # Data-path sleeps and work before each microbatch stall before the forward (5% or less at
    # the hand-over); simulated slow hosts stall nowhere, their gaps short and everywhere.
    # Nor, wherever they are, stalls under the threshold's share of its work beside backward ops
    # slower alike: a host that slows its rank by the threshold stalls at least that much (4
    # H200s, TP2 x DP2 under mapp's capture, 1.5x the layers' FLOPs on rank 2: backward ops
    # 1.39x alike, 8.7 ms more stalls a step, 3.4% of its work, 70% of them at the hand-over;
    # injected sleeps and work before each microbatch stalled 36-215% of their ranks' work)
    handover = max(row.get("handover_excess_ns") or 0.0, 0.0)
    backward = row.get("ops_median")
    if (row["flagged"] and (host or row.get("launch_bound")) and row.get("gpu_alike") and not shared_cpus
            and backward is not None and math.isfinite(float(backward))
            and len(row["iterations"] or []) >= CONSISTENT * traced_iterations(peers)
            and stalled >= peers.min_effect * busy
            and (handover >= CONSISTENT * stalled or stalled < slowdown_threshold * busy)):
        gpu = math.exp(float(backward))
        host, row = False, {**row, "launch_bound": False, "slowdown": gpu, "excess_ns": excess_at(row, busy, gpu)}
    # A GPU whose kernels run the same work slower, alone on it (``contention``), by far more
    # time than its idle gaps grew, is slow itself: a late host leaves kernels as fast as ever,
    # while a GPU time-sliced with another process leaves its stream idle as the other runs (2
    # H200s, a DDP transformer, a neighbour process busy 25-50% of rank 0's GPU: its kernels
    # 1.2-2.7x its peer's, its gaps 7.1-7.3 ms a step more, "slow host 0")
    # So also one whose kernels are slower by the threshold and lose more time than its gaps:
    # the neighbour's slices are stalls of the stream, as long as the kernels' loss (2 H200s, a
    # user's DDP transformer under autocast, a neighbour busy 30% of rank 0's GPU: its kernels
    # 1.31x at z 55, 7.4 ms a step, its gaps 4.8 ms more, all of it stalls: "slow host 0")
    lost = row["excess_ns"] or 0.0
    if (host and row["flagged"] and not shared_cpus and peers.counted and not extra
            and (lost > FAR_MORE * gap_excess
                 or (float(row["slowdown"]) >= 1 + slowdown_threshold and lost > gap_excess))):
        host = False
    launch = bool(row.get("launch_bound")) and row["flagged"]
    if launch:
        judged = launch_bound_verdict(row, peers, stalled=stalled, handover=handover, gap_excess=gap_excess,
                                      busy=busy, slowdown_threshold=slowdown_threshold)
        if isinstance(judged, str):
            if overruled is not None and float(row["slowdown"]) >= 1 + slowdown_threshold:
                overruled.append(Overruled(int(row["rank"]), f"rank {row['rank']} computes "
                                           f"{float(row['slowdown']):.2f}x its peers (z {float(row['z']):.1f}): not a "
                                           f"suspect ({judged})"))
            return None
        row, launch, host, stalled = judged
    if not (row["flagged"] or host):
        return None
    # On shared CPUs a rank slower than every other rank of the job by the threshold, in nearly
    # every iteration, is no chance of two peers (``shared_cpus.above_shared_cpus``); where its gaps lose
    # more than its ops, though, its host is the likelier cause (megatron-core TP2 x DP2 under
    # the profiler, a 20 ms data-path sleep on rank 0: its ops 1.20x, its gaps 28.5 ms a step more)
    beside = slowest_other(peers, row["rank"]) if shared_cpus else None
    alone = (not host and beside is not None
             and stands_out(typical_slowdown(peers, row["rank"], float(row["slowdown"])), beside, slowdown_threshold)
             and len(row["iterations"] or []) >= CONSISTENT * traced_iterations(peers)
             and (row["excess_ns"] or 0.0) > gap_excess)
    why = overruled_why(row, peers, late, host=host, counted=counted_work, extra=extra, guessed=guessed,
                        stalled=stalled, busy=busy, alone=alone, big_stalls=big_stalls, replica=replica,
                        shared_cpus=shared_cpus, stage=(coords.get(row["rank"]) or {}).get("pp"),
                        threshold=slowdown_threshold, untraced=untraced)
    if why is not None:
        under = _under_threshold(row, max(gap_excess, stalled), iteration_ns, slowdown_threshold) if host else None
        why = why if under is None else f"{under}; {why}"
        if overruled is not None and (host or float(row["slowdown"]) >= 1 + slowdown_threshold):
            overruled.append(overruled_line(row, late, host, gap_excess, why))
        return None
    if host and shared_cpus:
        # On shared cores a host's stalls are what it costs where they exceed its idle time's
        # excess: its peers' idle time, swollen by the shared cores in short gaps, eats the
        # latter (plain DDP and FSDP, 4 processes on 2 CPUs, a 22-24 ms data-path sleep on one
        # rank: 22.3-24.2 ms more stalls a step than its peers, 13-16 ms more idle time in all,
        # "below threshold" at 1.06-1.08x of a ~230 ms step; hosts named in healthy and
        # imbalanced jobs there stalled at most 1.4 ms a step beyond their idle time's excess;
        # a host named by its stalls alone, ``stalls.stalls_alone``, is costed so already, on any
        # machine)
        gap_excess = max(gap_excess, stalled)
        # and its layers' excess only where it is more than the shared cores make, one rank a
        # stage (``shared_cpus.layers_by_contention``)
        if layers_by_contention(peers, float(row["slowdown"]), (coords.get(row["rank"]) or {}).get("pp"),
                                steady=row.get("steady") is not None):
            row = {**row, "flagged": False, "layers_excess_ns": row["excess_ns"], "excess_ns": 0.0}
    c1 = margin(row["gap_z"] if host else row["z"], peers.z_crit)
    c2 = margin(late["net_z"], late_cut) if corroborated else 0.0
    if launch:
        if not row["gap_flagged"]:
            gap_excess = 0.0    # idle time that does not last is no part of it
        # its spans' part no more than the median of its ops says: a few long ops make an
        # excess that median does not share (a simulated data reader's forward steps)
        row = {**row, "excess_ns": excess_at(row, busy, float(row["slowdown"]))}
    # What it costs a step is the time it adds to its own step: in a 1F1B pipeline a stage that
    # adds x over its microbatches delays the step by about x (m x its microbatch time plus the
    # other stages' ramp), not x (m + pp - 1) / m, as the warm-up and cool-down steps cross it
    # once each way (megatron-core PP2 x DP2 and PP4 x DP4 under mapp's capture, a data-path
    # sleep before each microbatch of one stage: costed 1.26-1.84x the time it slept, a 16-rank
    # job's 191.7 ms a step beyond its 182.8 ms step; without the factor 1.01-1.05x)
    excess = max(row["excess_ns"] or 0.0, 0.0) + (gap_excess if host else 0.0)
    shows_added = (extra or (adds and shared_cpus)) and not host
    if shows_added:
        # it costs at least the work it adds, however its whole compute's times scatter (a
        # user's DDP transformer, 4 processes on 2 cores, 1.4x the forward's matmuls on rank 0:
        # its compute 0.87-0.98x its peers' by their times, 5.8-6.7 ms a step more on the ops it
        # calls more often; no cost was shown)
        excess = max(excess, added_cost_ns(row))
    added = None if host else added_slowdown(row, peers.min_effect, slowdown_threshold)
    # (where stage 1 timed a sliver of the stages' work, the ops they call alike without shapes
    # (``peers.scope``), its slowdown is no whole compute's: the added work's figure is shown,
    # as at a threshold that slowdown does not clear; PP4 under the profiler's defaults, 1.5x
    # the layers' matmuls on stage 1: "1.12x" on 4% of its compute, 65 ms a step added)
    sliver = peers.scope is not None
    # So too on shared CPUs for a rank flagged on its times that does counted work: there its
    # timed excess is the shared cores' as much as its own, and whether the added work explains
    # most of it (``does_extra_work``) says nothing; the work added is what the threshold judges
    # (plain DDP, 4 processes on 2 cores, 1.41x the forward's matmuls on rank 2, two runs: 1.25x
    # on the ops it calls more often, 2.0 ms a step of its 4.5 ms timed excess, its whole compute
    # 1.07x: "below threshold")
    if (counted or (counted_work and not host)) and (float(row["slowdown"]) < 1 + slowdown_threshold or sliver):
        added = max(float(row["added"]), added or 0.0)
    slowdown = _host_slowdown(row, gap_excess, iteration_ns) if host else max(float(row["slowdown"]), added or 0.0)
    evidence: dict[str, Any] = {
        "lasting": bool(row.get("lasting", True)),
        "peers": {"mode": peers.mode, "slowdown": round(float(row["slowdown"]), 3), "z": round(float(row["z"]), 2),
                  "cut": round(peers.z_crit, 2), "share_slow_ops": round(float(row["share_slow"]), 3),
                  "ops": int(row["n_ops"]),
                  "excess_ms_per_iteration": round((row.get("layers_excess_ns", row["excess_ns"]) or 0.0) / 1e6, 4)},
        "launch_gaps": {"excess_ms_per_iteration": round(gap_excess / 1e6, 4), "z": round(float(row["gap_z"] or 0.0), 2),
                        "flagged": bool(row["gap_flagged"])} | ({"by": "stalls"} if row.get("by_stalls") else {}),
        "lateness": as_evidence(late),
    }
    # (on shared CPUs counted work is the evidence whether or not it explains most of the timed
    # excess: ``shared_cpus.above_shared_cpus`` reads it)
    if shows_added:
        evidence["peers"]["added_work"] = added_evidence(row)
    if row.get("by_floor"):
        evidence["peers"]["fastest_ops"] = round(math.exp(float(row["ops_floor"])), 3)
    if row.get("steady") is not None and not host:
        evidence["peers"]["steady_layers"] = round(float(row["steady"]), 3)
    if (row.get("held_ns") or 0.0) > 0 and not host:   # its GPU's, in its slowdown (``same_work._held``)
        evidence["peers"]["held_ms_per_iteration"] = round(float(row["held_ns"]) / 1e6, 4)
    if launch:
        evidence["launch_bound"] = {"why": row["launch_why"], **{
            k: None if row.get(k) is None else round(float(row[k]), 3) for k in ("ops_spread", "ops_median", "peers_spread")}}
    # A host named by its gaps that launches more than its peers in nearly every iteration is
    # launching work added, as fast GPUs wait on (``added_work.launches_more``): the work is the
    # fault, the gaps its cost. Launching idles the GPU in short gaps all over (the autocast run
    # ``launches_more`` names: 2.7 ms of its 23.9 ms more idle a step in gaps of 1 ms or more);
    # a host whose extra idle time is mostly stalls is stalling, whatever else it calls (a log
    # line's few ``item`` calls)
    launching = (host and not shared_cpus and launches_more(row, peers.min_effect)
                 and max(row.get("long_excess_ns") or 0.0, 0.0) < STALLS_SHARE * gap_excess)
    if launching:
        host = False
        evidence["peers"]["launched_more"] = launched_evidence(row)
    return Suspect(
        rank=row["rank"], kind="slow_host" if host else "slow_compute", coords=coords.get(row["rank"]),
        confidence=min(0.99, 0.5 + 0.3 * c1 + 0.19 * c2), slowdown=slowdown,
        iterations=[int(i) for i in row["iterations"]], excess_ns=excess, iteration_ns=iteration_ns,
        evidence=evidence,
    )


def _under_threshold(row: dict, gap_excess: float, iteration_ns: float | None, threshold: float) -> str | None:
    """Why a host a gate set aside would be no suspect anyway, where it is so: what it costs its
    step (``_host_slowdown``) is under the threshold. Said before the gate's reason, which alone
    reads as though the host were fine (4 gloo processes on 2 cores, a user's DDP transformer with
    its gradients all-reduced by hand, a 23 ms sleep before each step on rank 1: 25 ms more idle a
    step at z 13, 1.07x of a 384 ms step, set aside as "stage 2 does not agree" alone)."""
    slowdown = _host_slowdown(row, gap_excess, iteration_ns)
    if not 1 < slowdown < 1 + threshold:
        return None
    return f"it would cost its step {slowdown:.3f}x, under the threshold {1 + threshold:g}x"


def _host_slowdown(row: dict, gap_excess: float, iteration_ns: float | None) -> float:
    """A slow host stretches its rank's iteration: by the excess idle time, and by the excess
    time of its spans when they are slower too (a late launch inside a span stretches it).
    The iteration over the same less the excess (without iteration times: the rank's work and
    idle time, which on a CPU trace with several threads can count some time twice)."""
    span = iteration_ns or (row["busy_ns"] or 0.0) + (row.get("gap_ns") or 0.0)
    excess = gap_excess + (max(row["excess_ns"] or 0.0, 0.0) if row["flagged"] else 0.0)
    if span <= excess or span <= 0:
        return float("inf") if excess > 0 else 1.0
    return span / (span - excess)


def _last_stage(layout: LayoutInfo) -> frozenset[int]:
    """The ranks of the last pipeline stage traced (none where the layout has no stages, or only
    the first stage was traced: the first stage is never held to the last stage's bars)."""
    pp = layout.ranks.filter(pl.col("pp").is_not_null())
    if pp.is_empty() or pp["pp"].max() == 0:
        return frozenset()
    return frozenset(pp.filter(pl.col("pp") == pp["pp"].max())["rank"].to_list())


def _middle_stages(layout: LayoutInfo) -> frozenset[int]:
    """The ranks of pipeline stages that are neither the layout's first stage nor its last among
    the ranks traced (``_last_stage``'s): a traced stage after an untraced first one is a middle one."""
    if layout.sizes is None or layout.ranks.filter(pl.col("pp").is_not_null()).is_empty():
        return frozenset()
    traced_last = int(layout.ranks["pp"].max())
    return middle_stages(layout.ranks, first=0, last=min(layout.sizes["pp"] - 1, traced_last))


def _receivers(f) -> list[int]:
    """The receiving ends of a link finding's observations timed by one direction's windows."""
    return [o["direction"][1] for o in f.observations if o.get("compared") == WINDOWED and o.get("direction")]


def _link_suspect(f, bandwidth: BandwidthEvidence, coords: dict, iteration_ns: float | None) -> Suspect:
    iterations = sorted({i for o in f.observations for i in o["iterations"]})
    c1 = margin(f.z, bandwidth.z_crit)
    # more than one slow observation (several links of one NIC, or one link in several
    # iterations) is a second, independent look at the same fault
    c2 = 1.0 if len(f.observations) >= 2 or len(iterations) >= 2 else 0.0
    evidence = {"bandwidth": {"observations": f.observations, "cut": round(bandwidth.z_crit, 2)}}
    if f.kind == "slow_nic":
        evidence["bandwidth"]["healthy_inter_node_links"] = f.healthy_links
        kind, rank, peer, group = "slow_nic", f.ranks[0], None, None
    elif f.kind == "slow_link":
        kind, rank, peer, group = "slow_link", f.ranks[0], f.ranks[1], None
    else:
        kind, rank, peer, group = "slow_link", f.ranks[0], None, list(f.ranks)
        evidence["bandwidth"]["note"] = "a ring collective's timing cannot tell which pair of the group is slow"
        c2 = 0.0
    return Suspect(rank=rank, kind=kind, peer=peer, group=group, coords=coords.get(rank),
                   confidence=min(0.99, 0.5 + 0.3 * c1 + 0.19 * c2) * (0.8 if group else 1.0),
                   slowdown=f.slowdown, iterations=iterations, excess_ns=f.excess_ns, iteration_ns=iteration_ns,
                   evidence=evidence)


def _victims(lateness: LatenessEvidence, suspects: list[Suspect], layout: LayoutInfo) -> list[int]:
    """TP and DP peers of a compute/host suspect that waited for it more than the typical rank."""
    if not lateness.ran or lateness.ranks.is_empty() or layout.sizes is None:
        return []
    culprits = [s for s in suspects if s.kind in ("slow_compute", "slow_host") and s.coords]
    if not culprits:
        return []
    w = lateness.ranks.select("rank", "waited_ns").join(layout.ranks.select("rank", "tp", "pp", "dp"), on="rank")
    med = w["waited_ns"].median() or 0.0
    near = pl.lit(False)
    for s in culprits:
        c = s.coords
        near = near | ((pl.col("pp") == c["pp"]) & ((pl.col("dp") == c["dp"]) | (pl.col("tp") == c["tp"])))
    flagged = {s.rank for s in suspects}
    out = w.filter(near & (pl.col("waited_ns") > med))["rank"].to_list()
    return sorted(r for r in out if r not in flagged)


def _grid(layout: LayoutInfo, peers: PeerEvidence, lateness: LatenessEvidence, flagged: set[int],
          victims: set[int]) -> pl.DataFrame:
    grid = layout.ranks.select("rank", "tp", "pp", "dp")
    if peers.mode != "skipped" and not peers.ranks.is_empty():
        grid = grid.join(peers.ranks.select("rank", "slowdown"), on="rank", how="left")
    else:
        grid = grid.with_columns(slowdown=pl.lit(None, pl.Float64))
    if lateness.ran:
        grid = grid.join(lateness.ranks.select("rank", "share_last"), on="rank", how="left")
    else:
        grid = grid.with_columns(share_last=pl.lit(None, pl.Float64))
    return grid.with_columns(
        role=pl.when(pl.col("rank").is_in(list(flagged))).then(pl.lit("suspect"))
        .when(pl.col("rank").is_in(list(victims))).then(pl.lit("victim")).otherwise(pl.lit("ok"))
    ).sort("rank")
