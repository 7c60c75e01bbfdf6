"""The events table as a partitioned dataset (in this process): the same rows as the single file,
reused on the next load, checked on open, and read by every command."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import duckdb
import polars as pl
import pytest

from mapp.analysis.ingest import ingest_partitioned, load_bundle
from mapp.analysis.simulate import SimConfig, parse_fault, simulate
from mapp.sql.database import open_database

SMALL = dict(tp=2, pp=2, dp=4, layers=4, hidden=1024, seq_length=1024, microbatches=4, iterations=2, seed=3)


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dataset") / "job"
    simulate(SimConfig(**SMALL, faults=[parse_fault("slow_gpu:5:1.5")]), out)
    return out


def _copy(job: Path, tmp_path: Path, name: str) -> Path:
    target = tmp_path / name
    shutil.copytree(job, target, ignore=shutil.ignore_patterns(".mapp"))
    return target


def _rows(bundle) -> pl.DataFrame:
    # src_file is the trace's absolute path: the copies differ there only
    rows = bundle.scan().sort("rank", "ts_ns", "name", "lane", "src_line").collect()
    return rows.with_columns(pl.col("src_file").str.replace(r".*/", ""))


def test_the_partitioned_dataset_holds_the_single_files_rows_in_hive_directories(job, tmp_path):
    single = load_bundle(_copy(job, tmp_path, "single"))
    bundle, results = ingest_partitioned(_copy(job, tmp_path, "parts"), ranks_per_partition=5)
    assert not single.partitioned and bundle.partitioned
    # 16 ranks in blocks of 5: 5 + 5 + 5 + 1, each a hive directory of its own
    assert [p.parent.name for p in bundle.parts] == [f"rank_block={k}" for k in range(4)]
    assert sorted(len(r.ranks) for r in results) == [1, 5, 5, 5]
    assert _rows(bundle).equals(_rows(single))
    manifest = json.loads((bundle.cache_dir / "manifest.json").read_text())
    assert manifest["layout"] == "partitioned"
    assert [f["first_rank"] for f in manifest["partitions"]["files"]] == [0, 5, 10, 15]
    assert manifest["rows"]["events"] == single.scan().select(pl.len()).collect().item()
    assert not (bundle.cache_dir / "events.parquet").exists()


def test_the_next_load_reuses_the_dataset_and_a_damaged_file_is_rebuilt_with_a_warning(job, tmp_path):
    directory = _copy(job, tmp_path, "parts")
    built, _ = ingest_partitioned(directory, ranks_per_partition=8)
    rows = built.scan().select(pl.len()).collect().item()
    again = load_bundle(directory)
    assert again.from_cache and again.partitioned and again.parts == built.parts
    victim = built.parts[1]
    victim.write_bytes(victim.read_bytes()[:-100])  # cut off: the footer is gone
    warnings: list[str] = []
    rebuilt = load_bundle(directory, warn=warnings.append)
    assert not rebuilt.from_cache
    assert any("rank_block=1/part-0.parquet" in w and "rebuilt" in w for w in warnings), warnings
    # rebuilt as the default single file: the dataset's directory is gone with its manifest
    assert not rebuilt.partitioned and not (directory / ".mapp" / "events").exists()
    assert rebuilt.scan().select(pl.len()).collect().item() == rows


def test_sql_reads_the_dataset_and_tools_read_it_as_it_is(job, tmp_path):
    single_dir, parts_dir = _copy(job, tmp_path, "single"), _copy(job, tmp_path, "parts")
    bundle, _ = ingest_partitioned(parts_dir, ranks_per_partition=5)
    query = ("SELECT rank, cat, count(*) AS n, sum(dur_ns) AS busy, min(ts_aligned_ns) AS first "
             "FROM events GROUP BY ALL ORDER BY ALL")
    one, many = open_database(single_dir), open_database(parts_dir)
    try:
        assert many.query(query).table.equals(one.query(query).table)
        comm = "SELECT count(*), sum(arrival_spread_ns) FROM collectives"
        assert many.query(comm).table.equals(one.query(comm).table)
    finally:
        one.close()
        many.close()
    # DuckDB, with the partition key from the directory names: block 3 holds rank 15 alone
    glob = str(bundle.events_path / "*" / "*.parquet")
    blocks = duckdb.sql(f"SELECT rank_block, min(rank), max(rank) FROM read_parquet('{glob}', hive_partitioning=true) "
                        "GROUP BY ALL ORDER BY 1").fetchall()
    assert blocks == [(0, 0, 4), (1, 5, 9), (2, 10, 14), (3, 15, 15)]
    hive = pl.scan_parquet(bundle.events_path, hive_partitioning=True).filter(pl.col("rank_block") == 3)
    assert hive.select(pl.col("rank").unique()).collect()["rank"].to_list() == [15]


def test_mapp_trace_ingest_partitioned_writes_the_dataset_in_this_process(job, tmp_path):
    import subprocess
    import sys

    directory = _copy(job, tmp_path, "parts")
    said = subprocess.run([sys.executable, "-m", "mapp", "trace", "ingest", str(directory), "--partitioned",
                           "--ranks-per-partition", "5"], capture_output=True, text=True, timeout=300)
    assert said.returncode == 0, said.stderr
    assert "in this process into 4 files" in said.stdout and "per worker" in said.stdout
    bundle = load_bundle(directory)
    assert bundle.from_cache and len(bundle.parts) == 4
    # one worker (this process) did the 4 blocks and the 16 files
    row = next(line for line in said.stdout.splitlines() if ":" in line and "│" in line)
    cells = [c.strip() for c in row.split("│") if c.strip()]
    assert cells[1:3] == ["4", "16"], row
