"""Stage 1's model of data: what each replica's data adds to its ops' times, fitted with the peers.

Ranks compared as peers belong to different data-parallel replicas, which train on different
data: with uneven sequence lengths every rank of a replica is slower on its long microbatches.
``polish`` fits both at once (the peers' median per op, each replica's effect per microbatch)
and leaves each op's residual, in which a slow GPU stays and the data does not.
"""

from __future__ import annotations

import polars as pl

from mapp.analysis.detect._stats import MEDIAN_SE, robust_scale
from mapp.analysis.detect.peer_evidence import PeerEvidence

__all__ = ["polish", "POLISH_ROUNDS", "LEAVE_ONE_OUT", "with_replica"]

POLISH_ROUNDS = 3
"""Rounds of alternating peer and replica medians (they settle within two or three)."""

_CELL = ["dp", "iteration", "microbatch"]

LEAVE_ONE_OUT = 8
"""Replicas of up to this many ranks take each rank's data effect from the others only; in
larger ones a rank's own ops move the median by at most ~1/size of its slowdown, and leaving
each out costs a pass over every op per rank of the replica (at 1,024 ranks in replicas of 64,
stage 1 took 1.6 s with it, 0.37 s without)."""


def polish(ops: pl.DataFrame, g: list[str], first: dict | bool | None = None) -> tuple[pl.DataFrame, dict | None]:
    """``r`` (each op against its peers' same op) and ``r_adj`` (that, less what its replica's
    data explains) from ``y``, by a robust two-way fit, a Tukey median polish:
    ``y = op[g] + k[pp, name] x data[dp, iteration, microbatch] + residual`` (``_scales``).

    A long sequence makes every stage and TP shard of its replica slower on that microbatch;
    a slow GPU makes one rank slower on all of them. Peers are ranks of other replicas, so
    when replicas' sequence lengths differ the peers' median of one op is a median over
    different lengths, and with a handful of replicas a slow rank among them moves it by as
    much as its own slowdown (a 1.2x GPU in a PP4 x DP4 job read 1.08x, and its peers looked
    fast). So the two medians alternate, each on what the other leaves: the peers' median per
    op, the replica's per microbatch, until both settle. Rows without ``use`` (the first
    pass's outliers) are left out of both medians and still get a residual.

    The replica part is fitted only when it is larger than what jitter alone would put into
    such a median (else every op keeps its plain peer comparison). With two or more ranks in a
    replica the whole shared part (also the replica's average over microbatches) goes, each
    rank's taken from the replica's *other* ranks (``LEAVE_ONE_OUT``): a slow rank among four
    would otherwise pull the median a quarter of the way to itself, hiding a quarter of its
    slowdown; in a TP2 replica the other TP rank saw the same data. A replica of one rank has
    no other: only the part that varies between its microbatches goes, so that its constant
    slowdown is not taken for data (``_fit_data`` says how uncertain that leaves it).

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
        return _fit_data(ops, g, first["sd"]), first
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
            "relative_spread": round(float(spread) * 1.7320508, 3), "sd": round(_between_sd(e), 4)}
    return _fit_data(ops, g, info["sd"]), info


def with_replica(peers: PeerEvidence, rank: int, iterations: list[int], coords: dict[int, dict],
                 among: str = "replica") -> tuple[list[int], float, float] | None:
    """Other ranks of ``rank``'s data-parallel replica and their mean effect, beside ``rank``'s
    own, over ``iterations`` (log-ratios to their own peers, ``PeerEvidence.rank_iterations``);
    None where it has no such rank or nothing was kept per iteration. ``coords``: rank -> its
    ``tp``, ``pp`` and ``dp``. ``among``: ``"replica"`` (all of its other ranks), ``"stages"``
    (its other pipeline stages, of its own TP rank) or ``"tp"`` (its TP peers, of its own stage).

    What ``polish`` leaves of a replica slower together: its fit takes out what a replica's data
    adds per microbatch, not a replica slowed as a whole in some steps (its processes crowded
    on shared cores, its stage's spans holding waits for its pipeline: ``shared_cpus``,
    ``tp_waits``). A slow rank does not slow the other ranks of its replica on their own work.

    Also None where each rank is compared with the other stages (one rank a stage, "layer
    peers"): there its replica's other ranks are its peers, and their effects mirror its own."""
    me = coords.get(rank) or {}
    if me.get("dp") is None or peers.mode == "layer peers":
        return None
    same = {"replica": lambda c: True,
            "stages": lambda c: c.get("tp") == me.get("tp") and c.get("pp") != me.get("pp"),
            "tp": lambda c: c.get("pp") == me.get("pp") and c.get("tp") != me.get("tp")}[among]
    others = [r for r, c in coords.items() if r != rank and c.get("dp") == me["dp"] and same(c)]
    per = peers.rank_iterations
    if not others or not iterations or per.is_empty() or "effect" not in per.columns:
        return None
    there = per.filter(pl.col("iteration").is_in(iterations))
    own = there.filter(pl.col("rank") == rank)["effect"].mean()
    theirs = there.filter(pl.col("rank").is_in(others))["effect"].mean()
    if own is None or theirs is None:
        return None
    return others, float(own), float(theirs)


def _between_sd(e: pl.DataFrame) -> float:
    """How much microbatches' data effects ``e`` scatter within a replica's iteration: the
    standard deviation around each (replica, iteration)'s mean, pooled, corrected for the mean
    fitted from the same n. Not a MAD: with four microbatches, two sit beside their median by
    construction, which halved it, and a heavy tail of lengths is what it must not hide."""
    d = e.with_columns(n_g=pl.len().over("dp", "iteration"),
                       d=pl.col("e") - pl.col("e").mean().over("dp", "iteration")).filter(pl.col("n_g") >= 2)
    if d.is_empty():
        return 0.0
    var = d.select((pl.col("d") ** 2 * pl.col("n_g") / (pl.col("n_g") - 1)).mean()).item()
    return float(var or 0.0) ** 0.5


def _fit_data(ops: pl.DataFrame, g: list[str], sd: float) -> pl.DataFrame:
    """The alternating medians of ``polish`` (``ops`` with the peers' first ``a``), and
    ``data_se``: where a replica keeps its average over microbatches (a replica of one rank),
    that average is as much its data's as its GPU's. Its microbatches' effects scatter by
    ``sd``, so their median over a replica's microbatches of an iteration is uncertain by
    MEDIAN_SE x sd / sqrt(microbatches): a rank's slowdown is judged against that too (a
    DP2 job on heavy-tailed lengths without tokens in the trace: one replica's four microbatches
    a little longer read as a 1.12x GPU)."""
    size = ops.group_by("dp").agg(replica_n=pl.col("rank").n_unique())
    ops = ops.drop("replica_n").join(size, on="dp", how="left")
    ops = ops.with_columns(k=pl.lit(1.0))
    for _ in range(POLISH_ROUNDS):
        mb = ops.filter(pl.col("microbatch") >= 0)
        e, others = _cells(mb), _others_cells(mb.filter(pl.col("replica_n") <= LEAVE_ONE_OUT))
        # a replica of one rank has its own microbatches' effect, also where that rank is left
        # out of the peers' baseline (it is no one else's baseline to spoil)
        own = _cells(mb.filter(pl.col("replica_n") < 2), every=True).select(*_CELL, e_own=pl.col("e_c"))
        ops = ops.drop("c").join(e.select(*_CELL, "e"), on=_CELL, how="left").join(
            own, on=_CELL, how="left").join(others, on=[*_CELL, "rank"], how="left").with_columns(
            lat=pl.when(pl.col("replica_n") > LEAVE_ONE_OUT).then(pl.col("e"))
            .when(pl.col("replica_n") >= 2).then(pl.col("e_o")).otherwise(pl.col("e_own")).fill_null(0.0)
        ).drop("e", "e_own", "e_o")
        ops = _scales(ops).with_columns(c=pl.col("k") * pl.col("lat")).drop("lat")
        ops = _rows(ops, g)
    n_mb = ops.filter(pl.col("microbatch") >= 0).group_by("dp", "iteration").agg(n_mb=pl.col("microbatch").n_unique())
    pair = pl.when(pl.col("n_base") == 2).then(2 ** 0.5).otherwise(1.0)
    ops = ops.join(n_mb, on=["dp", "iteration"], how="left").with_columns(
        data_se=pl.when((pl.col("replica_n") < 2) & pl.col("n_mb").is_not_null())
        .then(pair * MEDIAN_SE * sd / pl.col("n_mb").cast(pl.Float64).sqrt()).otherwise(0.0)).drop("n_mb")
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


def _cells(ops: pl.DataFrame, *, every: bool = False) -> pl.DataFrame:
    """Per (replica, iteration, microbatch): ``e``, the median of what the peers leave of its
    ops (rows with ``use``; ``every``: all rows), and ``e_c``, that less the replica's median
    over its microbatches."""
    rows = pl.col("a").is_not_null() if every else pl.col("use") & pl.col("a").is_not_null()
    e = ops.filter(rows).group_by(_CELL).agg(
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
