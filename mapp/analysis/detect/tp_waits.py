"""TP groups under a tracer whose spans hold their waits: the victim beside a slow GPU, and the
slow GPU that its group hides.

The original MegatronApp tracer adds TP barriers inside the spans it times (in ``MLP.forward``
and before each steady-state forward; ``ingest.megatronapp``): a rank that waits there for a
slower TP peer spends the wait inside its own ``forward``/``backward`` spans, where no
collective record stands for it, so stage 1 finds it slower too (simulated TP2 x PP2 x DP2 in
that format, a 1.5x GPU on rank 5: its TP peer, rank 4, 1.44x its stage peers at z 36 and named
second; in mapp's own format, whose waits are collectives nested in the spans and taken out of
them, rank 4 is a victim). Stage 2 tells the two apart: the culprit arrives last at nearly every
TP collective of theirs, the victim at nearly none.

Only for such a tracer: where every wait is recorded, two slow GPUs of one TP group are two
suspects, the slower one last at their collectives (``test_verdicts``).

The same barriers hide a slow GPU from stage 1 altogether: its TP peers wait inside their spans,
so the whole TP group computes slower alike, as a replica given longer sequences would, and the
comparison with other replicas discounts it as data; stage 2 alone gives a lower bound
(simulated in that format: a 1.2x GPU of TP2 x DP4, a "slow host" at 1.083x, below the
threshold; a 1.3x GPU of TP8 x DP4 at 1.024x). What tells it
apart is its *pace* (``tp_pace``): between two of their TP collectives every rank of a group
does the same work, and each rank's stretch from the one's end to its arrival at the next is
timed on its own clock, so no alignment is needed. The slow GPU's stretch is its peers' times
its slowdown, at nearly every collective (those two: 1.199x and 1.302x); with healthy GPUs or
uneven sequences no rank's is (at most 1.06x over the suite's negatives in that format).

And a group slower alike with no member pacing it, nor last at its collectives, waited on
something outside it (``tp_group_alike``): its pipeline's other stages, whose waits its spans
hold too, or its data.
"""

from __future__ import annotations

import math
import statistics

import polars as pl

from mapp.analysis.detect._stats import margin, robust_scale, z_critical
from mapp.analysis.detect.findings import Overruled, Suspect, in_place_of_lower
from mapp.analysis.detect.gates import keeps_waiting
from mapp.analysis.detect.lateness import LatenessEvidence
from mapp.analysis.detect.peer_evidence import PeerEvidence
from mapp.analysis.detect.replicas import with_replica
from mapp.analysis.detect.thresholds import CONSISTENT
from mapp.analysis.graph.diagnose import rank_list

__all__ = ["TP_ALIKE", "tp_group_alike", "tp_pace", "tp_pace_suspects", "tp_victims"]

SHORT_STRETCH = 2.0
"""The longest stretch between two TP collectives that ``tp_pace`` compares, in multiples of the
rank's lower-quartile one. The tracer records only the forward's TP reductions: a stretch from
the last of one forward to the first of the next holds the backward, whose TP reductions (not
recorded) and pipeline exchanges let the peers meet again unseen, so there the slow GPU's
stretch is hardly longer than theirs. The forward's stretches (one attention or one MLP between
two reductions) are the short ones."""

WINDOW = 2.0
"""A rank slower than its TP peers in some iterations only is a fault that came and went where,
in each of them, it was slower at ``CONSISTENT`` of its short stretches and its median ratio
stood ``WINDOW`` x the Bonferroni cut beyond the spread of every rank's per-iteration ratios,
with three traced iterations or more (with two, one slow iteration is as likely a hiccup):
the rule ``peers._per_rank`` applies to stage 1's windows. Simulated in the MegatronApp format,
a 2x GPU in one iteration of four stood 113 and 182 spreads out, a 1.2x one 16; the most any
rank-iteration of a healthy or imbalanced job stood, 4.9."""

WINDOW_SCALE_FLOOR = 0.005
"""The least spread of per-iteration ratios (in log units, 0.5%) that ``WINDOW`` is measured in:
a job whose stretches agree to better than that would otherwise make any small wobble stand out."""

_PACE_SCHEMA = {"rank": pl.Int32, "pace": pl.Float64, "stretches": pl.UInt32, "share_slower": pl.Float64,
                "lasting": pl.Float64, "slower_iterations": pl.List(pl.Int32), "z": pl.Float64,
                "z_cut": pl.Float64, "extra_ns": pl.Float64, "flagged": pl.Boolean,
                "window": pl.List(pl.Int32), "window_pace": pl.Float64, "window_extra_ns": pl.Float64}


def tp_pace(matching, traced: int) -> pl.DataFrame:
    """Per rank of a TP group, its pace against its TP peers (see the module doc).

    For each complete TP collective and each member whose previous collective was the one
    before it in the same group and iteration: its *stretch*, from that one's end to this one's
    start, on its own clock; against the median of its peers' stretches there (leave one out).
    Only the short stretches count (``SHORT_STRETCH``). Per rank: ``pace`` (the median ratio),
    ``stretches``, ``share_slower`` (of those, how many are longer than the peers'), ``lasting``
    (the share of iterations in which it was slower at ``CONSISTENT`` of its short stretches;
    ``slower_iterations`` those), ``z`` (binomial z of ``share_slower`` against one half),
    ``extra_ns`` (what all its stretches,
    long ones too, took beyond its peers', an iteration: a lower bound of its cost, the
    backward's stretches being unseen) and ``flagged``: slower at far more stretches than chance
    (``z`` beyond ``z_cut``, the Bonferroni cut of ``traced`` ranks) and in ``CONSISTENT`` of the
    iterations.

    ``window``: the iterations in which the rank was far slower than in the job's others, a fault
    that came and went (``WINDOW``); ``window_pace`` and ``window_extra_ns`` its pace and cost
    there."""
    members = matching.members
    if members.is_empty() or "group" not in members.columns:
        return pl.DataFrame(schema=_PACE_SCHEMA)
    inst = matching.collectives.filter(pl.col("complete")).select("instance_id", "group_ranks", "iteration")
    m = (
        members.sort("rank", "start_ns")
        .join(inst, on="instance_id", how="left")
        .with_columns(prev_end=pl.col("end_ns").shift(1).over("rank"),
                      prev_group=pl.col("group").shift(1).over("rank"),
                      prev_ranks=pl.col("group_ranks").shift(1).over("rank"),
                      prev_iteration=pl.col("iteration").shift(1).over("rank"))
        .filter((pl.col("group") == "tp") & (pl.col("prev_group") == "tp") & pl.col("iteration").is_not_null()
                & (pl.col("prev_iteration") == pl.col("iteration")) & (pl.col("prev_ranks") == pl.col("group_ranks")))
        .select("instance_id", "rank", "iteration", stretch=(pl.col("start_ns") - pl.col("prev_end")).cast(pl.Float64))
        .filter(pl.col("stretch") > 0)
    )
    if m.is_empty():
        return pl.DataFrame(schema=_PACE_SCHEMA)
    peers = m.select("instance_id", peer="rank", peer_stretch="stretch")
    vs = (
        m.join(peers, on="instance_id").filter(pl.col("peer") != pl.col("rank"))
        .group_by("instance_id", "rank").agg(pl.col("stretch", "iteration").first(), ref=pl.col("peer_stretch").median())
        .with_columns(log_ratio=(pl.col("stretch") / pl.col("ref")).log(),
                      short=pl.col("ref") <= SHORT_STRETCH * pl.col("ref").quantile(0.25).over("rank"))
    )
    iterations = vs.group_by("rank").agg(n_it=pl.col("iteration").n_unique(),
                                         extra_sum=(pl.col("stretch") - pl.col("ref")).sum())
    short = vs.filter(pl.col("short"))
    cut = z_critical(traced)
    per_iteration = _windows(vs, short, cut)
    lasting = per_iteration.group_by("rank").agg(
        lasting=pl.col("slower_it").mean(), slower_iterations=pl.col("iteration").filter(pl.col("slower_it")).sort(),
        window=pl.col("iteration").filter(pl.col("window")).sort(),
        window_pace=pl.col("e").filter(pl.col("window")).median().exp(),
        window_extra_ns=pl.col("extra").filter(pl.col("window")).mean())
    per = short.group_by("rank").agg(
        pace=pl.col("log_ratio").median().exp(), stretches=pl.len(), slower=(pl.col("log_ratio") > 0).sum(),
    ).join(lasting, on="rank").join(iterations, on="rank")
    return per.select(
        pl.col("rank").cast(pl.Int32), "pace", pl.col("stretches").cast(pl.UInt32),
        share_slower=pl.col("slower") / pl.col("stretches"), lasting="lasting",
        slower_iterations=pl.col("slower_iterations").cast(pl.List(pl.Int32)),
        z=(pl.col("slower") - pl.col("stretches") / 2) / (pl.col("stretches").cast(pl.Float64).sqrt() / 2),
        z_cut=pl.lit(cut), extra_ns=(pl.col("extra_sum") / pl.col("n_it")).clip(lower_bound=0.0),
        window=pl.col("window").cast(pl.List(pl.Int32)), window_pace="window_pace",
        window_extra_ns=pl.col("window_extra_ns").clip(lower_bound=0.0),
    ).with_columns(flagged=(pl.col("z") > cut) & (pl.col("lasting") >= CONSISTENT)).select(
        list(_PACE_SCHEMA)).sort("rank")


def _windows(stretches: pl.DataFrame, short: pl.DataFrame, cut: float) -> pl.DataFrame:
    """Per (rank, iteration): ``e`` (the median log ratio of its short stretches), ``extra`` (what
    all its stretches took beyond its peers'), ``slower_it`` (slower than its peers at
    ``CONSISTENT`` of its short stretches there) and ``window``: a fault that came and went (see
    ``WINDOW``)."""
    per = short.group_by("rank", "iteration").agg(e=pl.col("log_ratio").median(), slower=(pl.col("log_ratio") > 0).mean())
    per = per.join(stretches.group_by("rank", "iteration").agg(extra=(pl.col("stretch") - pl.col("ref")).sum()),
                   on=["rank", "iteration"], how="left")
    scale = max(per.select(robust_scale("e")).item() or 0.0, WINDOW_SCALE_FLOOR)
    told = per["iteration"].n_unique() >= 3
    return per.with_columns(slower_it=(pl.col("e") > 0) & (pl.col("slower") >= CONSISTENT)).with_columns(
        window=pl.lit(told) & pl.col("slower_it") & (pl.col("e") / scale >= WINDOW * cut))


TP_ALIKE = 0.5
"""The least share of a stage-1 suspect's slowdown (log-ratio, over the iterations it is flagged
in) that its TP peers of the same replica and stage show too, for its slowness to be its TP
group's (``tp_group_alike``). Not what tells a slow GPU from a group that waited: its peers wait
for it inside their spans, so its group is slower alike too (the suite's slow_gpu-077 in that
format, TP8 x PP4 x DP16, a 1.3x GPU: its peers 0.55 of its 1.14x); its pace does."""


def tp_group_alike(suspects: list[Suspect], peers: PeerEvidence, coords: dict, lateness: LatenessEvidence,
                   pace: pl.DataFrame, overruled: list[Overruled]) -> list[Suspect]:
    """``suspects`` without stage 1's slow compute of a rank whose TP group, that of its replica
    and stage, is slower alike (``TP_ALIKE``) while none of its members paces the group
    (``tp_pace``'s: none slower than its peers between their collectives in nearly every stretch
    by ``min_effect`` over its role, whether or not that cleared the cut-off, which eight
    stretches cannot: TP8 x PP4 x DP16, a 1.3x GPU paced 1.30x in all 8, z 2.8 under 4.1) and
    none is last at nearly all of its TP collectives (stage 2, ``lateness``, which
    ``tp_victims`` then asks): a line for each in ``overruled``.

    The tracer's barriers and the backward's unrecorded TP reductions put every wait of a TP
    group inside its members' spans, so what one member waits for, the group waits for: a slow
    member paces the group, and a group slower with none pacing it waited on something outside
    it, its pipeline's other stages or its data. Simulated in that format (the suite's stage-276),
    TP8 x PP4 x DP16 with a heavier last stage on lengths of sigma 0.3, no fault: the first stage
    of one replica spent ~1.2 ms more in two of its eight spans of an iteration, each holding a
    wait for a later stage; 6 of its 8 TP ranks read "slow compute" 1.39-1.42x, their TP peers
    0.67-0.77 of their slowdown, paced at most 1.01x."""
    role = _role_pace(pace, coords)
    paced = {s.rank for s in suspects if "tp_pace" in s.evidence} | {
        r["rank"] for r in pace.iter_rows(named=True)
        if r["share_slower"] >= CONSISTENT and r["pace"] / role.get(r["rank"], 1.0) > 1 + peers.min_effect}
    late = {r["rank"]: r for r in lateness.ranks.iter_rows(named=True)} if lateness.ran else {}
    kept = []
    for s in suspects:
        alike = (with_replica(peers, s.rank, s.iterations, coords, among="tp")
                 if s.kind == "slow_compute" and "tp_pace" not in s.evidence and "peers" in s.evidence else None)
        led = alike is not None and any(_leads(late.get(m)) for m in [s.rank, *alike[0]])
        if alike is None or alike[1] <= 0 or alike[2] < TP_ALIKE * alike[1] or paced & {s.rank, *alike[0]} or led:
            kept.append(s)
            continue
        others, mine, theirs = alike
        overruled.append(Overruled(s.rank, f"rank {s.rank} (slow compute {s.slowdown:.2f}x): over iterations "
                                           f"{', '.join(map(str, s.iterations))} it computes {math.exp(mine):.2f}x its "
                                           f"peers and its TP group ({rank_list(others)}) "
                                           f"{math.exp(theirs):.2f}x theirs, none of them pacing it or last at its "
                                           "collectives: not a suspect (the tracer's barriers hold the group's waits "
                                           "inside its spans: it waited on its pipeline or its data)"))
    return kept


def _leads(late: dict | None) -> bool:
    """Stage 2 finds the rank keeping the others waiting (``gates.keeps_waiting``) or last at
    nearly all of its TP collectives."""
    return late is not None and (keeps_waiting(late) or (late.get("share_last_tp") or 0.0) >= CONSISTENT)


def tp_pace_suspects(pace: pl.DataFrame, suspects: list[Suspect], coords: dict, iteration_ns: float | None,
                     min_effect: float) -> list[Suspect]:
    """``suspects`` with slow compute for each rank that ``tp_pace`` flags at least
    ``min_effect`` slower than its TP peers (or finds so in a window of iterations), its slowdown
    its pace (there), in place of a verdict on that rank of a lower slowdown (the spans' waits
    blur stage 1, and stage 2 alone gives a lower bound: a 2x GPU of TP8 x DP4 was a "slow host"
    at 1.095x, one of TP2 x DP2 slow compute at 1.18x). Its cost an iteration: ``extra_ns`` (in
    a window, ``window_extra_ns``), a lower bound.

    Slow compute, not a slow host: the tracer's times are CUDA events, so a host that launches
    late and a slow GPU both lengthen the stretch (simulated, 5x the host's launch overhead on
    one TP rank: a forward paced 1.7x its peer's, named slow compute), and its launch gaps are
    not judged (``detector``)."""
    out = []
    role = _role_pace(pace, coords)
    for row in pace.iter_rows(named=True):
        usual = role.get(row["rank"], 1.0)
        lasting = row["flagged"] and row["pace"] / usual > 1 + min_effect
        window = not lasting and bool(row["window"]) and row["window_pace"] / usual > 1 + min_effect
        if not (lasting or window):
            continue
        slowdown = (row["pace"] if lasting else row["window_pace"]) / usual
        evidence = {"pace": round(row["pace"], 3), "stretches": row["stretches"],
                    "share_slower": round(row["share_slower"], 3), "iterations_slower": round(row["lasting"], 3),
                    "z": round(row["z"], 2)} | ({"role_pace": round(usual, 3)} if usual != 1.0 else {})
        if window:
            evidence.update(window=row["window"], window_pace=round(row["window_pace"], 3))
        out.append(Suspect(
            rank=row["rank"], kind="slow_compute", coords=coords.get(row["rank"]),
            confidence=0.5 + 0.3 * margin(row["z"], row["z_cut"]) if lasting else 0.5,
            slowdown=slowdown, excess_ns=row["extra_ns"] if lasting else row["window_extra_ns"],
            iteration_ns=iteration_ns, iterations=row["slower_iterations"] if lasting else row["window"],
            evidence={"tp_pace": evidence,
                      "note": ("slower than its TP peers between their collectives" if lasting else
                               f"slower than its TP peers between their collectives in iterations "
                               f"{', '.join(map(str, row['window']))} only, far beyond the others: a fault that "
                               "came and went")
                      + " (its GPU, or its host launching late: the tracer's CUDA-event times cannot tell): the "
                        "tracer's barriers make them wait inside their spans, so stage 1 saw their whole group "
                        "slow alike; its cost is a lower bound (the backward's TP reductions are not recorded)"},
        ))
    return in_place_of_lower(suspects, out)


def _role_pace(pace: pl.DataFrame, coords: dict) -> dict[int, float]:
    """Per rank, the median pace of the ranks of the same TP index and stage in the other
    replicas (its *role*), where there are any: what its stretches take against its TP peers'
    by the program, not by its GPU. TP rank 0 alone reads each batch and hands it on (megatron-core's
    broadcast of the data within a TP group), so in a healthy job the TP ranks 0 of the first
    stage pace their groups slower (simulated in that format, TP2 x PP2 x DP8 on lengths of
    sigma 0.5, no fault: 1.00-1.10x on the eight TP ranks 0 of the first stage, 0.91-1.00x on
    its TP ranks 1, 0.97-1.03x on the last stage's; the 1.10x one named "slow compute"). A slow
    GPU is slower than its role as than its peers."""
    roles: dict[tuple, list[tuple[int, float]]] = {}
    for rank, value in pace.select("rank", "pace").iter_rows():
        c = coords.get(rank) or {}
        if c.get("tp") is not None and c.get("dp") is not None:
            roles.setdefault((c["tp"], c.get("pp")), []).append((rank, value))
    return {rank: statistics.median(v for r, v in members if r != rank)
            for members in roles.values() if len(members) >= 2 for rank, _ in members}


def tp_victims(suspects: list[Suspect], lateness: LatenessEvidence, overruled: list[Overruled],
               pace: pl.DataFrame | None = None) -> tuple[list[Suspect], list[int]]:
    """``suspects`` without the slow-compute ones that a slow-compute TP peer kept waiting
    (``_kept_waiting``: at nearly all of their TP collectives, or as its pace says, which holds
    where TP rank 0 alone reads the data and is last where the others wait for it: TP4 x PP2 x
    DP4 in that format, a 1.1x GPU last at 72% of its group's, its peers named at 1.06x), and
    those ranks: victims; a line for each in ``overruled``. ``pace``: ``tp_pace``'s, whose
    ranks found slower than their own peers are no one's victims."""
    if not lateness.ran or lateness.ranks.is_empty() or "share_last_tp" not in lateness.ranks.columns:
        return suspects, []
    share = {r: s for r, s in zip(lateness.ranks["rank"].to_list(), lateness.ranks["share_last_tp"].to_list())
             if s is not None}
    compute = [s for s in suspects if s.kind == "slow_compute" and s.coords and s.rank in share]
    paced = set() if pace is None else set(
        pace.filter(pl.col("flagged") | (pl.col("window").list.len() > 0))["rank"].to_list())
    kept, victims = [], []
    for s in suspects:
        culprit = None if s not in compute or "tp_pace" in s.evidence else next(
            (t for t in compute if t.rank != s.rank and _same_tp_group(s, t) and _kept_waiting(s, t, share, paced)),
            None)
        if culprit is None:
            kept.append(s)
            continue
        paced = culprit.evidence.get("tp_pace")
        why = (f"slower than them in {paced['share_slower']:.0%} of the stretches between their TP collectives, "
               if paced else "") + f"is last at {share[culprit.rank]:.0%} of those and it at {share[s.rank]:.0%}"
        overruled.append(Overruled(
            s.rank, f"rank {s.rank} computes {s.slowdown:.2f}x its peers: not a suspect (its TP peer {culprit.rank}, "
                    f"slow compute, {why}: the tracer's spans hold its waits for that peer)"))
        victims.append(s.rank)
    return kept, victims


def _kept_waiting(s: Suspect, culprit: Suspect, share: dict[int, float], paced: set[int]) -> bool:
    """``s``, a TP peer of ``culprit``, waited for it: it was last at ``1 - CONSISTENT`` of their
    TP collectives or fewer and ``culprit`` at ``CONSISTENT`` or more, or ``culprit`` was paced
    slower than its peers and ``s``, not so paced itself (``paced``), reads slower by less (a
    fault of some iterations only makes its peers wait in those, where they read slower too: TP4
    x PP2 x DP2 in that format, a 2x GPU in one iteration of four, its peers 1.77x there, last at
    a quarter of all their collectives)."""
    if "tp_pace" in culprit.evidence:
        return s.rank not in paced and s.slowdown < culprit.slowdown
    return share[s.rank] <= 1 - CONSISTENT and share[culprit.rank] >= CONSISTENT


def _same_tp_group(a: Suspect, b: Suspect) -> bool:
    return all(a.coords.get(axis) == b.coords.get(axis) for axis in ("pp", "dp")) and a.coords.get("tp") != b.coords.get("tp")
