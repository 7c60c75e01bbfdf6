"""``to_megatronapp.py``: a real run under mapp's capture rewritten in the original tracer's records."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import polars as pl

from mapp.analysis.ingest import load_bundle

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "to_megatronapp.py"
SOURCE = HERE / "cases-gpu2"
CASE = "gpt-pp2-mapp-healthy-gpu2"   # PP2 on 2 H200s, 4 microbatches


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)


def _records(path: Path) -> list[dict]:
    with gzip.open(path, "rt") as fh:
        return json.load(fh)


def test_a_pipeline_run_in_the_original_records(tmp_path):
    out = tmp_path / "ma"
    before = sorted(p.name for p in (SOURCE / CASE).iterdir())
    done = _run(str(SOURCE), str(out), "--only", CASE)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [CASE + "-ma"]
    assert sorted(p.name for p in (SOURCE / CASE).iterdir()) == before   # nothing written beside the source
    case = out / (CASE + "-ma")
    assert sorted(p.name for p in case.iterdir()) == ["benchmark-data-0-pipeline-0-tensor-0.json.gz",
                                                      "benchmark-data-0-pipeline-1-tensor-0.json.gz"]
    manifest = json.loads((out / "manifest.json").read_text())
    assert [c["id"] for c in manifest["cases"]] == [CASE + "-ma"]
    assert manifest["cases"][0]["format"] == "megatronapp" and manifest["cases"][0]["expect"]["suspect"] is None

    first = _records(case / "benchmark-data-0-pipeline-0-tensor-0.json.gz")
    assert first[0] == {"name": "iteration", "ph": "B", "pad_before": 0}
    names = [r["name"] for r in first if r["ph"] == "E"]
    # 1F1B on the first of 2 stages, 4 microbatches: one warmup forward, then forward/backward
    # pairs, one cooldown backward; a layer scope for each layer's forward the source timed
    steps = [n for n in names if n.startswith(("forward", "backward"))]
    iterations = names.count("iteration")
    assert steps[:3] == ["forward-warmup", "forward", "backward"] and steps.count("backward-cooldown") == iterations
    source = (SOURCE / CASE / "rank-00000.json").read_text()
    assert names.count("transformer_layer") == source.count('"name":"layer.forward"') > 0
    sends = [r for r in first if r["ph"] == "E" and r["name"] == "send-warmup"]
    assert sends and all(r["group"] == [1] and r["data"] > 0 and r["expect"] == "recv-warmup" for r in sends)
    assert not any(r["name"] in ("layer.backward", "_reduce") for r in first)

    # the reader takes them as the original's: ranks from the coordinates, the stages' p2p paired
    bundle = load_bundle(case)
    assert bundle.format == "megatronapp"
    events = pl.read_parquet(bundle.events_path)
    assert sorted(events["rank"].unique().to_list()) == [0, 1]
    assert events.filter(pl.col("cat") == "p2p")["peer"].drop_nulls().unique().sort().to_list() == [0, 1]


def test_bad_input_is_one_line_and_writes_nothing(tmp_path):
    done = _run(str(tmp_path), str(tmp_path / "out"))
    assert done.returncode != 0 and done.stderr.strip().count("\n") == 0 and "manifest.json" in done.stderr
    assert not (tmp_path / "out").exists()
    done = _run(str(SOURCE), str(SOURCE))
    assert done.returncode != 0 and "OUT is SRC" in done.stderr


def test_a_rerun_into_the_same_out_replaces_nothing(tmp_path):
    out = tmp_path / "ma"
    assert _run(str(SOURCE), str(out), "--only", CASE).returncode == 0
    written = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    done = _run(str(SOURCE), str(out), "--only", CASE)
    assert done.returncode != 0 and done.stderr.strip().count("\n") == 0 and "exists" in done.stderr
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == written
