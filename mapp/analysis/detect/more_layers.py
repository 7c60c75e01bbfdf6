"""A pipeline stage of more layers than its peers, read on the ops the stages call alike.

Where stages of one rank each were recorded without input shapes, they are compared on the ops
every stage calls as often (``peers.nth_call``). A layer's ops are not among them on a stage of
more layers (it calls each of them as many times more often); what is left is mostly the
optimizer's and the parameters' work, a few calls a step, each on all the stage's parameters: a
stage of three times the layers takes three times as long over them, as a slower device would
(a user's 1F1B PP4, stage 2 of 3x the layers, no fault: its ``aten::_fused_adam_`` 4.2 ms a
step against its peers' 1.1-1.2, the ops called alike 2.41x theirs at z 10.7: "slow compute 2",
its stage "2.46x the lightest (more layers)" beside it).

A slower device runs the layers' own calls slower too. So the stage's *layer pace* is taken
over the ops the stages do not call alike: per op name, its median call against its peers'
median call, the median of those ratios weighted by its peers' time on each (``layer_paces``).
A stage whose layers number ``units`` times its peers' (``stage_gemms.layer_units``) and run at
its peers' pace, its compared ops no slower than those layers explain, holds more parameters,
not a slower device (``more_layers``). Work added in calls (a forward run again, GEMMs beyond
its layers') is weighed apart, by ``added_work``, and passes.
"""

from __future__ import annotations

import polars as pl

from mapp.analysis.detect._stats import others_median, weighted_quantiles

__all__ = ["layer_paces", "more_layers"]


def layer_paces(ops: pl.DataFrame, unlike: str) -> pl.DataFrame:
    """Per ``rank``: ``layer_pace``, the median, weighted by its peers' time on each op name, of
    its median call against its peers' (the other ranks' median of theirs), over the op names
    that every rank calls but not alike (``shape`` == ``unlike``); and ``layer_kinds``, how
    many names. Empty where no name qualifies."""
    per = (ops.filter(pl.col("shape") == unlike)
           .group_by("rank", "name").agg(call=pl.col("self_ns").median().cast(pl.Float64),
                                         time=pl.col("self_ns").sum().cast(pl.Float64)))
    per = per.filter(pl.len().over("name") == per["rank"].n_unique()).sort("name", "rank")
    if per.height < 2:
        return pl.DataFrame(schema={"rank": ops.schema["rank"], "layer_pace": pl.Float64, "layer_kinds": pl.Int64})
    gid = per.select(pl.col("name").rank("dense")).to_series().to_numpy()
    per = per.with_columns(peer_call=pl.Series(others_median(gid, per["call"].to_numpy())),
                           peer_time=pl.Series(others_median(gid, per["time"].to_numpy())))
    per = per.filter(pl.col("peer_call") > 0).with_columns(ratio=pl.col("call") / pl.col("peer_call"))
    return (weighted_quantiles(per, "ratio", "peer_time", ["rank"], {"layer_pace": 0.5})
            .join(per.group_by("rank").agg(layer_kinds=pl.len().cast(pl.Int64)), on="rank").sort("rank"))


LAYER_KINDS = 10
"""The fewest op names called unalike for a stage's layer pace to mean anything: a transformer
layer's forward and backward call dozens."""


def more_layers(row: dict, threshold: float) -> bool:
    """Whether a stage's slower compared ops are the parameters of more layers: it holds
    ``units`` (``layer_units``) 1 + 2 x ``threshold`` times its peers' layers or more, their
    calls at its peers' pace (``layer_pace`` within ``threshold`` of 1, over ``LAYER_KINDS`` names
    or more), its compared ops' ``slowdown`` no more than those layers (within the threshold),
    and no work added in calls worth the threshold. A slower device runs its layers' calls
    slower; a stage repeating its layers' passes holds no more parameters, its compared ops at
    its peers' pace."""
    units, pace, kinds = row.get("layer_units"), row.get("layer_pace"), row.get("layer_kinds")
    slowdown = row.get("slowdown")
    if units is None or pace is None or slowdown is None or (kinds or 0) < LAYER_KINDS:
        return False
    if (row.get("added") or 1.0) >= 1 + threshold:
        return False
    return (units >= 1 + 2 * threshold and abs(pace - 1) <= threshold
            and float(slowdown) <= units * (1 + threshold))
