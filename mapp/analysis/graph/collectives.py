"""Collective instances: which calls on which ranks are one collective operation.

A call's group is identified by its ``group`` label and its ``group_ranks`` list (either may be
null, not both). Calls with a ``seq`` (trace format v1, NCCL profiler traces) are matched exactly
by ``(group, seq)``. Calls without one (MegatronApp, gloo profiler traces) are matched by call
order: the n-th call of op X on group G on every rank is one instance. That is exact as long as
every rank makes the same calls in the same order; when members made different numbers of calls
an ``order_unsafe`` finding says so.

Everything here is vectorised polars over the calls; no Python loop touches individual calls.
"""

from __future__ import annotations

import polars as pl

from mapp.analysis.graph.diagnose import Finding, group_label, rank_list
from mapp.analysis.graph.schema import COLLECTIVES, MEMBERS

__all__ = ["match_collectives", "instance_timing"]

_GROUP_KEYS = ["group_id", "order_op", "seq_eff"]


def _group_table(calls: pl.DataFrame) -> pl.DataFrame:
    """One row per distinct group: ``gkey`` (hash), ``group_id`` (stable order), label, ranks."""
    groups = calls.group_by("gkey").agg(pl.col("group").first(), pl.col("group_ranks").first())
    groups = groups.with_columns(
        _first=pl.col("group_ranks").list.first(), _n=pl.col("group_ranks").list.len()
    ).sort(["group", "_first", "_n", "gkey"], nulls_last=True)
    return groups.with_row_index("group_id").drop("_first", "_n").with_columns(pl.col("group_id").cast(pl.Int64))


def match_collectives(
    calls: pl.DataFrame, traced_ranks: set[int], world_size: int | None = None
) -> tuple[pl.DataFrame, pl.DataFrame, list[Finding]]:
    """Group collective calls into instances.

    ``calls`` has the columns of ``_load.COLLECTIVE_COLUMNS``. Returns ``(instances, members,
    findings)`` with the raw columns of ``schema.COLLECTIVES`` and ``schema.MEMBERS``.

    ``world_size``: the job's, where the traces say it. A call naming no group is matched with
    the other traced ranks' calls by order, which is a guess; where the traces cover only part
    of the world (a few ranks of a large job profiled) the guess has nothing to stand on -- the
    call's group may be a DP group of untraced ranks -- and its instances are not complete
    (not timed against each other), as a named group with untraced members is not.
    """
    if calls.is_empty():
        return COLLECTIVES.empty(), MEMBERS.empty(), []
    if "async" not in calls.columns:
        calls = calls.with_columns(pl.lit(False).alias("async"))
    calls = calls.with_columns(gkey=pl.struct("group", "group_ranks").hash(), by_order=pl.col("seq").is_null(),
                               no_group=pl.col("group").is_null() & pl.col("group_ranks").is_null())
    groups = _group_table(calls)
    # From here a call's group is its group_id: its label and ranks list (8 to thousands of
    # ints a call) come back from ``groups`` where needed, instead of being carried through
    # every sort (on 10,240 ranks they were most of matching's 2.7 GB peak)
    calls = calls.join(groups.select("gkey", "group_id"), on="gkey", how="left").drop("gkey", "group", "group_ranks")
    findings: list[Finding] = []
    if calls["by_order"].any():
        calls = calls.sort(["rank", "ts_ns"]).with_columns(
            _ordinal=pl.int_range(pl.len(), dtype=pl.Int64).over(["rank", "group_id", "by_order", "name"])
        )
        calls = calls.with_columns(
            seq_eff=pl.when(pl.col("by_order")).then(pl.col("_ordinal")).otherwise(pl.col("seq")),
            order_op=pl.when(pl.col("by_order")).then(pl.col("name")).otherwise(pl.lit("")),
        ).drop("_ordinal")
        findings += _order_findings(calls, groups)
    else:
        calls = calls.with_columns(seq_eff=pl.col("seq"), order_op=pl.lit(""))

    calls = calls.sort([*_GROUP_KEYS, "rank", "ts_ns"])
    new = (
        (pl.col("group_id") != pl.col("group_id").shift(1))
        | (pl.col("order_op") != pl.col("order_op").shift(1))
        | (pl.col("seq_eff") != pl.col("seq_eff").shift(1))
    ).fill_null(True)
    members = calls.with_columns(instance_id=new.cast(pl.Int64).cum_sum() - 1)
    instances = (
        members.group_by("instance_id", maintain_order=True)
        .agg(
            pl.col("group_id").first(),
            pl.col("name").first().alias("op"),
            pl.col("seq_eff").first().alias("seq"),
            pl.col("by_order").first(),
            pl.col("iteration").min(),
            pl.col("bytes").max(),
            pl.col("rank").n_unique().alias("n_members"),
            pl.len().alias("n_calls"),
            pl.col("name").n_unique().alias("n_ops"),
            pl.col("bytes").drop_nulls().n_unique().alias("n_sizes"),
            pl.col("async").fill_null(False).any().alias("launch_only"),
            pl.col("no_group").first(),
        )
        .join(groups.select("group_id", "group", "group_ranks"), on="group_id", how="left")
        .with_columns(n_expected=pl.col("group_ranks").list.len().cast(pl.Int32))
        .with_columns(
            complete=(
                (pl.col("n_members") == pl.col("n_expected").fill_null(pl.col("n_members")))
                & (pl.col("n_calls") == pl.col("n_members"))
                & (pl.col("n_ops") == 1)
                & (pl.col("n_sizes") <= 1)
                & ~(pl.col("no_group") & pl.lit(_part_of_world(traced_ranks, world_size)))
            )
        )
    )
    findings += _instance_findings(instances, members, traced_ranks)
    findings += _unknown_group_findings(members.filter(pl.col("no_group")),
                                        world_size if _part_of_world(traced_ranks, world_size) else None)
    members = members.join(groups.select("group_id", "group"), on="group_id", how="left", maintain_order="left").select(
        "instance_id", "rank", pl.col("name").alias("op"), "group", "lane", "bytes",
        pl.col("ts_ns").alias("start_ns"), (pl.col("ts_ns") + pl.col("dur_ns")).alias("end_ns"),
    )
    instances = instances.select(
        "instance_id", "op", "group", "group_ranks", "seq", "by_order", "iteration", "bytes",
        pl.col("n_members").cast(pl.Int32), "n_expected", "complete", "launch_only",
    )
    return instances, members, findings


def instance_timing(members: pl.DataFrame, start: str, end: str) -> pl.DataFrame:
    """Per instance, the timing columns of ``schema.COLLECTIVES`` from the given member time columns."""
    return members.group_by("instance_id").agg(
        arrival_spread_ns=pl.col(start).max() - pl.col(start).min(),
        last_arriver=pl.col("rank").get(pl.col(start).arg_max()),
        last_arrival_ns=pl.col(start).max(),
        end_spread_ns=pl.col(end).max() - pl.col(end).min(),
    )


def _order_findings(calls: pl.DataFrame, groups: pl.DataFrame) -> list[Finding]:
    ordered = calls.filter(pl.col("by_order"))
    counts = ordered.group_by(["group_id", "name", "rank"]).len()
    spread = (
        counts.group_by(["group_id", "name"])
        .agg(
            lo=pl.col("len").min(), hi=pl.col("len").max(),
            lo_rank=pl.col("rank").get(pl.col("len").arg_min()),
            hi_rank=pl.col("rank").get(pl.col("len").arg_max()),
        )
        .join(groups.select("group_id", "group", "group_ranks"), on="group_id")
        .sort(["group_id", "name"])
    )
    findings = [Finding(
        kind="order_matched", severity="info",
        message=f"{len(ordered):,} collective calls carry no seq; matched them by per-group call order "
                "(exact while every rank makes the same calls in the same order)",
        count=len(ordered),
    )]
    for row in spread.filter(pl.col("lo") != pl.col("hi")).iter_rows(named=True):
        label = group_label(row["group"], row["group_ranks"])
        findings.append(Finding(
            kind="order_unsafe", severity="warning",
            message=f"{row['name']} on {label}: no seq and ranks made different numbers of calls "
                    f"(rank {row['hi_rank']}: {row['hi']}, rank {row['lo_rank']}: {row['lo']}); "
                    "matching by call order may pair the wrong calls after the first missing one",
            ranks=(row["lo_rank"],), group=row["group"],
            group_ranks=None if row["group_ranks"] is None else tuple(row["group_ranks"]),
            op=row["name"], count=row["hi"] - row["lo"],
        ))
    return findings


def _part_of_world(traced_ranks: set[int], world_size: int | None) -> bool:
    """Whether the traces are of some ranks only of a world of known size."""
    return world_size is not None and len(traced_ranks) < world_size


def _unknown_group_findings(calls: pl.DataFrame, partial_world: int | None = None) -> list[Finding]:
    """``partial_world``: the world's size where the traces cover part of it only."""
    if calls.is_empty():
        return []
    ops = sorted(set(calls["name"].to_list()))
    ranks = sorted(set(calls["rank"].to_list()))
    use = ("not used for clock alignment" if partial_world is None else
           f"not used for clock alignment or lateness (the traces hold {len(ranks)} of the world's "
           f"{partial_world:,} ranks: these calls' groups may hold ranks not traced)")
    return [Finding(
        kind="unknown_group", severity="info",
        message=f"{len(calls):,} collective calls ({', '.join(ops[:4])}{', ...' if len(ops) > 4 else ''}) name "
                f"neither a group nor its members; matched by call order across ranks {rank_list(ranks)}, "
                f"and {use}",
        ranks=tuple(ranks), op=ops[0], count=len(calls),
    )]


def _instance_findings(instances: pl.DataFrame, members: pl.DataFrame, traced: set[int]) -> list[Finding]:
    bad = instances.filter(~pl.col("complete"))
    if bad.is_empty():
        return []
    ranks = (
        members.join(bad.select("instance_id"), on="instance_id", how="semi")
        .group_by("instance_id")
        .agg(present=pl.col("rank").unique().sort())
    )
    bad = bad.join(ranks, on="instance_id").sort("instance_id")
    missing = bad.filter(pl.col("n_expected").is_not_null() & (pl.col("n_members") < pl.col("n_expected")))
    findings: list[Finding] = []
    if len(missing):
        traced_list = pl.Series(sorted(traced), dtype=pl.Int32)
        missing = missing.with_columns(
            absent=pl.col("group_ranks").list.set_difference(pl.col("present").cast(pl.List(pl.Int32)))
        ).with_columns(
            hung=pl.col("absent").list.set_intersection(pl.lit(traced_list.implode())),
            untraced=pl.col("absent").list.set_difference(pl.lit(traced_list.implode())),
        )
        findings += _missing_findings(missing)
    for kind, column, what in (("op_mismatch", "n_ops", "op"), ("size_mismatch", "n_sizes", "bytes")):
        rows = bad.filter(pl.col(column) > 1)
        if len(rows):
            findings += _mismatch_findings(rows, members, kind, what)
    dup = bad.filter(pl.col("n_calls") > pl.col("n_members"))
    if len(dup):
        first = dup.row(0, named=True)
        twice = (
            members.filter(pl.col("instance_id") == first["instance_id"])
            .group_by("rank").len().filter(pl.col("len") > 1)["rank"].sort().to_list()
        )
        label = group_label(first["group"], first["group_ranks"])
        findings.append(Finding(
            kind="duplicate_call", severity="warning",
            message=f"rank {rank_list(twice)} logged {first['op']} seq {first['seq']} on {label} more than once"
                    + (f" (and {len(dup) - 1} more instances)" if len(dup) > 1 else ""),
            ranks=tuple(twice), group=first["group"], group_ranks=_tuple(first["group_ranks"]),
            op=first["op"], seq=first["seq"], iteration=first["iteration"], count=len(dup),
        ))
    return findings


def _tuple(values) -> tuple[int, ...] | None:
    return None if values is None else tuple(values)


def _missing_findings(missing: pl.DataFrame) -> list[Finding]:
    findings: list[Finding] = []
    hung = missing.filter(pl.col("hung").list.len() > 0)
    per_key = (
        hung.group_by(["group_id", "hung"], maintain_order=True)
        .agg(pl.all().first(), count=pl.len(), last_seq=pl.col("seq").max())
    )
    for row in per_key.iter_rows(named=True):
        label = group_label(row["group"], row["group_ranks"])
        culprits = sorted(row["hung"])
        iteration = f" (iteration {row['iteration']})" if row["iteration"] is not None else ""
        more = (f"; {row['count'] - 1} later instances up to seq {row['last_seq']} also lack "
                f"{'it' if len(culprits) == 1 else 'them'}") if row["count"] > 1 else ""
        who = "rank" if len(culprits) == 1 else "ranks"
        findings.append(Finding(
            kind="missing_member", severity="error",
            message=f"{who} {rank_list(culprits)} never reached {row['op']} seq {row['seq']} on {label}"
                    f"{iteration} that {rank_list(row['present'])} entered: likely hang culprit{more}",
            ranks=tuple(culprits), group=row["group"], group_ranks=_tuple(row["group_ranks"]),
            op=row["op"], seq=row["seq"], iteration=row["iteration"], count=row["count"],
        ))
    untraced = missing.filter(pl.col("untraced").list.len() > 0)
    if len(untraced):
        absent = sorted(set(untraced["untraced"].explode().drop_nulls().to_list()))
        groups = untraced["group_id"].n_unique()
        findings.append(Finding(
            kind="untraced_member", severity="info",
            message=f"ranks {rank_list(absent)} belong to {groups} traced groups but have no trace file; "
                    f"{len(untraced):,} collective instances are incomplete for that reason only",
            ranks=tuple(absent), count=len(untraced),
        ))
    return findings


def _mismatch_findings(rows: pl.DataFrame, members: pl.DataFrame, kind: str, what: str) -> list[Finding]:
    column = "name" if what == "op" else "bytes"
    first = rows.row(0, named=True)
    sides = (
        members.filter(pl.col("instance_id") == first["instance_id"])
        .group_by(column).agg(pl.col("rank").unique().sort()).sort(pl.col("rank").list.len(), descending=True)
    )
    detail = "; ".join(f"{value} on {'rank' if len(r) == 1 else 'ranks'} {rank_list(r)}" for value, r in sides.iter_rows())
    odd = tuple(r for _, ranks in list(sides.iter_rows())[1:] for r in ranks)
    label = group_label(first["group"], first["group_ranks"])
    iteration = f" (iteration {first['iteration']})" if first["iteration"] is not None else ""
    more = f" (and {len(rows) - 1} more instances)" if len(rows) > 1 else ""
    return [Finding(
        kind=kind, severity="error",
        message=f"{what} mismatch in collective seq {first['seq']} on {label}{iteration}: {detail}{more}",
        ranks=tuple(sorted(odd)), group=first["group"], group_ranks=_tuple(first["group_ranks"]),
        op=first["op"], seq=first["seq"], iteration=first["iteration"], count=len(rows),
    )]
