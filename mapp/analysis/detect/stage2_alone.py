"""Suspects from stage 2 alone: where stage 1 could not run (the MegatronApp tracer records no
compute where PP is 1) or, with peers only a guess by program, found no clear slowdown, a rank
that stage 2 finds last far more often than chance and keeping the others waiting stands in
(``late_stand_ins``), where it does so in (nearly) every traced iteration, more of them than
chance gives one of its peers (``lasting_stand_ins``). Its cost is the net waiting it imposes
(``late_suspect``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from mapp.analysis.detect._stats import FALSE_ALARM, binomial_tail, margin
from mapp.analysis.detect.added_work import added_evidence, does_extra_work
from mapp.analysis.detect.data_sized import heavier_than_its_optimizer, larger_inputs, looped_by_data, sized_by_data
from mapp.analysis.detect.findings import Overruled, Suspect
from mapp.analysis.detect.gates import traced_iterations
from mapp.analysis.detect.lateness import LatenessEvidence, as_evidence
from mapp.analysis.detect.layout import LayoutInfo
from mapp.analysis.detect.peer_evidence import PeerEvidence
from mapp.analysis.detect.routed import sized_by_routing

__all__ = ["STAND_IN_LASTING", "late_stand_ins", "late_suspect", "lasting_by_chance", "lasting_stand_ins"]


def late_stand_ins(peers: PeerEvidence, lateness: LatenessEvidence, layout: LayoutInfo, named: set[int],
                   coords: dict, iteration_ns: float | None, slowdown_threshold: float) -> list[Suspect]:
    """Stage 2 stands in for stage 1 where peers are only a guess by program (no layout).

    On shared or busy hosts the time of single ops says little (a rank's ops stretch whenever
    another process holds its core, and a straggler's last ops often run alone and fast), while
    who arrives last at the job's collectives and who waits there is measured directly. A rank
    that stage 2 flags (last far more often than chance, imposing far more waiting than it
    suffers) is a suspect when it is the only such rank among the ranks running its program (a
    whole group of them late alike is a heavier part of the job, not a fault) and stage 1 does
    not find it faster than its peers (and, for the verdict, where it keeps the others waiting
    in (nearly) every traced iteration: ``lasting_stand_ins``).
    """
    flagged = lateness.ranks.filter(pl.col("flagged"))
    if flagged.is_empty():
        return []
    program = dict(zip(layout.ranks["rank"].to_list(), layout.ranks["pp"].to_list()))
    members = layout.ranks.group_by("pp").len()
    alone = set(members.filter(pl.col("len") == 1)["pp"].to_list()) if peers.mode == "program peers" else set()
    per_program: dict[int, int] = {}
    for r in flagged["rank"].to_list():
        per_program[program.get(r)] = per_program.get(program.get(r), 0) + 1
    stage1 = {r["rank"]: r for r in peers.ranks.iter_rows(named=True)}
    out = []
    for row in flagged.iter_rows(named=True):
        r = row["rank"]
        own = stage1.get(r)
        if r in named or per_program[program.get(r)] > 1:
            continue
        # (nor for a rank that runs a program no other rank runs: with no peer to be slower than,
        # being last is its part's, not a fault's. An actor-learner's learner waits on no one but
        # its actors and is last at every parameter broadcast: a user's IMPALA on 4 gloo
        # processes, no fault, "slow compute 0" 2.0x, last at 69% of the collectives)
        if program.get(r) in alone:
            continue
        if own is not None and float(own["slowdown"]) < 1 / (1 + peers.min_effect):
            continue
        # (nor for a rank stage 1 found slower only on the tokens routed to it: it keeps the
        # others waiting at their exchanges as the data made it, ``routed``)
        if own is not None and sized_by_routing(own, slowdown_threshold) and not does_extra_work(own, peers.min_effect):
            continue
        # (nor for a rank whose data runs the program's loops more often, by its calls of them:
        # ``same_work._data_scales``; a user's LSTM, one replica's sentences 1.6x as long, last
        # at 92% of the collectives)
        if own is not None and looped_by_data(own, slowdown_threshold):
            continue
        # (nor for a rank whose inputs are larger in every step, by its fastest calls against its
        # optimizer's: ``data_sized.larger_inputs``; a user's MLM, one replica's token budget 1.5x)
        if own is not None and (larger_inputs(own, slowdown_threshold)
                                or heavier_than_its_optimizer(own, slowdown_threshold)):
            continue
        # (nor for a rank stage 1 found slower, beyond the noise, on a few ops only, those its
        # data swells, by its pace on the ops that make most of its peers' time:
        # ``data_sized.sized_by_data``; a user's WaveNet with hand-made gradient buckets, one
        # replica's batch 2x: its compute 3.0x at z 6.5, 1.2x on those ops, last at every
        # all-reduce. One within the noise, stage 1 found no clear slowdown in: stage 2 judges it)
        if own is not None and own.get("flagged") and sized_by_data(own, slowdown_threshold):
            continue
        s = late_suspect(row, own, peers, lateness, coords, iteration_ns,
                         f"stage 2 stands in: stage 1 ({peers.mode}) found no clear slowdown", slowdown_threshold)
        # (whether it is slower by the threshold at all, which ``lasting_stand_ins`` asks)
        s.evidence[NOT_SLOWER] = None if own is None else _not_slower(own, stage1, program, slowdown_threshold)
        out.append(s)
    return out


NOT_SLOWER = "not_slower_by_threshold"
"""A stand-in's evidence key: why it is no slower than the others of its program by the
threshold (``_not_slower``), or None where it is."""


def _not_slower(own: dict, stage1: dict[int, dict], program: dict, threshold: float) -> str | None:
    """None where a rank's busy time is over (1 + ``threshold``) x the median of the others' of
    its program by work they do too, or its idle time beyond theirs (``gap_excess_ns``) the
    threshold's share of its own; else why not: "data" (neither), or "role" (busier only by
    its part in the program: ``_its_role``)."""
    busy = own.get("busy_ns") or 0.0
    if max(own.get("gap_excess_ns") or 0.0, 0.0) >= threshold * busy:
        return None
    others = [r["busy_ns"] for rank, r in stage1.items()
              if rank != own["rank"] and program.get(rank) == program.get(own["rank"]) and r.get("busy_ns")]
    if not (others and busy > (1 + threshold) * float(np.median(others))):
        return "data"
    return "role" if _its_role(own, busy, threshold) else None


_NOT_SLOWER_WHY = {
    "data": ("neither busier than its peers by the threshold nor idle longer by its share of its work: last by its "
             "turn of the data"),
    "role": ("busier than its peers only by work they never do or do less often, at their pace on the work they "
             "share: its part in the program"),
}
"""What each of ``_not_slower``'s answers says in the stand-in's note."""


def _its_role(own: dict, busy: float, threshold: float) -> bool:
    """Whether a rank is busier than its peers by work they never do or do less often (its
    ``alone_ns`` and ``added_real_ns``, by its clock, the threshold's share of its busy time or
    more) while it runs the work they share at their pace (``pace`` under half a threshold
    over): its part in the program, no slower device. A user's master-worker trainer on 4 gloo
    processes, rank 0 building every step's batch for all and stepping the optimizer for all,
    no fault: 1.63x its workers' busy time, 120 ms a step of it theirs never run, its pace 1.04,
    last where they wait for the next batch in every step ("slow compute 0"). A rank whose data
    runs its loops longer is slower there at its pace too; that is ``looped_by_data``'s."""
    pace = own.get("pace")
    role = max(own.get("alone_ns") or 0.0, 0.0) + max(own.get("added_real_ns") or 0.0, 0.0)
    return pace is not None and pace < 1 + threshold / 2 and role >= threshold * busy


STAND_IN_LASTING = 0.875
"""Share of the traced iterations in which a rank that stage 1 finds no slower must keep the
others waiting for stage 2 to name it alone: every one of a handful (3 of 4 is 0.75), all but
one of eight or more, where one step's hiccup should not clear a fault (0.9 until the
hundred-and-first session, which asked 8 of 8: a user's distributed Cholesky, one rank's
trailing updates 3-4x, its calls read as the program's uneven split, last and keeping the others
waiting in 7 of 8 steps, "no suspect"; two busy threads the same). Replicas of heavy-tailed lengths padded
per batch draw other work each step, and the one that draws the longest batches in most steps is
last and keeps the others waiting there, as a fault does, which lasts (``transformers.Trainer``,
DDP4 under the profiler's defaults, lognormal lengths, no fault: a rank 1.31-1.45x its peers'
busy time in 3 of 4 steps and 1.0x in the fourth, net waiting imposed in 3 of 4, "slow compute 1"
2.03x; healthy, 4 loader workers a process: 1.09-1.22x in 3 of 4 and 0.95x, "slow host 3"). Over
the 880 jobs recorded before (477 under the profiler) no suspect stage 2 stood in for was named
right by it. The share is necessary, not enough: the lead must also be no turn of chance among the
ranks (``lasting_by_chance``), which few ranks over few steps are not (two ranks: 9 of 10 steps is
one time in 50)."""


def lasting_by_chance(lateness: LatenessEvidence, net_lasting: float) -> float:
    """The chance that some rank keeps the others waiting in as many of the traced iterations as
    ``net_lasting`` says, were it only its turn: each rank in each iteration at the share of
    (rank, iteration) pairs in which one did (the mean of ``net_lasting``), over the ranks
    (a union bound). Every one of three steps is no rare event among four ranks taking turns:
    one of them does so about one time in seven (PyTorch Lightning's profiler traces three
    steps by default)."""
    shares = lateness.ranks["net_lasting"].fill_null(0.0)
    n = max(int(lateness.iterations), 1)
    k = round(net_lasting * n)
    p = min(max(float(shares.mean() or 0.0), 0.0), 1.0)
    return min(1.0, shares.len() * float(binomial_tail([k], [n], [p])[0]))


def lasting_stand_ins(stand_ins: list[Suspect], lateness: LatenessEvidence,
                      overruled: list[Overruled]) -> list[Suspect]:
    """The stand-ins of stage 2 that keep the others waiting in (nearly) every traced iteration
    (``STAND_IN_LASTING``), in more of them than the ranks' turns give one by chance
    (``lasting_by_chance`` under ``_stats.FALSE_ALARM``); the others overruled, with a note."""
    rows = {r["rank"]: r for r in lateness.ranks.iter_rows(named=True)}
    kept = []
    for s in stand_ins:
        row = rows[s.rank]
        lasting = row.get("net_lasting") or 0.0
        chance = lasting_by_chance(lateness, lasting) if lasting >= STAND_IN_LASTING else 1.0
        why_not = s.evidence.pop(NOT_SLOWER, None)
        if chance < FALSE_ALARM and why_not is None:
            kept.append(s)
            continue
        # (nor one that is neither busier than the others of its program by the threshold nor
        # idle longer by the threshold's share of its work: it keeps them waiting by its turn of
        # the data, not by being slower. A user's LayerDrop transformer, lengths drawn lognormal
        # per rank and step, no fault: rank 2 last in 7 of 8 steps, its busy time 1.03x the
        # others', 3.9 ms a step more idle of 142 ms; every busy thread or slowed rank stage 2
        # stood in for over the recorded jobs was 1.24-5.9x)
        # (nor one busier only by its part in the program: ``_its_role``)
        if chance < FALSE_ALARM:
            overruled.append(Overruled(s.rank, f"rank {s.rank} kept the others waiting (last at {row['last']} of "
                                               f"{row['instances']} collectives) in {lasting:.0%} of the traced "
                                               "iterations: not a suspect (stage 1 found no clear slowdown, and it is "
                                               f"{_NOT_SLOWER_WHY[why_not]})"))
            continue
        why = ("alone names a rank only in (nearly) every one: a fault lasts, while ranks drawing other work "
               "each step are last in most steps by chance" if lasting < STAND_IN_LASTING else
               "alone names a rank only where that is no turn of chance: with "
               f"{lateness.iterations} iterations traced, one of {lateness.ranks.height} ranks taking turns does so "
               "about one time in "
               f"{max(round(1 / max(chance, 1e-9)), 1)}")
        overruled.append(Overruled(s.rank, f"rank {s.rank} kept the others waiting (last at {row['last']} of "
                                           f"{row['instances']} collectives) in {lasting:.0%} of the "
                                           "traced iterations: not a suspect (stage 1 found no clear slowdown, and stage 2 "
                                           f"{why})"))
    return kept


def late_suspect(row: dict, own: dict | None, peers: PeerEvidence, lateness: LatenessEvidence, coords: dict,
                 iteration_ns: float | None, note: str, slowdown_threshold: float | None = None) -> Suspect:
    """A suspect from stage 2 alone: the net waiting it imposes per iteration is its cost (its
    slowdown that of the iteration; where that stays under ``slowdown_threshold`` and the rank
    calls ops more often than its peers, theirs: ``added_work.added_slowdown``). A slow host where stage
    1's launch gaps account for more of it than its ops do, unless it does extra work."""
    traced = traced_iterations(peers) if peers.mode != "skipped" else lateness.iterations
    # (the waiting it imposed with overlapping waits counted once: queued collectives overlap)
    excess = max(row.get("net_once_ns", row["net_ns"]) or 0.0, 0.0) / max(traced, 1)
    gap = max((own or {}).get("gap_excess_ns") or 0.0, 0.0)
    extra = own is not None and does_extra_work(own, peers.min_effect)
    host = own is not None and not extra and gap > max((own.get("excess_ns") or 0.0), 0.0)
    slowdown = iteration_ns / max(iteration_ns - excess, 1.0) if iteration_ns else float("nan")
    evidence: dict[str, Any] = {"lateness": as_evidence(row), "note": note}
    if own is not None:
        evidence["peers"] = {"mode": peers.mode, "slowdown": round(float(own["slowdown"]), 3),
                             "z": round(float(own["z"]), 2), "cut": round(peers.z_crit, 2)}
        evidence["launch_gaps"] = {"excess_ms_per_iteration": round(gap / 1e6, 4),
                                   "z": round(float(own["gap_z"] or 0.0), 2)}
        if extra:
            evidence["peers"]["added_work"] = added_evidence(own)
            if slowdown_threshold is not None and not slowdown >= 1 + slowdown_threshold:
                slowdown = max(float(own["added"]), slowdown) if slowdown == slowdown else float(own["added"])
    return Suspect(
        rank=row["rank"], kind="slow_host" if host else "slow_compute", coords=coords.get(row["rank"]),
        confidence=0.5 + 0.3 * margin(row["net_z"], lateness.z_crit),
        slowdown=slowdown, excess_ns=excess, iteration_ns=iteration_ns, evidence=evidence,
    )
