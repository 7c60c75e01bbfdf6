"""Output that survives a pipe, a CI log and an 80-column terminal: no cell split or cut.

Each command runs in a subprocess, as a user or a CI job runs it: stdout a pipe and
``COLUMNS=80``, or a pseudo-terminal 80 columns wide.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mapp.analysis.simulate import SimConfig, parse_fault, simulate

WIDTH = 80
# Wide enough that a table of its results cannot fit in 80 columns.
QUERY = ("SELECT rank, count(*) AS events, sum(dur_ns) AS busy_ns, min(ts_ns) AS first_ts_ns, "
         "max(end_ns) AS last_end_ns, max(dur_ns) AS longest_ns, min(dur_ns) AS shortest_ns, "
         "sum(dur_ns) * 1000 AS busy_ps, max(end_ns) * 1000 AS last_end_ps "
         "FROM events WHERE ph = 'X' GROUP BY rank ORDER BY rank")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("TERMINAL_WIDTH", "FORCE_COLOR", "PY_COLORS", "GITHUB_ACTIONS", "LINES")}
    return {**env, "COLUMNS": str(WIDTH), "NO_COLOR": "1", **extra}


def _mapp(*args: str, **env: str) -> subprocess.CompletedProcess:
    """``mapp ARGS`` with stdout and stderr pipes, as in a CI log."""
    result = subprocess.run([sys.executable, "-m", "mapp", *args], capture_output=True, text=True,
                            env=_env(**env), timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    return result


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("width") / "job"
    simulate(SimConfig(tp=1, pp=2, dp=2, microbatches=2, iterations=2, layers=4, hidden=512, seed=5), directory)
    return directory


def _expected_rows(directory: Path) -> list[list[str]]:
    rows = list(csv.reader(io.StringIO(_mapp("sql", str(directory), "-c", QUERY, "--format", "csv").stdout)))
    assert len(rows) == 5 and len(rows[0]) == 9
    return rows  # the header, then one row per rank


def _whole(value: str, line: str) -> bool:
    """``value`` appears in ``line`` as a whole cell, not the start or end of a longer number."""
    return re.search(rf"(?<![\w.,]){re.escape(value)}(?![\w.,])", line) is not None


def _assert_rows_whole(output: str, rows: list[list[str]]) -> None:
    lines = output.splitlines()
    for row in rows:
        assert any(all(_whole(v, line) for v in row) for line in lines), (row, output)
    assert "…" not in output


def test_sql_table_piped_keeps_every_row_on_one_line(traces):
    rows = _expected_rows(traces)
    assert max(len(v) for row in rows for v in row) >= 12  # numbers long enough to have been split
    result = _mapp("sql", str(traces), "-c", QUERY)
    _assert_rows_whole(result.stdout, rows)
    assert max(len(line) for line in result.stdout.splitlines()) > WIDTH  # rendered wider, not squeezed


def test_sql_table_in_a_narrow_terminal_is_whole_and_hints_csv(traces):
    pexpect = pytest.importorskip("pexpect")
    rows = _expected_rows(traces)
    child = pexpect.spawn(sys.executable, ["-m", "mapp", "sql", str(traces), "-c", QUERY], env=_env(),
                          encoding="utf-8", timeout=120, dimensions=(40, WIDTH))
    output = child.read()  # up to end of output
    child.close()
    assert child.exitstatus == 0, output
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", output).replace("\r\n", "\n")  # styles (bold) off
    _assert_rows_whole(plain, rows)
    assert "--format csv" in output


def test_progress_of_a_long_path_keeps_its_elapsed_time_whole_in_80_columns(tmp_path):
    """A reading bar that lasts: a long path gives way, the bytes and elapsed time stay whole.

    Under load the bar of ``mapp sql`` showed in CI's terminal, its path pushing the elapsed
    time to "0:00:…" (and the table test above to fail on that ellipsis).
    """
    pexpect = pytest.importorskip("pexpect")
    long_path = "/tmp/pytest-of-root/pytest-101/popen-gw0/width0/a-rather-long-job-name"
    code = ("import time\n"
            "from mapp.cli._ui import progress_bar\n"
            f"with progress_bar('reading {long_path}', unit='bytes') as update:\n"
            "    for i in range(4):\n"
            "        update(i * 1_000_000, 9_000_000)\n"
            "        time.sleep(0.3)\n")
    child = pexpect.spawn(sys.executable, ["-c", code], env=_env(), encoding="utf-8", timeout=120,
                          dimensions=(40, WIDTH))
    output = child.read()
    child.close()
    assert child.exitstatus == 0, output
    lines = [re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", line) for line in re.split(r"[\r\n]+", output)]
    drawn = [line for line in lines if "a-rather-long-job-name" in line]
    assert drawn, output  # the bar was drawn (1.2 s against rich's 0.1 s refresh)
    assert all(re.search(r" (\d\.\d/9\.0 MB|0/\? bytes) \d:\d\d:\d\d$", line.rstrip()) for line in drawn), drawn
    assert all(len(line.rstrip()) <= WIDTH for line in drawn) and "…" not in output


def test_sql_shell_table_in_a_narrow_terminal_hints_mode_csv(traces):
    """The shell says ``.mode csv`` (its own spelling) when a result is wider than the terminal."""
    from mapp.cli._ui import FitConsole
    from mapp.sql import open_database
    from mapp.sql.shell import Shell

    out, err = io.StringIO(), io.StringIO()
    console = FitConsole(file=out, width=WIDTH, force_terminal=True, color_system=None,
                         hints=FitConsole(file=err, width=WIDTH, color_system=None))
    db = open_database(traces)
    try:
        Shell(db, console).handle(QUERY + ";")
    finally:
        db.close()
    _assert_rows_whole(out.getvalue(), _expected_rows(traces))
    assert ".mode csv" in err.getvalue() and "--format" not in err.getvalue()


def test_detect_report_piped_keeps_each_suspect_on_one_line(tmp_path):
    directory = tmp_path / "slow"
    simulate(SimConfig(tp=2, pp=2, dp=2, microbatches=4, iterations=3, layers=4, hidden=1024, seed=2,
                       faults=[parse_fault("slow_gpu:5:1.5")]), directory)
    out = _mapp("detect", str(directory)).stdout
    suspect = [line for line in out.splitlines() if re.match(r"\s*1 │", line)]
    assert len(suspect) == 1 and "slow compute" in suspect[0] and "->" in suspect[0], out
    assert "…" not in out


def test_bench_detect_real_piped_keeps_case_and_source_whole(tmp_path):
    source = Path(__file__).resolve().parents[1] / "corpus" / "cases"
    case = [c for c in json.loads((source / "manifest.json").read_text())["cases"]
            if c["id"] == "tp2dp2-plain-prof-healthy"][0]
    shutil.copytree(source / case["path"], tmp_path / case["path"])
    (tmp_path / "manifest.json").write_text(json.dumps({"version": 1, "cases": [case]}))
    out = _mapp("bench", "detect", "--scale", "none", "--real", str(tmp_path)).stdout
    row = [line for line in out.splitlines() if case["id"] in line]
    assert len(row) == 1 and case["source"] in row[0] and row[0].rstrip().endswith("yes"), out


def _every_command() -> list[list[str]]:
    """Every command and command group of ``mapp``, walked from the app as registered."""
    import typer.main

    from mapp.cli.app import app

    found: list[list[str]] = []

    def walk(command, path: list[str]) -> None:  # Typer's own click: a group has .commands
        found.append(path)
        if hasattr(command, "commands"):
            for name, sub in command.commands.items():
                if not sub.hidden:
                    walk(sub, [*path, name])

    walk(typer.main.get_command(app), [])
    return found


COMMANDS = _every_command()


def test_no_help_text_is_eaten_as_markup():
    # the help is rich markup: an unescaped "[default: X]" vanishes from the page ("\\[" keeps it)
    import typer.main
    from rich.markup import render

    from mapp.cli.app import app

    def walk(command, path):
        texts = [command.help or ""] + [getattr(p, "help", None) or "" for p in command.params]
        for text in texts:
            assert render(text).plain == text.replace("\\[", "["), (path, text)
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, [*path, name])

    walk(typer.main.get_command(app), [])


def test_every_command_is_in_the_help_test():
    # the walk finds the commands registered today; a new command or group is added by itself
    for command in ([], ["demo"], ["simulate"], ["detect"], ["sql"], ["report"], ["trace"], ["trace", "merge"],
                    ["bench"], ["bench", "detect"]):
        assert command in COMMANDS, command


def _description(help_text: str) -> list[list[str]]:
    """The paragraphs of prose between the usage line and the first panel, as lists of lines."""
    body = help_text.split("Usage:", 1)[1].split("╭", 1)[0].splitlines()[1:]
    paragraphs, current = [], []
    for line in body:
        if line.strip():
            current.append(line.strip())
        elif current:
            paragraphs.append(current)
            current = []
    return paragraphs + ([current] if current else [])


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "mapp")
def test_help_wraps_on_words_and_cuts_nothing(command):
    help_text = _mapp(*command, "--help").stdout
    assert "…" not in help_text  # nothing ellipsized: option names, metavars and help words are whole
    assert all(len(line) <= WIDTH for line in help_text.splitlines())
    for paragraph in _description(help_text):
        # Filled like a paragraph: a line ends early only when the next word would not fit.
        for line, following in zip(paragraph, paragraph[1:]):
            assert len(line) + 1 + len(following.split()[0]) > WIDTH - 4, (line, following)


def test_simulate_fault_option_shows_its_syntax_whole():
    help_text = _mapp("simulate", "--help").stdout
    assert any(re.search(r"--fault +FAULT +A fault", line) for line in help_text.splitlines()), help_text
    assert "KIND:TARGET" in help_text and ":FIRST-LAST" in help_text
    assert "--no-distributed-optimizer" in help_text
