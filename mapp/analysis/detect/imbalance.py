"""Workload imbalance: lost time that the workload, not the hardware, causes.

A pipeline stage that computes more than the others (more layers, the loss or the embedding) and
replicas that drew longer sequences are reported as imbalance, never as a slow GPU; ``verdict``
calls these once its suspects are known (a replica slower alike is taken out of them here).
"""

from __future__ import annotations

import polars as pl

from mapp.analysis.detect.findings import Imbalance, Suspect
from mapp.analysis.detect.layout import LayoutInfo
from mapp.analysis.detect.peer_evidence import PeerEvidence
from mapp.analysis.detect.thresholds import ALIKE

__all__ = ["heavy_replicas", "suspects_stages", "workload_imbalance"]


def workload_imbalance(peers: PeerEvidence, imbalance_threshold: float, layout: LayoutInfo) -> list[Imbalance]:
    out: list[Imbalance] = []
    if peers.stages is not None:
        one_rank = (layout.sizes is not None and layout.sizes["tp"] * layout.sizes["dp"] == 1
                    and peers.mode != "layer peers")
        for row in peers.stages.filter(pl.col("ratio") > 1 + imbalance_threshold).iter_rows(named=True):
            message = (f"pipeline stage {row['pp']} computes {row['ratio']:.2f}x the lightest stage "
                       "(more layers, or the loss/embedding): the other stages wait on it")
            if one_rank:
                message += "; with one rank per stage a slow GPU there would look the same"
            out.append(Imbalance(kind="stage", message=message,
                                 evidence={"stage": row["pp"], "ratio": round(row["ratio"], 3),
                                           "compute_ms_per_iteration": round(row["compute_ns"] / 1e6, 4)}))
    if peers.graded is not None and float(peers.graded["share"].sum()) >= GRADED_PART:
        out.append(_graded_line(peers.graded))
    # Statistically clear but under a percent is not worth a line (it still gets discounted).
    if peers.seqlen is not None and peers.seqlen["relative_spread"] >= 0.01:
        out.append(Imbalance(
            kind="sequence_length",
            message=(f"compute varies by about +/-{peers.seqlen['relative_spread']:.0%} between microbatches, alike on "
                     "every rank of a replica: uneven sequence lengths (discounted when judging GPUs)"),
            evidence=dict(peers.seqlen),
        ))
    return out


GRADED_PART = 0.05
"""Share of the ranks' compute that the ops the program splits unevenly must take for a line
(``graded_work``; a few odd ``aten::item`` calls are no imbalance worth naming)."""


def _graded_line(graded: pl.DataFrame) -> Imbalance:
    """The work a program splits unevenly by rank, its dearest op for example."""
    top = graded.row(0, named=True)
    calls = ", ".join(f"{c:g}" for c in top["calls"])
    ranks = ", ".join(str(r) for r in top["ranks"])
    more = len(graded) - 1
    message = (f"ranks {ranks} call {top['name']} {calls} times a step"
               + (f" (and {more} more op{'s' if more > 1 else ''} as unevenly)" if more else "")
               + ": the program gives each rank a different share of that work "
               "(judged as its program, not as a slower GPU)")
    return Imbalance(kind="graded_work", message=message,
                     evidence={"ops": graded["name"].to_list(), "ranks": top["ranks"], "calls": top["calls"],
                               "share": round(float(graded["share"].sum()), 4)})


def suspects_stages(imbalance: list[Imbalance], suspects: list[Suspect], layout: LayoutInfo) -> list[Imbalance]:
    """A heavier stage whose every rank is a slow-compute suspect says so: what a slow rank adds
    weighs its stage too, and with one rank per stage that may be all of the imbalance
    (megatron-core PP4 under the profiler, matmuls before each microbatch on stage 2: the stage
    "1.94x the lightest" and its rank slow compute 1.68x, in two lines that did not meet)."""
    slow = {s.rank for s in suspects if s.kind == "slow_compute"}
    if not slow:
        return imbalance
    ranks = layout.ranks.group_by("pp").agg(pl.col("rank"))
    members = {pp: sorted(rs) for pp, rs in ranks.iter_rows()}
    out = []
    for item in imbalance:
        ours = members.get(item.evidence.get("stage")) if item.kind == "stage" else None
        if ours and set(ours) <= slow:
            who = (f"rank {ours[0]} there is a slow-compute suspect: its" if len(ours) == 1 else
                   f"ranks {', '.join(map(str, ours))} there are slow-compute suspects: their")
            item = Imbalance(kind=item.kind, evidence={**item.evidence, "suspects": ours},
                             message=item.message + f"; {who} own slowness weighs the stage too")
        out.append(item)
    return out


def heavy_replicas(suspects: list[Suspect], peers: PeerEvidence, layout: LayoutInfo,
                    imbalance: list[Imbalance]) -> list[Suspect]:
    """With uneven sequence lengths, a replica can draw longer sequences on average: then every
    rank of that replica is slower alike, which is data, not a GPU (a replica of one or two
    ranks cannot tell its own average from a fault otherwise). A slow GPU slows its own
    compute only (its TP and PP peers wait, which is not compute), so a whole replica slower
    by the same factor (``thresholds.ALIKE``) is read as data even when the microbatch-to-
    microbatch spread was too small to be measured; slowdowns that differ are left as suspects
    (two faulty GPUs).
    Not a replica whose compute varied with no data (``peers.seqlen`` unset) and whose ranks were
    slower than each of their other peers in nearly every microbatch (``peers.leading``):
    data redrawn each microbatch makes no such lead; a slow node does (simulated TP2 x DP2, the
    TP group of ranks 0 and 1 at 1.5x: "replica dp0 got longer sequences", no suspect)."""
    if layout.sizes is None:
        return suspects
    size = layout.sizes["tp"] * layout.sizes["pp"]
    compute = [s for s in suspects if s.kind == "slow_compute" and s.coords]
    by_replica: dict[int, list[Suspect]] = {}
    for s in compute:
        by_replica.setdefault(s.coords["dp"], []).append(s)
    drop: set[int] = set()
    for dp, members in by_replica.items():
        slowdowns = [s.slowdown for s in members]
        alike = max(slowdowns) <= ALIKE * min(slowdowns)
        node = peers.seqlen is None and {s.rank for s in members} <= set(peers.leading)
        if size >= 2 and len(members) == size and (peers.seqlen is not None or (alike and not node)):
            drop |= {s.rank for s in members}
            factor = sum(s.slowdown for s in members) / len(members)
            imbalance.append(Imbalance(kind="sequence_length", message=(
                f"replica dp{dp} got longer sequences: all its {size} ranks computed {factor:.2f}x alike"),
                evidence={"replica": dp, "ratio": round(factor, 3), "ranks": sorted(s.rank for s in members)}))
    return [s for s in suspects if not (s.kind == "slow_compute" and s.rank in drop)]
