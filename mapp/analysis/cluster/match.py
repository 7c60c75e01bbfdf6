"""Matching on a Ray cluster: each worker selects the communication calls of some of the
dataset's files (a filter and six to eleven columns of 24: where the bytes are read), and only
those calls travel to the driver, which pairs them (a join across every rank's calls: global)
and keeps the result in the bundle's matching cache, where every later command finds it."""

from __future__ import annotations

import polars as pl

from mapp.analysis.cluster.engine import RayEngine
from mapp.analysis.graph import Matching, match_calls
from mapp.analysis.graph._load import comm_calls

__all__ = ["match_on_cluster"]


def match_on_cluster(bundle, engine: RayEngine) -> Matching:
    """Match ``bundle``'s collectives and p2p, the reading spread over ``engine``'s workers."""
    parts = [[str(path)] for path in bundle.parts]
    found = engine.map(comm_calls, parts)
    collectives = pl.concat([c for c, _ in found], how="vertical") if found else None
    p2p = pl.concat([p for _, p in found], how="vertical") if found else None
    return match_calls(bundle, collectives, p2p)
