"""Ingest and matching on a local Ray cluster of two workers: the same answers as one process,
a dataset that Ray Data, DuckDB and (if present) Spark read as it is, and one-line errors."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

ray = pytest.importorskip("ray")

from mapp.analysis.ingest import load_bundle  # noqa: E402
from mapp.analysis.simulate import SimConfig, parse_fault, simulate  # noqa: E402
from mapp.sql.database import open_database  # noqa: E402

SMALL = dict(tp=2, pp=2, dp=4, layers=4, hidden=1024, seq_length=1024, microbatches=4, iterations=2, seed=5)
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}


def _mapp(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", "mapp", *args], capture_output=True, text=True, env=ENV,
                            timeout=300)
    if check:
        assert result.returncode == 0, result.stderr
    return result


@pytest.fixture(scope="module")
def jobs(tmp_path_factory) -> tuple[Path, Path]:
    """One faulty job twice: ``single`` read as usual, ``cluster`` by ``--engine ray``."""
    root = tmp_path_factory.mktemp("ray")
    simulate(SimConfig(**SMALL, faults=[parse_fault("slow_gpu:6:1.4")]), root / "single")
    shutil.copytree(root / "single", root / "cluster")
    said = _mapp("trace", "ingest", str(root / "cluster"), "--engine", "ray", "--workers", "2",
                 "--ranks-per-partition", "3", check=False)
    if said.returncode == 6 and "cannot start a local Ray cluster" in said.stderr:
        # the machine cannot run Ray's processes at all (mapp said so in one line): not mapp's failure
        pytest.skip(said.stderr.strip())
    assert said.returncode == 0, said.stderr
    assert "on ray (2 workers, local)" in said.stdout and "into 6 files" in said.stdout, said.stdout
    return root / "single", root / "cluster"


def _verdict(directory: Path, out: Path) -> dict:
    _mapp("detect", str(directory), "--threshold", "0.1", "--json", str(out))
    verdict = json.loads(out.read_text())
    verdict.pop("timings_s")
    verdict.pop("source")   # the directory's path
    return verdict


def test_detect_and_sql_give_the_single_process_answers(jobs, tmp_path):
    single, cluster = jobs
    bundle = load_bundle(cluster)
    assert bundle.from_cache and bundle.partitioned and len(bundle.parts) == 6
    assert (cluster / ".mapp" / "matching" / "key").is_file()   # matched on the cluster, kept for later
    one, many = _verdict(single, tmp_path / "one.json"), _verdict(cluster, tmp_path / "many.json")
    assert many == one
    assert [s["rank"] for s in one["suspects"]][:1] == [6]       # and the answer is the injected fault
    queries = ["SELECT rank, cat, name, count(*), sum(dur_ns), min(ts_aligned_ns) FROM events GROUP BY ALL ORDER BY ALL",
               "SELECT op, \"group\", count(*), sum(arrival_spread_ns), max(last_arriver) FROM collectives "
               "GROUP BY ALL ORDER BY ALL",
               "SELECT count(*), sum(recv_end_ns - send_start_ns) FROM p2p",
               "SELECT * FROM findings ORDER BY ALL"]
    a, b = open_database(single), open_database(cluster)
    try:
        for query in queries:
            assert b.query(query).table.equals(a.query(query).table), query
    finally:
        a.close()
        b.close()


def test_detect_in_windows_on_the_workers_gives_the_windows_of_one_process(jobs, tmp_path):
    _, cluster = jobs
    verdicts = []
    for where, extra in (("here", []), ("ray", ["--engine", "ray", "--workers", "2"])):
        out = tmp_path / f"{where}.json"
        _mapp("detect", str(cluster), "--window", "1", "--json", str(out), *extra)
        verdict = json.loads(out.read_text())
        verdict.pop("timings_s")
        verdicts.append(verdict)
    assert verdicts[0] == verdicts[1]
    top = verdicts[0]["suspects"][0]
    assert top["rank"] == 6 and top["evidence"]["windows"] == {"found_in": 2, "of": 2, "iterations": [0, 1]}


def test_ray_data_duckdb_and_spark_read_the_dataset_as_it_is(jobs):
    _, cluster = jobs
    events = cluster / ".mapp" / "events"
    rows = load_bundle(cluster).scan().select(pl.len()).collect().item()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        pytest.importorskip("pandas")
        from ray import data as ray_data

        data = ray_data.read_parquet(str(events), partitioning=ray_data.datasource.Partitioning("hive"))
        assert data.count() == rows
        per_block = {r["rank_block"]: r["count()"] for r in data.groupby("rank_block").count().take_all()}
        assert sorted(int(k) for k in per_block) == list(range(6))   # 16 ranks, 3 a block
        assert sum(per_block.values()) == rows
    finally:
        ray.shutdown()
    import duckdb

    ranks = duckdb.sql(f"SELECT rank_block, count(DISTINCT rank) FROM read_parquet('{events}/*/*.parquet', "
                       "hive_partitioning=true) GROUP BY 1 ORDER BY 1").fetchall()
    assert ranks == [(0, 3), (1, 3), (2, 3), (3, 3), (4, 3), (5, 1)]
    pyspark = pytest.importorskip("pyspark", reason="pyspark is not installed: Spark SQL's reading is documented only")
    spark = pyspark.sql.SparkSession.builder.master("local[1]").getOrCreate()
    try:
        assert spark.read.parquet(str(events)).count() == rows
    finally:
        spark.stop()


def test_a_damaged_trace_fails_on_a_worker_with_the_one_line_error_of_one_process(jobs, tmp_path):
    single, _ = jobs
    broken = tmp_path / "broken"
    shutil.copytree(single, broken, ignore=shutil.ignore_patterns(".mapp"))
    (broken / "rank-00004.json").write_text('[\n{"ph":"M","name":"mapp","args":{"format":"mapp-trace","version":1,'
                                            '"rank":4,"world_size":16}},\n{"ph":"X", garbage\n')
    here = _mapp("trace", "ingest", str(broken), check=False)
    there = _mapp("trace", "ingest", str(broken), "--engine", "ray", "--workers", "2", check=False)
    assert there.returncode == here.returncode
    first = lambda text: [line for line in text.splitlines() if line.startswith("error:") or "warning" in line]  # noqa: E731
    assert first(there.stderr) == first(here.stderr) and "Traceback" not in there.stderr


@pytest.mark.parametrize("args, says", [
    (["--engine", "dask"], "--engine dask: unknown engine"),
    (["--workers", "2"], "--address and --workers need --engine ray"),
    (["--engine", "ray", "--workers", "2", "--address", "auto"], "--workers with --address"),
])
def test_engine_options_that_do_not_fit_get_one_line(jobs, args, says):
    single, _ = jobs
    result = _mapp("trace", "ingest", str(single), *args, check=False)
    assert result.returncode == 2 and says in result.stderr and "Traceback" not in result.stderr
