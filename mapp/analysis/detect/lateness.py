"""Stage 2, collective lateness on aligned clocks: who arrives last, and who waits for whom.

In every complete collective instance (each member logged it once) the members' arrivals
(call starts on the reference clock) are compared. The last arriver keeps the others waiting:
its *blame* is the time the others spent waiting for it. A culprit arrives last consistently
and imposes waiting; a victim arrives early and waits, and so arrives late only at the next
collective of another group (a TP peer of a slow GPU is late at its DP reduce-scatter because
it waited inside TP). Per rank, the *net delay* (mean wait imposed per instance where it was
last, summed, minus the waiting it suffered) separates the two: positive for a culprit, near
zero or negative for its victims.

A collective a rank only launched (``collectives.launch_only``: megatron-core's overlapped
gradient reduce-scatter and parameter all-gather) keeps no one waiting at the call; who launched
it last still counts as last, and the waiting is that of the spans in which the others waited for
it (``grad_sync_wait``, ``param_sync_wait``: ``_launched_waits``), in ``waited_ns`` and ``blame_ns``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from mapp.analysis.detect._stats import robust_scale, z_critical
from mapp.analysis.detect.thresholds import CONSISTENT
from mapp.analysis.ingest.schema import COMM_WAIT_NAMES, LAUNCH_NAMES

__all__ = ["LatenessEvidence", "as_evidence", "collective_lateness", "others_median", "stands_out_waiting", "waits_more_than_most"]


@dataclass(slots=True)
class LatenessEvidence:
    """What stage 2 found. Times in ns."""

    ran: bool
    reason: str | None = None
    ranks: pl.DataFrame = field(default_factory=pl.DataFrame)
    """Per rank: ``instances``, ``last``, ``share_last``, ``expected_share``, ``last_z``
    (binomial z of being last that often), ``blame_ns``, ``waited_ns``, ``net_ns``, ``net_z``,
    ``net_once_ns`` (``net_ns`` with each member's overlapping waits counted once: ``_counted_once``;
    what the rank's lateness cost, where ``net_ns`` ranks who is late; ``net_ns`` itself but on the
    flagged ranks, the only ones a cost is asked of),
    ``others_net_ns`` (the median of the other ranks' ``net_ns``: ``others_median``),
    ``net_lasting`` (share of iterations in which it imposed more waiting than it suffered),
    ``recurring_ns`` (the waiting it imposed an iteration at one point of its program where it is
    last in nearly every iteration: ``_recurring``),
    ``flagged``, ``guessed`` (some of its instances are calls of no known group, matched by call
    order across every rank that made them: a guess where ranks call one op on several groups,
    as gloo traces of TP x DP do), and per group kind ``share_last_<group>``."""
    z_crit: float = 0.0
    iterations: int = 1
    """How many iterations the matched collectives span (at least 1)."""


def collective_lateness(matching, traced: list[int], waits: pl.DataFrame | None = None) -> LatenessEvidence:
    """Run stage 2 on an aligned :class:`~mapp.analysis.graph.Matching`. ``waits`` (``rank``,
    ``name``, ``start`` on the reference clock, ``dur_ns``, ``iteration``): the spans in which ranks waited for
    communication they had only launched (``ingest.schema.COMM_WAIT_NAMES``), see
    ``_launched_waits``."""
    if not matching.aligned:
        return LatenessEvidence(False, "clocks could not be aligned")
    inst = matching.collectives.filter(pl.col("complete") & (pl.col("n_members") >= 2))
    if inst.is_empty():
        return LatenessEvidence(False, "no complete collective instance with two or more traced members")
    kinds = inst.select(
        "instance_id", "n_members",
        kind=pl.col("group").fill_null(pl.format("g{}", pl.col("n_members"))),
        guess=pl.col("group").is_null() & pl.col("group_ranks").is_null(),
        launched=pl.col("launch_only") if "launch_only" in inst.columns else pl.lit(False),
    )
    m = matching.members.join(kinds, on="instance_id").select(
        "instance_id", "rank", "op", "kind", "n_members", "guess", "launched", start=pl.col("start_aligned_ns")
    )
    # (at a collective a member only launched nobody waits: it returns at once, and the wait
    # comes later, in a span of its own: ``_launched_waits``. Who launched last still counts.)
    m = m.with_columns(
        last=pl.col("start").max().over("instance_id"),
        is_last=pl.col("start") == pl.col("start").max().over("instance_id"),
    ).with_columns(waited=pl.when(pl.col("launched")).then(0.0)
                   .otherwise((pl.col("last") - pl.col("start")).cast(pl.Float64)))
    # ties (identical starts) would make several ranks "last"; keep the lowest rank only
    m = m.with_columns(
        is_last=pl.col("is_last") & (pl.col("rank") == pl.col("rank").filter(pl.col("is_last")).min().over("instance_id"))
    )
    blame = m.group_by("instance_id").agg(
        blame=pl.col("waited").sum(), who=pl.col("rank").filter(pl.col("is_last")).first(),
        n=pl.col("n_members").first(), op=pl.col("op").first(),
    )
    later = _launched_waits(m, blame, waits)
    per_blame = pl.concat([
        blame.select("who", "blame", imposed=pl.col("blame") / (pl.col("n") - 1)),
        later.select("who", blame="dur", imposed=pl.col("dur") / (pl.col("n") - 1)),
    ]).group_by("who").agg(blame_ns=pl.col("blame").sum(), imposed_ns=pl.col("imposed").sum()).rename({"who": "rank"})
    per = m.group_by("rank").agg(
        instances=pl.len(), guessed=pl.col("guess").any(), last=pl.col("is_last").sum(),
        expected=(1.0 / pl.col("n_members")).sum(), waited_ns=pl.col("waited").sum(),
    ).join(later.group_by("rank").agg(later_ns=pl.col("dur").sum()), on="rank", how="left").with_columns(
        waited_ns=pl.col("waited_ns") + pl.col("later_ns").fill_null(0.0)).drop("later_ns")
    # per iteration, the waiting a rank imposed (where last) less the waiting it suffered: a
    # culprit between two ranks imposes more in every iteration, even where most collectives
    # are paced by something else (FSDP's prefetched all-gathers: a 20 ms host stall on one of
    # two ranks made it last at 1 or 2 of 24 a step, and its peer waited 24 ms a step there)
    it_of = inst.select("instance_id", "iteration")
    net = m.join(it_of, on="instance_id").join(
        blame.select("instance_id", "who", "blame", "n"), on="instance_id").with_columns(
        net=pl.when(pl.col("rank") == pl.col("who")).then(pl.col("blame") / (pl.col("n") - 1)).otherwise(0.0)
        - pl.col("waited")).select("rank", "iteration", "net")
    if len(later):   # a wait for launched communication: the waiter's loss, the last launcher's doing
        net = pl.concat([net, later.select("rank", "iteration", net=-pl.col("dur")),
                         later.select(pl.col("who").alias("rank"), "iteration",
                                      net=pl.col("dur") / (pl.col("n") - 1))], how="vertical_relaxed")
    lasting = net.group_by("rank", "iteration").agg(net=pl.col("net").sum()).group_by("rank").agg(
        net_lasting=(pl.col("net") > 0).mean())
    recurring = _recurring(m.join(it_of, on="instance_id"), blame)
    per_kind = (
        m.group_by(["rank", "kind"]).agg(share=pl.col("is_last").mean())
        .with_columns(pl.format("share_last_{}", pl.col("kind")).alias("kind"))
        .pivot(on="kind", index="rank", values="share")
    )
    per = per.join(per_blame, on="rank", how="left").join(per_kind, on="rank", how="left").join(
        lasting, on="rank", how="left").join(recurring, on="rank", how="left").with_columns(
        pl.col("blame_ns", "imposed_ns", "recurring_ns").fill_null(0.0)
    )
    # Binomial z of the number of times last: expected sum of 1/n, variance sum p(1-p).
    var = m.group_by("rank").agg(v=((1.0 / pl.col("n_members")) * (1 - 1.0 / pl.col("n_members"))).sum())
    per = per.join(var, on="rank").with_columns(
        share_last=pl.col("last") / pl.col("instances"),
        expected_share=pl.col("expected") / pl.col("instances"),
        last_z=(pl.col("last") - pl.col("expected")) / pl.col("v").sqrt().clip(lower_bound=1e-9),
        net_ns=pl.col("imposed_ns") - pl.col("waited_ns"),
    )
    per = per.with_columns(others_net_ns=pl.Series(others_median(per["net_ns"].to_list()), dtype=pl.Float64))
    scale = per.select(robust_scale("net_ns")).item() or 0.0
    center = per["net_ns"].median()
    z_crit = z_critical(len(traced))
    per = per.with_columns(net_z=(pl.col("net_ns") - center) / max(scale, 1000.0)).with_columns(
        flagged=(pl.col("net_z") > z_crit) & (pl.col("last_z") > z_crit)
    ).drop("v", "expected").sort("rank")
    # (what a flagged rank's lateness cost, the only ranks it is asked of: a stand-in's)
    flagged = per.filter(pl.col("flagged"))["rank"].to_list()
    per = per.join(_counted_once(m, blame, flagged), on="rank", how="left").with_columns(
        net_once_ns=pl.col("imposed_ns") * pl.col("imposed_once").fill_null(1.0)
        - pl.col("waited_ns") * pl.col("waited_once").fill_null(1.0)).drop("imposed_once", "waited_once")
    return LatenessEvidence(True, None, per, z_crit, max(inst["iteration"].drop_nulls().n_unique(), 1))


def _counted_once(m: pl.DataFrame, blame: pl.DataFrame, ranks: list[int]) -> pl.DataFrame:
    """Per rank of ``ranks``: ``imposed_once`` and ``waited_once``, the share of the waiting it
    imposed (was last) and suffered that remains with each waiting member's overlapping waits
    counted once (the union of its intervals from its arrival to the last arrival, over their sum).

    Collectives queued back to back overlap: DDP hands gloo each gradient bucket as it fills,
    and a member that enqueued two buckets waits for the late rank's first and second at once,
    each call's wait running from its own arrival to the late rank's. Summed, the late rank's
    "imposed waiting" exceeded the iteration it was in (a user's MLM under DDP's ``Join``, a busy
    thread beside rank 0: 1,088 ms a step imposed on each member, the step 924 ms; its slowdown
    shown as 924316203x). The sums still rank who is late; what it costs is the union."""
    schema = {"rank": pl.Int32, "imposed_once": pl.Float64, "waited_once": pl.Float64}
    if not ranks:
        return pl.DataFrame(schema=schema)
    waits = (m.join(blame.select("instance_id", "who"), on="instance_id")
             .filter((pl.col("waited") > 0) & (pl.col("rank") != pl.col("who"))
                     & (pl.col("who").is_in(ranks) | pl.col("rank").is_in(ranks)))
             .select("who", "rank", start=pl.col("start").cast(pl.Float64), end=pl.col("last").cast(pl.Float64)))
    if waits.is_empty():
        return pl.DataFrame(schema=schema)
    merged = (waits.sort("who", "rank", "start")
              .with_columns(reach=pl.col("end").cum_max().shift(1).over("who", "rank"))
              .with_columns(run=(pl.col("reach").is_null() | (pl.col("start") > pl.col("reach")))
                            .cum_sum().over("who", "rank"))
              .group_by("who", "rank", "run").agg(once=pl.col("end").max() - pl.col("start").min(),
                                                  summed=(pl.col("end") - pl.col("start")).sum()))

    def share(by: str, name: str) -> pl.DataFrame:
        return merged.group_by(by).agg(
            (pl.col("once").sum() / pl.col("summed").sum().clip(lower_bound=1.0)).clip(upper_bound=1.0).alias(name)
        ).rename({by: "rank"}).with_columns(pl.col("rank").cast(pl.Int32))
    return (share("who", "imposed_once").join(share("rank", "waited_once"), on="rank", how="full", coalesce=True)
            .select(pl.col("rank").cast(pl.Int32), "imposed_once", "waited_once").filter(pl.col("rank").is_in(ranks)))


def others_median(values: list[float]) -> list[float | None]:
    """For each value, the median of the others (None where there are none): sorted once, each
    rank's median found by index, so 1,024 ranks cost a sort, not a million comparisons.

    Why against the others: a rank's net imposes the others' mean wait where it is last, so the
    nets of a group of n sum to -(n-2)/(n-1) of its waiting, below zero from three members on;
    on cores shared by more processes than they have (8 on 2) every rank waits at collectives
    for a core as well as for its peers, and every net is below zero. The rank that made the
    others wait is then the one whose net is highest, not one above zero."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranked = [values[i] for i in order]
    n = len(ranked) - 1        # how many others each has
    out: list[float | None] = [None] * len(values)
    for pos, i in enumerate(order):
        if n == 0:
            continue

        def kth(k: int) -> float:   # the k-th smallest of the others (its own place skipped)
            return ranked[k if k < pos else k + 1]
        out[i] = kth(n // 2) if n % 2 else (kth(n // 2 - 1) + kth(n // 2)) / 2
    return out


STANDS_BELOW = -1.0
"""``net_z`` under which a rank's net waiting stands out of the ranks' scatter (``stands_out_waiting``)."""


def stands_out_waiting(late: dict) -> bool:
    """Stage 2 finds the rank's net wait at collectives below the ranks' scatter (``net_z`` under
    ``STANDS_BELOW``), not just below their median.

    What it takes to overrule stage 1's steady route (``steady.steady_layers``: a rank's layers
    slower than its peers' in every traced iteration, alone of the job). With 8 processes on 2
    cores, who waits at a collective is the cores' chance, and a net a little below the others'
    no evidence against a rank slower in every step: megatron-core PP2 x DP4, matmul layer faults
    of 1.3x and 1.4x, the slowed rank's layers 1.35x and 1.39x its peers' at least in each of 10
    steps, z 16 and 20; last at 2 of 10 all-reduces (chance 2.5), net 21 and 225 ms below the
    others' median, ``net_z`` -0.03 and -0.37 (ranks 0 and 4 waited most in both jobs). A victim
    a culprit slows steadily waits clearly more (megatron-core TP2 x PP2, a host sleep on rank 2:
    rank 3's layers 1.90x at least, ``net_z`` -1.31)."""
    return (late.get("net_z") or 0.0) < STANDS_BELOW


def waits_more_than_most(late: dict, steady: bool = False) -> bool:
    """Stage 2 finds the rank waiting on its peers at collectives more than they wait on it (net
    below zero) and more than the other ranks do (below their median net: ``others_median``);
    the job's steady rank (``steady``) only where its net also stands out (``stands_out_waiting``)."""
    others = late.get("others_net_ns")
    below = late["net_ns"] < 0 and (others is None or late["net_ns"] < others)
    return below and (not steady or stands_out_waiting(late))


def _recurring(m: pl.DataFrame, blame: pl.DataFrame) -> pl.DataFrame:
    """Per rank, ``recurring_ns``: at the point of its iterations (its k-th collective) where it is
    last in nearly every iteration (``CONSISTENT``), the waiting it imposed there on each other
    member, an iteration (0 where it is last at no such point).

    A host that stalls at one point of its program (a data-path sleep before the step) keeps the
    others waiting at the collective after it, in every iteration, however often chance makes it
    last elsewhere: 4 gloo processes of FSDP on 2 CPUs, a 24 ms data-path sleep on rank 0, 12
    collectives a step: last at the step's first all-gather in every step, the others waiting
    20-27 ms there, yet last at 23% of all its collectives and only 5 ms a step ahead net, its
    waits elsewhere (the cores it shares) cancelling the rest. Where chance decides, no rank is
    last at one point in nearly every iteration with a real wait."""
    at = m.with_columns(at=pl.col("start").rank("ordinal").over("rank", "iteration"))
    its = at.group_by("rank").agg(n_it=pl.col("iteration").n_unique())
    last = at.filter(pl.col("is_last")).join(
        blame.select("instance_id", imposed=pl.col("blame") / (pl.col("n") - 1)), on="instance_id")
    points = last.group_by("rank", "at").agg(times=pl.col("iteration").n_unique(), imposed=pl.col("imposed").sum())
    return (points.join(its, on="rank")
            .filter(pl.col("times") >= CONSISTENT * pl.col("n_it"))
            .group_by("rank").agg(recurring_ns=(pl.col("imposed") / pl.col("n_it")).max()))


def _launched_waits(m: pl.DataFrame, blame: pl.DataFrame, waits: pl.DataFrame | None) -> pl.DataFrame:
    """Each wait for launched communication (``rank``, ``name``, ``start``, ``dur_ns``) with the
    collective it waited for: the last of its kind (``LAUNCH_NAMES``, in the order of
    ``COMM_WAIT_NAMES``) that the rank had launched before the wait ended (``finish_param_sync``
    launches the first bucket's gather inside its own wait). ``who`` launched it last, among
    ``n`` members; ``dur`` is what the rank waited for that: its wait, at most the time from its
    own launch to the last one (the rest is the transfer, no one's doing). A rank's wait for a
    collective it launched last itself is left out.

    megatron-core's overlapped gradient reduce-scatter and parameter all-gather return at once;
    a rank waits for them at ``finish_grad_sync`` / ``finish_param_sync`` (``grad_sync_wait``,
    ``param_sync_wait``), until every member has launched them. Timed at the launches, the skew
    of a late rank counted once per bucket (4 H200s, DP4 with the distributed optimizer, 25 ms
    of matmuls before each of rank 1's microbatches: "others waited 11,145 ms" over 2 steps,
    where its peers waited ~100 ms a step)."""
    empty = pl.DataFrame(schema={"rank": pl.Int32, "iteration": pl.Int32, "dur": pl.Float64,
                                 "who": pl.Int32, "n": pl.Int32})
    launched = m.filter(pl.col("launched"))
    if waits is None or waits.is_empty() or launched.is_empty():
        return empty
    kind_of = dict(zip(COMM_WAIT_NAMES, LAUNCH_NAMES))
    launches = (launched.join(blame.select("instance_id", "who", "op"), on="instance_id")
                .select(pl.col("rank").cast(pl.Int32), pl.col("op").alias("kind"), pl.col("start").cast(pl.Int64),
                        own=pl.col("start").cast(pl.Float64), last=pl.col("last").cast(pl.Float64), who="who",
                        n=pl.col("n_members").cast(pl.Int32))
                .sort("start"))
    w = (waits.filter(pl.col("name").is_in(list(kind_of)))
         .select(pl.col("rank").cast(pl.Int32), pl.col("name").replace_strict(kind_of).alias("kind"),
                 (pl.col("start") + pl.col("dur_ns")).cast(pl.Int64).alias("start"), "iteration",
                 dur=pl.col("dur_ns").cast(pl.Float64))
         .drop_nulls("start").sort("start"))
    # (both sorted by start, here the wait's end: with ``by`` polars cannot check it)
    found = w.join_asof(launches, on="start", by=["rank", "kind"], strategy="backward", check_sortedness=False)
    found = found.filter(pl.col("who").is_not_null() & (pl.col("who") != pl.col("rank")))
    found = found.with_columns(dur=pl.min_horizontal("dur", (pl.col("last") - pl.col("own")).clip(lower_bound=0.0)))
    return found.filter(pl.col("dur") > 0).select(pl.col("rank").cast(pl.Int32), pl.col("iteration").cast(pl.Int32),
                                                  "dur", pl.col("who").cast(pl.Int32), pl.col("n").cast(pl.Int32))


def as_evidence(row: dict | None) -> dict | None:
    """A rank's row of ``LatenessEvidence.ranks`` as a verdict shows it (ms, rounded), or None."""
    if row is None:
        return None
    out = {"share_last": round(row["share_last"], 3), "expected_share": round(row["expected_share"], 3),
           "blame_ms": round(row["blame_ns"] / 1e6, 4), "waited_ms": round(row["waited_ns"] / 1e6, 4),
           "net_delay_ms": round(row["net_ns"] / 1e6, 4), "last_z": round(row["last_z"], 2), "net_z": round(row["net_z"], 2)}
    for k, v in row.items():
        if k.startswith("share_last_") and v is not None:
            out[k] = round(v, 3)
    # last at one point of nearly every iteration (``lateness._recurring``), where it says
    # something: a millisecond an iteration or more
    if (row.get("recurring_ns") or 0.0) >= 1e6:
        out["recurring_ms"] = round(row["recurring_ns"] / 1e6, 3)
    return out
