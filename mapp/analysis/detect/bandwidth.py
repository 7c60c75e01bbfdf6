"""Stage 3, effective bandwidth of p2p links and collective transfers.

A transfer's *effective time* is measured once both sides are ready: for a p2p message the
shorter of the send's and the receive's durations (both end together; the later-posted side
did not wait; a message with an asynchronous side has no such time and is left out), for a
collective the shortest member duration (the last arriver's, which did not wait). No clock
alignment is needed for either. Each link (a p2p pair) and each group (a collective's members)
gets the median effective time per iteration; it is compared with its class (same kind, op,
size, member count, and whether it crosses nodes) as a ratio. Slow by that median only where its
fastest transfer of the size in that iteration is slower than its like links' too (``_fastest_too``:
waiting only adds, so a late end raises the median, not the fastest); where processes share CPUs
like p2p links are compared by their fastest transfers over the run alone (``_raised_floors``),
and where the capture records the spans' waits for a core, a link raised only by those waits is
not slow (``OWN_FLOOR_RATIO``).
A job's only p2p link (PP2 on 2 ranks), with nothing like it, is weighed against the slowest
fabric a job runs on instead (``_only_link``, ``FABRIC``). Where processes share a machine, links
whose messages were posted asynchronously and recorded no size are timed by the messages'
windows, from both posts to the first wait that saw them done (``p2p_windows``).

Attribution: a *slow NIC* makes every inter-node link and group of one rank slow while the
same links of its neighbours are fine; a *slow link* makes one pair slow (a p2p pair, or a
two-member group); a larger slow group with no common slow rank is a slow link somewhere
inside it (which one a ring collective's timing cannot tell). Slow compute leaves all of
these unchanged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import polars as pl

from mapp.analysis.detect._stats import binomial_tail, others_median, robust_scale, z_critical
from mapp.analysis.detect.findings import LinkFinding
from mapp.analysis.detect.late_exits import late_pairs
from mapp.analysis.detect.p2p_windows import window_links
from mapp.analysis.detect.thresholds import CONSISTENT
from mapp.analysis.detect.traffic import COUNTED, added_traffic

__all__ = ["BandwidthEvidence", "COUNTED", "LinkFinding", "link_bandwidth"]

@dataclass(slots=True)
class BandwidthEvidence:
    ran: bool
    reason: str | None = None
    observations: pl.DataFrame = field(default_factory=pl.DataFrame)
    """Per (observation, iteration): ``obs`` (ranks), ``what`` (p2p or op/group),
    ``inter`` (crosses nodes), ``time_ns``, ``bytes``, ``gbps``, ``ratio``, ``z``, ``slow``;
    ``pair`` (one of two of its kind: compared with the other), ``kind`` (its size, or -1 where
    the link's sizes never recur), ``recurs`` (its kind three times or more), ``fastest`` (a p2p
    link judged by its fastest transfers: ``_raised_floors``), ``floor_ratio`` (where its fastest
    transfers were raised above its like links': their ratio, else null). A finding's
    observations say what was compared where it was not like transfers' typical times:
    ``compared`` "fastest transfers", or one of ``COUNTED`` (``traffic.added_traffic``); and ``fastest_ratio``
    where its fastest transfers were raised too."""
    findings: list[LinkFinding] = field(default_factory=list)
    z_crit: float = 0.0
    waited: list[dict] = field(default_factory=list)
    """Links raised over the run by their ends' waits for a core alone (``OWN_FLOOR_RATIO``), not
    slow: ``ranks``, ``ratio`` (their fastest over the run against their like links') and
    ``own_ratio`` (the typical step, less the waits)."""


def _p2p(matching, waits: pl.DataFrame | None = None) -> pl.DataFrame:
    # A pair with an asynchronous side is left out rather than timed from the other side: an
    # async send's span is its post (not the transfer), and the blocking receive it pairs with
    # spans the wait for the sender (MegaDPP's, from when the rank was free for the task, while
    # the sender still computed), so neither side's duration is a transfer time.
    every = matching.p2p.filter(pl.col("src") != pl.col("dst"))
    p = every.filter(pl.col("bytes_match") & ~pl.col("send_async") & ~pl.col("recv_async"))
    p = p.with_columns(batched=pl.col("pair_id").is_in(_batched_with_others(every)["pair_id"].implode()))
    if waits is not None:
        p = _less_core_waits(p, waits)
    return p.select(
        obs=pl.concat_list(pl.min_horizontal("src", "dst"), pl.max_horizontal("src", "dst")).cast(pl.List(pl.Int32)),
        what=pl.lit("p2p"), iteration=pl.col("iteration"), bytes=pl.col("bytes"),
        time_ns=pl.min_horizontal(pl.col("send_end_ns") - pl.col("send_start_ns"),
                                  pl.col("recv_end_ns") - pl.col("recv_start_ns")),
        batched="batched",
    )


def _less_core_waits(p: pl.DataFrame, waits: pl.DataFrame) -> pl.DataFrame:
    """``p`` (matched messages) with each side's span shortened by the time its thread waited
    for a core (``waits``: ``rank``, ``name``, ``ts_ns`` and ``waited_ns`` of the p2p spans, the
    wait ``own_time`` takes out of a span), a side without a record kept whole: that wait is the
    scheduler's, not the link's (``_only_link``). A side is found by its rank, name and start (a
    batched send and receive may start within the same microsecond)."""
    w = waits.select(pl.col("rank").cast(pl.Int32), pl.col("name"), pl.col("ts_ns").cast(pl.Int64),
                     pl.col("waited_ns").fill_null(0))
    for side, rank in (("send", "src"), ("recv", "dst")):
        p = p.join(w.rename({"rank": rank, "name": f"{side}_name", "ts_ns": f"{side}_start_ns", "waited_ns": "_w"}),
                   on=[rank, f"{side}_name", f"{side}_start_ns"], how="left")
        p = p.with_columns(pl.col(f"{side}_end_ns") - pl.col("_w").fill_null(0)).drop("_w")
    return p


def _batched_with_others(p: pl.DataFrame) -> pl.DataFrame:
    """The ``pair_id`` of messages one of whose sides ran in one batch with a transfer to or from
    another peer (its span overlapping that one's on the same rank): such a span is the batch's,
    which ends when its slowest transfer does, and so waits on another link (see
    ``link_bandwidth``). (Batches of one peer's two directions, as 1F1B's
    send-forward-receive-backward, are not: both are the one link's.)"""
    sides = pl.concat([
        p.select("pair_id", rank="src", peer="dst", start="send_start_ns", end="send_end_ns"),
        p.select("pair_id", rank="dst", peer="src", start="recv_start_ns", end="recv_end_ns"),
    ]).sort("rank", "start")
    batch = (pl.col("start") >= pl.col("end").cum_max().shift(1).over("rank")).fill_null(True).cast(pl.Int32).cum_sum().over("rank")
    sides = sides.with_columns(batch=batch).with_columns(mixed=pl.col("peer").n_unique().over("rank", "batch") > 1)
    return sides.filter(pl.col("mixed")).select("pair_id").unique()


_FLOOR_CLASS = ["what", "inter", "bytes", "iteration"]


def _with_floors(obs: pl.DataFrame, per: pl.DataFrame) -> pl.DataFrame:
    """``per`` with each link's or group's fastest transfer of a size in an iteration (``low``),
    the median of its like links' (``other``) and their ratio (``floor``); null where it has no
    like link in that step."""
    lows = obs.group_by(["obs", *_FLOOR_CLASS]).agg(low=pl.col("time_ns").min())
    floors = _against_likes(lows, _FLOOR_CLASS).select("obs", *_FLOOR_CLASS, "low", "other",
                                                      floor=pl.col("low") / pl.col("other"))
    return per.join(floors, on=["obs", *_FLOOR_CLASS], how="left")


def _fastest_too(per: pl.DataFrame, link_threshold: float) -> pl.DataFrame:
    """A link or group slow by its typical transfers is slow only where its fastest transfer of
    the kind is slower than its like links' too (by ``link_threshold``). Waiting only adds: what
    a link itself costs shows in its fastest transfer, and its typical one also holds the waits
    of whatever its ends did before (on a GPU, a host-timed transfer waits for the kernels
    queued ahead of it on its stream, and a kernel shares the GPU with the others running).
    Of two like pipeline links of a healthy PP2 x DP2 job with the distributed optimizer (4
    H200s, mapp's capture), link 0-2 read 2.1-3.0x link 1-3 by its medians, its fastest
    transfers 0.97x; with 512 MB more on every exchange of link 0-2, its fastest took 8x. Of
    two TP groups of TP2 x DP2 with sequence parallelism, the healthy pair's all-gathers read
    2.8x the other's by their medians (its DP peers' slower layers kept its reduce-scatters
    waiting beside them), their fastest 1.01x. A link slow by its raised floors (``fastest``)
    already is by them."""
    judged = pl.col("floor").is_not_null() & ~pl.col("fastest")
    return per.with_columns(slow=pl.col("slow") & (~judged | (pl.col("floor") >= 1 + link_threshold)))


def _batched_links(per: pl.DataFrame) -> pl.DataFrame:
    """Links timed by batches with another link's transfers (``batched``), judged by their
    fastest transfer in each iteration (``_with_floors``) beside their typical ones: slow where
    the fastest takes ``FLOOR_RATIO`` x their like links'; not where a slower batched link at
    one of their ranks explains them. (Slow by their typical transfers only where the fastest
    is slower too: ``_fastest_too``.)

    A batch ends when its slowest transfer does, so a batched link's typical time includes the
    waits of the links it is batched with. Interleaved 1F1B batches a stage's receive from the
    previous stage with its send to the next: of four like pipeline links of a healthy PP4 job
    (4 H200s), link 1-2 read 1.47x the others by its medians in 3 steps of 4, its fastest
    transfers 0.94-0.97x theirs. With a 512 MB tensor more on every exchange of link 2-3, that
    link's medians read 1.3-1.4x, within the waits' scatter, its fastest transfers 12x; the link
    batched with it at rank 3 (0-3) read 6.6x by its fastest: the slower link at a shared rank
    is the one."""
    if not per["batched"].any():
        return per
    batched = pl.col("batched") & pl.col("floor").is_not_null()
    hit = batched & (pl.col("floor") >= FLOOR_RATIO) & ~pl.col("slow")
    per = per.with_columns(
        slow=pl.col("slow") | hit,
        ratio=pl.when(hit).then(pl.col("floor")).otherwise(pl.col("ratio")),
        excess_ns=pl.when(hit).then((pl.col("low") - pl.col("other")) * pl.col("n")).otherwise(pl.col("excess_ns")),
        fastest=pl.col("fastest") | hit,
        floor_ratio=pl.when(batched & (pl.col("floor") >= FLOOR_RATIO)).then(pl.col("floor")).otherwise(pl.col("floor_ratio")),
    ).with_row_index("_row")
    # explained: another slow batched link at one of its ranks, in that iteration, whose fastest
    # transfers are EXPLAINS x as slow as its own (by the fastest transfers, which every batched
    # row has, not by ``ratio``, which is the medians' where those were slow already). Not where
    # they are alike: a rank whose own hardware is slow slows both its links alike (a NIC).
    slow = (per.filter(pl.col("slow") & batched)
            .select("_row", "iteration", "floor", link=pl.col("obs").cast(pl.List(pl.String)).list.join("-"),
                    rank="obs").explode("rank"))
    explained = (slow.join(slow.select("iteration", "rank", other_link="link", other_floor="floor"), on=["iteration", "rank"])
                 .filter((pl.col("other_link") != pl.col("link")) & (pl.col("other_floor") >= EXPLAINS * pl.col("floor")))
                 ["_row"].unique())
    return per.with_columns(slow=pl.col("slow") & ~pl.col("_row").is_in(explained.implode())).drop("_row")


def _steady_at_other_sizes(per: pl.DataFrame, link_threshold: float) -> pl.DataFrame:
    """A p2p link slow at one size of transfer, in an iteration where its fastest transfer of
    another size is as fast as its like links' (``floor`` under 1 + ``link_threshold``), is not
    slow: a slow link moves every size slowly, while a transfer that waited for its other end is
    slow by itself. The original tracer's 1F1B steady-state exchange (one a step on each link,
    both directions, twice the warm-up's size) holds the wait for the later stage: simulated in
    that format, TP8 x PP8 x DP16 with no fault, link 42-170's one exchange of an iteration took
    2.9 ms against its like links' 0.43, "slow link 6.65x", while its seven 16.8 MB sends of the
    same iteration took 0.43-0.48 ms, as theirs did."""
    key = pl.col("obs").cast(pl.List(pl.String)).list.join("-")
    fine = (per.filter((pl.col("what") == "p2p") & ~pl.col("slow") & pl.col("floor").is_not_null()
                       & (pl.col("floor") < 1 + link_threshold))
            .select(_link=key, iteration="iteration", _fine_bytes="bytes"))
    if fine.is_empty():
        return per
    per = per.with_columns(_link=key)
    other = (per.filter((pl.col("what") == "p2p") & pl.col("slow")).select("_link", "iteration", "bytes")
             .join(fine, on=["_link", "iteration"]).filter(pl.col("_fine_bytes") != pl.col("bytes"))
             .select("_link", "iteration", "bytes").unique().with_columns(_steady=pl.lit(True)))
    return per.join(other, on=["_link", "iteration", "bytes"], how="left").with_columns(
        slow=pl.col("slow") & ~pl.col("_steady").fill_null(False)).drop("_link", "_steady")


PAIR_RATIO = 1.5
"""Of two like links or groups, the least ratio of one's transfer times to the other's that makes
it slow: with no third to say which of the two is the odd one, a steady difference is as likely
the context the two run in (what else their ranks' GPUs do meanwhile) as a fault (4 H200s,
megatron-core TP2 x PP2 under mapp's capture, no fault: stage 0's TP all-reduces 1.36x stage
1's in all four steps; two NVLink pairs 1.2x apart on 4 H100s). Faults: a link or NIC at half
speed, 1.95-2.01x in the simulated suite; injected on real jobs, one of two like pipeline links
moving 4 MB more per exchange on CPUs or 512 MB on GPUs, 4.2-50x. A margin measured, not
derived: between 1.36x and 1.95x."""


EXPLAINS = 1.25
"""Of two slow batched links at one rank, one whose fastest transfers take this many times the
other's explains the other (``_batched_links``): a link moving 512 MB more per exchange took
1.46-2.2x the fastest transfers of the link batched with it (interleaved PP4, 4 H200s); a rank
whose own hardware is slow slows both its links alike."""


def _collectives(matching) -> pl.DataFrame:
    inst = matching.collectives.filter(pl.col("complete") & (pl.col("n_members") >= 2))
    t = matching.members.join(inst.select("instance_id"), on="instance_id", how="semi").group_by("instance_id").agg(
        time_ns=(pl.col("end_ns") - pl.col("start_ns")).min()
    )
    return inst.join(t, on="instance_id").select(
        obs=pl.col("group_ranks").cast(pl.List(pl.Int32)),
        what=pl.format("{}/{}", pl.col("op"), pl.col("group").fill_null("group")),
        iteration=pl.col("iteration"), bytes=pl.col("bytes"), time_ns=pl.col("time_ns"), batched=pl.lit(False),
    )


def link_bandwidth(matching, hosts: pl.DataFrame, *, link_threshold: float, shared_cpus: bool = False,
                   iteration_ns: float | None = None, core_waits: pl.DataFrame | None = None,
                   untraced: list[int] | None = None) -> BandwidthEvidence:
    """Run stage 3. ``hosts`` maps ``rank`` to ``host`` (null when unknown); a link's or group's
    transfers are slow beyond (1 + ``link_threshold``) x like transfers (``Thresholds.link``).
    ``shared_cpus``: the ranks are CPU processes (gloo), where like p2p links are compared by
    their fastest transfers over the run only (``_raised_floors``) and two like groups not by
    their times. ``iteration_ns``: the job's iteration, against which a job's only p2p link is
    weighed (``_only_link``). ``core_waits``: where the capture records them, the p2p spans'
    waits for a core (``rank``, ``name``, ``ts_ns``, ``waited_ns``), taken out of the only link's
    times. ``untraced``: the job's ranks with no trace; where there are any, a link that is the
    only one traced is not weighed alone, for its like may run between untraced ranks (PP2 x DP2
    with rank 3's trace lost: link 0<->2 of a healthy job on 2 shared cores read "slow link"
    3.5x against the fabric, its twin 1<->3 unseen)."""
    added = added_traffic(matching, link_threshold)
    if shared_cpus:     # (one machine's processes: their own clocks are one clock)
        counted = {f.ranks for f in added}
        added += [f for f in window_links(matching.p2p, iteration_ns) if f.ranks not in counted]
        counted = {f.ranks for f in added}
        added += [f for f in late_pairs(matching) if f.ranks not in counted]
    obs = pl.concat([_p2p(matching), _collectives(matching)])
    obs = obs.filter(pl.col("time_ns") > 0)
    if obs.is_empty():
        if added:       # (every transfer had an asynchronous side: counted, not timed)
            return BandwidthEvidence(True, None, obs, added, 0.0)
        return BandwidthEvidence(False, "no matched p2p message or complete collective")
    host_of = dict(zip(hosts["rank"].to_list(), hosts["host"].to_list()))
    known_hosts = any(h is not None for h in host_of.values())
    # crosses nodes: members on more than one host (unknown hosts: all in one class)
    keys = obs.select("obs").unique()
    keys = keys.with_columns(
        inter=pl.col("obs").map_elements(
            lambda rs: len({host_of.get(r) for r in rs}) > 1 if known_hosts else False, return_dtype=pl.Boolean
        )
    )
    obs = obs.join(keys, on="obs", how="left").with_columns(pl.col("iteration").fill_null(-1))
    per = obs.group_by(["obs", "what", "inter", "bytes", "iteration"]).agg(
        time_ns=pl.col("time_ns").median(), n=pl.len(), batched=pl.col("batched").mean() >= 0.5,
    ).with_columns(size=pl.col("obs").list.len())
    cls = ["what", "inter", "bytes", "size", "iteration"]
    per = per.with_columns(
        log_ratio=(pl.col("time_ns").cast(pl.Float64).log() - pl.col("time_ns").cast(pl.Float64).log().median().over(cls)),
        class_n=pl.len().over(cls),
    ).filter(pl.col("class_n") >= 2)
    if per.is_empty():
        if added:       # (its like links' transfers all had an asynchronous side: counted, not timed)
            return BandwidthEvidence(True, None, per, added, 0.0)
        own = None if core_waits is None else _p2p(matching, core_waits).filter(pl.col("time_ns") > 0)
        if untraced:
            return BandwidthEvidence(False, "every traced link or group is the only one of its kind: nothing to "
                                     "compare with (and not weighed alone: its like may join untraced ranks)"
                                     + _best_rates(obs))
        only = _only_link(obs if own is None else own, iteration_ns)
        if only is not None and only.findings:
            return only
        timed = "" if own is None else ", less its ends' waits for a core,"
        return BandwidthEvidence(False, "every link or group is the only one of its kind: nothing to compare with"
                                 + (f"; the job's one p2p link{timed} took no longer than " + FABRIC
                                    if only is not None else "")
                                 + _best_rates(obs))
    # Two of a kind (the two pipeline links of PP2 x DP2, the two TP groups of TP2 x DP2): the
    # median of two is their mean and halves the difference, and two values always sit one
    # spread apart, so neither can stand out from the pair's scatter. Each is compared with
    # the other, and the noise is how much that difference varies from iteration to iteration
    # (a link 11x slower in every iteration on 4 H100s; on 2 shared CPU cores the same links
    # trade places by 0.4-14 ms from one iteration to the next).
    pair = pl.col("class_n") == 2
    # Scatter of like observations: pooled over all classes whose rows are medians of as many
    # transfers (a collective that runs once per iteration scatters more than a p2p link's
    # median of many messages), never below the scatter of everything pooled.
    pooled = per.select(robust_scale("log_ratio")).item() or 0.0
    per = per.with_columns(spread=pl.max_horizontal(robust_scale("log_ratio").over("n"), pl.lit(max(pooled, 1e-6))))
    # Where a pair's difference recurs in three iterations or more (the same transfer size
    # each time), its noise is how much that difference varies; else, as before, the scatter
    # of like observations (of half the difference: the median of two is their mean).
    # Sizes that change per microbatch (tokens per replica) never recur: there the pair's
    # transfers of every size are taken together (``kind`` -1). A simulated TP group 8x slower
    # on lengths sigma 0.3: each all-reduce's class held it and one like group only, the pairs
    # of the slow one were a third of all rows, and the pooled scatter they made (1.5 in log)
    # hid a difference of 2.08 +- 0.01 on all 16 transfers.
    per = per.with_columns(kind=pl.when(pl.len().over("obs", "what", "inter", "bytes") >= 3)
                           .then(pl.col("bytes")).otherwise(pl.lit(-1, pl.Int64)))
    pairs = per.filter(pair).with_columns(d=pl.col("log_ratio") - pl.col("log_ratio").median().over(_KIND),
                                          k=pl.len().over(_KIND)).filter(pl.col("k") >= 3)
    within = (pairs.select(robust_scale("d")).item() or 0.0) if len(pairs) else None
    per = per.with_columns(pair=pair, recurs=pl.len().over(_KIND) >= 3)
    if within is not None:
        per = per.with_columns(spread=pl.when(pl.col("pair") & pl.col("recurs"))
                               .then(pl.lit(max(2 * within, _PAIR_FLOOR)) / 2).otherwise(pl.col("spread")))
    per = per.with_columns(log_ratio=pl.when(pl.col("pair")).then(2 * pl.col("log_ratio")).otherwise(pl.col("log_ratio")),
                           spread=pl.when(pl.col("pair")).then(2 * pl.col("spread")).otherwise(pl.col("spread")))
    z_crit = z_critical(len(per))
    # Slow means: beyond the threshold *and* beyond what the scatter of like links explains.
    per = per.with_columns(
        ratio=pl.col("log_ratio").exp(),
        z=pl.col("log_ratio") / pl.col("spread"),
        gbps=pl.col("bytes").cast(pl.Float64) / pl.col("time_ns"),
        slow=(pl.col("log_ratio") > pl.max_horizontal(pl.lit(math.log1p(link_threshold)), z_crit * pl.col("spread")))
        & (~pl.col("pair") | (pl.col("log_ratio") >= math.log(PAIR_RATIO))),
        excess_ns=(pl.col("time_ns") - pl.col("time_ns") / pl.col("log_ratio").exp()) * pl.col("n"),
    )
    # Two of a kind that trade places, each slow in some iteration, are noise: a link that is
    # slow by itself is not faster than its like link in any iteration (4 H200s, megatron-core
    # TP2 x PP2 under mapp's capture, no fault: pipeline link 0-2 2.8-3.8x link 1-3 in three
    # steps, 1-3 3.7x 0-2 in the fourth; an injected link, 4.2-50x, slower in every step)
    traded = (per.filter(pl.col("pair") & pl.col("slow")).group_by("what", "inter", "kind")
              .agg(n=pl.col("obs").n_unique()).filter(pl.col("n") >= 2).drop("n"))
    if len(traded):
        per = per.join(traded.with_columns(_traded=pl.lit(True)), on=["what", "inter", "kind"], how="left").with_columns(
            slow=pl.col("slow") & ~(pl.col("pair") & pl.col("_traded").fill_null(False))).drop("_traded")
    if shared_cpus:
        # their typical transfers are mostly waits for the other end to be scheduled (one of two
        # like pipeline links 2.9x slower by its medians in every step of a job whose only fault
        # was rank 1's slower layers; its fastest transfers no slower than the other link's), and
        # a gloo collective's time is its members' CPU time, which whoever shares their core
        # stretches (TP2 x DP2, no fault, beside a fifth busy process: one TP group's all-reduces
        # 4.3x the other's by their medians in 3 of 4 steps)
        per = per.with_columns(slow=pl.col("slow") & ~pl.col("pair"))
    own = None if core_waits is None or not shared_cpus else _p2p(matching, core_waits).filter(pl.col("time_ns") > 0)
    per = _raised_floors(obs, per, shared_cpus, own)
    per, waited = _waited(per)
    per = _fastest_too(_with_floors(obs, per), link_threshold)
    per = _steady_at_other_sizes(_batched_links(per), link_threshold).drop("low", "other", "floor")
    findings = _attribute(per, shared_cpus)
    named = {f.ranks for f in findings}
    findings += [f for f in added if f.ranks not in named]
    # (a link named by another measure is not also excused: ``waited`` lists sorted ends)
    links = {tuple(sorted(f.ranks)) for f in findings}
    return BandwidthEvidence(True, None, per.sort("ratio", descending=True), findings, z_crit,
                             [w for w in waited if tuple(w["ranks"]) not in links])


def _waited(per: pl.DataFrame) -> tuple[pl.DataFrame, list[dict]]:
    """``per`` without ``_raised_floors``' ``waited_run``/``waited_own`` columns, and those links
    as ``BandwidthEvidence.waited`` (per link, its largest figures over its kinds of transfer)."""
    if "waited_own" not in per.columns:
        return per, []
    rows = (per.filter(pl.col("waited_own").is_not_null()).group_by("obs")
            .agg(ratio=pl.col("waited_run").max(), own_ratio=pl.col("waited_own").max()).sort("obs"))
    waited = [{"ranks": list(r["obs"]), "ratio": round(float(r["ratio"]), 3), "own_ratio": round(float(r["own_ratio"]), 3)}
              for r in rows.iter_rows(named=True)]
    return per.drop("waited_run", "waited_own"), waited


SHOWN = 3
"""Links and groups that ``_best_rates`` lists at most (those of the largest transfers)."""


FLOOR_GBPS = 1.25
FLOOR_LATENCY_NS = 1e6
FABRIC = f"10 Gb Ethernet would ({FLOOR_GBPS:g} GB/s, {FLOOR_LATENCY_NS / 1e6:g} ms a message)"
"""What the only p2p link of a job is weighed against (``_only_link``): the slowest fabric a
training job runs on, 10 Gb Ethernet, and a message's own time on a software stack over shared
CPUs (gloo, 2 processes on 2 cores: 0.2-0.4 ms a 16 KB message once both ends were ready,
healthy, in every CPU PP2 job of the corpus; NCCL on 2 H200s: 0.1-0.45 ms for 12-33 MB). A model,
not a measurement of the job's hardware: NVLink and InfiniBand links are 20-400x faster, so it
names only a link that is slow by any standard."""


def _only_link(obs: pl.DataFrame, iteration_ns: float | None) -> BandwidthEvidence | None:
    """Where a job's p2p traffic runs on one link (PP2 on 2 ranks), nothing like it says how long
    its transfers should take; they are weighed against ``FABRIC``: a message's time once both
    ends were ready beyond ``FLOOR_LATENCY_NS`` + its bytes at ``FLOOR_GBPS`` is the link's
    excess, a typical message's excess times the messages of an iteration its cost. A suspect
    where that cost lasts (``CONSISTENT`` of the iterations); its slowdown is the iteration's
    over the iteration without that cost. None where the job has no such link.

    2 processes on 2 CPUs, megatron-core PP2 under mapp's capture, 4 MB more on every exchange
    of the one link: its 16 KB messages took 2.4-4.4 ms (1.1 ms at best), 20-27 ms of a 60-76 ms
    iteration, 1.27x and 1.54x by this measure; in 15 healthy, imbalanced or otherwise faulty CPU PP2
    jobs 0.2-0.75 ms, never beyond it in a typical message. On 2 H200s 512 MB more on every
    exchange took the 20 MB messages to 1.9 ms, well within the 17 ms 10 Gb Ethernet would take
    (and the job lost 0-6.5% of its iteration: below any threshold).

    The cost is the median iteration's, not their mean: lognormal lengths on this machine's 2
    cores (70-145 KB messages, no fault) took 8.0, 13.3, 87.4 and 28.1 ms a step beyond the
    allowance, "slow link 0<->1" 1.11x by their mean, 1.06x by their median; the loaded links of
    nine CPU runs (3-6 MB more an exchange) cost 1.19-2.52x by it, 1.24-2.81x by their mean.

    Where the capture records waits for a core, messages are timed without them (``obs`` comes
    from ``_p2p`` with ``core_waits``): 2 processes on 1 core, PP2 of 223-331 KB messages, no
    fault, a heavier last stage or lognormal lengths (9 runs): the faster end's span took
    8.9-14.4 ms at the median, 63-82% of it on a run queue while the other process ran, and each
    read "slow link 0<->1" 1.10-1.25x from the scheduler alone; without the waits their median
    message took 0.5-2.6 ms. (On 2 cores a message waits ~10 us and nothing changes.)"""
    p2p = obs.filter((pl.col("what") == "p2p") & (pl.col("bytes") > 0))
    if p2p.is_empty() or p2p["obs"].n_unique() != 1 or not iteration_ns:
        return None
    p2p = p2p.with_columns(allowed=FLOOR_LATENCY_NS + pl.col("bytes") / FLOOR_GBPS)
    per = p2p.group_by("iteration").agg(
        n=pl.len(), excess=(pl.col("time_ns") - pl.col("allowed")).median().clip(lower_bound=0) * pl.len())
    slow = per.filter(pl.col("excess") > 0)
    if len(slow) < CONSISTENT * len(per):
        return BandwidthEvidence(False, None, p2p)
    # the median iteration's: a process that shared cores descheduled mid-transfer stretches
    # some iterations' messages many times over (below), a loaded link every iteration's alike
    excess_ns = float(per["excess"].median())
    if excess_ns >= iteration_ns:       # (an iteration shorter than its transfers: not timed alike)
        return BandwidthEvidence(False, None, p2p)
    ranks = tuple(p2p["obs"][0])
    ratio = float((p2p["time_ns"] / p2p["allowed"]).median())
    observation = {"ranks": list(ranks), "what": "p2p", "ratio": ratio, "iterations": sorted(slow["iteration"].to_list()),
                   "compared": f"than {FABRIC}: the job's only link, nothing like it to compare with", "against": "fabric"}
    finding = LinkFinding("slow_link", ranks, iteration_ns / (iteration_ns - excess_ns), 0.0, [observation], excess_ns)
    return BandwidthEvidence(True, None, p2p.with_columns(ratio=pl.col("time_ns") / pl.col("allowed")), [finding], 0.0)


def _best_rates(obs: pl.DataFrame) -> str:
    """What each link or group alone of its kind moved at best, for the user to weigh against
    the hardware: with nothing like it in the job, mapp cannot tell a slow link from a slow
    fabric (2 H200s, PP2: the one pipeline link moved its 20 MB at 247 GB/s at best; with 512 MB
    more in every exchange, at 11.6 GB/s, which a healthy link across nodes on 100 Gb Ethernet
    would also be). Per link or group its largest transfers' fastest (small ones measure
    latency, not bandwidth), the ``SHOWN`` largest, as " (at best: p2p 0<->1 20.1 MB in 1.73 ms,
    11.6 GB/s; ...)"; empty where no size is known."""
    sized = obs.filter((pl.col("bytes") > 0) & pl.col("obs").is_not_null())   # (groups of unknown members: no ends to name)
    if sized.is_empty():
        return ""
    best = (sized.group_by("obs", "what", "bytes").agg(pl.col("time_ns").min())
            .sort("bytes", descending=True).group_by("obs", "what", maintain_order=True).first()
            .head(SHOWN))
    parts = []
    for r in best.iter_rows(named=True):
        what = "p2p " + "<->".join(map(str, r["obs"])) if r["what"] == "p2p" else \
            f"{r['what'].split('/')[0]} of ranks {','.join(map(str, r['obs']))}"
        parts.append(f"{what} {_size(r['bytes'])} in {r['time_ns'] / 1e6:.2f} ms, "
                     f"{_size(r['bytes'] * 1e9 / r['time_ns'])}/s")
    more = sized.select(pl.struct("obs", "what").n_unique()).item() - len(parts)
    return " (at best: " + "; ".join(parts) + (f"; {more} more" if more > 0 else "") + ")"


def _size(n: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"


FLOOR_RATIO = 2.0
"""Of two like links, one whose fastest transfer in an iteration takes this many times the
other's is slower in that iteration. Where processes share CPUs that decides only which ratio is
reported (``_raised_over_the_run`` decides whether the link is slow)."""


def _raised_floors(obs: pl.DataFrame, per: pl.DataFrame, shared_cpus: bool = False,
                   own: pl.DataFrame | None = None) -> pl.DataFrame:
    """Like p2p links compared by their fastest transfers, beside their typical ones.

    Where processes share CPUs, a transfer waits for both ends to be scheduled, and a link's
    typical time is mostly that wait: its median over a step varies by several times from one
    step to the next, and a link that moves far more than its like one need not stand out by it
    (megatron-core PP2 x DP2 under mapp's capture, 4 processes on 2 cores, a 4 MB tensor more in
    every pipeline exchange of one link: its median 3.4-6.1x the other's, yet within the
    steps' scatter). Waiting only adds, so a link's fastest transfer is the nearest to what the
    link itself costs: an iteration's fastest on the loaded link took 1.8-46x the like link's (7
    runs, 28 steps; 8-17x on 4 H200s), 2x or more in 27 of the 28 steps. A link is raised in an
    iteration when its fastest transfer of a kind takes ``FLOOR_RATIO`` x its like link's (of more
    than two, the median of the others' fastest), and slow when so in nearly every iteration
    (``CONSISTENT``); its ratio is the median over the iterations, its excess what the raised
    floor costs every transfer. Where processes share CPUs a step's fastest is often a wait too,
    and the run decides instead (``_raised_over_the_run``)."""
    # (p2p links only: a collective's shortest member time is its last arriver's, which on
    # shared CPUs still waits for the others to be scheduled in its ring: compared so, the
    # all-reduces of one DP pair were "slow" in a healthy TP2 x DP2 job and a PP2 x DP2 one)
    # (Of more than two like links, as the four pipeline links of TP2 x PP2 x DP2, each is
    # compared with the median of the others' fastest where processes share CPUs: a link moving
    # 4 MB more per exchange, 8 processes on 2 cores, had medians 0.9-13x the others' and its
    # fastest 10-21x in every step. Elsewhere their medians are no waits, and like links of
    # different hardware in one node, NVLink and PCIe, would differ in every step.)
    likes = per.filter(pl.col("recurs") & (pl.col("what") == "p2p") & (pl.col("pair") | pl.lit(shared_cpus)))
    per = per.with_columns(fastest=pl.lit(False), floor_ratio=pl.lit(None, pl.Float64))
    if likes.is_empty():
        return per
    keys = ["obs", "what", "inter", "bytes"]
    step = ["what", "inter", "size", "kind", "iteration"]
    link = ["obs", "what", "inter", "kind"]
    floors = _against_likes(obs.group_by(keys + ["iteration"]).agg(low=pl.col("time_ns").min())
                            .join(likes.select(keys + ["iteration", "size", "kind"]), on=keys + ["iteration"]), step)
    if floors.is_empty():
        return per
    floors = floors.with_columns(step_ratio=pl.col("low") / pl.col("other")).with_columns(
        raised=(pl.col("step_ratio") >= FLOOR_RATIO).mean().over(link) >= CONSISTENT,
        floor_ratio=pl.col("step_ratio").median().over(link),
    )
    if shared_cpus:
        floors = _raised_over_the_run(floors, link, _own_run_ratios(own, likes, keys, step, link))
        if "waited_own" in floors.columns:      # (``link_bandwidth`` takes them out: ``waited``)
            per = per.join(floors.filter(pl.col("waited_own").is_not_null())
                           .select(keys + ["iteration", "waited_run", "waited_own"]), on=keys + ["iteration"], how="left")
    raised = floors.filter(pl.col("raised")).select(
        keys + ["iteration", "floor_ratio"], lift=(pl.col("low") - pl.col("other")).clip(lower_bound=0))
    if raised.is_empty():
        return per
    per = per.drop("floor_ratio").join(raised, on=keys + ["iteration"], how="left")
    hit = pl.col("floor_ratio").is_not_null() & ~pl.col("slow")
    # (``floor_ratio`` stays, also where the medians were slow already: a link whose fastest
    # transfers are raised is slow by itself, not by a late end: ``verdict`` reads it)
    return per.with_columns(
        ratio=pl.when(hit).then(pl.col("floor_ratio")).otherwise(pl.col("ratio")),
        excess_ns=pl.when(hit).then(pl.col("lift") * pl.col("n")).otherwise(pl.col("excess_ns")),
        slow=pl.col("slow") | hit, fastest=hit,
    ).drop("lift")


RUN_FLOOR_RATIO = 3.5
"""Where processes share CPUs, a p2p link whose fastest transfer over the whole trace took this
many times its like links' is slow by itself, and only such a link (``_raised_over_the_run``)."""


def _raised_over_the_run(floors: pl.DataFrame, link: list[str], own: pl.DataFrame | None = None) -> pl.DataFrame:
    """``floors`` (``_raised_floors``'s per link and step) with ``raised`` where, and only where,
    the link's fastest transfer over all traced steps took ``RUN_FLOOR_RATIO`` x its like links'
    fastest over all steps (the median of theirs); where its steps alone did not raise it,
    ``floor_ratio`` is then that ratio and ``other`` their fastest.

    On shared CPUs a healthy link's fastest transfer of a step is often a wait too: both of its
    ends descheduled through all of the step's transfers. Step by step the loaded link then
    stands out in some steps only (megatron-core PP2 x DP2 under mapp's capture, 4 processes on
    2 of 16 CPUs, a 4 MB tensor more in every exchange of link 0-2: its fastest 1.1-2.2 ms a step,
    the like link's 0.26-2.5 ms, 2x or more in 1 and in 2 of 4 steps, "no suspect"). Waiting
    only adds, and over the whole trace a healthy link's ends are free together at least once:
    the loaded links of 13 jobs on 2 to 4 CPUs took 4.3-24x their like links' fastest over the
    run, every link of 65 other jobs (healthy, imbalanced, other faults) at most 2.5x (of 353
    held-out jobs since, unloaded links raised step by step at most 2.7x but for two, 4.5x and 5.0x).

    For the same reason a link raised step by step is slow only where it is so over the run too:
    a link that once moved its kind about as fast as its like link has no cost of its own, and
    its raised steps were waits (a healthy PP2 x DP2 job, 4 processes on 2 CPUs: a link 4-6x its
    like link in 3 of 4 steps, 1.1x in the fourth, was named a slow link; healthy PP2 x DP2 and
    TP2 x PP2 jobs' links 2x their like link or more in 3 of 4 steps read 2.3x and 2.7x over the
    run). The named loaded links of the held-out jobs (1.5-4 MB more per exchange, 47) took 4.0-24x
    their like links' fastest over the run; raised step by step, 6x or more.

    Where the capture records each span's wait for a core, ``own`` holds each link's ratio timed
    without those waits in its typical step (``_own_run_ratios``): a link raised only by them is
    not slow (``OWN_FLOOR_RATIO``)."""
    run = floors.group_by(link).agg(run_low=pl.col("low").min(), run_other=pl.col("other").min())
    run = run.with_columns(run_ratio=pl.col("run_low") / pl.col("run_other"))
    floors = floors.join(run, on=link, how="left")
    slow = pl.col("run_ratio") >= RUN_FLOOR_RATIO
    if own is not None:
        floors = floors.join(own, on=link, how="left")
        waited = slow & (pl.col("own_ratio") < OWN_FLOOR_RATIO).fill_null(False)
        floors = floors.with_columns(slow_=slow & ~waited, waited_run=pl.when(waited).then(pl.col("run_ratio")),
                                     waited_own=pl.when(waited).then(pl.col("own_ratio"))).drop("own_ratio")
        slow = pl.col("slow_")
    # (where its steps raised it too, their median ratio and lows stay: what each step cost)
    over = slow & ~pl.col("raised")
    return floors.with_columns(
        floor_ratio=pl.when(over).then(pl.col("run_ratio")).otherwise(pl.col("floor_ratio")),
        low=pl.when(over).then(pl.col("run_low")).otherwise(pl.col("low")),
        other=pl.when(over).then(pl.col("run_other")).otherwise(pl.col("other")),
        raised=slow,
    ).drop("run_low", "run_other", "run_ratio", "slow_", strict=False)


OWN_FLOOR_RATIO = 1.3
"""Where processes share CPUs and the capture records each span's wait for a core, a p2p link
raised over the run (``RUN_FLOOR_RATIO``) is slow only where, timed less those waits, its fastest
transfer of a step took this many times its like links' so timed in the typical step
(``_own_run_ratios``).

The scheduler's wait is no link's cost, and on shared CPUs it can raise one link's every transfer
of a run: a healthy PP2 x DP2 job with a heavier last stage (4 processes on 2 CPUs, mapp's
capture) moved link 0-2's 200 KB messages in 2.6 ms at best, 12x link 1-3's, but 2.4 ms of it
was on a run queue: without it 1.12x link 1-3's in the typical step; lognormal lengths, PP2 x
DP2 and PP2 x DP4, read 3.7-6.5x on one link's largest messages, 0.70-1.10x without the waits.
The loaded links of 29 CPU jobs whose capture records the waits (2-6 MB more an exchange),
timed so, took 1.55-14x their like links' in the typical step (their extra bytes are copying
that the link's ends do themselves), and more than 1.1x in 9 steps of 10 or all.

The typical step, not the run's fastest: a link's own time still carries what the capture
cannot take out (a loaded link's fastest over the run, less the waits, was 1.28x its like
link's, its typical step 1.55x; a job with no fault read 1.21x and 1.10x)."""


def _own_run_ratios(own: pl.DataFrame | None, likes: pl.DataFrame, keys: list[str], step: list[str],
                    link: list[str]) -> pl.DataFrame | None:
    """Per p2p ``link`` of ``likes``, ``own_ratio``: the median over its steps of its fastest
    transfer timed less its ends' waits for a core (``own``, from ``_p2p`` with the waits) over
    its like links' fastest so timed (``_against_likes``). None where no wait was recorded."""
    if own is None or own.is_empty():
        return None
    on = ["obs", "what", "bytes", "iteration"]      # (``inter`` comes with ``likes``)
    lows = own.with_columns(pl.col("iteration").fill_null(-1)).group_by(on).agg(low=pl.col("time_ns").min())
    lows = lows.join(likes.select(keys + ["iteration", "size", "kind"]), on=on)
    floors = _against_likes(lows, step)
    if floors.is_empty():
        return None
    return floors.group_by(link).agg(own_ratio=(pl.col("low") / pl.col("other")).median())


def _against_likes(lows: pl.DataFrame, step: list[str]) -> pl.DataFrame:
    """``lows`` (a link's fastest transfer ``low`` per ``obs`` and ``step``) with ``other``, the
    median of the other like links' ``low`` in the same step; links alone in their step are
    left out. Where each link has one row a step (nearly always) by ``others_median``: joining
    each link with its like ones made 16,384 rows a step of 128 like TP groups of 1,024 ranks,
    a third of a second. (A link with rows of several sizes in a step, where sizes never
    recur, is joined: its own other rows are no like link's.)"""
    lows = lows.drop_nulls(step).with_columns(_link=pl.col("obs").hash())
    lows = lows.filter(pl.col("_link").n_unique().over(step) >= 2)
    if lows.is_empty() or lows.select((pl.len().over([*step, "_link"]) > 1).any()).item():
        others = (lows.select(*step, "_link", "low").join(lows.select(*step, o2="_link", l2="low"), on=step)
                  .filter(pl.col("_link") != pl.col("o2")).group_by(["_link", *step]).agg(other=pl.col("l2").median()))
        return lows.join(others, on=["_link", *step]).drop("_link")
    gid = lows.select(pl.struct(step).rank("dense")).to_series().to_numpy()
    return lows.with_columns(other=pl.Series(others_median(gid, lows["low"].to_numpy()))).drop("_link")


_KIND = ["obs", "what", "inter", "kind"]
"""A link's transfers of one kind: one size (or, where sizes never recur, every size)."""

_PAIR_FLOOR = 0.02
"""Log-ratio below which two like links' difference is timing noise, however steady."""


CHANCE = 0.05
"""Of three or more like links, one slow in as many iterations as it was is taken for chance
where that is at least this likely for some one of them, at the rate its like links were slow."""


_NO_KIND = -2
"""``_by_chance``'s key for a null ``kind`` (sizes are >= 0, and -1 means every size)."""


def _by_chance(per: pl.DataFrame) -> pl.DataFrame:
    """``chance``: the link's transfers of that kind were slow in as many iterations as the
    rate of its like links' (same op, size and reach; three or more links) makes likely for
    one of that many links: the binomial tail of its slow count at that rate, times the links.

    A job of many like links has some slow by chance, and one of them in most steps (64 gloo
    processes on 64 cores, PP2 x DP32, no fault: 4-byte all-reduces of the 32 embedding groups
    slow in 20 of 128 group-steps, 16 groups at least once, one in 3 of 4 steps at 4.8-10x).
    A faulty link is slow where its like links are not, and passes whatever its count; the rate
    is of the like links slow in fewer than ``CONSISTENT`` of their iterations."""
    # (a collective whose instances recorded no size has a null kind: a key of its own here, so
    # that its rows group and join back like any other's)
    keyed = per.with_columns(_kind=pl.col("kind").fill_null(_NO_KIND))
    key = ["obs", "what", "inter", "_kind", "size"]
    like = ["what", "inter", "_kind", "size"]
    # a link whose fastest transfers were raised above its like links' (``_raised_floors``:
    # waiting only adds) is slow by itself, which no rate of like links slow by their typical
    # transfers excuses
    raised = pl.col("floor_ratio").is_not_null().any() if "floor_ratio" in per.columns else pl.lit(False)
    links = keyed.group_by(*key).agg(k=pl.col("slow").sum(), m=pl.len(), raised=raised)
    # the rate of like links slow now and then: links slow in most iterations are left out of
    # it, for several faulty links of one class must not excuse each other (a NIC's links)
    now_and_then = pl.col("k") < CONSISTENT * pl.col("m")
    links = links.with_columns(
        total_k=pl.col("k").filter(now_and_then).sum().over(like), total_m=pl.col("m").filter(now_and_then).sum().over(like),
        n_links=pl.len().over(like))
    own_k = pl.when(now_and_then).then(pl.col("k")).otherwise(0)
    own_m = pl.when(now_and_then).then(pl.col("m")).otherwise(0)
    rate = (pl.col("total_k") - own_k) / (pl.col("total_m") - own_m)
    links = links.with_columns(p=pl.when(pl.col("total_m") > own_m).then(rate).otherwise(0.0))
    candidates = links.filter((pl.col("k") > 0) & (pl.col("p") > 0) & (pl.col("n_links") >= 3) & ~pl.col("raised"))
    if candidates.is_empty():
        return per.with_columns(chance=pl.lit(False))
    tail = binomial_tail(candidates["k"].to_numpy(), candidates["m"].to_numpy(), candidates["p"].to_numpy())
    by_chance = candidates.filter(pl.Series(candidates["n_links"].to_numpy() * tail >= CHANCE, dtype=pl.Boolean))
    return keyed.join(by_chance.select(*key).with_columns(chance=pl.lit(True)), on=key, how="left").with_columns(
        pl.col("chance").fill_null(False)).drop("_kind")


def _attribute(per: pl.DataFrame, shared_cpus: bool) -> list[LinkFinding]:
    iterations = max(per["iteration"].n_unique(), 1)
    per = _by_chance(per)
    # a link whose transfers of a kind recur is slow only when it is slow in nearly every
    # iteration where one odd iteration says little: one of a pair, judged on how their
    # difference varies, and any link where processes share CPUs (three like pipeline links,
    # megatron-core PP4, 4 processes on 2 cores, no fault: a link 4.7-5.1x the others' in one
    # step of four, twice). Elsewhere a link slow in some steps only is a transient fault (the
    # suite's "transient" class: a 4x link in 2 of 4 iterations)
    lasting = ((pl.col("slow").mean().over(_KIND) >= CONSISTENT) | ~pl.col("recurs")
               | ~(pl.col("pair") | pl.lit(shared_cpus))) & ~pl.col("chance")
    slow = per.filter(pl.col("slow") & lasting)
    if slow.is_empty():
        return []
    # A link or group is slow on two or more of its transfers: with sequence lengths that differ
    # per microbatch every message has a size of its own, so a class can hold one message of a
    # link, and one message delayed by a busy host made a "slow link" of a healthy job
    by_obs = slow.group_by(["obs"]).agg(
        ratio=pl.col("ratio").median(), z=pl.col("z").max(), iterations=pl.col("iteration").unique().sort(),
        excess_ns=pl.col("excess_ns").sum() / iterations, inter=pl.col("inter").first(), transfers=pl.col("n").sum(),
        fastest=pl.col("fastest").any(), floor_ratio=pl.col("floor_ratio").median(),
    ).filter(pl.col("transfers") >= 2).sort("ratio", descending=True)
    if by_obs.is_empty():
        return []
    rows = {tuple(r["obs"]): r for r in by_obs.sort("ratio").iter_rows(named=True)}
    what = slow.group_by("obs").agg(pl.col("what").unique().sort())
    whats = {tuple(o): list(w) for o, w in what.iter_rows()}
    remaining = set(rows)
    # Every inter-node link/group (a set of ranks, whatever ops ran on it) of each rank.
    links_of: dict[int, set] = {}
    for (o,) in per.filter(pl.col("inter")).select("obs").unique().iter_rows():
        for r in o:
            links_of.setdefault(r, set()).add(tuple(o))
    findings: list[LinkFinding] = []
    while True:
        best, best_hits = None, set()
        for rank, links in sorted(links_of.items()):
            hits = links & remaining
            # a NIC: at least two of the rank's distinct links slow, and (nearly) all of them
            if len(hits) >= 2 and len(hits) > len(best_hits) and len(hits) >= 0.75 * len(links):
                best, best_hits = rank, hits
        if best is None:
            break
        chosen = [rows[k] for k in best_hits]
        findings.append(LinkFinding(
            kind="slow_nic", ranks=(best,),
            slowdown=float(_median([r["ratio"] for r in chosen])), z=float(max(r["z"] for r in chosen)),
            observations=[_obs(r, whats) for r in chosen], excess_ns=float(sum(r["excess_ns"] for r in chosen)),
            healthy_links=len(links_of[best]) - len(best_hits),
        ))
        remaining -= best_hits
    for key in sorted(remaining, key=lambda k: -rows[k]["ratio"]):
        r = rows[key]
        findings.append(LinkFinding(
            kind="slow_link" if len(key) == 2 else "slow_group", ranks=key, slowdown=float(r["ratio"]),
            z=float(r["z"]), observations=[_obs(r, whats)], excess_ns=float(r["excess_ns"]),
        ))
    return findings


def _obs(r: dict, whats: dict) -> dict:
    out = {"ranks": list(r["obs"]), "what": ", ".join(whats[tuple(r["obs"])]), "ratio": round(float(r["ratio"]), 3),
           "iterations": [int(i) for i in r["iterations"] if i is not None and i >= 0]}
    if r["fastest"]:
        out["compared"] = "fastest transfers"     # ratio: of its fastest transfer to its like link's
    if r["floor_ratio"] is not None:               # its fastest transfers were raised: by how much
        out["fastest_ratio"] = round(float(r["floor_ratio"]), 3)
    return out


def _median(values: list[float]) -> float:
    s = sorted(values)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])
