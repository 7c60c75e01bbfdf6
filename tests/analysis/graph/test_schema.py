"""The matching tables are what ``mapp.analysis.graph.schema`` says: names, types, order, stage."""

from __future__ import annotations

from mapp.analysis.align import align_bundle
from mapp.analysis.graph import Matching, match_bundle
from mapp.analysis.graph.schema import COLLECTIVES, MATCHING_TABLES, MEMBERS, P2P, describe
from mapp.analysis.ingest import load_bundle
from mapp.analysis.simulate import SimConfig, simulate


def test_empty_matching_is_the_raw_schema():
    empty = Matching.empty()
    for name, table in MATCHING_TABLES.items():
        frame = getattr(empty, name)
        assert dict(frame.schema) == table.schema() and frame.is_empty(), name


def test_matching_produces_exactly_the_schema_at_each_stage(tmp_path):
    simulate(SimConfig(tp=2, pp=2, dp=2, microbatches=4, iterations=2, layers=4, hidden=512, seed=2), tmp_path)
    bundle = load_bundle(tmp_path)
    raw = match_bundle(bundle, use_cache=False)
    assert len(raw.collectives) and len(raw.members) and len(raw.p2p)
    assert dict(raw.collectives.schema) == COLLECTIVES.schema(timing=True)
    assert dict(raw.members.schema) == MEMBERS.schema()
    assert dict(raw.p2p.schema) == P2P.schema()
    aligned = raw.with_clock(align_bundle(bundle, raw))
    assert dict(aligned.collectives.schema) == COLLECTIVES.schema(timing=True)
    assert dict(aligned.members.schema) == MEMBERS.schema(aligned=True)
    assert dict(aligned.p2p.schema) == P2P.schema(aligned=True)
    # the cached copy is read back as the same tables (a type that drifted from the schema
    # would make every cache read fail the check and match again)
    match_bundle(bundle)
    cached = match_bundle(bundle)
    assert dict(cached.collectives.schema) == COLLECTIVES.schema(timing=True)


def test_every_column_is_described_once():
    for table in MATCHING_TABLES.values():
        names = [c.name for c in table.columns]
        assert len(names) == len(set(names)), table.name
        assert all(c.meaning for c in table.columns)
        text = describe(table)
        assert all(f"  {n} (" in text for n in names)
