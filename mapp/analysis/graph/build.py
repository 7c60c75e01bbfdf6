"""The dependency graph as networkx, built from the matching tables (for graph queries).

Nodes are communication calls on one rank: ``(rank, "collective", instance_id)``,
``(src, "send", pair_id)`` and ``(dst, "recv", pair_id)``, with attributes ``rank``, ``kind``,
``op``, ``iteration``, ``start_ns`` and ``end_ns`` (aligned when the matching is).
Edges carry ``kind``: ``"collective"`` from an instance's lowest-ranked member to each other
member, ``"p2p"`` from a send to its receive, ``"program"`` from each call to the next one on
the same rank. Matching itself never goes through networkx (it is vectorised over the tables);
build the graph for a window (``iterations``/``ranks``) when the job is large.

networkx is an optional dependency (``pip install 'mapp[graph]'``): nothing in mapp's own
commands needs the graph; it is for users' own graph queries.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import polars as pl

from mapp.errors import MappError

if TYPE_CHECKING:
    import networkx as nx

__all__ = ["build_graph"]


def _nodes(matching, ranks: set[int] | None, iterations: set[int] | None) -> pl.DataFrame:
    t = "_aligned_ns" if matching.aligned else "_ns"
    members = matching.members.join(
        matching.collectives.select("instance_id", "iteration"), on="instance_id", how="left"
    ).select(
        "rank", pl.lit("collective").alias("kind"), pl.col("instance_id").alias("id"), "op", "iteration",
        pl.col(f"start{t}").alias("start_ns"), pl.col(f"end{t}").alias("end_ns"),
    )
    sends = matching.p2p.select(
        pl.col("src").alias("rank"), pl.lit("send").alias("kind"), pl.col("pair_id").alias("id"),
        pl.col("send_name").alias("op"), "iteration",
        pl.col(f"send_start{t}").alias("start_ns"), pl.col(f"send_end{t}").alias("end_ns"),
    )
    recvs = matching.p2p.select(
        pl.col("dst").alias("rank"), pl.lit("recv").alias("kind"), pl.col("pair_id").alias("id"),
        pl.col("recv_name").alias("op"), "iteration",
        pl.col(f"recv_start{t}").alias("start_ns"), pl.col(f"recv_end{t}").alias("end_ns"),
    )
    nodes = pl.concat([members, sends, recvs], how="vertical_relaxed")
    if ranks is not None:
        nodes = nodes.filter(pl.col("rank").is_in(list(ranks)))
    if iterations is not None:
        nodes = nodes.filter(pl.col("iteration").is_in(list(iterations)))
    return nodes


def build_graph(
    matching,
    *,
    ranks: Iterable[int] | None = None,
    iterations: Iterable[int] | None = None,
    program_order: bool = True,
) -> nx.DiGraph:
    """Build the dependency graph of ``matching`` (optionally restricted to some ranks/iterations)."""
    try:
        import networkx as nx
    except ImportError:
        raise MappError("build_graph needs networkx", "pip install 'mapp[graph]' (or networkx)") from None
    nodes = _nodes(matching, None if ranks is None else set(ranks), None if iterations is None else set(iterations))
    graph = nx.DiGraph()
    columns = [nodes[c].to_list() for c in ("rank", "kind", "id", "op", "iteration", "start_ns", "end_ns")]
    keys = list(zip(*columns[:3]))
    graph.add_nodes_from(
        (key, {"rank": key[0], "kind": key[1], "op": op, "iteration": it, "start_ns": s, "end_ns": e})
        for key, op, it, s, e in zip(keys, *columns[3:])
    )

    coll = nodes.filter(pl.col("kind") == "collective").select("id", "rank")
    hub = coll.group_by("id").agg(pl.col("rank").min().alias("hub"))
    star = coll.join(hub, on="id").filter(pl.col("rank") != pl.col("hub"))
    graph.add_edges_from(
        ((h, "collective", i), (r, "collective", i), {"kind": "collective"})
        for i, r, h in star.iter_rows()
    )
    present = set(keys)
    for src, dst, pair in matching.p2p.select("src", "dst", "pair_id").iter_rows():
        a, b = (src, "send", pair), (dst, "recv", pair)
        if a in present and b in present:
            graph.add_edge(a, b, kind="p2p")
    if program_order:
        ordered = nodes.sort(["rank", "start_ns", "end_ns"]).select("rank", "kind", "id")
        nxt = ordered.select(pl.all().shift(-1).name.suffix("_next"))
        chain = pl.concat([ordered, nxt], how="horizontal").filter(pl.col("rank") == pl.col("rank_next"))
        graph.add_edges_from(
            ((r, k, i), (r2, k2, i2), {"kind": "program"}) for r, k, i, r2, k2, i2 in chain.iter_rows()
        )
    return graph
