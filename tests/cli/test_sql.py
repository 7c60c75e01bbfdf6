"""``mapp sql`` end to end: named queries, -c/-f, formats, --db, and one line per bad input."""

from __future__ import annotations

import csv
import io
import json

import pytest
from typer.testing import CliRunner

from mapp.cli.app import app
from tests.v1_builder import job

runner = CliRunner()


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    directory = tmp_path_factory.mktemp("sqlcli")
    job(directory, tp=2, dp=2, events_per_rank=3)
    return directory


def sql(*args: str, input: str | None = None):
    return runner.invoke(app, ["sql", *map(str, args)], input=input)


def error_line(result) -> str:
    assert result.exit_code != 0, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 1, result.output
    return errors[0]


def test_list_needs_no_bundle():
    result = sql("--list")
    assert result.exit_code == 0
    for name in ("iteration_times", "p2p_bandwidth", "pipeline_bubbles", "slowest_ops"):
        assert name in result.output


def test_named_query_as_csv_and_json(bundle):
    result = sql(bundle, "--query", "top_ops", "--param", "limit=1", "--format", "csv")
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert rows == [{**rows[0], "name": "forward", "cat": "compute", "count": "12"}]
    result = sql(bundle, "-q", "iteration_times", "--format", "json")
    assert result.exit_code == 0, result.output
    assert {row["rank"] for row in json.loads(result.stdout)} == {0, 1, 2, 3}


def test_c_runs_every_statement(bundle):
    result = sql(bundle, "-c", "SELECT count(*) AS n FROM events; SELECT 'x' AS y", "--format", "csv")
    assert result.exit_code == 0, result.output
    assert result.stdout.split() == ["n", "24", "y", "x"]


def test_f_reads_a_file_and_stdin(bundle, tmp_path):
    script = tmp_path / "q.sql"
    script.write_text("-- a comment\nSELECT count(*) AS collectives\nFROM collectives;\n")
    result = sql(bundle, "-f", script, "--format", "json")
    assert json.loads(result.stdout) == [{"collectives": 6}]
    result = sql(bundle, "-f", "-", "--format", "csv", input="SELECT 3 AS three;")
    assert result.stdout.split() == ["three", "3"]


def test_table_format(bundle):
    result = sql(bundle, "-c", "SELECT rank, tp, dp FROM ranks ORDER BY rank")
    assert result.exit_code == 0
    assert "rank" in result.stdout and "4 rows" in result.stdout


def test_db_persists(bundle, tmp_path):
    target = tmp_path / "run.duckdb"
    assert sql(bundle, "--db", target, "-c", "SELECT 1").exit_code == 0
    result = sql("--db", target, "-c", "SELECT count(*) AS n FROM events", "--format", "csv")
    assert result.exit_code == 0 and result.stdout.split() == ["n", "24"]


@pytest.mark.parametrize("args, message", [
    (["-c", "SELEC 1"], "syntax error"),
    (["-c", "SELECT * FROM nosuch"], "nosuch"),
    (["--query", "iteration_time"], "did you mean iteration_times"),
    (["--query", "top_ops", "--param", "limit=lots"], "not a valid INTEGER"),
    (["--query", "top_ops", "--param", "nope=1"], "no parameter 'nope'"),
    (["--format", "xml", "-c", "SELECT 1"], "--format xml"),
    (["-c", "COPY (SELECT 1) TO '{bundle}/out.csv'"], "read-only"),
    (["--engine", "perfetto", "-c", "SELECT 1"], "perfetto"),
])
def test_bad_input_is_one_line(bundle, args, message):
    args = [a.replace("{bundle}", str(bundle)) for a in args]
    line = error_line(sql(bundle, *args))
    assert message in line
    assert not (bundle / "out.csv").exists()


def test_missing_directory(tmp_path):
    assert "not a directory" in error_line(sql(tmp_path / "nope", "-c", "SELECT 1"))
