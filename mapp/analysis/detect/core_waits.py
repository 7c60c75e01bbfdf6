"""Ranks whose processes waited for a CPU core, where the capture recorded it (``runnable_ns``).

Stage 1 compares ranks' own time (``own_time``): a span's duration less the time its thread
waited on a run queue. Two things follow where CPU processes share cores.

- Extra own time that cost no one is no fault. A process that shares a core with another runs
  its ops with colder caches, and their CPU time itself grows: megatron-core PP4 x DP2 under
  mapp's capture, 8 processes on 4 CPUs, no fault: rank 1's forward layers took 1.3-1.6x its
  stage peer's CPU time in every step, its backward 0.92x, 1.22x over its ops at z 4.6; yet
  its peer was last at 3 of 4 of their collectives and rank 1 waited 104 ms more for it than
  it made it wait. A rank its own time flags is a suspect only where it does not wait for its
  peers more than they wait for it (``absorbed``; in each of 26 layer faults of 1.3-1.4x with
  collectives to judge, the slowed rank made its peers wait on net).
- A rank slowed because another process takes its core does its own work as fast as its peers
  and is slower by the wait alone (DP4, 4 processes on 4 CPUs, another process spinning half
  the time on rank 1's core: its layers waited 394 ms for their core over 4 steps, its peers'
  25 ms, and the peers spent 409-474 ms in the gradient all-reduce, rank 1 52 ms). Where own time names no one, the
  wall times are judged as on traces without the field, and a rank they name whose waits for
  a core stand out (``waited``, in every traced iteration) is a slow host: its cores are
  shared, its work is not slower (``detector.detect_bundle``). Where the wall times name no one
  either (its ops a few percent slower each, within the noise), such a rank is a slow host where
  stage 2 finds its peers waiting for it (``waiting_host``).
"""

from __future__ import annotations

import polars as pl

from mapp.analysis.detect.findings import Suspect
from mapp.analysis.detect.lateness import LatenessEvidence, as_evidence, waits_more_than_most
from mapp.analysis.detect.layout import LayoutInfo
from mapp.analysis.detect.own_time import RUNNABLE
from mapp.analysis.detect.peer_evidence import PeerEvidence

__all__ = ["records_waits", "absorbed", "waited", "waiting_host", "waiting_hosts", "waited_note", "RANK_KINDS",
           "STANDS_OUT", "MIN_SHARE"]

STANDS_OUT = 2.0
"""A rank's share of its compute time spent waiting for a core, over its peers' median share,
in every traced iteration (the DP4 above: 30% against 2-3%; 86 healthy or imbalanced jobs of
megatron-core under mapp's capture, 4 or 8 processes on 2 or 4 CPUs: the ranks' shares 1.6-54%,
no rank so in any job)."""
MIN_SHARE = 0.05
"""... and at least this share of its compute time."""
RANK_KINDS = ("slow_compute", "slow_host")
"""The kinds of suspect that name a rank's own compute or host."""


def records_waits(events: pl.DataFrame) -> bool:
    """Whether the compute spans of ``events`` carry their waits for a core: some wait recorded
    (a kernel that keeps no scheduler statistics reads 0 for every thread)."""
    if RUNNABLE not in events.columns:
        return False
    compute = events.filter(pl.col("cat") == "compute")
    return compute.height > 0 and (compute[RUNNABLE].sum() or 0) > 0


def absorbed(ranks: pl.DataFrame, lateness_ranks: pl.DataFrame | None) -> pl.DataFrame:
    """``ranks`` (stage 1's per-rank table) with ``flagged`` cleared for ranks that waited for
    their peers at collectives more than the peers waited for them (stage 2's ``net_ns`` below
    zero) and more than the other ranks did (below their median net; the job's steady rank only
    where its net stands out: ``lateness.waits_more_than_most``): their extra own time cost the
    job nothing.

    Why against the others too: on cores shared by more processes than they have (8 on 2), every
    rank waits at collectives for a core as well as for its peers, and every rank's net is below
    zero. Then the rank that made the others wait is the one whose net is highest, not above zero
    (DP8, rank 5's layers 1.8x its peers': net -488 ms a run, the others' -1,001 to -2,466 ms)."""
    if lateness_ranks is None or lateness_ranks.is_empty() or "flagged" not in ranks.columns:
        return ranks
    steady = set(ranks.filter(pl.col("steady").is_not_null())["rank"].to_list()) if "steady" in ranks.columns else set()
    waiters = pl.Series([r["rank"] for r in lateness_ranks.iter_rows(named=True)
                         if r["net_ns"] is not None and waits_more_than_most(r, steady=r["rank"] in steady)],
                        dtype=ranks["rank"].dtype)
    return ranks.with_columns(flagged=pl.col("flagged") & ~pl.col("rank").is_in(waiters.implode()))


def waited(events: pl.DataFrame) -> dict[int, dict[str, float]]:
    """Ranks whose compute spans waited for a core far more than their peers' in every traced
    iteration: rank -> its share of compute time spent waiting and its peers' median share."""
    spans = events.filter((pl.col("cat") == "compute") & pl.col("iteration").is_not_null()
                          & pl.col(RUNNABLE).is_not_null() & (pl.col("dur_ns") > 0))
    if spans.is_empty() or spans["rank"].n_unique() < 2:
        return {}
    per = spans.group_by("rank", "iteration").agg(share=pl.col(RUNNABLE).sum() / pl.col("dur_ns").sum())
    # each rank against the median of the others in the same iteration
    others = per.join(per, on="iteration", suffix="_o").filter(pl.col("rank") != pl.col("rank_o")).group_by(
        "rank", "iteration").agg(peers=pl.col("share_o").median())
    per = per.join(others, on=["rank", "iteration"])
    out = per.group_by("rank").agg(
        every=((pl.col("share") >= STANDS_OUT * pl.col("peers")) & (pl.col("share") >= MIN_SHARE)).all(),
        share=pl.col("share").median(), peers=pl.col("peers").median(), k=pl.len(),
        iterations=pl.col("iteration").sort())
    traced = per["iteration"].n_unique()
    out = out.filter(pl.col("every") & (pl.col("k") == traced))
    return {int(r["rank"]): {"share": float(r["share"]), "peers_share": float(r["peers"]),
                             "iterations": [int(i) for i in r["iterations"]]}
            for r in out.iter_rows(named=True)}


def waiting_host(rank: int, waits: dict, late: dict | None, busy_ns: float | None, iteration_ns: float | None,
                 threshold: float, coords: dict | None) -> Suspect | None:
    """A slow host named by its waits for a core alone, where its peers wait for it: last at
    more of its collectives than chance, and others waiting for it more than it for them (stage
    2), by ``threshold`` of its work an iteration or more. Its slowdown is its compute time's
    over what it would be without the extra waits (``busy_ns``: its compute time an iteration);
    a suspect only at ``1 + threshold`` or more."""
    if late is None or not late["net_ns"] > 0 or not late["share_last"] > late["expected_share"] or not busy_ns:
        return None
    extra = max(waits["share"] - waits["peers_share"], 0.0) * busy_ns
    slowdown = busy_ns / max(busy_ns - extra, 1.0)
    # and what its peers waited for it is a real share of its work: a core shared now and then
    # beside a job that waits on others costs the job nothing (DP4, another process spinning half
    # the time on rank 2's core: the rank 1.35x slower by its waits, the others waiting for it
    # 3 ms a step of 417)
    waited_on = late["net_ns"] / max(len(waits["iterations"]), 1)
    if slowdown < 1 + threshold or waited_on < threshold * (busy_ns - extra):
        return None
    return Suspect(rank=rank, kind="slow_host", coords=coords, confidence=0.6, slowdown=slowdown,
                   iterations=waits["iterations"], excess_ns=min(extra, waited_on),
                   iteration_ns=iteration_ns,
                   evidence={"core_wait": {k: round(waits[k], 3) for k in ("share", "peers_share")},
                             "lateness": as_evidence(late)})


def waiting_hosts(suspects: list[Suspect], waits: dict[int, dict], peers: PeerEvidence, lateness: LatenessEvidence,
                  layout: LayoutInfo, iteration_ns: float | None, threshold: float) -> list[Suspect] | None:
    """The suspects ``verdict.combine`` found on wall times (``peers``, ``lateness``, ``layout``:
    the stages' evidence it judged), their rank suspects kept only where the rank's waits for a
    core stand out (``waits``: ``waited``), each then a slow host; or where the wall times name
    none of those, the ranks that waited whose peers waited for them (``waiting_host``). None
    where no rank is so."""
    hosts = [s for s in suspects if s.kind in RANK_KINDS and s.rank in waits]
    for s in hosts:
        s.kind = "slow_host"
        s.evidence["core_wait"] = {k: round(waits[s.rank][k], 3) for k in ("share", "peers_share")}
    if not hosts:
        late = {r["rank"]: r for r in lateness.ranks.iter_rows(named=True)} if lateness.ran else {}
        # stage 1's compute time an iteration, by rank
        busy = ({r["rank"]: r["busy_ns"] for r in peers.ranks.iter_rows(named=True)}
                if peers.mode != "skipped" and "busy_ns" in peers.ranks.columns else {})
        coords = {r["rank"]: {a: r[a] for a in ("tp", "pp", "dp")} for r in layout.ranks.iter_rows(named=True)}
        hosts = [h for r, w in sorted(waits.items())
                 if (h := waiting_host(r, w, late.get(r), busy.get(r), iteration_ns, threshold, coords.get(r)))]
    if not hosts:
        return None
    return hosts + [s for s in suspects if s.kind not in RANK_KINDS]


def waited_note(suspect: Suspect) -> str:
    """What a slow host named by its waits for a core says in the verdict's notes."""
    w = suspect.evidence["core_wait"]
    return (f"rank {suspect.rank} waited for a core {w['share']:.0%} of its compute time, its peers "
            f"{w['peers_share']:.0%}: another process shares its cores (its own work is no slower than its peers')")
