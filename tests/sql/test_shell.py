"""The interactive shell: dot commands and results in-process, then driven through a real pty."""

from __future__ import annotations

import io
import json
import os
import shutil
import sys
import time

import pytest
from rich.console import Console

from mapp.report.theme import THEME
from mapp.sql.shell import Shell


def _shell(db) -> tuple[Shell, io.StringIO]:
    out = io.StringIO()
    return Shell(db, Console(file=out, width=140, theme=THEME, color_system=None)), out


def test_statements_modes_and_dot_commands(faulty):
    db, _, _ = faulty
    shell, out = _shell(db)
    assert shell.handle("SELECT rank, count(*) AS n\nFROM events GROUP BY rank ORDER BY rank LIMIT 2;")
    assert "rank" in out.getvalue() and "2 rows" in out.getvalue()
    shell.handle(".mode json")
    out.truncate(0), out.seek(0)
    shell.handle("SELECT 41 + 1 AS answer;")
    assert json.loads(out.getvalue().strip().splitlines()[-1]) == [{"answer": 42}]
    shell.handle(".mode csv")
    out.truncate(0), out.seek(0)
    shell.handle(".run top_ops limit=2")
    lines = out.getvalue().strip().splitlines()
    assert lines[0].startswith("name,cat,count") and len(lines) == 3
    shell.handle(".timer on")
    shell.handle("SELECT 1 AS one;")
    assert "Run Time:" in out.getvalue()
    for command, expected in ((".tables", "collective_members"), (".schema p2p", "bandwidth_gbs"),
                              (".queries", "pipeline_bubbles"), (".help", ".mode table|csv|json")):
        out.truncate(0), out.seek(0)
        shell.handle(command)
        assert expected in out.getvalue(), command
    assert shell.handle(".quit") is False


def test_errors_stay_in_the_shell(faulty):
    db, _, _ = faulty
    shell, out = _shell(db)
    for bad, message in (("SELEC 1;", "syntax error"), (".mode xml", "expected one of"), (".frobnicate", "unknown command"),
                         (".schema nosuch", "no table 'nosuch'"), (".run iteration_time", "did you mean iteration_times")):
        assert shell.handle(bad) is True
        assert message in out.getvalue(), bad
    assert "Traceback" not in out.getvalue()


pexpect = pytest.importorskip("pexpect")


def test_shell_through_a_pseudo_terminal(faulty, tmp_path):
    """Run a query, switch mode, cancel a long query with Ctrl-C, run another, quit."""
    _, _, directory = faulty
    mapp = shutil.which("mapp") or f"{sys.executable} -m mapp"
    env = dict(os.environ, PROMPT_TOOLKIT_NO_CPR="1", MAPP_SQL_HISTORY=str(tmp_path / "history"), TERM="xterm")
    child = pexpect.spawn(f"{mapp} sql {directory}", env=env, encoding="utf-8", timeout=60, dimensions=(40, 140))
    try:
        child.expect("mapp>")
        child.sendline("SELECT rank, count(*) AS n")  # a statement over two lines
        child.sendline("FROM events GROUP BY rank ORDER BY rank LIMIT 2;")
        child.expect("2 rows")
        child.expect("mapp>")
        child.sendline(".mode csv")
        child.expect("mode csv")
        child.sendline("SELECT 41 + 1 AS answer;")
        child.expect("answer\r\n42")
        child.sendline("SELECT sum(i * i) FROM range(1000000000000) t(i);")
        time.sleep(1.0)
        child.sendintr()
        child.expect("query cancelled")
        child.sendline("SELECT 7 AS after_cancel;")
        child.expect("after_cancel\r\n7")
        child.sendline(".quit")
        child.expect(pexpect.EOF)
    finally:
        child.close()
    assert child.exitstatus == 0
    assert "SELECT 41 + 1 AS answer;" in (tmp_path / "history").read_text()
