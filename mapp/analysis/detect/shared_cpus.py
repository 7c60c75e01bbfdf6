"""The verdict's rules for compute timed on CPU processes that share cores (gloo jobs).

Processes that share cores slow each other for as long as they run, and which one is unlucky is
chance: the one whose core is busier is descheduled in a good share of its calls and arrives last
at many collectives, for the whole run. So where ``detector._cpu_compute`` says the ranks are such
processes, a rank slower by its times or its arrivals alone must stand out beyond what that makes,
and work a fault adds is judged by its counted calls (``added_work``). The rules that read one
candidate's evidence live in ``verdict._compute_suspect`` (its ``shared_cpus`` switch); these are
the ones that look across ranks. ``benchmarks/detect_evidence.py`` measures, on any corpus, what
the constants below cut between faults and healthy or imbalanced jobs.
"""

from __future__ import annotations

import math

import polars as pl

from mapp.analysis.detect.findings import Overruled, Suspect
from mapp.analysis.detect.peer_evidence import PeerEvidence
from mapp.analysis.detect.replicas import with_replica
from mapp.analysis.detect.thresholds import CONSISTENT
from mapp.analysis.graph.diagnose import rank_list

__all__ = ["FAR_MORE", "CONTENTION", "LAST_STAGE", "ONE_RANK_A_STAGE", "TIMES_ALONE", "TWO_PEERS", "WITH_REPLICA",
           "above_shared_cpus", "counted_first", "late_above_contention", "late_alone", "layers_by_contention",
           "slowest_other", "stands_out", "typical_slowdown"]

FAR_MORE = 2.0
"""On CPUs, ops losing this many times the time its gaps lose make a rank slow compute, not a slow host."""

CONTENTION = 1.3
"""On CPU processes sharing cores, where calls are counted (``PeerEvidence.counted``), the least
slowdown by its times alone, or by its arrivals alone, that names a rank: which process shares
its core with a busier one is chance, and lasts the whole run. Healthy megatron-core and plain
DDP jobs on 4 processes on 2 cores, some beside a fifth busy process: a rank 1.11-1.15x its peers
by the lesser typical call while slower than every other rank by the threshold, 1.12x by its
arrivals alone. A fault adds work, which its counted calls show (``added_work``); slowed by
times alone, 1.41-1.61x (extra matmuls of shapes the model never runs), 2.5-7.4x by arrivals.
Also the bar of a middle or the last pipeline stage timed against the other stages where calls
are not counted (``ONE_RANK_A_STAGE``)."""


TIMES_ALONE = 1.5
"""``CONTENTION`` for a rank flagged by its times alone where calls are counted (under the
profiler) and it calls no op more often than its peers: the same work, timed slower. Over the
corpora, the held-out sets and the user jobs' runs (1,150 jobs, about 700 of them profiler
traces on shared CPUs), each of 277 faulted ranks named slow compute there did counted work
(``added_work``), and the three ranks named by their times alone were in jobs with no fault,
1.30-1.44x (plain DDP and a CNN of two processes on 2 cores, one core of the pair slower all
run; megatron-core DP4 on lognormal lengths, no shapes recorded). A core that is slower at the
same work beyond this is still named."""


LAST_STAGE = 1.6
"""``CONTENTION`` for the last pipeline stage where each stage is one rank (``peers`` in "layer
peers" mode) and calls are counted (under the profiler; under mapp's capture, where they are not,
it is held to ``CONTENTION``, ``ONE_RANK_A_STAGE`` says why): on CPU processes sharing cores it is
timed slower than the other stages on the same kinds in jobs with no fault (healthy, lognormal
lengths, a heavier last stage), whichever machine (megatron-core under the profiler: PP2
1.23-1.54x in five jobs on 2 cores and on 8 CPUs of a 64-CPU machine; PP4 1.14-1.45x in three),
its calls slower even while no other rank runs, the cause not known. Work a fault adds to it is
counted (``same_work._layers_often``, ``_added_alone``), not judged by this."""


ONE_RANK_A_STAGE = 1.55
"""``CONTENTION`` for ranks compared with layer peers (one rank a pipeline stage) where calls are
not counted (mapp's capture): one process's layers timed against another process's, which
contention on the shared cores slows or spares for the whole run, and no count to tell work from
time. Megatron-core PP2 under mapp's capture, 2 processes on 2 CPUs of a 16- and a 64-CPU
machine, no fault: the first stage's layers 1.46x the last's in a healthy job, the last stage's
1.21x the first's with the heavier last stage; layer faults made by sleeps (1.45-1.85x) in PP2
and PP4 jobs on 2 to 4 CPUs, where named, read 1.68-2.07x (13 jobs; a PP2 1.45x one is missed
on 2 of 3 machines by other rules, whichever bar).

For the first stage only, which reads the data outside its spans and whose layers shared CPUs
time slower than the others' in jobs with no fault (up to 1.82x in PP2 with a heavier last
stage: beyond this bar too, and left to the other rules, which must find it slower in more than
half the iterations, ``gates``). A middle stage, which neither reads the data nor computes the
loss, is held to ``CONTENTION``: the middle stages of healthy PP4 jobs under mapp's capture on
shared CPUs were timed at most 1.08x the other stages' same layers (26 ranks), of imbalanced ones
1.22x, while a 1.5x layer fault on stage 2 read 1.51x in two runs, "not a suspect" under 1.55x
(942 jobs and ``--set fresh21``, ``benchmarks/detect_evidence.py``). So is the last stage, whose
loss is no layer span: in 69 PP2 jobs with no fault on its rank (healthy, a heavier last stage,
lognormal lengths, a fault elsewhere), 2 processes on 2 to 4 CPUs of 2- to 64-CPU machines, its
layers read at most 1.21x the first stage's, and in 96 of 97 PP4 ones at most 1.24x (the 97th, lognormal
lengths, 1.90x, is judged by the other rules as before); its layer faults of 1.4-1.55x read
1.41-2.24x in 11 of 12 PP2 jobs, five of them "not a suspect" under 1.55x before. And so is a
first stage of three or more that ``steady.steady_layers`` flagged, slower than the other stages'
mean layer call in every step: PP4's first stages with no fault read at most 1.21x so (105 ranks),
their 1.4-1.45x layer faults 1.39x or more."""


TWO_PEERS = 1.25
"""``CONTENTION`` for a job of two ranks that run the same program (DP2, TP2) where calls are not
counted (mapp's capture): with no third rank to show how far contention slows a healthy one
(``slowest_other``), its times alone name one only beyond this. Megatron-core DP2 and TP2 under
mapp's capture, 2 processes on 2 CPUs of a 32-CPU machine beside other such jobs, no fault
(healthy, lognormal lengths; 27 jobs of sessions 40-46): a rank's compute at most 1.20x its
peer's, in every step (one core of the pair busier for the whole run; 1.16x and 1.14x were
"slow compute"); the faulted ranks stage 1 flagged on times (layer faults of 1.2-1.48x, work
before each microbatch; 21 jobs) read 1.28-2.04x, and no other rank was flagged."""


WITH_REPLICA = 0.5
"""On CPU processes sharing cores, the least share of a rank's slowdown (log-ratio to its peers,
over the iterations it is flagged in) that the other ranks of its data-parallel replica show
against their own peers in those iterations for the slowdown to be its replica's, not its own.
A slow rank does not slow its replica's other stages or TP ranks on their own work (they wait
for it in their transfers, and its cores' time is no more theirs than anyone's); a replica whose
processes the scheduler crowds onto the busier core, or whose data is longer, is slower
together. Megatron-core PP2 x DP2 and TP2 x DP2 (mapp's capture and the profiler), 4 processes on
2 cores, 92 jobs: the faulted ranks flagged slow (layer faults of 1.2-1.5x, work before each
microbatch, extra matmuls) at most 0.28 of their slowdown in their replica's other ranks; a
PP2 x DP2 job with a heavier last stage and no fault, its replica 1 crowded in 3 steps of 4,
its last stage "slow compute 1.47x" at 0.55. (Ranks flagged beside a faulted rank of their own
replica, its victims, see 2.3x their slowdown and more in it.)"""


def above_shared_cpus(suspects: list[Suspect], peers: PeerEvidence, slowdown_threshold: float,
                      overruled: list[Overruled], last_stage: frozenset[int] = frozenset(),
                      middle_stages: frozenset[int] = frozenset(),
                      coords: dict[int, dict] | None = None, late: dict[int, dict] | None = None) -> list[Suspect]:
    """Where compute is timed on CPUs, a rank timed slower than its peers is a suspect only if it
    is also slower than every other rank of the job by the threshold: processes that share cores
    slow each other for as long as they run, so one of two peers doing the same work is slower
    than the other by chance, and the job's other peers show by how much (megatron-core PP2 x
    DP2 under the profiler, 4 processes on 2 cores, no fault, 3 runs, two healthy and one with a
    heavier last stage: in each, one rank of a DP pair 1.12-1.18x its peer at z 22-34, the other
    pair 1.03-1.18x; one layer 1.5x slower: the slowed rank 1.37-1.80x, every other 1.03-1.09x),
    each rank in its typical traced iteration (``typical_slowdown``, ``slowest_other``).
    Where calls are counted, also faster than contention makes a healthy process doing the same
    work (``TIMES_ALONE``); where they are not and the job is two ranks of one program, than
    ``TWO_PEERS``; where they are not and each stage is one rank (layer peers), than
    ``ONE_RANK_A_STAGE`` (a rank of ``middle_stages`` or of ``last_stage``, not the first stage,
    than ``CONTENTION``).
    And slower in nearly every traced iteration (``CONSISTENT``): another process's burst on its
    cores comes and goes (megatron-core DP4 under mapp's capture, 4 processes on 12 logical CPUs
    of a 64-CPU machine beside 3 other such jobs, no fault: one rank 1.45x its peers at z 8.7 in
    2 of 4 steps). Work counted, not timed, is no chance (``added_work``). ``last_stage``: the
    ranks held to ``LAST_STAGE`` instead of ``TIMES_ALONE`` where calls are counted (under the
    profiler), and to ``CONTENTION`` instead of ``ONE_RANK_A_STAGE`` where they are not.
    ``coords`` (rank -> its ``tp``, ``pp``, ``dp``, where the layout is known): a rank whose
    replica's other ranks are slower than their own peers in the same iterations, by
    ``WITH_REPLICA`` of its slowdown or more, is slower with its replica (``with_replica``); so
    is a slow host whose replica's other pipeline stages then compute slower than their peers by
    the threshold and spend more time beyond their peers' than it idles (``_crowded``: a host that stalls leaves
    its other stages waiting, not computing slower; TP peers are left out, for under mapp's
    capture a TP rank's spans hold its waits for its peer's stalls).
    ``late`` (rank -> its stage 2 row, where stage 2 ran): a rank no slower than the slowest other
    by the threshold is still kept where stage 2 flags it and not that other (``late_alone``)."""
    traced = peers.rank_iterations["iteration"].n_unique() if not peers.rank_iterations.is_empty() else 0
    kept = []
    for s in suspects:
        own = s.evidence.get("peers", {}).get("slowdown")
        # (one under the threshold anyway is said to be below it, which says more)
        timed = (s.kind == "slow_compute" and own is not None and "added_work" not in s.evidence["peers"]
                 and s.slowdown >= 1 + slowdown_threshold)
        beside = slowest_other(peers, s.rank)
        # (a rank steady.steady_layers flagged, one stage of three or more slower than the others'
        # mean in every step, is held to CONTENTION wherever it sits: ONE_RANK_A_STAGE says why)
        steady = "steady_layers" in s.evidence.get("peers", {})
        typical = typical_slowdown(peers, s.rank, own) if timed else None
        along = with_replica(peers, s.rank, s.iterations, coords or {}) if timed else None
        crowded = _crowded(peers, s, coords or {}, slowdown_threshold) if s.kind == "slow_host" else None
        if timed and traced and len(s.iterations) < CONSISTENT * traced:
            overruled.append(Overruled(s.rank, f"rank {s.rank} computes {own:.2f}x its peers in {len(s.iterations)} of "
                                               f"{traced} iterations: not a suspect (on shared CPUs, slower by its "
                                               "times alone in some iterations only: contention comes and goes)"))
        elif along is not None and along[1] > 0 and along[2] >= WITH_REPLICA * along[1]:
            others, mine, theirs = along
            overruled.append(Overruled(s.rank, f"rank {s.rank} computes {math.exp(mine):.2f}x its peers where "
                                               f"{_ranks(others)} of its replica {_compute(others)} {math.exp(theirs):.2f}x "
                                               f"against {_its(others)} peers in the same iterations: not a "
                                               "suspect (on shared CPUs, slower with its replica: its cores or its "
                                               "data, for a slow rank does not slow the other ranks of its replica "
                                               "on their own work)"))
        elif crowded is not None:
            others, theirs, idle_ms, extra_ms = crowded
            overruled.append(Overruled(s.rank, f"rank {s.rank} idles {idle_ms:.1f} ms an iteration more than its peers "
                                               f"while {_ranks(others)}, the other stage{'s' if len(others) > 1 else ''} "
                                               f"of its replica, {_compute(others)} {math.exp(theirs):.2f}x against "
                                               f"{_its(others)} peers, {extra_ms:.1f} ms more, in the same iterations: "
                                               "not a suspect (on shared CPUs, its replica's processes crowded "
                                               "together: a host that stalls leaves its other stages waiting, not "
                                               "computing slower)"))
        elif (timed and beside is not None and not stands_out(typical, beside, slowdown_threshold)
              and not late_alone(late, s.rank, beside[0])):
            overruled.append(Overruled(s.rank, f"rank {s.rank} computes {own:.2f}x its peers ({typical:.2f}x in its "
                                               f"typical iteration): not a suspect (on shared CPUs: rank {beside[0]} "
                                               f"is {beside[1]:.2f}x its own peers in its typical iteration, and a "
                                               "slow rank is slower than every other by the threshold, "
                                               f"{1 + slowdown_threshold:g}x)"))
        elif timed and peers.counted and own < (bar := LAST_STAGE if s.rank in last_stage else TIMES_ALONE):
            where = " (the last stage, which shared CPUs time slower than the others)" if s.rank in last_stage else ""
            overruled.append(Overruled(s.rank, f"rank {s.rank} computes {own:.2f}x its peers: not a suspect (on "
                                               f"shared CPUs, by its times alone, under {bar:g}x{where}: it calls no "
                                               "op more often than its peers)"))
        elif (timed and not peers.counted and peers.mode != "layer peers" and peers.ranks.height == 2
              and own < TWO_PEERS):
            overruled.append(Overruled(s.rank, f"rank {s.rank} computes {own:.2f}x its peer: not a suspect (on "
                                               f"shared CPUs, of two ranks by their times alone, under {TWO_PEERS:g}x: "
                                               "which of two processes contention slows is chance, and no call is "
                                               "counted)"))
        elif (timed and not peers.counted and peers.mode == "layer peers"
              and own < (bar := _layers_bar(peers, s.rank not in middle_stages | last_stage, steady))):
            overruled.append(Overruled(s.rank, f"rank {s.rank} computes {own:.2f}x its peers: not a suspect (on "
                                               "shared CPUs, one rank a stage timed against the other stages' layers, "
                                               f"under {bar:g}x: which process contention slows is chance, and no "
                                               "call is counted)"))
        else:
            if timed and beside is not None and not stands_out(typical, beside, slowdown_threshold):
                s.evidence["peers"]["as_slow_beside"] = {"rank": beside[0], "slowdown": round(beside[1], 3)}
            kept.append(s)
    return kept


def late_alone(late: dict[int, dict] | None, rank: int, other: int) -> bool:
    """Stage 2 flags ``rank`` (it keeps the others waiting beyond chance, net of its own waits)
    and not ``other``, a rank its times alone cannot tell it from (``stands_out``): contention
    that slows a process's spans as much as a fault's does not also leave it last at the job's
    collectives (megatron-core DP16 under mapp's capture, 16 processes on 16 cores, one rank's
    layers 1.5x: it 1.67x its peers in its typical step, a healthy one 1.62x; stage 2 flagged the
    slowed one alone, net +29.8 ms, the other -5.0 ms). Over the corpora and the held-out run
    directories (about 800 jobs) the times-alone rule held back nine ranks, eight of them with
    no stage 2 flag; the ninth is that one."""
    if not late:
        return False
    mine, theirs = late.get(rank), late.get(other)
    return bool(mine and mine.get("flagged")) and not bool(theirs and theirs.get("flagged"))


def counted_first(suspects: list[Suspect]) -> list[Suspect]:
    """``suspects`` (ranked by cost), each that does work counted beyond its peers' (``added_work``
    in its evidence) moved ahead of the compute suspects before it that are slower by their times
    alone. Counts are exact where the times of processes sharing cores are not, and no healthy
    rank there was seen calling an op more often than its peers: a rank's times can say it
    computes 1.5x while its calls say it does the same work (a CNN under DDP, 4 processes on 2
    cores, one more pass of the middle block on rank 2: 878 calls a step to its peers' 832, 1.66x
    on the ops it calls more often, its whole compute 1.09x; rank 3 1.51x its peers by its times
    alone, none of them more often)."""
    def counted(s: Suspect) -> bool:
        return s.kind == "slow_compute" and "added_work" in s.evidence.get("peers", {})

    def timed(s: Suspect) -> bool:
        return s.kind == "slow_compute" and "peers" in s.evidence and not counted(s)

    out: list[Suspect] = []
    for s in suspects:
        at = next((i for i, t in enumerate(out) if timed(t)), len(out)) if counted(s) else len(out)
        out.insert(at, s)
    return out


def _ranks(ranks: list[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + rank_list(ranks)


def _compute(ranks: list[int]) -> str:
    return "computes" if len(ranks) == 1 else "compute (their mean)"


def _its(ranks: list[int]) -> str:
    return "its" if len(ranks) == 1 else "their"


def layers_by_contention(peers: PeerEvidence, slowdown: float, stage: int | None, steady: bool = False) -> bool:
    """One rank a stage on CPU processes sharing cores, calls not counted (mapp's capture): the
    rank's layers are slower than the other stages' by less than ``above_shared_cpus`` holds such
    a rank's compute to (``ONE_RANK_A_STAGE`` on the first stage, ``CONTENTION`` on the others or
    where ``steady``), so by no more than contention makes them.

    Such layers are no part of a slow host's cost either (``verdict._compute_suspect``): a host
    is named by its idle time, and its spans' excess counts only where it is more than the cores'
    chance. Megatron-core PP2 under mapp's capture, 2 processes on the 2 cores of this machine, no
    fault: the first stage's layers 1.12x the last's (z 3.0) and its idle time 2.2 ms a step more
    in one step of four, "slow host 0" 1.11x (8.0 ms a step, 4.1 of them its layers'); costed by
    its idle time alone, 1.04x, under the threshold. Host faults of jobs of one rank a stage idle
    far more than that (35-381 ms a step: ``gates.idle_in_slack``); of 242 such jobs, no suspect
    and no line below the threshold changed."""
    if peers.counted or peers.mode != "layer peers":
        return False
    return slowdown < _layers_bar(peers, stage == 0, steady)


def _layers_bar(peers: PeerEvidence, first_stage: bool, steady: bool) -> float:
    """What a rank's layers must exceed, one rank a stage, calls not counted: ``ONE_RANK_A_STAGE``
    on the first stage (not ``steady``), but only where ops are timed by their wall times; less
    their waits for a core (``PeerEvidence.own_time``) the first stage is held to ``CONTENTION``
    like the others. Megatron-core PP2 under mapp's capture, 2 processes on 1 or 2 cores, waits
    recorded: the first stage's layers read 0.97-1.03x the last's in 11 runs healthy, on lognormal
    lengths or with work before each microbatch, 1.14x in 1 of 4 with a heavier last stage (judged
    by the stages' balance); its 1.4x matmul layer faults 1.17-1.61x, of which 1.48x and 1.51x
    were under 1.55x."""
    return ONE_RANK_A_STAGE if first_stage and not steady and not peers.own_time else CONTENTION


def late_above_contention(suspects: list[Suspect], peers: PeerEvidence, overruled: list[Overruled]) -> list[Suspect]:
    """Stage 2's stand-ins for slow compute on shared CPUs where calls are counted: slower by its
    arrivals alone than contention makes a healthy process (``CONTENTION``). (A host stands in
    by its stalls, which contention does not make.)"""
    if not peers.counted:
        return suspects
    kept = []
    for s in suspects:
        alone = s.kind == "slow_compute" and "added_work" not in s.evidence.get("peers", {})
        if alone and s.slowdown == s.slowdown and s.slowdown < CONTENTION:
            overruled.append(Overruled(s.rank, f"rank {s.rank} slows the iteration {s.slowdown:.2f}x by arriving last: "
                                               f"not a suspect (on shared CPUs, by its arrivals alone, under "
                                               f"{CONTENTION:g}x: it calls no op more often than its peers)"))
        else:
            kept.append(s)
    return kept


def _crowded(peers: PeerEvidence, s: Suspect, coords: dict, slowdown_threshold: float
             ) -> tuple[list[int], float, float, float] | None:
    """A slow host ``s`` whose replica's other pipeline stages compute slower than their own
    peers by the threshold in the iterations it is named for, and spend more time beyond their
    peers' computing than it idles beyond its own: what crowded it crowded them (its other stages, their mean effect,
    its idle excess and their compute excess, ms an iteration); None otherwise.

    Its idle time must be no more than theirs, for a replica of two processes crowded on one
    core slows both by a few ms a step, which the pair comparison of its other stage reads as
    1.1-1.3x of noise whatever the host does: PP2 x DP2 under mapp's capture, 4 processes on 2
    cores (``--set fresh98``, held out), a 25 ms host sleep and 22 ms of work before each
    microbatch idled 86-103 ms a step beyond their peers while their other stages read 1.09-1.25x,
    1-8 ms more (4 runs; a first form of this rule, without the comparison of times, hid 3 of
    them); the crowded replica of ``fresh97`` idled 5 ms a step beside 12 ms."""
    stages = with_replica(peers, s.rank, s.iterations, coords, among="stages")
    if stages is None or stages[2] < math.log1p(slowdown_threshold):
        return None
    others, _, theirs = stages
    per = peers.rank_iterations.filter(pl.col("iteration").is_in(s.iterations))
    if "gap_excess_ns" not in per.columns or "excess_ns" not in per.columns:
        return None
    idle = per.filter(pl.col("rank") == s.rank)["gap_excess_ns"].mean()
    extra = per.filter(pl.col("rank").is_in(others))["excess_ns"].mean()
    if idle is None or extra is None or extra < idle:
        return None
    return others, theirs, float(idle) / 1e6, float(extra) / 1e6


def slowest_other(peers: PeerEvidence, rank: int) -> tuple[int, float] | None:
    """The rank other than ``rank`` that stage 1 finds slowest against its own peers in its
    typical traced iteration (the median), and how much slower, or None where there is no other.
    The level contention keeps a process at, not a burst: a rank 1.42x its peers in 1 of 4 steps
    and about 1.05x in the others hid a rank 1.44x in all four behind it (megatron-core PP2 x DP2
    under mapp's capture, 1.5x the layers' time on rank 3, 4 processes on 12 logical CPUs)."""
    typical = _typical(peers)
    if typical is None:
        return _slowest_by_rank(peers, rank)
    others = typical.filter(pl.col("rank") != rank)
    if others.is_empty():
        return None
    top = others.sort(["effect", "rank"], descending=[True, False]).row(0, named=True)
    return int(top["rank"]), math.exp(float(top["effect"]))


def typical_slowdown(peers: PeerEvidence, rank: int, slowdown: float) -> float:
    """``rank``'s slowdown in its typical traced iteration, to set beside ``slowest_other``'s
    (``slowdown``, what stage 1 found, where the comparison kept no per-iteration effect): a
    healthy process on a busier core scatters 0.94-1.57x its peers from step to step, and the
    steps it was flagged in are its worst."""
    typical = _typical(peers)
    mine = None if typical is None else typical.filter(pl.col("rank") == rank)
    return slowdown if mine is None or mine.is_empty() else math.exp(float(mine["effect"][0]))


def _typical(peers: PeerEvidence) -> pl.DataFrame | None:
    """Per rank, the median ``effect`` over its traced iterations, or None where not kept."""
    per = peers.rank_iterations
    if per.is_empty() or "effect" not in per.columns:
        return None
    return per.group_by("rank").agg(pl.col("effect").median()).drop_nulls()


def _slowest_by_rank(peers: PeerEvidence, rank: int) -> tuple[int, float] | None:
    """``slowest_other`` from the per-rank table alone (its slowdown: the flagged iterations')."""
    others = [(int(r), float(v)) for r, v in zip(peers.ranks["rank"].to_list(), peers.ranks["slowdown"].to_list())
              if r != rank and v is not None and v == v]
    return max(others, key=lambda o: o[1]) if others else None


def stands_out(slowdown: float, beside: tuple[int, float] | None, slowdown_threshold: float) -> bool:
    """A rank ``slowdown`` x its peers is slower than every other rank of the job (the slowest
    of them ``beside``, from ``slowest_other``) by the threshold; False where there is no other."""
    return beside is not None and slowdown >= beside[1] * (1 + slowdown_threshold)
