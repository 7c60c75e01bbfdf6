"""Stage 1, peer comparison: is a rank's own compute slower than that of ranks doing the same work?

Ranks with the same pipeline stage and TP coordinate run the same kernels on different data;
with equal TP shards every rank of a stage does. For each op instance (iteration, name,
microbatch, chunk, layer, and its ordinal among equal keys) the rank's *self time* (the op's
duration minus the communication nested inside it, i.e. minus any waiting for peers) is
compared with its peers' median. Peers are the DP peers when DP >= 3, else every rank of the
stage; with a single rank per stage each rank is compared with its own other iterations.

Everything is judged in log space (a slowdown is a ratio), per (rank, iteration) so that a
fail-slow window of one iteration is not averaged away, with robust scales (median/MAD):

- the *effect* of a (rank, iteration) is the median log-ratio of its ops to their peers;
- its standard error comes from the scatter of single ops around that median;
- a rank-iteration is an outlier when its effect is beyond a Bonferroni cut-off in units of
  the larger of that standard error and the spread of effects across all rank-iterations.

Also here, because they are per-rank timelines compared in the same way: *launch gaps* (idle
time between a rank's consecutive leaf events, where a slow host shows) and the per-stage
compute balance (a heavy pipeline stage is imbalance, not a fault).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import polars as pl

from mapp.analysis.detect._stats import MAD_TO_SIGMA, MEDIAN_SE, robust_scale, z_critical
from mapp.analysis.detect.same_work import CONSISTENT, compare_same_work, self_times
from mapp.analysis.ingest.schema import COMM_KERNEL_PATTERN

__all__ = ["PeerEvidence", "leaf_ops", "compare_peers"]

_KEY = ["iteration", "name", "microbatch", "chunk", "layer"]
# One rank per pipeline stage: no rank does another's work, but every stage's transformer
# layers do the same work on the same microbatch (the k-th layer call of one stage against the
# k-th of another, told apart by order). Only spans mapp's capture names as transformer layers
# or their parts are compared so; the embedding, output layer and loss are one stage's, and
# ops of other names may differ between stages.
_LAYER_KEY = ["iteration", "name", "microbatch"]
_LAYER_SPANS = ("layer.", "attention.", "mlp.", "self_attention.", "core_attention.", "linear_qkv.", "linear_proj.",
                "linear_fc1.", "linear_fc2.")


@dataclass(slots=True)
class PeerEvidence:
    """What stage 1 found. Times in ns."""

    mode: str
    """"dp peers", "stage peers", "layer peers", "own history", or "skipped"."""
    reason: str | None = None
    """Why the stage did not run (mode "skipped"), else None."""
    rank_iterations: pl.DataFrame = field(default_factory=pl.DataFrame)
    """Per (rank, iteration): ``effect`` (log-ratio to peers), ``z``, ``n_ops``, ``share_slow``,
    ``excess_ns`` (self time beyond the peers' medians), ``busy_ns`` (self time), ``flagged``,
    ``gap_ns``, ``gap_excess_ns``, ``gap_z``, ``gap_flagged``."""
    ranks: pl.DataFrame = field(default_factory=pl.DataFrame)
    """Per rank: ``slowdown``, ``z``, ``share_slow``, ``n_ops``, ``flagged``, ``iterations``
    (flagged ones), ``excess_ns`` and ``busy_ns`` per iteration, and the same for gaps."""
    z_crit: float = 0.0
    min_effect: float = 0.0
    seqlen: dict | None = None
    """Set when compute varies per microbatch the same way on every rank of a replica."""
    stages: pl.DataFrame | None = None
    """Per pipeline stage: ``compute_ns`` per iteration (its fastest rank) and ``ratio`` to the lightest."""
    pairs: bool = False
    """Some ops had only two ranks to compare: a slower one could be either's noise, so a
    verdict needs stage 2 to agree (the slow rank also arrives last)."""


def leaf_ops(events: pl.DataFrame) -> pl.DataFrame:
    """Compute events that contain no other compute event, with ``self_ns``: their duration
    minus the collective/p2p time nested inside them (time spent waiting for peers).
    (Profiler traces, whose ops nest differently, use ``same_work.self_times``.)"""
    comp = (
        events.filter(pl.col("cat") == "compute")
        .with_columns(end_ns=pl.col("ts_ns") + pl.col("dur_ns"))
        .sort(["rank", "lane", "ts_ns", "dur_ns"], descending=[False, False, False, True])
    )
    # A parent span is followed (in start order) by its first child, which ends inside it;
    # the next op of a sequence ends after it (timestamps rounded to 1 us may make it start
    # a hair before the previous op's end, so start order alone would mistake it for a child).
    nxt_end = pl.col("end_ns").shift(-1).over(["rank", "lane"])
    leaves = comp.filter(nxt_end.is_null() | (nxt_end > pl.col("end_ns") + 1000)).with_row_index("op_id")
    comm = (
        events.filter(pl.col("cat").is_in(["collective", "p2p"]))
        .select("rank", "ts_ns", (pl.col("ts_ns") + pl.col("dur_ns")).alias("c_end"))
        .sort(["rank", "ts_ns"])
    )
    if len(comm) and len(leaves):
        right = leaves.select("rank", pl.col("ts_ns").alias("l_ts"), pl.col("end_ns").alias("l_end"), "op_id").sort(["rank", "l_ts"])
        nested = (
            comm.join_asof(right, left_on="ts_ns", right_on="l_ts", by="rank", strategy="backward", check_sortedness=False)
            .filter(pl.col("op_id").is_not_null() & (pl.col("c_end") <= pl.col("l_end") + 1000))
            .group_by("op_id")
            .agg(nested_ns=(pl.min_horizontal("c_end", "l_end") - pl.col("ts_ns")).sum())
        )
        leaves = leaves.join(nested, on="op_id", how="left")
    else:
        leaves = leaves.with_columns(nested_ns=pl.lit(0, pl.Int64))
    # never below the 1 us resolution of the traces: a fully nested op keeps a finite log
    return leaves.with_columns(
        self_ns=pl.max_horizontal(pl.col("dur_ns") - pl.col("nested_ns").fill_null(0), pl.lit(1000))
    )


def _mode(sizes: dict[str, int] | None, iterations: int, programs: bool) -> tuple[str, list[str], list[str], str | None]:
    if sizes is None and programs:
        return "program peers", ["pp"], _KEY, None
    if sizes is None:
        return "skipped", [], [], "no layout: the traces carry none and --layout was not given"
    if sizes["dp"] >= 3:
        return "dp peers", ["pp", "tp"], _KEY, None
    if sizes["dp"] * sizes["tp"] >= 2:
        return "stage peers", ["pp"], _KEY, None
    if sizes["pp"] >= 2:
        return "layer peers", [], _LAYER_KEY, None
    if iterations >= 2:
        return "own history", ["rank"], _KEY[1:], None
    return "skipped", [], [], "one rank per pipeline stage and a single iteration: no peer to compare with"


def compare_peers(events: pl.DataFrame, coords: pl.DataFrame, sizes: dict[str, int] | None, *,
                  slow_op: float, min_effect: float, judge_gaps: bool = True,
                  starts: pl.DataFrame | None = None) -> PeerEvidence:
    """Run stage 1 (and the launch-gap and stage-balance checks) over ``events``.

    ``slow_op``: an op slower than (1 + this) x its peers counts as slow (``share_slow``,
    evidence only). ``min_effect``: a rank-iteration is flagged, and its launch gaps count,
    only when at least this much slower than its peers (``Thresholds`` says why and the defaults).

    ``judge_gaps=False`` where idle gaps say nothing of the host (a tracer that synchronizes
    the GPU inside the traced path): no rank is then flagged for them.

    ``events`` has the events-table columns of timed events; ``coords`` maps ``rank`` to
    ``tp``, ``pp``, ``dp``. ``starts`` (``rank``, ``iteration``, ``ts_ns``): where each traced
    iteration began, when the trace marks it; idle time from there to a rank's first op counts
    as a launch gap (a stall at the start of the first traced iteration has nothing before it).
    """
    iterations = events["iteration"].drop_nulls().n_unique()
    programs = sizes is None and len(coords) > 0 and coords["pp"].null_count() == 0
    mode, group, key, reason = _mode(sizes, iterations, programs)
    if mode == "skipped":
        return PeerEvidence(mode, reason, min_effect=min_effect)
    timed = events.filter(pl.col("iteration").is_not_null())
    if "shape" in events.columns and events["shape"].null_count() < len(events):
        ops = self_times(timed)
        if ops.is_empty():
            return PeerEvidence("skipped", "no compute events to compare", min_effect=min_effect)
        gaps = _gaps(events, ops.select("rank", "iteration", "ts_ns", "end_ns"), group, coords, min_effect, starts)
        found = compare_same_work(ops, gaps, coords, group, slow_op=slow_op, min_effect=min_effect)
        if found is None:
            return PeerEvidence("skipped", "no op ran on two or more peers with the same shapes", min_effect=min_effect)
        per, ranks, z_crit, pairs = found
        if not judge_gaps:
            ranks = ranks.with_columns(gap_flagged=pl.lit(False))
        stages = _stage_balance(per, coords) if sizes and sizes["pp"] >= 2 else None
        return PeerEvidence(mode, None, per, ranks, z_crit, min_effect, None, stages, pairs=pairs)
    ops = leaf_ops(timed)
    if ops.is_empty():
        return PeerEvidence("skipped", "no compute events to compare", min_effect=min_effect)
    leaves = ops.select("rank", "iteration", "ts_ns", "end_ns")
    if mode == "layer peers":
        ops = ops.filter(pl.any_horizontal(pl.col("name").str.starts_with(w) for w in _LAYER_SPANS))
        if ops.is_empty() or ops["rank"].n_unique() < 2:   # no layer spans: each rank against itself
            if iterations < 2:
                return PeerEvidence("skipped", "one rank per pipeline stage, no layer spans and a single "
                                    "iteration: no peer to compare with", min_effect=min_effect)
            mode, group, key = "own history", ["rank"], _KEY[1:]
            ops = leaf_ops(timed)
        else:
            # different stages idle differently by the schedule's design (the first waits for
            # gradients, the last for activations): their launch gaps are not the same thing
            judge_gaps = False
    ops = ops.join(coords.select("rank", "tp", "pp", "dp"), on="rank", how="left").with_columns(
        pl.col(c).fill_null(-1) for c in ("microbatch", "chunk", "layer")
    )
    # repeated keys on one rank (a format without microbatch numbers) are told apart by order
    if ops.select(pl.struct("rank", *_KEY).is_duplicated().any()).item():
        ops = ops.with_columns(ordinal=pl.int_range(pl.len()).over(["rank", *_KEY]))
    else:
        ops = ops.with_columns(ordinal=pl.lit(0, pl.Int64))
    # one hashed column for the peer group + op key: grouping on it is much cheaper than on seven
    ops = ops.with_columns(gk=pl.struct(*group, *key, "ordinal").hash(), lx=pl.col("self_ns").cast(pl.Float64).log(),
                           use=pl.lit(True))
    g = ["gk"]
    ops = ops.with_columns(n_peers=pl.len().over(g)).filter(pl.col("n_peers") >= 2)
    # Two passes: a slow rank pulls its peers' median up (with two slow ranks out of four the
    # healthy ones even look fast), so ranks that are clear outliers in the first pass are left
    # out of the baseline of the second.
    # fitted once, on every rank: in the second pass the outliers are out of the baseline,
    # and with two peers what is left could not show how time grows with tokens
    beta = _token_slope(_relative(ops, g), g)
    ops = _token_free(ops, beta)
    ops, seqlen = _polish(ops, g)
    first = _rank_iterations(ops, min_effect, use_spread=False)
    outliers = first.filter(pl.col("flagged")).select("rank", "iteration", out=pl.lit(True))
    if len(outliers):
        ops = ops.join(outliers, on=["rank", "iteration"], how="left").with_columns(
            use=pl.col("out").is_null()).drop("out")
        ops, seqlen = _polish(ops, g, first=seqlen or False)
    ops = ops.with_columns(
        slow=(pl.col("r").exp() > 1 + slow_op),
        excess=(pl.col("self_ns") - pl.col("self_ns") / pl.col("r_adj").exp()),
    )
    per = _rank_iterations(ops, min_effect, use_spread=True)
    z_crit = z_critical(len(per))
    per = per.join(_gaps(events, leaves, group, coords, min_effect, starts, _stalls(ops)), on=["rank", "iteration"],
                   how="left")
    if not judge_gaps:
        per = per.with_columns(gap_flagged=pl.lit(False))
    ranks = _per_rank(per, z_crit, judge_gaps, min_effect)
    stages = _stage_balance(per, coords) if sizes and sizes["pp"] >= 2 else None
    return PeerEvidence(mode, None, per.sort(["rank", "iteration"]), ranks, z_crit, min_effect, seqlen, stages,
                        pairs=_two_peers(ops))


def _relative(ops: pl.DataFrame, g: list[str]) -> pl.DataFrame:
    """``r``: each op's log-ratio to the median of its peers' (rows with ``use``) same op."""
    base = ops.filter(pl.col("use")).group_by(g).agg(
        n_base=pl.len(), med=pl.col("lx").median(), mean=pl.col("lx").mean()
    )
    ops = ops.drop([c for c in ("n_base", "med", "mean") if c in ops.columns]).join(base, on=g, how="left")
    # With two peers the median is their mean and would halve the difference; compare with
    # the other one instead (leave-one-out), which is what a median of the others means.
    # Where every peer was left out the op keeps no baseline and drops out.
    return ops.with_columns(
        r=pl.when((pl.col("n_base") == 2) & pl.col("use")).then(2 * (pl.col("lx") - pl.col("mean")))
        .otherwise(pl.col("lx") - pl.col("med"))
    ).filter(pl.col("r").is_not_null())


def _token_x(ops: pl.DataFrame, g: list[str]) -> pl.DataFrame:
    """``x``: each op's log token count against its peers' (rows with ``use``), as ``r`` is;
    0 where the trace records no tokens."""
    lt = pl.col("tokens").cast(pl.Float64).log()
    t = ops.filter(pl.col("use") & pl.col("tokens").is_not_null() & (pl.col("tokens") > 0))
    base = t.group_by(g).agg(t_med=lt.median(), t_mean=lt.mean(), t_n=pl.len())
    return ops.join(base, on=g, how="left").with_columns(
        x=pl.when(pl.col("tokens").is_null() | (pl.col("tokens") <= 0)).then(0.0)
        .when((pl.col("t_n") == 2) & pl.col("use")).then(2 * (lt - pl.col("t_mean")))
        .otherwise(lt - pl.col("t_med")).fill_null(0.0)
    ).drop("t_med", "t_mean", "t_n")


def _token_slope(ops: pl.DataFrame, g: list[str]) -> pl.DataFrame | None:
    """How each op's time grows with its tokens, where the trace records them: ``name`` and
    ``beta`` per op name (None: no tokens, or lengths hardly vary).

    Peers run the same op on different data: with sequence lengths that differ between data
    parallel replicas, one replica's layers take longer because they have more tokens, not
    because its GPU is slow, and a replica of one rank has no peer of its own to share that
    with (``_polish`` cannot remove it). A slope per op name (a layer's backward, its
    forward, the embedding and the output layer grow differently: 0.2-1.0 measured on one CPU
    job), fitted within each rank (``r`` and ``x`` less their rank's means; kept between 0 and
    2: linear layers scale with tokens, attention up to their square); a name with too little
    variation of its own takes the slope of all ops. Within a rank, because between ranks a
    slow GPU and a replica of longer sequences are both offsets of the whole rank: a pooled fit
    would let one explain the other (with two ranks, a slow rank 1 beside a rank 0 of longer
    sequences drove the slope down and hid rank 1). A rank's microbatch lengths vary, its GPU's
    speed does not.
    """
    if "tokens" not in ops.columns or ops["tokens"].drop_nulls().is_empty():
        return None
    used = _token_x(ops, g).filter(pl.col("use")).with_columns(
        dr=pl.col("r") - pl.col("r").mean().over("rank", "name"),
        dx=pl.col("x") - pl.col("x").mean().over("rank", "name"))
    fit = dict(sxy=(pl.col("dr") * pl.col("dx")).sum(), sxx=(pl.col("dx") ** 2).sum(),
               varied=(pl.col("dx").abs() > 0.05).sum())
    sxy, sxx, varied = used.select(**fit).row(0)
    if not sxx or varied < 8:   # equal lengths everywhere (or nearly): nothing to explain
        return None
    pooled = sxy / sxx
    return used.group_by("name").agg(**fit).select(
        "name", beta=pl.when((pl.col("varied") >= 8) & (pl.col("sxx") > 0)).then(pl.col("sxy") / pl.col("sxx"))
        .otherwise(pooled).clip(0.0, 2.0))


def _token_free(ops: pl.DataFrame, beta: pl.DataFrame | None) -> pl.DataFrame:
    """``y``: each op's log time less what its tokens explain (``beta`` per op name from
    :func:`_token_slope`); the log time itself where the trace records no tokens. A slow GPU is
    slow whatever its tokens, so it stays."""
    if beta is None:
        return ops.with_columns(y=pl.col("lx"))
    lt = pl.when(pl.col("tokens") > 0).then(pl.col("tokens").cast(pl.Float64).log()).otherwise(0.0)
    return ops.join(beta, on="name", how="left").with_columns(
        y=pl.col("lx") - pl.col("beta").fill_null(0.0) * lt).drop("beta")


def _rank_iterations(ops: pl.DataFrame, min_effect: float, *, use_spread: bool) -> pl.DataFrame:
    """Per (rank, iteration): the median log-ratio ``effect`` (centred), its ``z`` and ``flagged``.

    The standard error of a median of n ops is MEDIAN_SE x sigma / sqrt(n), sigma the scatter
    of single ops around their rank-iteration's median. With ``use_spread`` the spread of
    effects across rank-iterations is a floor too: when healthy ranks differ among themselves
    (data-dependent work) a rank must stand out from that, not only from its own noise.

    Ops of one microbatch are not independent where the data sets their time (a longer
    sequence makes all of its layers longer together): there the rank-iteration's effect is
    as uncertain as its microbatches' medians scatter (``_microbatch_se``), whatever the count
    of ops. A GPU slower on everything is slower on every microbatch alike.
    """
    if "slow" not in ops.columns:
        ops = ops.with_columns(slow=pl.lit(False), excess=pl.lit(0.0))
    per = ops.group_by(["rank", "iteration"]).agg(
        effect=pl.col("r_adj").median(), n_ops=pl.len(), share_slow=pl.col("slow").mean(),
        data_se=pl.col("data_se").max() if "data_se" in ops.columns else pl.lit(0.0),
        excess_ns=pl.col("excess").sum(), busy_ns=pl.col("self_ns").sum(), baseline=pl.col("use").all(),
    )
    # sigma from the scatter of single ops around their peers (not around the rank's own
    # median, which fits the same ops and so understates it for a dozen ops)
    pairs = _two_peers(ops)
    if pairs:  # the ops' scatter around peers is the slowdown itself: use their own medians
        sigma = ops.select(robust_scale(pl.col("r_adj") - pl.col("r_adj").median().over(["rank", "iteration"]))).item() or 0.0
    else:
        sigma = ops.select(robust_scale("r_adj")).item() or 0.0
    spread = _effect_spread(per, pairs) if use_spread else 0.0
    per = per.join(_microbatch_se(ops), on=["rank", "iteration"], how="left").with_columns(
        pl.col("mb_se").fill_null(0.0))
    # centred on the rank-iterations that form the baseline (the first pass's outliers do not)
    base = per.filter(pl.col("baseline"))["effect"]
    center = base.median() if len(base) else per["effect"].median()
    z_crit = z_critical(len(per))
    return per.with_columns(effect=pl.col("effect") - center).with_columns(
        se=pl.max_horizontal(((MEDIAN_SE * sigma) ** 2 / pl.col("n_ops").cast(pl.Float64) + pl.col("data_se") ** 2).sqrt(),
                             pl.col("mb_se"), pl.lit(spread), pl.lit(1e-6))
    ).with_columns(z=pl.col("effect") / pl.col("se")).with_columns(
        flagged=(pl.col("z") > z_crit) & (pl.col("effect").exp() - 1 >= min_effect)
    ).drop("baseline", "mb_se", "data_se")


def _microbatch_se(ops: pl.DataFrame) -> pl.DataFrame:
    """Per (rank, iteration) with three microbatches or more: ``mb_se``, MEDIAN_SE x the
    scatter of its microbatches' median ``r_adj`` around their median / sqrt(microbatches).
    The scatter is the larger of the rank-iteration's own (robust, so one odd microbatch
    does not make it) and that pooled over all rank-iterations (four microbatches alone can
    happen to agree)."""
    mb = ops.filter(pl.col("microbatch") >= 0).group_by("rank", "iteration", "microbatch").agg(m=pl.col("r_adj").median())
    if mb.is_empty():
        return pl.DataFrame(schema={"rank": pl.Int32, "iteration": pl.Int32, "mb_se": pl.Float64})
    mb = mb.with_columns(d=pl.col("m") - pl.col("m").median().over("rank", "iteration"))
    pooled = mb.select(robust_scale("d")).item() or 0.0
    return mb.group_by("rank", "iteration").agg(n_mb=pl.len(), own=MAD_TO_SIGMA * pl.col("d").abs().median()).filter(
        pl.col("n_mb") >= 3).select("rank", "iteration", mb_se=MEDIAN_SE * pl.max_horizontal(pl.col("own"), pl.lit(pooled))
                                     / pl.col("n_mb").cast(pl.Float64).sqrt())


def _two_peers(ops: pl.DataFrame) -> bool:
    """Whether some op is compared between two ranks only (each is then measured against the other)."""
    smallest = ops.group_by("gk").agg(pl.col("rank").n_unique().alias("n"))["n"].min()
    return smallest is not None and smallest < 3


def _effect_spread(per: pl.DataFrame, pairs: bool) -> float:
    """How much healthy rank-iterations' effects scatter: the floor of a standard error.

    Across rank-iterations when every peer group has three or more ranks (then the healthy
    majority sets the scale). With two peers the two ranks' effects are mirror images, so
    their scatter *is* the slowdown being tested; there the floor is how much each rank's
    effect varies from iteration to iteration.
    """
    if not pairs:
        return per.select(robust_scale("effect")).item() or 0.0
    within = per.with_columns(d=pl.col("effect") - pl.col("effect").median().over("rank"))
    return within.select(robust_scale("d")).item() or 0.0


POLISH_ROUNDS = 3
"""Rounds of alternating peer and replica medians (they settle within two or three)."""

_CELL = ["dp", "iteration", "microbatch"]

LEAVE_ONE_OUT = 8
"""Replicas of up to this many ranks take each rank's data effect from the others only; in
larger ones a rank's own ops move the median by at most ~1/size of its slowdown, and leaving
each out costs a pass over every op per rank of the replica (10 x the whole stage at 1,024 ranks)."""


def _polish(ops: pl.DataFrame, g: list[str], first: dict | bool | None = None) -> tuple[pl.DataFrame, dict | None]:
    """``r`` (each op against its peers' same op) and ``r_adj`` (that, less what its replica's
    data explains) from ``y``, by a robust two-way fit, a Tukey median polish:
    ``y = op[g] + data[dp, iteration, microbatch] + residual``.

    A long sequence makes every stage and TP shard of its replica slower on that microbatch;
    a slow GPU makes one rank slower on all of them. Peers are ranks of other replicas, so
    when replicas' sequence lengths differ the peers' median of one op is a median over
    different lengths, and with a handful of replicas a slow rank among them moves it by as
    much as its own slowdown (a 1.2x GPU in a PP4 x DP4 job read 1.08x, and its peers looked
    fast). So the two medians alternate, each on what the other leaves: the peers' median per
    op, the replica's per microbatch, until both settle. Rows without ``use`` (the first
    pass's outliers) are left out of both medians and still get a residual.

    The replica part is fitted only when it is larger than what jitter alone would put into
    such a median (else every op keeps its plain peer comparison). With three or more ranks in
    a replica the whole shared part (also the replica's average over microbatches) goes, each
    rank's taken from the replica's *other* ranks: a slow rank among four would otherwise pull
    the median a quarter of the way to itself, hiding a quarter of its slowdown. With fewer,
    only the part that varies between microbatches, so that a rank's constant slowdown is not
    taken for data.

    ``first``: what the first pass found (its ``info``, False where it fitted no data effect):
    the second, with the outliers left out, keeps that decision, since a fault left out of the
    medians must not also decide whether they are fitted.
    """
    ops = _rows(ops.with_columns(c=pl.lit(0.0), k=pl.lit(1.0), replica_n=pl.lit(0, pl.UInt32)), g)
    have_mb = ops.filter(pl.col("microbatch") >= 0)
    if have_mb.is_empty():
        return _residuals(ops), None
    if first is False:
        return _residuals(ops), None
    if first is not None:
        return _fit_data(ops, g, first["spread"]), first
    e = _cells(have_mb)
    spread = e.select(robust_scale("e_c")).item() or 0.0
    noise = have_mb.join(e.select(*_CELL, "e"), on=_CELL, how="left").select(
        robust_scale(pl.col("y") - pl.col("a") - pl.col("e"))
    ).item() or 0.0
    n = float(e["n"].median())
    # a median of n ops with per-op noise sigma scatters by MEDIAN_SE * sigma / sqrt(n); four
    # times that is far beyond chance for any count of cells we see
    chance = 4 * MEDIAN_SE * noise / max(n, 1.0) ** 0.5
    if spread <= chance:
        return _residuals(ops), None
    info = {"spread": round(float(spread), 4), "chance": round(float(chance), 4),
            "relative_spread": round(float(spread) * 1.7320508, 3)}
    return _fit_data(ops, g, spread), info


def _fit_data(ops: pl.DataFrame, g: list[str], spread: float) -> pl.DataFrame:
    """The alternating medians of ``_polish`` (``ops`` with the peers' first ``a``), and
    ``data_se``: where a replica keeps its average over microbatches (fewer than three ranks),
    that average is as much its data's as its GPU's. Its microbatches' effects scatter by
    ``spread``, so their median over a replica's microbatches of an iteration is uncertain by
    MEDIAN_SE x spread / sqrt(microbatches): a rank's slowdown is judged against that too (a
    DP2 job on heavy-tailed lengths without tokens in the trace: one replica's four microbatches
    a little longer read as a 1.12x GPU)."""
    size = ops.group_by("dp").agg(replica_n=pl.col("rank").n_unique())
    ops = ops.drop("replica_n").join(size, on="dp", how="left")
    ops = ops.with_columns(k=pl.lit(1.0))
    for _ in range(POLISH_ROUNDS):
        mb = ops.filter(pl.col("microbatch") >= 0)
        e, others = _cells(mb), _others_cells(mb.filter(pl.col("replica_n") <= LEAVE_ONE_OUT))
        ops = ops.drop("c").join(e.select(*_CELL, "e", "e_c"), on=_CELL, how="left").join(
            others, on=[*_CELL, "rank"], how="left").with_columns(
            lat=pl.when(pl.col("replica_n") > LEAVE_ONE_OUT).then(pl.col("e"))
            .when(pl.col("replica_n") >= 2).then(pl.col("e_o")).otherwise(pl.col("e_c")).fill_null(0.0)
        ).drop("e", "e_c", "e_o")
        ops = _scales(ops).with_columns(c=pl.col("k") * pl.col("lat")).drop("lat")
        ops = _rows(ops, g)
    n_mb = ops.filter(pl.col("microbatch") >= 0).group_by("dp", "iteration").agg(n_mb=pl.col("microbatch").n_unique())
    pair = pl.when(pl.col("n_base") == 2).then(2 ** 0.5).otherwise(1.0)
    ops = ops.join(n_mb, on=["dp", "iteration"], how="left").with_columns(
        data_se=pl.when((pl.col("replica_n") < 2) & pl.col("n_mb").is_not_null())
        .then(pair * MEDIAN_SE * spread / pl.col("n_mb").cast(pl.Float64).sqrt()).otherwise(0.0)).drop("n_mb")
    return _residuals(ops)


def _scales(ops: pl.DataFrame) -> pl.DataFrame:
    """``k`` per kind of op (stage and name): how strongly its time follows its replica's data
    effect ``lat``. Time grows as tokens to a power that differs between ops (attention up to
    the square, the output layer linearly, a backward otherwise than its forward), and the
    last stage's ops are not the first's: one data effect for all would leave a part of it
    in every op of some stages. A least-squares slope on the ops with ``use``, kept between
    1/4 and 4, relative to the median op's."""
    # only where two or more peers set ``a`` (with one, what it leaves of its own op is exactly
    # the fit, whatever the slope)
    fit = ops.filter(pl.col("use") & (pl.col("microbatch") >= 0) & (pl.col("n_base") >= 2)).group_by("pp", "name").agg(
        k=((pl.col("y") - pl.col("a")) * pl.col("lat")).sum() / (pl.col("lat") ** 2).sum())
    ops = ops.drop("k").join(fit, on=["pp", "name"], how="left").with_columns(
        pl.col("k").fill_nan(None).fill_null(1.0).clip(0.25, 4.0))
    return ops.with_columns(k=pl.col("k") / pl.col("k").filter(pl.col("microbatch") >= 0).median())


def _rows(ops: pl.DataFrame, g: list[str]) -> pl.DataFrame:
    """``a``: the peers' median of ``y - c`` per op (rows with ``use``), ``n_base`` their count."""
    base = ops.filter(pl.col("use")).group_by(g).agg(n_base=pl.len(), a=(pl.col("y") - pl.col("c")).median())
    return ops.drop([c for c in ("n_base", "a") if c in ops.columns]).join(base, on=g, how="left")


def _cells(ops: pl.DataFrame) -> pl.DataFrame:
    """Per (replica, iteration, microbatch): ``e``, the median of what the peers leave of its
    ops (rows with ``use``), and ``e_c``, that less the replica's median over its microbatches."""
    e = ops.filter(pl.col("use") & pl.col("a").is_not_null()).group_by(_CELL).agg(
        e=((pl.col("y") - pl.col("a")) / pl.col("k")).median(), n=pl.len())
    return e.with_columns(e_c=pl.col("e") - pl.col("e").median().over(["dp", "iteration"]))


def _others_cells(ops: pl.DataFrame) -> pl.DataFrame:
    """Per (replica, iteration, microbatch, rank): ``e_o``, the median of what the peers leave
    of the ops of the replica's *other* ranks in that microbatch (rows with ``use``)."""
    vals = ops.filter(pl.col("use") & pl.col("a").is_not_null()).select(
        *_CELL, other=pl.col("rank"), v=(pl.col("y") - pl.col("a")) / pl.col("k"))
    return ops.select(*_CELL, "rank").unique().join(vals, on=_CELL).filter(
        pl.col("other") != pl.col("rank")).group_by([*_CELL, "rank"]).agg(e_o=pl.col("v").median())


def _residuals(ops: pl.DataFrame) -> pl.DataFrame:
    """``r`` and ``r_adj`` from the fit. With two peers their median is their mean and would
    halve the difference: a rank is compared with the other one instead (leave-one-out, which
    is what a median of the others means). Where every peer was left out the op keeps no
    baseline and drops out."""
    pair = pl.when((pl.col("n_base") == 2) & pl.col("use")).then(2.0).otherwise(1.0)
    if "data_se" not in ops.columns:
        ops = ops.with_columns(data_se=pl.lit(0.0))
    return ops.with_columns(r_adj=pair * (pl.col("y") - pl.col("c") - pl.col("a"))).with_columns(
        r=pl.col("r_adj") + pl.col("c")).filter(pl.col("r").is_not_null()).drop("a", "c", "k", "n_base", "replica_n")


def _gaps(events: pl.DataFrame, leaves: pl.DataFrame, group: list[str], coords: pl.DataFrame,
          min_effect: float, starts: pl.DataFrame | None = None, stalls: pl.DataFrame | None = None) -> pl.DataFrame:
    """Idle time between a rank's consecutive leaf events (compute leaves, communication,
    optimizer), per iteration, compared with its peers'. A slow host launches every op late,
    which shows as such gaps; a slow GPU does not. ``leaves``: ``rank``, ``iteration``,
    ``ts_ns``, ``end_ns`` of the compute leaves; ``starts``: iteration starts, as zero-length
    marks on the timeline (the time before an iteration's first op is idle too)."""
    # GPU communication kernels that no comm event stands for (schema.COMM_KERNEL_PATTERN) are
    # waiting for peers too: without them a pipeline's first stage, idle on its GPU while a
    # coalesced SendRecv waited for a slow next stage, looked like a slow host (real 4-GPU job)
    comm_kernel = ((pl.col("cat") == "other") & pl.col("lane").str.starts_with("stream:")
                   & pl.col("name").str.contains("(?i)" + COMM_KERNEL_PATTERN))
    other = events.filter((pl.col("cat").is_in(["collective", "p2p", "optimizer"]) | comm_kernel)
                          & pl.col("iteration").is_not_null()).select(
        "rank", "iteration", "ts_ns", (pl.col("ts_ns") + pl.col("dur_ns")).alias("end_ns")
    )
    parts = [leaves, other.cast(leaves.schema)]
    if starts is not None and len(starts):
        marks = starts.join(leaves.select("rank", "iteration").unique(), on=["rank", "iteration"], how="semi")
        parts.append(marks.select("rank", "iteration", "ts_ns", end_ns=pl.col("ts_ns")).cast(leaves.schema))
    tl = pl.concat(parts).sort(["rank", "ts_ns"])
    prev = pl.col("end_ns").cum_max().shift(1).over("rank")
    tl = tl.with_columns(gap=(pl.col("ts_ns") - prev).clip(lower_bound=0).fill_null(0))
    per = tl.group_by(["rank", "iteration"]).agg(gap_ns=pl.col("gap").sum(), n_gaps=pl.len(),
                                                 span_ns=pl.col("end_ns").max() - pl.col("ts_ns").min())
    if stalls is not None and len(stalls):   # host time spent inside a coarse step span
        per = per.join(stalls, on=["rank", "iteration"], how="left").with_columns(
            gap_ns=pl.col("gap_ns") + pl.col("stall_ns").fill_null(0).cast(pl.Int64)).drop("stall_ns")
    per = per.join(coords.select("rank", "tp", "pp", "dp"), on="rank", how="left")
    g = [c for c in group if c != "rank"] + ["iteration"] if group != ["rank"] else ["rank"]
    per = per.with_columns(gap_excess_ns=(pl.col("gap_ns") - pl.col("gap_ns").median().over(g)).cast(pl.Float64),
                           n_peers=pl.len().over(g))
    per = _readers_wait(per)
    if group != ["rank"] and per["n_peers"].min() == 2:
        # two peers: their excesses mirror each other, so the scatter across ranks is the
        # difference being tested; the noise is how much a rank's excess varies by itself
        scale = per.select(robust_scale(pl.col("gap_excess_ns") - pl.col("gap_excess_ns").median().over("rank"))).item() or 0.0
        per = per.with_columns(gap_excess_ns=2 * pl.col("gap_excess_ns"))   # against the other, not the mean
    else:
        scale = per.select(robust_scale("gap_excess_ns")).item() or 0.0
    # Trace timestamps are microseconds: each gap carries up to 1 us of rounding, which adds up
    # like noise over a rank's gaps. Below that no difference in gaps means anything.
    floor = 1000.0 * float(per["n_gaps"].mean() or 1.0) ** 0.5
    z_crit = z_critical(len(per))
    # and, as for compute, at least ``min_effect`` of the rank's iteration: a simulated trace's
    # 1 us timestamps make the scale so small that a 0.1 ms excess had a z in the hundreds
    # (``gap_share`` says so; a rank whose compute stands out anyway is told a slow host from a
    # slow GPU by its idle time's z alone: ``_per_rank``)
    return per.with_columns(gap_z=pl.col("gap_excess_ns") / max(scale, floor)).with_columns(
        gap_flagged=pl.col("gap_z") > z_crit, gap_share=pl.col("gap_excess_ns") >= min_effect * pl.col("span_ns")
    ).select("rank", "iteration", "gap_ns", "gap_excess_ns", "gap_z", "gap_flagged", "gap_share")


def _readers_wait(per: pl.DataFrame) -> pl.DataFrame:
    """On the stages that read data (the first and the last), TP rank 0 reads each batch and
    broadcasts it to its TP peers (``get_batch_on_this_tp_rank``), a broadcast no trace of
    megatron-core's hooks records: while the reader idles on a starved loader its peers idle
    in that broadcast, the same time. So what a TP peer's idle excess shares with its reader's
    in an iteration is the reader's, and only the rest is its own."""
    if per["tp"].drop_nulls().n_unique() < 2:
        return per
    ends = [0, int(per["pp"].max())]
    reader = pl.col("gap_excess_ns").filter(pl.col("tp") == 0).max().over("pp", "dp", "iteration")
    return per.with_columns(gap_excess_ns=pl.when(
        (pl.col("tp") != 0) & pl.col("pp").is_in(ends) & (reader > 0))
        .then(pl.col("gap_excess_ns") - pl.min_horizontal(reader, pl.col("gap_excess_ns").clip(lower_bound=0.0)))
        .otherwise(pl.col("gap_excess_ns")))


STALL = 2.0
"""An op this many times as long as the rest of its rank's ops say it should be held a stall."""

_STALL_MIN_NS = 1_000_000


def _stalls(ops: pl.DataFrame) -> pl.DataFrame:
    """Per (rank, iteration): ``stall_ns``, time inside single forward steps far beyond what the
    rank's other ops and its peers say they take (at least ``STALL`` x, and 1 ms).

    A trace with one span per forward step (no layer spans inside it) holds the data fetch
    inside that span: a starved data loader makes one microbatch's forward step tens of ms
    long, which a median over the rank's ops rightly ignores as compute, and which no idle gap
    shows. It is host time, and is judged with the launch gaps. In Megatron the data is read
    by tensor-parallel rank 0 of the first and last stages (``get_batch_on_this_tp_rank``) and
    broadcast to its TP peers, which wait inside the same step: a stall that TP rank 0 of a
    stage shows in a microbatch is its own, and its TP peers' in the same step are its too."""
    eff = pl.col("r_adj") - pl.col("r_adj").median().over("rank", "iteration")
    # only a forward step holds the data fetch (a span of that name that holds no other span)
    long = ops.with_columns(d=eff).filter((pl.col("name") == "forward") & (pl.col("microbatch") >= 0)).filter(pl.col("d") > float(np.log(STALL))).with_columns(
        stall_ns=pl.col("self_ns").cast(pl.Float64) * (1 - (-pl.col("d")).exp())).filter(pl.col("stall_ns") >= _STALL_MIN_NS)
    if long.is_empty():
        return pl.DataFrame(schema={"rank": pl.Int32, "iteration": pl.Int32, "stall_ns": pl.Float64})
    # where TP rank 0 stalled in a step, its TP peers that stalled with it waited for its batch
    step = ["pp", "dp", "iteration", "microbatch"]
    long = long.with_columns(reader=(pl.col("tp") == 0).any().over(step))
    long = long.filter(~pl.col("reader") | (pl.col("tp") == 0))
    return long.group_by("rank", "iteration").agg(pl.col("stall_ns").sum())


def _per_rank(per: pl.DataFrame, z_crit: float, judge_gaps: bool = True, min_effect: float = 0.0) -> pl.DataFrame:
    """Per rank. ``lasting``: a fault lasts, while noise on shared or busy hosts can make one
    iteration of one rank stand out; a rank's compute flags last when it is flagged in nearly
    every traced iteration (``CONSISTENT``) or, for a fault that came and went (a transient
    window, told from a hiccup with three traced iterations or more), in fewer but far beyond the cut-off; launch-gap flags only in nearly every
    iteration. Verdicts need it (``verdict.combine``)."""
    if "se" in per.columns:
        per = _judged_together(per, z_crit, min_effect)
    per = per.with_columns(gap_raw=pl.col("gap_flagged").fill_null(False))
    if "gap_share" in per.columns:   # idle time alone names a host only when it is a real share
        per = per.with_columns(gap_flagged=pl.col("gap_raw") & (
            pl.col("gap_share").fill_null(False) | pl.col("flagged").any().over("rank"))).drop("gap_share")
    # ``gap_idle``: by the z of idle time alone, which tells a rank that is a suspect by another
    # route (stage 2 with its compute leaning the same way) a slow host rather than a slow GPU
    per = per.with_columns(gap_idle=_lasting_gaps(pl.col("gap_raw"), z_crit) if judge_gaps else pl.lit(False),
                           gap_flagged=_lasting_gaps(pl.col("gap_flagged").fill_null(False), z_crit)
                           if judge_gaps else pl.lit(False)).drop("gap_raw")
    gap = pl.col("gap_flagged")
    # A window is told from a hiccup only against traced iterations on its sides: with two, a
    # rank slow in one of them and normal in the other is as likely a busy host's noise as a
    # fault that came and went (a lasting fault that noise put under the cut-off once still
    # leans the same way in the other iteration).
    window = per["iteration"].n_unique() >= 3
    far = (pl.col("z").filter(pl.col("flagged")).max() >= 2 * z_crit) & (pl.lit(window) | (pl.col("z").min() > z_crit / 2))
    lasting = (pl.col("flagged").mean() >= CONSISTENT) | far | gap.any()
    flagged = pl.col("flagged") | gap
    return per.group_by("rank").agg(
        lasting=lasting.fill_null(False),
        slowdown=pl.when(pl.col("flagged").any()).then(pl.col("effect").filter(pl.col("flagged")).median())
        .otherwise(pl.col("effect").median()).exp(),
        z=pl.col("z").max(),
        share_slow=(pl.col("share_slow") * pl.col("n_ops")).sum() / pl.col("n_ops").sum(),
        n_ops=pl.col("n_ops").sum(),
        flagged=pl.col("flagged").any(),
        iterations=pl.col("iteration").filter(flagged).sort(),
        excess_ns=pl.when(flagged.any()).then(pl.col("excess_ns").filter(flagged).mean()).otherwise(pl.col("excess_ns").mean()),
        busy_ns=pl.col("busy_ns").mean(),
        gap_excess_ns=pl.when(pl.col("gap_flagged").any()).then(pl.col("gap_excess_ns").filter(pl.col("gap_flagged")).mean())
        .otherwise(pl.col("gap_excess_ns").mean()),
        gap_z=pl.col("gap_z").max(),
        gap_flagged=pl.col("gap_flagged").fill_null(False).any(),
        gap_idle=pl.col("gap_idle").fill_null(False).any(),
        gap_ns=pl.col("gap_ns").mean(),
    ).sort("rank")


def _lasting_gaps(gap: pl.Expr, z_crit: float) -> pl.Expr:
    """Per (rank, iteration): idle-time flags ``gap`` that last.

    A slow host is a lasting condition (no transient exemption: a first traced iteration often
    idles longer on one rank while the others warm up): flagged in nearly every iteration, or
    idling longer than its peers in nearly every iteration by a median beyond the cut-off
    (every iteration's z has the same scale, so the median's standard error is MEDIAN_SE /
    sqrt(iterations) of it): on busy hosts one iteration's gaps scatter by tens of ms, and a
    stall of that size is judged on all iterations together. Only with three traced iterations
    or more: the median of two is their mean, one far iteration and one barely positive would
    pass, and that is a hiccup, not a lasting stall."""
    n_it = pl.col("gap_z").count().over("rank").cast(pl.Float64)
    median_z = pl.col("gap_z").median().over("rank") * n_it.sqrt() / MEDIAN_SE
    positive = (pl.col("gap_excess_ns") > 0).mean().over("rank") >= CONSISTENT
    judged_together = (n_it >= 3) & (median_z > z_crit) & positive
    lasting = (gap.mean().over("rank") >= CONSISTENT) | judged_together
    return (gap | (pl.col("gap_excess_ns") > 0)) & lasting


def _judged_together(per: pl.DataFrame, z_crit: float, min_effect: float) -> pl.DataFrame:
    """A rank slower in every traced iteration by an amount that no single iteration's
    evidence clears is flagged when their median clears the cut-off: the median over n
    iterations is uncertain by MEDIAN_SE x (a typical iteration's standard error) / sqrt(n).
    Where data sets the time (a replica's microbatches longer or shorter than its peers' by
    chance, in each iteration anew: ``data_se``) one iteration says little, and a 1.3x GPU
    beside it only shows across iterations. Slower in nearly every iteration
    (``CONSISTENT``), and by at least ``min_effect``."""
    n_it = pl.len().over("rank").cast(pl.Float64)
    med = pl.col("effect").median().over("rank")
    together = ((med / (MEDIAN_SE * pl.col("se").median().over("rank") / n_it.sqrt()) > z_crit)
                & ((pl.col("effect") > 0).mean().over("rank") >= CONSISTENT) & (med.exp() - 1 >= min_effect))
    return per.with_columns(flagged=pl.col("flagged") | (together & (pl.col("effect") > 0)))


def _stage_balance(per: pl.DataFrame, coords: pl.DataFrame) -> pl.DataFrame:
    """Per stage, the compute of its fastest rank (a faulty GPU does not move a minimum; a
    heavier stage moves all its ranks), relative to the lightest stage."""
    st = (
        per.join(coords.select("rank", "pp"), on="rank").group_by(["pp", "iteration"]).agg(pl.col("busy_ns").min())
        .group_by("pp").agg(compute_ns=pl.col("busy_ns").median()).sort("pp")
    )
    return st.with_columns(ratio=pl.col("compute_ns") / pl.col("compute_ns").min())
