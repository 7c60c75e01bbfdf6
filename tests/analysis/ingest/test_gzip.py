"""Gzip-compressed PyTorch profiler traces (``*.pt.trace.json.gz``, as PyTorch's
tensorboard_trace_handler(use_gzip=True), HTA and TraceLens write them) are found and read
like plain ones; a compressed file cut off mid-write is salvaged like a plain one."""

from __future__ import annotations

import gzip
import pathlib

import polars as pl
import pytest

from mapp.analysis.ingest import kineto
from mapp.analysis.ingest._json import load_document, read_head
from mapp.analysis.ingest.discover import discover
from mapp.errors import TraceFormatError

H200 = pathlib.Path(__file__).parent.parent.parent / "fixtures" / "kineto_nccl_h200"
PLAIN = sorted(H200.glob("rank-*.json"))


def _read(files):
    warnings: list[str] = []
    events, ranks = kineto.read(list(files), warn=warnings.append)
    return events, ranks, warnings


def _gzip_copies(tmp_path: pathlib.Path, name: str = "worker{rank}.1700000000.pt.trace.json.gz") -> list[pathlib.Path]:
    out = []
    for rank, src in enumerate(PLAIN):
        dst = tmp_path / name.format(rank=rank)
        dst.write_bytes(gzip.compress(src.read_bytes()))
        out.append(dst)
    return out


def test_gzip_trace_reads_like_the_plain_one(tmp_path):
    packed = _gzip_copies(tmp_path)
    plain_events, plain_ranks, _ = _read(PLAIN)
    gz_events, gz_ranks, warnings = _read(packed)
    assert warnings == []
    assert gz_events.drop("src_file").equals(plain_events.drop("src_file"))
    assert gz_ranks.drop("src_file").equals(plain_ranks.drop("src_file"))
    assert set(gz_events["src_file"].unique()) == {str(p) for p in packed}


def test_discover_takes_gzip_kineto_traces(tmp_path):
    packed = _gzip_copies(tmp_path)
    (tmp_path / "notes.json.gz").write_bytes(gzip.compress(b'{"hello": 1}'))
    found = discover(tmp_path)
    assert found.format == "kineto"
    assert found.files == sorted(packed)
    assert found.ignored == [tmp_path / "notes.json.gz"]
    assert discover(tmp_path, "kineto").files == sorted(packed + [tmp_path / "notes.json.gz"])


def test_gzip_named_like_a_profiler_trace_but_not_one_is_an_error(tmp_path):
    _gzip_copies(tmp_path)
    bad = tmp_path / "worker9.1700000000.pt.trace.json.gz"
    bad.write_bytes(gzip.compress(b"not a trace"))
    with pytest.raises(TraceFormatError, match="worker9.*named like a kineto trace.*'not a trace'"):
        discover(tmp_path)


def test_compressed_rank_file_is_not_taken_for_a_mapp_v1_trace(tmp_path):
    # a gzip file with a plain .json name: its raw bytes are not a v1 trace, and it says so
    (tmp_path / "rank-00000.json").write_bytes(gzip.compress(PLAIN[0].read_bytes()))
    with pytest.raises(TraceFormatError, match="named like a mapp trace"):
        discover(tmp_path)


def test_cut_off_gzip_stream_is_salvaged(tmp_path):
    whole = PLAIN[1].read_bytes()
    packed = gzip.compress(whole)
    path = tmp_path / "rank-1.pt.trace.json.gz"
    path.write_bytes(packed[: len(packed) * 2 // 3])          # the writer died mid-stream
    events, ranks, warnings = _read([path])
    plain_events, _, _ = _read([PLAIN[1]])
    assert ranks["rank"].to_list() == [1]
    assert len(warnings) == 1 and warnings[0].startswith(f"{path}: truncated at byte {path.stat().st_size}; kept ")
    assert 0 < events.height < plain_events.height
    # what was kept is exactly the head of the plain file's events
    kept = events.drop("src_file").sort("ts_ns", "dur_ns", "name", "lane")
    assert kept.join(plain_events.drop("src_file"), on=kept.columns, how="anti", nulls_equal=True).height == 0


def test_several_gzip_members_are_one_document(tmp_path):
    whole = PLAIN[0].read_bytes()
    half = len(whole) // 2
    path = tmp_path / "rank-0.json.gz"
    path.write_bytes(gzip.compress(whole[:half]) + gzip.compress(whole[half:]))
    document, salvage = load_document(path, (b"]}",), "trace")
    assert salvage.truncated_at is None
    assert document == load_document(PLAIN[0], (b"]}",), "trace")[0]


def test_damaged_gzip_names_the_file(tmp_path):
    path = tmp_path / "rank-0.pt.trace.json.gz"
    path.write_bytes(b"\x1f\x8b" + b"\x00" * 64)
    with pytest.raises(TraceFormatError, match="rank-0.pt.trace.json.gz: damaged gzip data"):
        load_document(path, (b"]}",), "trace")


def test_read_head_decompresses_only_what_it_needs(tmp_path):
    body = b'{"traceEvents": [' + b'{"ph": "X"},' * 200_000 + b"]}"
    path = tmp_path / "big.json.gz"
    path.write_bytes(gzip.compress(body))
    assert read_head(path, 4096) == body[:4096]
    plain = tmp_path / "plain.json"
    plain.write_bytes(body)
    assert read_head(plain, 100) == body[:100]
    short = tmp_path / "short.json.gz"
    short.write_bytes(gzip.compress(b"{}"))
    assert read_head(short, 4096) == b"{}"


def test_gzip_events_are_dated_and_stepped_like_plain(tmp_path):
    packed = _gzip_copies(tmp_path, "rank-{rank}.json.gz")
    events, _, _ = _read(packed)
    steps = events.filter(pl.col("cat") == "iteration")
    assert steps.height > 0
    assert events["ts_ns"].min() > 10**18            # baseTimeNanoseconds was applied (Unix-epoch ns)


MEGATRONAPP = pathlib.Path(__file__).parent.parent.parent / "fixtures" / "megatronapp_original"
AGGREGATED = pathlib.Path(__file__).parent.parent.parent / "fixtures" / "megatronapp_aggregate" / "aggregated"


def test_gzip_megatronapp_files_and_their_aggregated_trace_are_found_and_read(tmp_path):
    # MegatronApp's per-rank files and aggregate.py's one file, gzipped to be copied off a cluster
    from mapp.analysis.ingest import megatronapp
    per_rank, merged = tmp_path / "per-rank", tmp_path / "aggregated"
    per_rank.mkdir()
    merged.mkdir()
    plain = sorted((MEGATRONAPP / "pp").glob("benchmark-data-*.json"))
    for src in plain:
        (per_rank / (src.name + ".gz")).write_bytes(gzip.compress(src.read_bytes()))
    (merged / "benchmark.json.gz").write_bytes(gzip.compress((AGGREGATED / "benchmark.json").read_bytes()))
    for folder, originals in ((per_rank, plain), (merged, [AGGREGATED / "benchmark.json"])):
        found = discover(folder)
        assert found.format == "megatronapp" and len(found.files) == len(originals)
        packed, _ = megatronapp.read(found.files, warn=lambda _: None)
        unpacked, _ = megatronapp.read(originals, warn=lambda _: None)
        cols = ["rank", "name", "ts_ns", "dur_ns", "iteration", "microbatch"]
        assert packed.select(cols).sort(cols).equals(unpacked.select(cols).sort(cols))
