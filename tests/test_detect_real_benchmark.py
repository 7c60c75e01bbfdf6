"""``benchmarks/detect_real.py``: many corpora scored at once, saved, and compared run to run."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from mapp.analysis.ingest import load_bundle
from mapp.bench.real import _drop_rank, load_corpus, result_record, run_case

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "tests" / "corpus" / "cases"
IDS = ("tp2dp2-plain-prof-healthy", "tp2dp2-plain-prof-2.5x-r2")


def _corpus(tmp_path: Path, expect_fault: dict) -> Path:
    """The two committed jobs above in a corpus of their own, the fault's answer as given."""
    out = tmp_path / "corpus"
    cases = [c for c in json.loads((SOURCE / "manifest.json").read_text())["cases"] if c["id"] in IDS]
    for c in cases:
        if not (out / c["path"]).exists():
            shutil.copytree(SOURCE / c["path"], out / c["path"])
        if c["expect"]["suspect"] is not None:
            c["expect"] = {"suspect": expect_fault}
    (out / "manifest.json").write_text(json.dumps({"version": 1, "cases": cases}))
    return out


def _run(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / "detect_real.py"), *map(str, args),
                           "--workers", "1"], capture_output=True, text=True, env={"COLUMNS": "200", "PATH": ""},
                          timeout=300)


def test_a_saved_case_records_where_it_lies_what_was_expected_and_what_was_found():
    case = next(c for c in load_corpus(SOURCE) if c.id == "tp2dp2-plain-prof-2.5x-r2")
    record = result_record(run_case(case))
    assert record["key"] == str((SOURCE / case.directory.name).resolve())
    assert record["expected"] == "slow_compute 2"
    assert record["right"] is True and record["top"].endswith(" 2")
    assert json.loads(json.dumps(record)) == record   # plain JSON


def test_where_several_ranks_were_slowed_any_is_a_right_answer_and_whether_all_were_named_is_said(tmp_path):
    # the committed job slowed rank 2 alone; scored as if a slow node had slowed 0 and 2 too
    corpus = _corpus(tmp_path, {"rank": 0, "ranks": [0, 2], "kinds": ["slow_compute"]})
    case = next(c for c in load_corpus(corpus) if c.id == "tp2dp2-plain-prof-2.5x-r2")
    record = result_record(run_case(case))
    assert record["expected"] == "slow_compute 0,2"
    assert record["right"] is True and record["top"] == "slow_compute 2"
    assert record["named_all"] is False   # rank 0 was not slowed, so not named
    healthy = next(c for c in load_corpus(corpus) if c.id == "tp2dp2-plain-prof-healthy")
    assert result_record(run_case(healthy))["named_all"] is None
    # a rank outside them is wrong
    corpus = _corpus(tmp_path, {"rank": 0, "ranks": [0, 1], "kinds": ["slow_compute"]})
    case = next(c for c in load_corpus(corpus) if c.id == "tp2dp2-plain-prof-2.5x-r2")
    assert result_record(run_case(case))["right"] is False


def test_a_case_scored_without_a_ranks_trace_expects_no_one_named_for_the_missing_rank():
    case = next(c for c in load_corpus(SOURCE) if c.id == "tp2dp2-plain-prof-2.5x-r2")
    elsewhere = result_record(run_case(case, without=0))   # rank 2, slowed, is still traced
    assert elsewhere["expected"] == "slow_compute 2" and elsewhere["right"] is True
    assert elsewhere["top"] == "slow_compute 2"
    missing = result_record(run_case(case, without=2))     # the slowed rank's trace is gone
    assert missing["expected"] == "none"
    assert missing["right"] is (missing["top"] is None)
    assert (SOURCE / case.directory.name / "rank-2.json.gz").is_file()   # left out of the copy only


def test_of_several_ranks_slowed_alike_the_ones_still_traced_are_the_answer(tmp_path):
    # scored as if ranks 0 and 2 had been slowed: with rank 0's trace gone, rank 2 is the answer
    corpus = _corpus(tmp_path, {"rank": 0, "ranks": [0, 2], "kinds": ["slow_compute"]})
    case = next(c for c in load_corpus(corpus) if c.id == "tp2dp2-plain-prof-2.5x-r2")
    record = result_record(run_case(case, without=0))
    assert record["expected"] == "slow_compute 2"
    assert record["right"] is True and record["top"] == "slow_compute 2"


def test_the_file_left_out_is_the_one_whose_trace_holds_the_rank_whatever_its_name(tmp_path):
    # TensorBoard's handler names its files host_pid.timestamp: the traces say which rank each is
    source = ROOT / "tests" / "corpus" / "cases-users" / "ddp4-transformer-tb-fwd1.4x-r0"
    copy = tmp_path / "job"
    shutil.copytree(source, copy, ignore=shutil.ignore_patterns(".mapp"))
    _drop_rank(copy, 2)
    assert len(list(copy.glob("*.pt.trace.json.gz"))) == 3
    assert sorted(load_bundle(copy).ranks["rank"].to_list()) == [0, 1, 3]


def test_a_second_run_lists_the_cases_whose_answer_changed(tmp_path):
    corpus = _corpus(tmp_path, {"rank": 2, "kinds": ["slow_compute"]})
    first = _run(corpus, "--save", tmp_path / "before.jsonl")
    assert first.returncode == 0, first.stderr
    saved = [json.loads(line) for line in (tmp_path / "before.jsonl").read_text().splitlines()]
    assert sorted(r["id"] for r in saved) == sorted(IDS) and all(r["right"] for r in saved)
    # the same traces, now expected to name another rank: that job reads "broken", the other stays
    _corpus(tmp_path, {"rank": 0, "kinds": ["slow_compute"]})
    second = _run(corpus, "--compare", tmp_path / "before.jsonl")
    assert second.returncode == 0, second.stderr
    assert "2 jobs in both, right 2 then, 1 now" in second.stdout
    assert "broken tp2dp2-plain-prof-2.5x-r2" in second.stdout
    assert "tp2dp2-plain-prof-healthy (" not in second.stdout.split("compared with")[1]


def test_a_results_file_that_is_not_one_is_a_one_line_error(tmp_path):
    bad = tmp_path / "before.jsonl"
    bad.write_text("not json\n")
    result = _run(_corpus(tmp_path, {"rank": 2, "kinds": ["slow_compute"]}), "--compare", bad)
    assert result.returncode == 2 and "not a file of saved results" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr


def test_the_same_corpus_elsewhere_is_compared_case_for_case(tmp_path):
    # another worktree's committed corpora lie under another path: the same corpus name and id
    # are the same case
    corpus = _corpus(tmp_path / "a", {"rank": 2, "kinds": ["slow_compute"]})
    assert _run(corpus, "--save", tmp_path / "before.jsonl").returncode == 0
    elsewhere = tmp_path / "b" / "corpus"
    shutil.copytree(corpus, elsewhere)
    second = _run(elsewhere, "--compare", tmp_path / "before.jsonl")
    assert second.returncode == 0, second.stderr
    assert "2 jobs in both, right 2 then, 2 now" in second.stdout


def _one_case_corpus(corpus: str, case_id: str, tmp_path: Path) -> tuple[dict, Path]:
    """The manifest entry of ``case_id`` in committed ``corpus``, and a corpus of it alone under
    ``tmp_path`` (the committed one is never written to)."""
    src = ROOT / "tests" / "corpus" / corpus
    case = next(c for c in json.loads((src / "manifest.json").read_text())["cases"] if c["id"] == case_id)
    out = tmp_path / "corpus"
    shutil.copytree(src / case["path"], out / case["path"])
    (out / "manifest.json").write_text(json.dumps({"version": 1, "cases": [case]}))
    return case, out


def test_a_sleeping_pipeline_stage_is_costed_the_time_its_job_measured_it_slept(tmp_path):
    # PP2 under mapp's capture, 28 ms slept before each of rank 1's 4 microbatches: the job timed
    # 112.3 ms a step (its manifest's injected_ms_per_step); the verdict costs it 114.2 ms
    case, out = _one_case_corpus("cases-fresh", "gpt-pp2-mapp-hostsleep28ms-r1-f121", tmp_path)
    result = _run(out, "--save", tmp_path / "after.jsonl")
    assert result.returncode == 0, result.stderr
    record = json.loads((tmp_path / "after.jsonl").read_text())
    assert record["pipeline"] is True and record["injected_ms_per_step"] == case["measured"]["injected_ms_per_step"]
    assert 0.95 < record["cost_ms"] / record["injected_ms_per_step"] < 1.05
    row = next(line for line in result.stdout.splitlines() if "slow_host, pipeline" in line)
    assert row.split("│")[2].strip() == "1"            # one job


def test_a_gpu_jobs_injected_work_timed_on_its_host_is_no_cost_to_compare_with(tmp_path):
    # 2 H200s, plain DDP, 1.5x the forward's matmuls on rank 1: its host timed the extra matmuls
    # as launched, 0.2 ms a step, against a verdict's cost of ~11 ms: no row of the cost table
    case, out = _one_case_corpus("cases-gpu2", "ddp2-prof-fwd1.5x-r1-gpu2", tmp_path)
    result = _run(out, "--save", tmp_path / "after.jsonl")
    assert result.returncode == 0, result.stderr
    record = json.loads((tmp_path / "after.jsonl").read_text())
    assert record["right"] is True and record["injected_ms_per_step"] == 0.2 and record["cost_ms"] > 1.0
    assert "cost a step" not in result.stdout
