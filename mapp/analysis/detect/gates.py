"""The gates a candidate of stage 1 must pass to be a suspect (``overruled_why``), and the
reading of stage 2's evidence they share with ``verdict``: whether stage 2 agrees with stage 1,
whether a rank keeps the others waiting, in how many traced iterations it stalled."""

from __future__ import annotations

import polars as pl

from mapp.analysis.detect.data_sized import (heavier_than_its_optimizer, larger_inputs, looped_by_data, runs_step_again,
                                             sized_by_data)
from mapp.analysis.detect.findings import Overruled
from mapp.analysis.detect.lateness import stands_out_waiting
from mapp.analysis.detect.more_layers import more_layers
from mapp.analysis.detect.peer_evidence import PeerEvidence
from mapp.analysis.detect.routed import sized_by_routing
from mapp.analysis.detect.thresholds import CONSISTENT

__all__ = ["holds_up_at_one_point", "idle_in_slack", "keeps_waiting", "light_stage", "most_steps", "overruled_line",
           "overruled_why", "recurring_stalls_stand", "stage2_agrees", "stage2_contradicts",
           "stalled_iterations", "stalls_last", "traced_iterations"]


def traced_iterations(peers: PeerEvidence) -> int:
    """How many iterations stage 1 compared (1 where none)."""
    if peers.rank_iterations.is_empty():
        return 1
    return peers.rank_iterations["iteration"].n_unique()


def stage2_agrees(late: dict | None) -> bool:
    """Stage 2 does not contradict a rank that stage 1 finds slow: it is last at least as often
    as chance and makes the others wait more than it waits for them. (With a handful of
    collectives per iteration, being last "more than chance" cannot be shown; a victim, which
    waits, is still told apart.)"""
    return late is not None and late["net_ns"] > 0 and late["share_last"] >= late["expected_share"]


def stage2_contradicts(late: dict | None, steady: bool = False) -> bool:
    """Stage 2 finds the rank no straggler on both counts: last no more often than chance, and
    waiting on the others, net, at least as long as they wait on it. On shared CPUs a slower
    core stretches a healthy process's layers in every step as a fault would, but only what the
    job waits for keeps the others waiting (megatron-core DP4 under mapp's capture, 4 processes
    on 4 CPUs of a 16-CPU machine beside other jobs, a process spinning on rank 0's core half the
    time: rank 1's layers 1.20x its peers' at z 7.4 in three steps of four, last at 4 of 16
    all-reduces, waiting 24 ms net, "slow compute 1"). A rank slowed in a pipeline may wait at its
    transfers more than it makes others wait and still be last more often than chance (PP4 x DP8
    on 16 cores, 1.9x layers on rank 13: last at 25%, chance 12.5%, 23 ms net waited).

    For the job's steady rank (``steady``: its layers slower than its peers' in every traced
    iteration, alone of the job) the net must also stand out below the others'
    (``lateness.stands_out_waiting``): with 8 processes on 2 cores every rank waits net (PP2 x
    DP4, rank 6's matmul layers 1.41x its stage peers' at least in every step, z 17, last at no
    more than chance: net -569 ms, the others' median -1,393 ms). Not the others' median alone:
    in groups of 4 on 2 cores a rank a fault elsewhere slows, or one given more tokens, waits
    net little more than the others (DP4, a process spinning beside rank 0: rank 1 named at
    1.20x, net 70 ms above the others' median; DP4 with hot experts on rank 0, no fault)."""
    return (late is not None and late["net_ns"] <= 0 and late["share_last"] <= late["expected_share"]
            and (not steady or stands_out_waiting(late)))


def most_steps(late: dict | None) -> bool:
    """Stage 2 finds the rank making the others wait more than it waits for them in most traced
    iterations (more than half). On shared CPUs, where peers are only a guess by program, a rank
    slower on the same work holds the others up in most steps, and a replica that drew the
    longest batches in one step in that one (PyTorch Lightning, DDP4 on 2 cores, lognormal
    lengths, no fault: rank 2's work at its typical calls 2.18x its peers', net waiting imposed
    in 1 of 3 traced steps; 4x matmuls on rank 1, 1.32x, in 2 of 3)."""
    return late is not None and (late.get("net_lasting") or 0.0) > 0.5


def keeps_waiting(late: dict | None) -> bool:
    """Stage 2 finds the rank making the others wait more than it waits for them, in nearly
    every iteration (``CONSISTENT``), however often it is last."""
    return late is not None and late["net_ns"] > 0 and (late.get("net_lasting") or 0.0) >= CONSISTENT


def holds_up_at_one_point(late: dict | None, stalled: float) -> bool:
    """Stage 2 finds the rank last at one point of its program in nearly every iteration,
    keeping the others waiting there for at least half of what it stalls more than they do
    (``lateness._recurring``): where its stalls go, however its waits elsewhere net out."""
    return late is not None and stalled > 0 and float(late.get("recurring_ns") or 0.0) >= 0.5 * stalled


def recurring_stalls_stand(peers: PeerEvidence, late: dict | None, shared_cpus: bool, stalled: float,
                           standing_out: bool = False) -> bool:
    """Stage 2 does not contradict a rank's stalls on shared CPUs where stage 1 counted calls
    (its stalls are then those that recur at one place of its program, ``idle._recurring``) and
    the rank's idle time stands out or (first paragraph) it waits little net; where calls are not
    counted, only with both (last paragraph). Waiting little net: the rank waits on the others,
    net over the run, less than it stalls beyond its peers in one
    iteration (``stalled``), however seldom it is last: a process that sleeps hands its core to
    the others, whose ops then run faster, so who reaches a collective last is the cores' chance,
    and what it imposes nets out at about nothing, where a victim waits at every collective of
    every step (plain DDP, 4 processes on 2 cores: a 35 ms data-path sleep on rank 0, 21% of its
    step, 36 ms more stalls a step at one place of every step, last at 1 of 5 all-reduces, 29 ms
    net imposed; an 18 ms sleep before each step on rank 1, 18 ms more stalls a step, idle time
    at z 8.3, last at 1 of 5, 2 ms net waited over the run; "no suspect" both, before). Ranks of
    healthy, imbalanced and other fault jobs there stalling so (a tenth of their work, idle time
    at half the cut-off) waited net 6-130x their stalls of one iteration, but one (942 jobs,
    ``benchmarks/detect_evidence.py``): a PP2 x DP2 rank with lognormal lengths, 3.6 ms more
    stalls a step, 15 ms net imposed, whose stalls cost its 220 ms step under the threshold
    ("below threshold", 1.03x). (A run's net wait against one step's stalls: the more steps
    traced, the stricter, as a victim's waits add up step after step while a sleeper's net out.)

    Where its idle time also stands out at the full cut-off (``standing_out``: stage 1 flagged
    its gaps, in nearly every iteration), stage 2's net has no say: whose core the scheduler
    hands over while it sleeps decides who waits, and a sleeper may come out waiting on the
    others step after step (a user's DDP transformer, 4 processes on 2 cores, a 34 ms sleep
    before each step on rank 3 with 2 loader workers a process: 38 ms more stalls a step at z
    10.5, its ops 0.79x its peers', last at 2 of 8 all-reduces, waiting 94 ms net, and 42 ms,
    z 13, 163 ms in a second run; with ``--accum 2``, a 40 ms sleep on rank 2: 42 ms at z 9.7,
    last at none of 8, 381 ms net; DDP4 under the profiler, a 21 ms data-path sleep: 22 ms at z
    12, waiting 34 ms net; "no suspect" all, eight runs in all). On shared CPUs with counted
    calls, among the ranks stage 1 named over 541 corpus jobs and 156 runs of the user's job, no
    rank of a healthy, imbalanced or other fault job stalled so with its idle time standing out
    (one PP2 stage rank stalled so at z 1.6); those whose idle time stood out stalled 5% of
    their work at most (their idle time's excess and z: ``benchmarks/detect_evidence.py``).
    Where calls are not counted (mapp's capture, whose spans are compared by name) it takes both,
    idle time standing out and a net wait under one iteration's stalls: megatron-core PP2 x DP2,
    4 processes on 2 cores, 20 ms of matmuls before each microbatch on rank 3: 82 ms more stalls a
    step at z 41-55 in all 4 steps, its one DP peer to compare with, last at 2 of 4 all-reduces,
    waiting 29 ms net over the run ("no suspect" before, in one run of six); a healthy TP2 x DP2's
    rank 2 idled 12.8 ms a step more at z 19.9, standing out too, but waited 202 ms net (named a
    host at threshold 0.03 with standing out alone)."""
    if not (shared_cpus and late is not None):
        return False
    if not peers.counted:   # spans by name (mapp's capture): both (see above)
        return standing_out and late["net_ns"] > -stalled
    return standing_out or late["net_ns"] > -stalled


def _heaviest_stage(peers: PeerEvidence) -> dict | None:
    """The pipeline stage that computes most (``pp``, ``compute_ns``), or None without stages."""
    if peers.stages is None or peers.stages.is_empty():
        return None
    return peers.stages.sort("compute_ns").row(-1, named=True)


def _stage_compute(peers: PeerEvidence, stage: int | None) -> float | None:
    """What stage ``stage`` computes a step (``peers._stage_balance``: all its ops, compared or not)."""
    if stage is None or peers.stages is None:
        return None
    own = peers.stages.filter(pl.col("pp") == stage)
    return None if own.is_empty() else float(own["compute_ns"][0])


def _rank_compute(peers: PeerEvidence, rank: int) -> float | None:
    """What ``rank`` computes a step (its median over the traced iterations), its slowness and all."""
    own = peers.rank_iterations.filter(pl.col("rank") == rank)
    return None if own.is_empty() else float(own["busy_ns"].median())


def light_stage(peers: PeerEvidence, stage: int | None, threshold: float,
                rank: int | None = None) -> tuple[int, float] | None:
    """One rank a stage: the heaviest stage and the share of its work that stage ``stage`` does,
    where that is under 1 / (1 + ``threshold``), or None. With ``rank``, the share that rank does
    itself, its slowness and all (for a rank compared with its own stage's replicas).

    A pipeline runs at its heaviest stage's pace, so a stage that computes less than that one by
    more than the threshold, its slower layers and all, sets no pace a suspect must set; on shared
    CPUs the layers of such a stage run slower, their cores idle between them. Megatron-core PP2
    and PP4 with a heavier last stage or lognormal lengths, no fault, 2 to 4 processes on 2 CPUs:
    30 ranks that stage 1 flagged, up to 2.1x the other stages' layers, their stage doing 27-60%
    of the heaviest's work ("slow compute 0" 1.63x at 51%, when the bar was half of it). Ranks
    slowed by injected layer faults, GPU hogs and work before each microbatch and named, one rank
    a stage, on CPUs and GPUs: their stage the heaviest in each of 42 runs. (A stage's work is
    all its ops', also where a profiler trace without shapes compares a few of them.)

    The same holds for a rank slower than its stage's other replicas on shared CPUs, where its
    own work stays so far under the heaviest stage's: megatron-core PP4 x DP2 under mapp's capture
    with 3 of 6 layers on the last stage, 8 processes on 8 CPUs of a 16-CPU machine beside other
    jobs, no fault: rank 0's layers 1.19x its replica's at z 5.9 in every step, the rank doing 46%
    of the last stage's work, "slow compute 0" in one run of three (issue 13's PP4 x DP2 class).
    Not off shared CPUs: the simulated suite's pipelines carry the output layer on the last stage,
    their first stage doing 61-78% of its work, and a GPU 1.2-1.3x slower there is a fault it
    asks to be named."""
    heaviest = _heaviest_stage(peers)
    if heaviest is None or float(heaviest["compute_ns"]) <= 0:
        return None
    own = _stage_compute(peers, stage) if rank is None else _rank_compute(peers, rank)
    if own is None:
        return None
    share = own / float(heaviest["compute_ns"])
    return (int(heaviest["pp"]), share) if share < 1 / (1 + threshold) else None


def idle_in_slack(peers: PeerEvidence, stage: int | None, idle_excess: float) -> int | None:
    """One rank a stage: the heavier stage whose wait holds the extra idle time (``idle_excess``,
    a step's) of the rank of stage ``stage`` -- that stage computes less than the heavier one by
    more than the rank idles beyond its peer -- or None.

    A pipeline runs at its heaviest stage's pace; a lighter stage waits for it at its transfers
    every microbatch, and idle time of its own host up to that wait only moves where it waits.
    Megatron-core PP2 under mapp's capture with a heavier last stage (3 of 4 layers), 2 processes
    on 2 CPUs, no fault: the first stage computed 16.6 ms a step to the last's 35.2 and idled
    2.6 ms more than it between its ops, "slow host 0" 1.13x; that host was named in three of
    eight such runs (``--set fresh60``, ``fresh63``). Data-path sleeps and work before each
    microbatch on a stage of PP2 and PP4 jobs, on CPUs and GPUs (37 runs): 35-381 ms a step more
    idle than its peer beside stages whose compute differs by 0-35 ms, the nearest 45 ms against
    35 (2 H200s under the profiler, its cost 1.12x)."""
    heaviest, own = _heaviest_stage(peers), _stage_compute(peers, stage)
    if heaviest is None or own is None or idle_excess <= 0:
        return None
    slack = float(heaviest["compute_ns"]) - own
    return int(heaviest["pp"]) if idle_excess < slack else None


def overruled_line(row: dict, late: dict | None, host: bool, gap_excess: float, why: str) -> Overruled:
    """What a candidate that a gate set aside had going for it, and the gate (for the notes)."""
    seen = (f"idles {gap_excess / 1e6:.1f} ms an iteration more than its peers (z {float(row['gap_z'] or 0.0):.1f})"
            if host else f"computes {float(row['slowdown']):.2f}x its peers (z {float(row['z']):.1f})")
    waits = ""
    if late is not None:
        waits = (f"; last at {late['share_last']:.0%} of its collectives (chance {late['expected_share']:.0%}), "
                 f"{'making the others wait' if late['net_ns'] > 0 else 'waiting'} "
                 f"{abs(late['net_ns']) / 1e6:.1f} ms net")
    return Overruled(int(row["rank"]), f"rank {row['rank']} {seen}{waits}: not a suspect ({why})")


def stalled_iterations(peers: PeerEvidence, rank: int) -> list[int]:
    """The iterations in which ``rank`` stalled (idle gaps of 1 ms and more; where the
    comparison kept no such count, idled) longer than its peers by ``min_effect`` of its work."""
    per = peers.rank_iterations
    idle = "long_excess_ns" if "long_excess_ns" in per.columns else "gap_excess_ns"
    if per.is_empty() or idle not in per.columns:
        return []
    mine = per.filter((pl.col("rank") == rank) & (pl.col(idle) >= peers.min_effect * pl.col("busy_ns")))
    return sorted(int(i) for i in mine["iteration"].to_list())


def stalls_last(peers: PeerEvidence, rank: int) -> bool:
    """``rank`` stalled longer than its peers in nearly every iteration (``CONSISTENT``), or waited
    in its data loader in bursts that last (``idle.data_stalls``)."""
    return (len(stalled_iterations(peers, rank)) >= CONSISTENT * traced_iterations(peers)
            or _data_stalls(peers, rank))


def _data_stalls(peers: PeerEvidence, rank: int) -> bool:
    if "data_stalls" not in peers.ranks.columns:
        return False
    return bool(peers.ranks.filter((pl.col("rank") == rank) & pl.col("data_stalls").fill_null(False)).height)


def waited_out(row: dict) -> bool:
    """Whether a rank's idle time beyond its peers' (``gap_excess_ns``) is no more than twice the
    compute it did less than they did (its ``busy_ns`` at a ``slowdown`` under 1): in a job that
    synchronises every step its iteration is theirs, so what its lighter work left over it spent
    waiting. Where no collective is recorded that waiting is an idle gap like a slow host's (a
    parameter server's trainers over RPC, whose agent's threads the profiler leaves out: a healthy
    trainer at 0.69x its peers' compute, 6.3 ms more idle a step, "slow host 1")."""
    slowdown, busy, excess = row.get("slowdown"), row.get("busy_ns"), row.get("gap_excess_ns")
    if slowdown is None or busy is None or excess is None or not 0 < float(slowdown) < 1:
        return False
    less = float(busy) * (1 / float(slowdown) - 1)
    return float(excess) <= 2 * less


def overruled_why(row: dict, peers: PeerEvidence, late: dict | None, *, host: bool, counted: bool, extra: bool,
               guessed: bool, stalled: float, busy: float, alone: bool = False,
               big_stalls: bool = False, replica: bool = False, shared_cpus: bool = False,
               stage: int | None = None, threshold: float = 0.1, untraced: bool = False) -> str | None:
    """Why a candidate of stage 1 is no suspect after all, or None: the gates below, each with
    the evidence that passes it. Most are stage 2 standing guard where stage 1's comparison is
    weak (``stage2_agrees``: the rank makes others wait and is last no less often than chance).

    1. Where only two ranks can be compared, stage 2 must agree, for a host as for a GPU: a rank
       whose launch gaps look long but that waits on its peer more than it makes the peer wait
       is not what slows the job. Passed by its layers being slower than every other stage's
       same layers while its stage partner's are not (``peers._layer_alone``), by counted work,
       and on shared CPUs by ``alone``: slower in nearly every iteration, and than every other
       rank of the job by the threshold (megatron-core PP2 x DP2 under mapp's capture, each layer
       of rank 1 stretched 1.2x: its spans 1.43x its DP peer's at z 4.8 in every step, every other
       rank's at most ~1.05x its own; its one all-reduce a step, 4 in all, last in 2). A host is
       passed by *holding up* its peers: stalls in nearly every iteration while keeping the others
       waiting in nearly every one (TP2 x PP2, a 20 ms data-path sleep on rank 2: 80 ms more
       stalls a step at z 97, net 78 ms a step imposed, last at 48% of its TP pair's calls), its
       idle time standing out or its stalls alone the threshold's share of its work
       (``big_stalls``: TP2 x DP2 under the profiler, 27 ms more stalls a step at z 2.5, 46%).
       On shared CPUs where calls are counted (or, where not, its idle time stands out), by
       recurring stalls too (``recurring_stalls_stand``,
       below): the gate is for compute compared between two ranks, each the other's mirror, where
       idle gaps are weighed against every peer's (a user's DDP transformer, 4 processes on 2
       cores, 2 loader workers a process and ``record_function`` ranges, a 38 ms sleep before
       each step on rank 0: 38 ms more stalls a step at z 5.7, last at 2 of 8 all-reduces, 7 ms
       net waited; "no suspect" before, the one rank over the corpora, the held-out sets and 173
       runs of that job so vetoed that had big stalls, counted calls and idle time standing out).
       In a pipeline a rank slower by its compute is passed by its replica too
       (``verdict._replica_waits``): another stage of it keeps its own peers waiting. Where the
       traces record no collective at all, stage 2 cannot run and so cannot disagree: off shared
       CPUs, a rank slower in nearly every iteration passes (the original MegatronApp tracer's
       DP-only jobs: their layers recorded, their gradient reduction not; a 1.3x GPU of DP2
       timed 1.31x in every iteration was "no suspect"). Nor, for a host whose stalls are a
       real share of its work and whose idle time stands out, where stage 2 matched none of its
       calls (a distillation teacher whose only traffic is p2p recorded without shapes), every
       rank of the job traced (``untraced`` false).
    2. One rank per stage: stage 2 cannot stand guard (the first stage always finishes a step
       last, whatever its speed); a stage's layers must instead be slower than another stage's
       same layers in most traced iterations, not in one noisy one.
    3. Peers found by their program (no layout) are a guess at who does the same work, and on
       shared CPUs every rank's ops and gaps stretch by chance: a rank is what slows the job
       only if it also keeps the others waiting at their collectives, there in most traced
       iterations (``most_steps``). Passed by counted work and by stalls (below), and by its
       whole step run again (``data_sized.runs_step_again``: nearly every kind of op called more
       often, counted, not timed; a DSGD rank's block SGD run 3x, 2.7x its peers' compute at z
       197, its ring partners waiting on it by p2p, last at the one all-reduce a step in half the
       steps: held back before. A rank handed 3x the ratings runs its step again too, and is
       named so: ``WHOLE_STEP`` says why the two cannot be told apart by their calls).
    4. Idle gaps stretch on any busy host by chance: a host named for its gaps alone must also
       keep the others waiting. Passed by stalls.
    5. One rank a stage: slower layers on a stage that computes less than the heaviest by more
       than the slowdown ``threshold`` are not what the pipeline waits on (``light_stage``); on
       shared CPUs, nor a rank slower than its stage's replicas whose own work is so light. Not
       passed.
    6. One rank a stage: a host whose extra idle time fits in its stage's wait on a heavier
       stage (``idle_in_slack``; ``stage``: the rank's pipeline stage) is not what the pipeline
       waits on either. Not passed.
    7. On shared CPUs, a rank whose spans outside its transformer layers are slower than its
       peers' by half its layers' slowdown or more (``whole_process``), its layers slower than
       that by less than the threshold, ran slower as a process, not on more work: the cores
       gave it less time. Not passed.
    8. On shared CPUs, a rank compared with more than one peer of its stage or replica group
       whom stage 2 finds no straggler on both counts (``stage2_contradicts``: last no more often
       than chance, waiting on the others net) is a process on a slower core, not what the job
       waits for. Passed by counted work and by layers slower than every other stage's same
       layers (``peers._layer_alone``).
    9. A rank slower only on its ops between its all_to_all exchanges, its other ops at about its
       peers' pace, computed on the tokens routed to it (``routed.sized_by_routing``, which also
       leaves out a rank whose extra calls cost it the threshold): imbalance of the data, not a
       slower GPU. Passed by work added in calls that is most of its excess (``extra``). Not by
       counts alone: more tokens take a few more calls of some ops (a router's favourite on 2
       shared cores: 1.08x on those, its excess 170 ms a step elsewhere).
    9a. One rank a stage, compared on the ops the stages call alike: a stage holding more layers
       (``stage_gemms.layer_units``) whose layers' calls run at its peers' pace, its compared ops
       slower by no more than its layers' number (``more_layers``): those ops are its parameters'
       work, more layers (imbalance), not a slower device. Passed as 10 is.
    10. A rank whose data ran the program's loops more often by the threshold (``data_scale``:
       its calls of the kinds whose calls differ between ranks, over its peers'), its compute slower by no
       more than that (``data_sized.looped_by_data``): imbalance, not a slower device. Passed by
       work added in calls that is most of its excess (``extra``).
    11. A rank recorded without shapes on CPUs whose fastest calls of most mid-sized ops are
       slower by twice the threshold, and by that much more than its optimizer's, which ran at its
       peers' pace (``data_sized.larger_inputs``): larger inputs in every step, not a slower
       device, which slows the optimizer too. Passed as 10 is. Where too few of its calls are
       mid-sized to tell, its whole compute on the same calls as its peers', twice its optimizer's
       or more (``data_sized.heavier_than_its_optimizer``).
    12. A rank slower as a whole by the threshold whose pace (``data_sized.paced_split``: the
       median, over its peers' compute, of how much slower it ran each op) is within half of it,
       or within ``data_sized.PACED_PART`` of its excess, ran slower only on a few ops, its data's
       (``data_sized.sized_by_data``): imbalance, not a slower device, which is slower on
       everything. Passed as 10 is. Last of the four, the least specific: a replica of larger
       crops is slower on a few ops too (since ``PACED_PART`` rose to 0.4), and 11 says why.
    13. A host named for its idle gaps where the trace records none of its collectives, whose
       compute is below its peers' by at least half its idle time beyond theirs
       (``waited_out``): it finished its lighter work first and waited on them at a
       synchronisation no event marks (an RPC reply). Not passed.

    *Counted work* passes 1 and 3: work counted, not timed, is no guess (``added_work``), and a
    stage 2 that matched calls of no known group by their order on every rank is one and does
    not veto work beyond its peers' (4 gloo ranks of TP2 x DP2 whose TP and DP calls could not be
    told apart, a rank with 1.5x the matmuls "last" in 20% of those; megatron-core TP2 x DP2,
    20 ms of matmuls before each microbatch, "last" in 36%); nor does one that finds the rank
    keeping the others waiting in nearly every iteration, however often it is last; nor, on
    GPUs, any stage 2 (a peer whose host paces the job keeps the rank doing more waiting).

    *Stalls* pass 3 and 4 where stage 2 has one collective a step to go on (plain DDP): idle
    gaps of 1 ms and more, longer than its peers' in nearly every iteration by a real share of
    its work, and last no less often than chance (a 20 ms data-path sleep on one of 4 ranks
    sharing 2 cores, 5 all-reduces: its peers, their cores freed while it slept, waited less
    than it did in one run of three). With many collectives a step, stage 2 keeps its say
    (simulated host noise: stalls as long on ranks last only by chance), except on shared CPUs
    where calls are counted: stalls recurring at one place of every step, a real share of the
    rank's work, that stage 2 does not contradict pass whatever the count (``recurring_stalls_stand``).
    """
    agrees = stage2_agrees(late)
    # (on shared CPUs, where stage 2 is no guess, it must still find the rank making the others
    # wait, in nearly every iteration, though not last more often than chance: a rank of
    # megatron-core TP2 x PP2 with extra matmuls in its layers, 4 shared cores, net 21 ms a step
    # imposed in every step, last at 47% of its TP pair's calls. On GPUs extra work stands on
    # its own, for a rank stage 1 flagged as slow compute: where a peer's host paces the job,
    # the rank doing it waits all the same (2 H200s, megatron-core TP2 under the profiler, 1.5x
    # the layers' FLOPs on rank 1: 3.2x the GEMM calls of its peer, 20 ms more a step, yet last
    # at 2-7% of the all-reduces, its peer's GPU idling 149-163 ms a step more between launches,
    # two runs). The one healthy GPU job seen calling ops more often, a 2-GPU FSDP one, was a
    # misread of its profiler steps, mended in ``ingest.kineto``.)
    counted_work = counted or (extra and (guessed or keeps_waiting(late) or not (shared_cpus or host)))
    stalls = (bool(row["gap_flagged"]) and stalled >= peers.min_effect * busy and late is not None
              and late["instances"] <= traced_iterations(peers) and late["share_last"] >= late["expected_share"])
    # With many collectives a step, most are paced by whatever came before them, and who is last
    # at those is chance; a rank that stalls in nearly every iteration and keeps the others
    # waiting in nearly every one is what they wait for (megatron-core TP2 x DP2 under mapp's
    # capture, 4 processes on 2 cores, 20 ms of matmuls before each microbatch outside the
    # model's spans: 80 ms more stalls a step at z 27, net 124 ms a step imposed, last at 47%
    # of 212 calls)
    # (or that keeps them waiting where it stalls, at one point of every iteration, however
    # its waits elsewhere on shared cores net out: ``holds_up_at_one_point``)
    holds_up = ((bool(row["gap_flagged"]) or big_stalls)
                and (keeps_waiting(late) or holds_up_at_one_point(late, stalled))
                and stalls_last(peers, row["rank"]))
    # (on shared CPUs, recurring stalls a real share of its work that stage 2 does not
    # contradict: ``recurring_stalls_stand``)
    recurring = big_stalls and recurring_stalls_stand(peers, late, shared_cpus, stalled,
                                                      standing_out=bool(row["gap_flagged"]))
    stalls = stalls or holds_up or recurring
    # One rank a stage: stage 2 cannot stand guard (gate 2), for a host either, whose few
    # collectives a step the pipeline's order decides; stalls in nearly every iteration, a real
    # share of its work, do (4 H200s, megatron-core PP4 under the profiler, a 40 ms data-path
    # sleep before each microbatch on rank 1: 325 ms more stalls a step at z 18.6, last at none
    # of its collectives, for the first stage finishes every step last)
    if peers.mode == "layer peers" and not stalls and stalled >= peers.min_effect * busy:
        stalls = len(stalled_iterations(peers, row["rank"])) >= CONSISTENT * traced_iterations(peers)
    # (compared with its stage's replicas on shared CPUs: what the rank itself computes, ``light_stage``)
    light = (light_stage(peers, stage, threshold) if peers.mode == "layer peers" and not host else
             light_stage(peers, stage, threshold, rank=int(row["rank"])) if peers.mode == "stage peers" and shared_cpus
             and not host else None)
    idle_excess = max(float(row["gap_excess_ns"] or 0.0), stalled)
    slack = idle_in_slack(peers, stage, idle_excess) if peers.mode == "layer peers" and host else None
    # Stage 2 with nothing to go on, no collective recorded (the original MegatronApp tracer's
    # DP-only jobs: it records no gradient reduction where there is no pipeline), cannot disagree;
    # off shared CPUs the same ops timed slower in nearly every iteration are the rank's own
    unjudged = (late is None and not shared_cpus and not host
                and len(row["iterations"] or []) >= CONSISTENT * traced_iterations(peers))
    # A host likewise, by stalls a real share of its work whose idle time stands out in nearly
    # every iteration (on shared CPUs with counted calls, stalls that recur at one place of its
    # program: ``idle._recurring``): no collective of its was matched, so no peer can be seen
    # waiting on it, nor it on them (a user's distillation job, 4 processes on 4 of a host's cores,
    # the teachers exchanging with the students by p2p only, recorded without shapes so no
    # message found its peer: a teacher sleeping 40 ms before each step, 40 ms more idle a step
    # than the other teacher at z 3.1, "no suspect" before)
    # Not where a rank of the job went untraced (``untraced``): both may be waiting on that one
    # (plain DDP3, rank 0 sleeping 24 ms before each step, rank 2's trace gone: no all-reduce
    # timed with every member, and the two left cannot say who waits)
    unjudged_host = (late is None and host and big_stalls and bool(row["gap_flagged"]) and not untraced
                     and (not shared_cpus or peers.counted))
    # On shared CPUs a rank whose spans outside its layers are slower by as much is a process the
    # cores gave less time, not one with more work (``whole_process``), where what its layers lose
    # beyond that is under the threshold: a fault on the rank the cores favour less shows there
    # (DP2, 1.33x layers on rank 0: its layers 1.80x, its other spans 1.33x, 1.36x beyond them)
    whole = (shared_cpus and not host and bool(row.get("whole_process"))
             and float(row["layers_ratio"]) < (1 + threshold) * float(row["outside_ratio"]))
    gates = (
        # (applies, passed by, why)
        (peers.pairs and peers.mode != "layer peers" and not agrees,
         bool(row.get("layer_alone")) or counted_work or alone or unjudged or unjudged_host
         or (host and (holds_up or recurring))
         or (replica and not host and bool(row["flagged"])),
         "two-peer comparison: stage 2 does not agree" if late is not None else
         "two-peer comparison: stage 2 timed none of its collectives with every member, as untraced ranks or "
         "unaligned clocks left them incomplete, so it cannot tell which of the two waits"),
        (shared_cpus and not host and not peers.pairs and peers.mode in ("dp peers", "stage peers")
         and stage2_contradicts(late, steady=row.get("steady") is not None),
         bool(row.get("layer_alone")) or counted_work, "stage 2 finds it waiting on the others more than they wait on it"),
        (peers.mode == "layer peers" and 2 * len(row["iterations"] or []) <= traced_iterations(peers),
         False, "one rank a stage: slower than the other stage's same layers in half the iterations or fewer"),
        (peers.mode == "program peers" and late is not None and not (agrees and (not shared_cpus or most_steps(late))),
         counted_work or stalls or runs_step_again(row, threshold),
         "peers by program: stage 2 does not agree" if not agrees else
         f"peers by program: it kept the others waiting in {late.get('net_lasting') or 0.0:.0%} of the traced "
         "iterations, not most"),
        (host and not row["flagged"] and late is not None and not agrees,
         stalls, "idle gaps alone: stage 2 does not agree"),
        (light is not None, False, f"{'its stage computes' if peers.mode == 'layer peers' else 'it computes'} "
                                   f"{light[1]:.0%} of stage {light[0]}'s work, under "
                                   f"1/{1 + threshold:g}: the pipeline waits on that one" if light else ""),
        (slack is not None, False, f"its stage computes less than stage {slack} by more than it idles: the pipeline "
                                   "waits on that one, its idle time inside that wait"),
        (whole, False, f"its spans outside the transformer layers {row.get('outside_ratio') or 0:.2f}x its peers' "
                       f"beside its layers' {row.get('layers_ratio') or 0:.2f}x: its whole process ran slower on "
                       "shared cores, no work of its own"),
        (not host and sized_by_routing(row, threshold), extra,
         f"its ops between its all_to_all exchanges {row.get('routed_ratio') or 0:.2f}x its peers', the rest "
         f"{row.get('unrouted_ratio') or 0:.2f}x: work sized by the tokens routed to it (imbalance), not a slower GPU "
         "(record_shapes=True shows their sizes)"),
        (not host and peers.mode == "layer peers" and more_layers(row, threshold), extra,
         f"its stage holds {row.get('layer_units') or 0:.2f}x its peers' layers, their calls at "
         f"{row.get('layer_pace') or 0:.2f}x their pace; the ops it calls as often, "
         f"{float(row.get('slowdown') or 0):.2f}x theirs, are its parameters' work: more layers (imbalance), "
         "not a slower device"),
        (not host and looped_by_data(row, threshold), extra,
         f"its compute {float(row.get('slowdown') or 0):.2f}x its peers' where its data ran the program's loops "
         f"{row.get('data_scale') or 0:.2f}x as often (more calls of each of their ops, each as fast): its data's "
         "work (imbalance), not a slower device"),
        (not host and larger_inputs(row, threshold), extra,
         f"its compute {float(row.get('slowdown') or 0):.2f}x its peers' where even its fastest calls of most ops "
         f"took {row.get('input_floor') or 0:.2f}x theirs and its optimizer's {row.get('param_floor') or 0:.2f}x: "
         "larger inputs in every step (imbalance), not a slower device (record_shapes=True shows their sizes)"),
        (not host and heavier_than_its_optimizer(row, threshold), extra,
         f"its compute {float(row.get('slowdown') or 0):.2f}x its peers' on the same calls while its optimizer's ran at "
         f"{row.get('param_floor') or 0:.2f}x theirs: larger inputs in every step (imbalance), not a slower device, "
         "which slows its optimizer alike (record_shapes=True shows their sizes)"),
        (not host and sized_by_data(row, threshold), extra,
         f"its compute {float(row.get('slowdown') or 0):.2f}x its peers' but {row.get('pace') or 0:.2f}x on the ops "
         "that make most of theirs: slower on a few ops only, as more data there makes them (imbalance) or a "
         "process sharing its core at those times, not on everything as a slower device is "
         "(record_shapes=True shows the ops' sizes)"),
        (host and late is None and waited_out(row), False,
         f"its compute {float(row.get('slowdown') or 0):.2f}x its peers' and its idle time beyond theirs no more than "
         "twice the work it did less: it finished first and waited on them, at a synchronisation the trace does not "
         "record (no collective to tell who waited)"),
    )
    return next((why for applies, passed, why in gates if applies and not passed), None)
