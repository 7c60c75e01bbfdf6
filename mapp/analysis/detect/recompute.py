"""Activation recomputation: a forward pass replayed inside the backward.

A reentrant checkpoint (``torch.utils.checkpoint`` with ``use_reentrant=True``, Megatron's
``CheckpointFunction``) runs its blocks under ``no_grad`` in the forward, keeping only their
inputs, and again with autograd on inside its own backward node, to back-propagate through them.
A stage that recomputes some blocks thus calls their forward ops twice, once outside its graph:
the shape of a stage running its forward again and discarding it (a slower device emulated by
repeated work), which ``no_grad_passes`` counts as added work. The replay is told by where it
runs: inside a backward node's span, with autograd on (``replayed``), and is not counted there
(a user's 1F1B PP4 recomputing 2 blocks on its first stage only, no fault: 1.98x its peers'
share outside its graph before, 1.00x now).

``stage_gemms`` still counts the replay's GEMMs: that stage still reads "slow compute 0", its
GEMMs 2.0x its layers'. Left out of them, three stages of the same job slowed by repeating their
blocks (the replays repeated too) lost the GEMMs that named them: the factor repeats every op of
their layers, so their layers read 2x as well and only the replays' GEMMs stood beyond them.
"""

from __future__ import annotations

import polars as pl

__all__ = ["FORWARD", "replayed"]

FORWARD = ~pl.col("name").str.contains("Backward", literal=True) & ~pl.col("name").str.starts_with("autograd::")
"""Ops of a forward pass: the backward's nodes and the engine's spans carry their forward's number."""

_BACKWARD_NODE = "autograd::engine::evaluate_function:"
"""The span of a backward node (its function's name after it)."""


def replayed(ops: pl.DataFrame) -> pl.DataFrame:
    """``ops`` with ``replayed``: a forward op recorded with autograd on inside a backward node's
    span, on its thread: activation recomputation (a reentrant checkpoint, as Megatron's
    ``CheckpointFunction`` is, runs its blocks under ``no_grad`` in the forward and again with
    autograd on in its backward): its ``no_grad`` pass is then the stage's forward, not work
    added. False throughout where ``ops`` carry no times or no backward node."""
    lane = ["lane"] if "lane" in ops.columns else []
    in_graph = pl.col("in_graph").fill_null(False) if "in_graph" in ops.columns else pl.lit(False)
    if not {"ts_ns", "dur_ns"} <= set(ops.columns):
        return ops.with_columns(replayed=pl.lit(False))
    nodes = (ops.filter(pl.col("name").str.starts_with(_BACKWARD_NODE))
             .select("rank", *lane, start="ts_ns", stop=pl.col("ts_ns") + pl.col("dur_ns")).sort("start"))
    if nodes.is_empty():
        return ops.with_columns(replayed=pl.lit(False))
    # (the nodes nest: each op against the latest start before it and the furthest end so far)
    nodes = nodes.with_columns(stop=pl.col("stop").cum_max().over("rank", *lane))
    marked = (ops.with_row_index("_row").sort("ts_ns")
              .join_asof(nodes, left_on="ts_ns", right_on="start", by=["rank", *lane], strategy="backward",
                         check_sortedness=False)
              .with_columns(replayed=(in_graph & FORWARD
                                      & pl.col("stop").is_not_null() & (pl.col("ts_ns") < pl.col("stop"))))
              .sort("_row").drop("_row", "start", "stop"))
    return marked
