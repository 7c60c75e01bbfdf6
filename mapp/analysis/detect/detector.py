"""``detect_bundle``: the three stages run over one bundle and combined into a ``Verdict``."""

from __future__ import annotations

import dataclasses
import time
from typing import Any, NamedTuple

import polars as pl

from mapp.analysis.detect.added_work import LAUNCHED
from mapp.analysis.detect.bandwidth import BandwidthEvidence, link_bandwidth
from mapp.analysis.detect.busy_neighbour import from_busy_neighbour
from mapp.analysis.detect.core_waits import RANK_KINDS, absorbed, records_waits, waited, waited_note, waiting_hosts
from mapp.analysis.detect.data_sized import input_floors, paced_split, sizes_unseen_notes
from mapp.analysis.detect.device import device_counters, device_evidence, neighbours
from mapp.analysis.detect.implicit_sync import as_matching, as_waits, implicit_syncs, inferred_at
from mapp.analysis.detect.lateness import LatenessEvidence, collective_lateness
from mapp.analysis.detect.onset import ONSET_LEAST, leaning, not_slower, onset_note, since_onset, trailing_windows
from mapp.analysis.detect.periodic import periodic_note, periodic_windows
from mapp.analysis.detect.layout import (LayoutInfo, exchanges_at_once, from_p2p_chain, loss_everywhere,
                                         parameters_everywhere, parse_layout, resolve_layout)
from mapp.analysis.detect.own_time import RUNNABLE, own_ns
from mapp.analysis.detect.peer_evidence import PeerEvidence
from mapp.analysis.detect.peers import compare_peers
from mapp.analysis.detect.program import program_groups
from mapp.analysis.detect.routed import routed_split
from mapp.analysis.detect.slow_blocks import block_note
from mapp.analysis.detect.sole_sender import sole_sender
from mapp.analysis.detect.thresholds import DEFAULT_THRESHOLD, Thresholds
from mapp.analysis.detect.time_slices import neighbour_notes
from mapp.analysis.detect.tp_waits import tp_pace
from mapp.analysis.detect.findings import StageStatus, Verdict
from mapp.analysis.detect.verdict import combine, paced_pairs
from mapp.analysis.ingest.schema import COMM_WAIT_NAMES

__all__ = ["StageEvidence", "detect_bundle", "stage_evidence"]

_COLUMNS = ["rank", "name", "cat", "lane", "ts_ns", "dur_ns", "iteration", "microbatch", "chunk", "layer", "launch_ns",
            "runnable_ns"]


class StageEvidence(NamedTuple):
    """What the three stages found in one bundle, before ``verdict.combine`` judges it: the
    detector's inputs to its rules, for ``detect_bundle`` and for tools that study the rules
    over many jobs (``benchmarks/detect_evidence.py``)."""
    peers: PeerEvidence
    lateness: LatenessEvidence
    bandwidth: BandwidthEvidence
    layout: LayoutInfo
    iteration_ns: float | None
    shared_cpus: bool
    traced: list[int]
    notes: list[str]
    tp_pace: pl.DataFrame | None = None
    """Per rank of a TP group, its pace against its TP peers (``tp_waits.tp_pace``), where the
    tracer's spans hold its waits for them (the MegatronApp tracer's); None where every wait is
    recorded."""
    counters: pl.DataFrame | None = None
    """Per rank, its device counters (``device.device_counters``; empty without NVML samples)."""
    waited: dict[int, dict[str, float]] | None = None
    """Where the spans carry their waits for a core (``core_waits``): the ranks whose waits stand
    out (``core_waits.waited``); None where none are recorded or ``own_time`` was off."""
    analysis: Any = None
    """The bundle's ``mapp.analysis.run.Analysis`` the stages used."""


def stage_evidence(bundle, cuts: Thresholds, layout: dict[str, int] | None = None, analysis: Any = None,
                   lap=lambda name: None, own_time: bool = True) -> StageEvidence:
    """Run the three stages over ``bundle`` (a ``TraceBundle``) at the cuts ``cuts``; ``lap(name)``
    is called as each step ends (``detect_bundle`` times them). ``own_time``: compare spans less
    their waits for a core where the trace records them (``own_time``); off, their wall times."""
    from mapp.analysis.run import analyse

    scan = bundle.scan().filter(pl.col("ph") == "X")
    events = _launched_by(scan.filter(pl.col("cat") != "iteration").select(
        _COLUMNS + _shape(bundle) + _tokens(bundle) + _in_graph(bundle)).collect())
    waits = own_time and records_waits(events)
    if not waits:
        events = events.drop(RUNNABLE)
    iters = scan.filter(pl.col("cat") == "iteration").select("rank", "iteration", "ts_ns", "dur_ns").collect()
    lap("read")
    if analysis is None:
        analysis = analyse(bundle)
    lap("match and align")
    matching = analysis.matching
    notes: list[str] = list(analysis.notes)
    if analysis.clock is not None and analysis.clock.unaligned:
        n = len(analysis.clock.unaligned)
        notes.append(f"{n} rank{'s share' if n != 1 else ' shares'} no collective or p2p with rank "
                     f"{analysis.clock.reference_rank}: {'their' if n != 1 else 'its'} lateness is judged on "
                     f"{'their' if n != 1 else 'its'} own clock{'s' if n != 1 else ''}")
    groups = matching.members.join(
        matching.collectives.select("instance_id", "group", "group_ranks"), on="instance_id"
    ).select("rank", "group", "group_ranks").unique(subset=["rank", "group"]) if len(matching.members) else pl.DataFrame(
        schema={"rank": pl.Int32, "group": pl.String, "group_ranks": pl.List(pl.Int32)})
    info = resolve_layout(bundle.ranks, groups, layout, bundle.world_size)
    # (every rank computing a loss, or holding as many parameters, runs the whole model: its p2p
    # partners are no pipeline's stages)
    whole_model = not info.known and len(matching.p2p) > 0 and (loss_everywhere(events) or parameters_everywhere(events))
    info = from_p2p_chain(info, matching.p2p, whole_model=whole_model)
    if not info.known:
        info = _program_peers(info, events, matching, groups, whole_model=whole_model)
    notes += info.notes
    if waits:
        notes.append("ops compared by their own time: their spans less the time their threads waited for a core "
                     "(the trace records it)")
    traced = bundle.ranks["rank"].to_list()
    if (syncs := implicit_syncs(events)) is not None:
        events = as_waits(events, syncs)
        names = sorted(syncs["name"].unique().to_list())
        notes.append(f"no communication in the traces: {', '.join(names)} inferred as synchronisation (its ranks "
                     "enter it apart and leave it together): stage 2 judges who entered last, and time in it is "
                     "waiting, not idle")
    lap("layout")
    # the original MegaScan tracer calls cuda.synchronize and TP barriers inside the traced
    # path: a rank's host then idles while its own (slow) GPU catches up, so idle gaps are no
    # evidence of a slow host there
    judge_gaps = not _synchronizing_tracer(bundle)
    on_cpus = _cpu_compute(bundle, events)
    if blind := _gpus_untraced(bundle, events):
        notes.append(f"ranks {_ranks(blind)} ran on GPUs but their traces hold no GPU activity (profiled without "
                     "ProfilerActivity.CUDA): their ops are timed on their hosts, which wait on their GPUs' queues "
                     "unseen, and their collectives when queued; a slow GPU cannot be told from these traces "
                     "(profile with activities=[CPU, CUDA])")
    peers = compare_peers(events, info.ranks, info.sizes, slow_op=cuts.slowdown, min_effect=cuts.min_effect,
                          judge_gaps=judge_gaps, starts=iters.select("rank", "iteration", "ts_ns"),
                          gpu_spans=_gpu_spans(bundle), shared_cpus=on_cpus,
                          time_slices=judge_gaps and not on_cpus)
    if not judge_gaps:
        notes.append("launch gaps not judged: the MegatronApp tracer synchronizes the GPU inside the traced "
                     "path, so a slow GPU's own host idles too")
    if peers.mode != "skipped" and (split := routed_split(events, info.ranks, matching.collectives)) is not None:
        peers = dataclasses.replace(peers, ranks=peers.ranks.join(split, on="rank", how="left", maintain_order="left"))
    if peers.mode != "skipped" and (paced := paced_split(events, info.ranks)) is not None:
        peers = dataclasses.replace(peers, ranks=peers.ranks.join(paced, on="rank", how="left", maintain_order="left"))
    if peers.mode != "skipped" and peers.by_order and (floors := input_floors(events, info.ranks)) is not None:
        peers = dataclasses.replace(peers, ranks=peers.ranks.join(floors, on="rank", how="left", maintain_order="left"))
    lap("peers")
    lateness = collective_lateness(as_matching(syncs) if syncs is not None else matching, traced,
                                   _comm_waits(events, analysis.clock))
    if waits and peers.mode != "skipped":
        peers = dataclasses.replace(peers, ranks=absorbed(peers.ranks, lateness.ranks if lateness.ran else None))
    lap("lateness")
    iteration_ns = _iteration_ns(iters, events)
    bandwidth = link_bandwidth(matching, info.ranks.select("rank", "host"), link_threshold=cuts.link,
                               shared_cpus=on_cpus, iteration_ns=iteration_ns,
                               core_waits=_p2p_core_waits(events) if waits else None, untraced=info.unrecorded)
    notes += [f"link {w['ranks'][0]}<->{w['ranks'][1]}: its fastest transfers took {w['ratio']:.1f}x its like links' "
              f"over the run, {w['own_ratio']:.2f}x in the typical step less its ends' waits for a core (the trace "
              "records them): the scheduler's, not a slow link" for w in bandwidth.waited]
    lap("bandwidth")
    pace = tp_pace(matching, len(traced)) if _synchronizing_tracer(bundle) else None
    return StageEvidence(peers, lateness, bandwidth, info, iteration_ns, on_cpus,
                         traced, notes, pace, device_counters(bundle.scan()),
                         waited(events) if waits else None, analysis)


def detect_bundle(bundle, *, threshold: float | Thresholds = DEFAULT_THRESHOLD, layout: dict[str, int] | str | None = None,
                  analysis: Any = None, onsets: bool = True) -> Verdict:
    """Find the ranks and links that slow the job in ``bundle`` (a ``TraceBundle``).

    ``threshold``: a number T (a suspect is slower than (1 + T) x its peers; the other cuts
    derived from it by ``Thresholds.derive``), or a ``Thresholds`` giving each cut.
    ``layout``: ``{"tp", "pp", "dp"}`` (or the ``tp=2,pp=1,dp=2`` text) for traces that do not
    record it. ``analysis``: the bundle's ``mapp.analysis.run.Analysis`` when the command
    already has it, else it is built here. ``onsets``: where the whole trace names no one, judge
    again the iterations from where a rank's fault set in (``onset``), or those of the period a
    rank's stalls recur in (``periodic``).
    """
    cuts = threshold if isinstance(threshold, Thresholds) else Thresholds.derive(threshold)
    if isinstance(layout, str):
        layout = parse_layout(layout)
    timings: dict[str, float] = {}
    t = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal t
        now = time.perf_counter()
        timings[name] = now - t
        t = now

    evidence = stage_evidence(bundle, cuts, layout, analysis, lap)
    judged = _combine(evidence, cuts)
    if evidence.waited is not None and not any(s.kind in RANK_KINDS for s in judged.suspects):
        # own time names no one: a rank the wall times name is a slow host where it waited for
        # its cores far more than its peers (``core_waits``)
        walled = stage_evidence(bundle, cuts, layout, evidence.analysis, own_time=False)
        on_walls = _combine(walled, cuts)
        hosts = waiting_hosts(on_walls.suspects, evidence.waited, walled.peers, walled.lateness, walled.layout,
                              walled.iteration_ns, cuts.slowdown)
        if hosts is not None:
            evidence, judged = walled, on_walls._replace(suspects=hosts)
            evidence.notes.extend(waited_note(s) for s in hosts if "core_wait" in s.evidence)
    peers, lateness, bandwidth, info, iteration_ns, on_cpus, traced, notes, pace, counters = evidence[:10]
    seen = neighbours(counters)
    suspects, imbalance, victims, grid, below, overruled = judged
    if not any(s.kind in RANK_KINDS for s in suspects) and (sender := _sole_sender(bundle, info, iteration_ns)):
        if sender.slowdown >= 1 + cuts.slowdown:
            suspects = suspects + [sender]
            waiting = sender.evidence["sole_sender"]["receivers"]
            victims = sorted(set(victims) | set(waiting))
            grid = grid.with_columns(role=pl.when(pl.col("rank") == sender.rank).then(pl.lit("suspect"))
                                     .when(pl.col("rank").is_in(waiting)).then(pl.lit("victim")).otherwise(pl.col("role")))
        elif sender.slowdown >= 1 + cuts.min_effect:
            below = below + [sender]
    notes += paced_pairs(peers, lateness, suspects + below)
    notes += [o.line for o in overruled]
    if below:
        notes.append("below threshold (not suspects): " + "; ".join(
            f"{s.kind.replace('_', ' ')} {s.label()} {s.slowdown:.3f}x" for s in below)
            + f" < {1 + cuts.slowdown:g}x")
    notes += neighbour_notes(seen, suspects + below)
    notes += sizes_unseen_notes(peers, suspects, cuts.slowdown)
    if (block := block_note(peers.leading, suspects)) is not None:
        notes.append(block)
    for suspect in suspects:
        device = device_evidence(counters, suspect.rank)
        if device is not None:
            suspect.evidence["device"] = device
    stages = [
        StageStatus(name="1 peers", ran=peers.mode != "skipped", reason=peers.reason,
                    detail=(f"compared with {peers.mode}" + (f", {peers.scope}" if peers.scope else ""))
                    if peers.mode != "skipped" else None),
        StageStatus(name="2 lateness", ran=lateness.ran, reason=lateness.reason,
                    detail=_lateness_detail(lateness) if lateness.ran else None),
        StageStatus(name="3 bandwidth", ran=bandwidth.ran, reason=bandwidth.reason,
                    detail=f"{bandwidth.observations['obs'].n_unique():,} links and groups" if bandwidth.ran else None),
    ]
    if not info.known and info.peers is None:
        notes.append("no layout: the traces record none and --layout was not given; stage 1 (peer comparison) "
                     "and the stage-balance check did not run (pass --layout tp=..,pp=..,dp=..)")
    elif not info.known:
        notes.append(f"no layout in the traces: peers by program ({info.peers}); "
                     "--layout tp=..,pp=..,dp=.. adds the stage-balance check")
    if info.unrecorded:
        n = len(info.unrecorded)
        notes.append(f"{n} rank{'s were' if n != 1 else ' was'} not recorded ({_ranks(info.unrecorded)}): not judged")
    lap("verdict")
    verdict = Verdict(suspects=suspects, imbalance=imbalance, stages=stages, layout=info.describe(),
                      layout_sizes=info.sizes, traced=len(traced), unrecorded=info.unrecorded, victims=victims,
                      grid=grid, iteration_ns=iteration_ns, threshold=cuts.slowdown, thresholds=cuts,
                      timings_s=timings, notes=notes, below=below)
    if onsets and not suspects and peers.mode != "skipped":
        return _set_in(bundle, verdict, peers, cuts, layout)
    return verdict


def _set_in(bundle, whole: Verdict, peers: PeerEvidence, cuts: Thresholds, layout) -> Verdict:
    """``whole``, or where one of ``onset.trailing_windows`` names a rank slower there than
    before it (``onset.leaning``) and since its onset (``onset.since_onset``), the verdict on
    those iterations alone: a fault that set in midway. The longest window first: the most
    iterations to judge it on. Failing that, the verdict on the iterations of one period where a
    rank's stalls recur (``_recurs``). Only such suspects are named; the verdict's other figures
    (victims, grid, iteration time) are the window's, and its timings hold the search's (``onset``)."""
    t = time.perf_counter()
    found = None
    per = peers.rank_iterations
    if not per.is_empty() and "iteration" in per.columns:
        iterations = sorted(int(i) for i in per["iteration"].drop_nulls().unique().to_list())
        for m in trailing_windows(len(iterations)):
            window = iterations[-m:]
            ranks = leaning(per, window, cuts.slowdown)
            if not ranks:
                continue
            v = detect_bundle(bundle.window(window), threshold=cuts, layout=layout, onsets=False)
            # a rank's own fault (not a link's, which its compute does not show), slower in every
            # iteration from some point to the end
            named = []
            for s in v.suspects:
                if from_busy_neighbour(s):
                    continue    # a whole run's judgement: on shared cores contention comes and goes
                since = since_onset(per, s, window, cuts.slowdown) if s.kind in RANK_KINDS and s.rank in ranks else []
                if len(since) >= ONSET_LEAST:
                    s.iterations = since
                    s.evidence["onset"] = {"from": since[0], "window": window, "traced": len(iterations),
                                            "not_slower": not_slower(since, window)}
                    named.append(s)
            if named:
                notes = [onset_note(s.rank, s.iterations, window, len(iterations)) for s in named]
                found = dataclasses.replace(v, suspects=named, notes=notes + v.notes)
                break
        if found is None:
            found = _recurs(bundle, per, iterations, cuts, layout)
    base = found or whole
    return dataclasses.replace(base, timings_s={**whole.timings_s, "onset": time.perf_counter() - t})


def _recurs(bundle, per: pl.DataFrame, iterations: list[int], cuts: Thresholds, layout) -> Verdict | None:
    """The verdict on the iterations of one period alone where a rank is slower in just those
    (``periodic.periodic_windows``) and that verdict names it a slow host, slower in every one
    of them: a fault that recurs every few iterations. None elsewhere."""
    for rank, window in periodic_windows(per, cuts.slowdown):
        v = detect_bundle(bundle.window(window), threshold=cuts, layout=layout, onsets=False)
        named = [s for s in v.suspects if s.rank == rank and s.kind == "slow_host" and not from_busy_neighbour(s)
                 and set(window) <= set(s.iterations or [])]
        if named:
            for s in named:
                s.evidence["periodic"] = {"iterations": window, "traced": len(iterations)}
            notes = [periodic_note(rank, window, len(iterations))]
            return dataclasses.replace(v, suspects=named, notes=notes + v.notes)
    return None


def _combine(evidence: StageEvidence, cuts: Thresholds):
    """``verdict.combine`` over one set of the stages' evidence."""
    return combine(evidence.peers, evidence.lateness, evidence.bandwidth, evidence.layout,
                   slowdown_threshold=cuts.slowdown, imbalance_threshold=cuts.imbalance,
                   iteration_ns=evidence.iteration_ns, shared_cpus=evidence.shared_cpus, tp_pace=evidence.tp_pace,
                   neighbours=neighbours(evidence.counters))


def _lateness_detail(lateness: LatenessEvidence) -> str:
    """What stage 2 judged: the collectives' calls, or the instances of ranges inferred as
    synchronisation where the traces record no communication (``implicit_sync``)."""
    calls = int(lateness.ranks["instances"].sum())
    if synced := inferred_at(lateness.ranks.columns):
        return f"{calls:,} entries into {', '.join(synced)}, inferred as synchronisation (no communication recorded)"
    return f"{calls:,} collective calls on aligned clocks"


def _sole_sender(bundle, info: LayoutInfo, iteration_ns: float | None):
    """The job's one sender to every other rank, where it runs a program no other rank runs
    (peers by program), judged by its receivers' waits (``sole_sender``); None otherwise."""
    if info.known or info.peers is None:
        return None
    sizes = info.ranks.group_by("pp").len()
    alone = set(info.ranks.join(sizes.filter(pl.col("len") == 1), on="pp")["rank"].to_list())
    if not alone:
        return None
    scan = bundle.scan().filter(pl.col("ph") == "X")
    p2p = scan.filter(pl.col("cat") == "p2p").select("rank", "name", "iteration", "ts_ns", "dur_ns", "args").collect()
    if p2p.is_empty():
        return None
    events = scan.filter(pl.col("cat") != "iteration").select("rank", "name", "cat", "lane", "ts_ns", "dur_ns").collect()
    steps = scan.filter(pl.col("cat") == "iteration").select("rank", "ts_ns", "dur_ns").collect()
    return sole_sender(p2p, events, steps, alone, iteration_ns)


def _synchronizing_tracer(bundle) -> bool:
    return set(bundle.ranks["format"].to_list()) == {"megatronapp"}


def _gpu_spans(bundle) -> bool:
    """Spans timed on the GPU (CUDA events: mapp's capture on a GPU, the MegatronApp tracer),
    not kernels (a profiler trace's compute is its kernels, which no launch delay stretches)."""
    return set(bundle.ranks["clock"].to_list()) == {"cuda"} and "kineto" not in bundle.ranks["format"].to_list()


def _cpu_compute(bundle, events: pl.DataFrame) -> bool:
    """Compute timed on the host of CPU processes, no GPU: no rank names a GPU, every clock is
    the host's and no compute event ran on a GPU stream."""
    ranks = bundle.ranks
    return (set(ranks["clock"].to_list()) == {"host"}
            and all(d is None or d.lower() == "cpu" for d in ranks["device"].to_list())
            and not events.filter((pl.col("cat") == "compute") & pl.col("lane").str.starts_with("stream:")).height)


def _gpus_untraced(bundle, events: pl.DataFrame) -> list[int]:
    """Profiler traces (``kineto``) of ranks whose job ran on GPUs (a device named: an NCCL
    process group or GPU events) that hold no event of a GPU stream: profiled host-only. (mapp's
    capture times its spans with CUDA events, on lanes of their own.)"""
    on_gpus = bundle.ranks.filter((pl.col("format") == "kineto") & pl.col("device").is_not_null()
                                  & (pl.col("device").str.to_lowercase() != "cpu"))
    streams = set(events.filter(pl.col("lane").str.starts_with("stream:"))["rank"].unique().to_list())
    return sorted(r for r in on_gpus["rank"].to_list() if r not in streams)


def _shape(bundle) -> list[pl.Expr]:
    """A ``shape`` column where the format records one (profiler traces: a CPU op's input
    dimensions, a kernel's grid and block), so that ops are compared on the same work; and
    ``external_id``, which ties a kernel to the CPU op that launched it (``_launched_by``)."""
    if "kineto" not in bundle.ranks["format"].to_list():
        return []
    dims = _arg("Input Dims")
    grid = pl.concat_str(_arg("grid"), _arg("block"), separator="x")
    return [pl.when(pl.col("lane").str.starts_with("stream:")).then(grid).otherwise(dims).alias("shape"),
            _arg("External id").alias("external_id")]


def _arg(key: str) -> pl.Expr:
    """The top-level ``key`` of each event's JSON ``args`` as text (null where it has none).

    JSON is parsed only where the key's quoted name occurs: most events carry none of the keys
    read here, and parsing every event's args took 130-190 ms of a 1,024-rank job's ~1 s
    analysis (164k events, no ``tokens``); the guard costs ~7 ms."""
    args = pl.col("args")
    return pl.when(args.str.contains(f'"{key}"', literal=True)).then(args.str.json_path_match(f"$['{key}']"))


def _comm_waits(events: pl.DataFrame, clock) -> pl.DataFrame | None:
    """The spans in which ranks waited for communication they had only launched
    (``COMM_WAIT_NAMES``), their starts on the reference clock: stage 2 weighs them."""
    waits = events.filter(pl.col("name").is_in(COMM_WAIT_NAMES)).select("rank", "name", "iteration", "ts_ns", "dur_ns")
    if waits.is_empty() or clock is None:
        return None
    return clock.apply(waits).select("rank", "name", "iteration", "dur_ns", start="ts_aligned_ns")


def _p2p_core_waits(events: pl.DataFrame) -> pl.DataFrame:
    """Per p2p span, the time ``own_time`` takes out of it (its thread's wait for a core): what
    stage 3 takes out of the job's only link's times (``bandwidth._less_core_waits``)."""
    spans = events.filter(pl.col("cat") == "p2p")
    return spans.select("rank", "name", "ts_ns", waited_ns=pl.col("dur_ns") - own_ns(spans))


def _launched_by(events: pl.DataFrame) -> pl.DataFrame:
    """A kernel's ``shape`` with the name and input dimensions of the CPU op that launched it
    (the op of the same rank with the kernel's ``External id``), where the trace has them.

    A kernel's grid and block alone do not say what it computed: cuBLASLt's persistent GEMM
    kernels on Hopper launch one block per SM whatever the problem (2 H200s, megatron-core PP2,
    hidden 3072: the same ``nvjet`` kernel and grid for a 3072 x 3072 x 3072 matmul at 218 us a
    call and another GEMM at 74 us, 68 calls of one on a rank and 400 of the other on its peer),
    so two ranks' calls of one kind were different work.

    Recorded without shapes (``record_shapes=False``, the profiler's default), the op's name is
    still known, and how many times it was called: a library picks a kernel for each problem
    size, so where replicas drew other sequence lengths their GEMMs ran as other kernels, the
    same ``aten::mm`` calls on each (2 H200s, megatron-core DP2, lognormal lengths: 1,485 calls
    on each rank, 1,548 and 1,522 kernels of 19 kinds, a kind 66 calls on one and 0 on the other;
    counted by kernel name, each rank read as adding 40-50 ms a step the other never ran).
    Kernels then carry ``launch``, whether each is its call's first (``added_work.op_calls``)."""
    if "external_id" not in events.columns:
        return events
    kernel = pl.col("lane").str.starts_with("stream:")
    if not events.select(kernel.any()).item():   # a CPU-only trace (gloo): no kernel to tie
        return events.drop("external_id")
    on_host = ~kernel & pl.col("external_id").is_not_null()
    launchers = events.filter(on_host & pl.col("shape").is_not_null()).select(
        "rank", "external_id", launcher=pl.concat_str("name", "shape", separator=" ")).unique(
        ["rank", "external_id"], keep="first")
    launches = []
    if launchers.is_empty():   # recorded without shapes: the launching op's name alone
        launchers = events.filter(on_host).select("rank", "external_id", launcher=pl.col("name")).unique(
            ["rank", "external_id"], keep="first")
        if launchers.is_empty():
            return events.drop("external_id")
        # one op call may launch several kernels, of kinds that vary with its unknown problem
        # size: each call counted once, at its first compute kernel (``added_work.op_calls``)
        compute = kernel & (pl.col("cat") == "compute") & pl.col("external_id").is_not_null()
        launches = [(compute & pl.struct("rank", "external_id", compute.alias("k")).is_first_distinct()).alias("launch")]
    return events.join(launchers, on=["rank", "external_id"], how="left", maintain_order="left").with_columns(
        *launches, shape=pl.when(kernel & pl.col("launcher").is_not_null())
        .then(pl.concat_str("shape", "launcher", separator=LAUNCHED)).otherwise("shape")).drop("external_id", "launcher")


def _tokens(bundle) -> list[pl.Expr]:
    """A ``tokens`` column where mapp's capture recorded one (``args.tokens`` of layer spans:
    sequence x micro-batch), so that longer sequences are not taken for a slower GPU."""
    if "mapp" not in bundle.ranks["format"].to_list():
        return []
    return [_arg("tokens").cast(pl.Int64, strict=False).alias("tokens")]


def _in_graph(bundle) -> list[pl.Expr]:
    """An ``in_graph`` column on profiler traces: whether the op ran with autograd on (the
    profiler's ``Sequence number``), which tells a stage's forward passes under ``no_grad``
    from its graph's (``no_grad_passes``)."""
    if "kineto" not in bundle.ranks["format"].to_list():
        return []
    return [pl.col("args").str.contains('"Sequence number"', literal=True).fill_null(False).alias("in_graph")]


def _program_peers(info: LayoutInfo, events: pl.DataFrame, matching, groups: pl.DataFrame, *,
                   whole_model: bool = False) -> LayoutInfo:
    """Without a layout, ranks running the same program are peers (see ``program``); p2p partners
    are not kept apart where every rank runs the whole model (``layout.loss_everywhere``,
    ``layout.parameters_everywhere``)."""
    ops = events.filter(pl.col("cat") == "compute").select(
        "rank", "name", pl.col("shape") if "shape" in events.columns else pl.lit(None, pl.String).alias("shape")
    ).unique()
    pairs = set()
    # (p2p partners run different programs, pipeline stages, unless they trade at once: a halo
    # exchange's neighbours, whose ends trade with one neighbour and its middles with two)
    if len(matching.p2p) and not whole_model and not exchanges_at_once(matching.p2p):
        pairs = {(int(a), int(b)) for a, b in matching.p2p.select("src", "dst").unique().iter_rows()}
    members = [frozenset(g) for g in groups["group_ranks"].drop_nulls().to_list() if g] if len(groups) else []
    ranks = info.ranks["rank"].to_list()
    programs, what = program_groups(ops, pairs, ranks, members)
    coords = info.ranks.drop("tp", "pp", "dp").join(programs, on="rank", how="left").with_columns(
        tp=pl.lit(0, pl.Int32), pp=pl.col("program"), dp=pl.int_range(pl.len()).over("program").cast(pl.Int32),
    ).select("rank", "tp", "pp", "dp", "host")
    return LayoutInfo(None, info.source, coords, info.world_size, info.unrecorded, info.notes, peers=what)


def _iteration_ns(iters: pl.DataFrame, events: pl.DataFrame) -> float | None:
    if iters.is_empty():
        iters = events.filter(pl.col("iteration").is_not_null()).group_by(["rank", "iteration"]).agg(
            dur_ns=(pl.col("ts_ns") + pl.col("dur_ns")).max() - pl.col("ts_ns").min()
        )
    if iters.is_empty():
        return None
    per = iters.group_by("iteration").agg(pl.col("dur_ns").max())
    return float(per["dur_ns"].median())


def _ranks(ranks: list[int]) -> str:
    from mapp.analysis.graph.diagnose import rank_list

    return rank_list(ranks)
