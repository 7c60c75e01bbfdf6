"""The schema over a bundle: tables, aligned times, read-only bundle, --db persistence, errors."""

from __future__ import annotations


import duckdb
import pytest

from mapp.errors import InputError, OutputError
from mapp.sql import QueryError, TABLES, open_database


def test_every_table_exists_and_is_documented(faulty):
    db, truth, _ = faulty
    names = [name for name, _ in db.tables()]
    assert names[:len(TABLES)] == list(TABLES)
    for name in TABLES:
        columns = [c for c, _ in db.columns(name)]
        undocumented = set(columns) - set(TABLES[name].columns)
        assert not undocumented, f"{name}: {undocumented}"
    assert dict(db.tables())["events"] == "view"  # nothing copied without --db
    info = db.info
    assert info["aligned"] and info["world_size"] == truth["world_size"] and info["notes"] == []


def test_aligned_times_recover_the_true_clock_offsets(faulty):
    db, truth, _ = faulty
    # Every rank's clock model maps its events onto rank 0's clock; the simulated offsets are known.
    rows = db.query("SELECT rank, clock_offset_ns, first_ts_ns FROM ranks ORDER BY rank").dicts()
    clocks = {int(k): v for k, v in truth["clocks"].items()} if isinstance(truth["clocks"], dict) else None
    assert rows[0]["clock_offset_ns"] == 0
    # Events that are simultaneous in true time (a collective's end) agree once aligned.
    spread = db.query("SELECT max(end_spread_ns) AS worst FROM collectives").dicts()[0]["worst"]
    assert spread < 1_000  # ns
    raw = db.query("SELECT max(e) - min(e) AS s FROM (SELECT instance_id, max(end_ns) - min(end_ns) AS e "
                   "FROM collective_members GROUP BY 1)").dicts()[0]["s"]
    assert raw > 1_000_000 or clocks is None


def test_events_view_columns(faulty):
    db, _, _ = faulty
    row = db.query("SELECT ts_ns, dur_ns, end_ns, ts_aligned_ns, end_aligned_ns FROM events "
                   "WHERE rank = 3 AND ph = 'X' LIMIT 1").dicts()[0]
    assert row["end_ns"] == row["ts_ns"] + row["dur_ns"]
    assert row["end_aligned_ns"] - row["ts_aligned_ns"] == row["dur_ns"]


def test_invalid_sql_is_a_query_error_with_duckdb_s_message(faulty):
    db, _, _ = faulty
    with pytest.raises(QueryError, match="Parser Error|syntax error") as caught:
        db.execute("SELEC 1")
    assert caught.value.hint
    with pytest.raises(QueryError, match="nosuch"):
        db.execute("SELECT * FROM nosuch")
    with pytest.raises(QueryError, match='"group"'):
        db.execute("SELECT group FROM collectives")
    assert db.query("SELECT 1 AS ok").rows() == [(1,)]  # still usable


def test_db_file_is_built_once_and_reused(faulty, tmp_path):
    _, _, directory = faulty
    target = tmp_path / "run.duckdb"
    db = open_database(directory, db=target)
    assert dict(db.tables())["events"] == "table"
    n = db.query("SELECT count(*) AS n FROM events").rows()[0][0]
    db.close()
    stamp = target.stat().st_mtime_ns
    again = open_database(directory, db=target)
    assert target.stat().st_mtime_ns == stamp  # reused, not rebuilt
    assert again.query("SELECT count(*) FROM events").rows()[0][0] == n
    again.close()
    alone = open_database(None, db=target)  # no trace directory needed any more
    assert alone.query("SELECT count(*) FROM p2p").rows()[0][0] > 0
    alone.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.duckdb"]


def test_db_file_errors(faulty, tmp_path):
    _, _, directory = faulty
    with pytest.raises(OutputError, match="inside the trace bundle"):
        open_database(directory, db=directory / "x.duckdb")
    other = tmp_path / "other.duckdb"
    con = duckdb.connect(str(other))
    con.execute("CREATE TABLE t AS SELECT 1")
    con.close()
    with pytest.raises(OutputError, match="not a mapp database"):
        open_database(directory, db=other)
    with pytest.raises(InputError, match="not a mapp database"):
        open_database(None, db=other)
    with pytest.raises(InputError, match="no such database"):
        open_database(None, db=tmp_path / "missing.duckdb")
    with pytest.raises(InputError, match="not a directory"):
        open_database(tmp_path / "nope")


def test_no_align_leaves_aligned_columns_null(faulty):
    _, _, directory = faulty
    db = open_database(directory, align=False)
    assert db.info["aligned"] is False and db.info["notes"]
    assert db.query("SELECT count(ts_aligned_ns) FROM events").rows() == [(0,)]
    assert db.query("SELECT count(*) FROM collectives").rows()[0][0] > 0
    windows = db.query("SELECT bool_and(NOT aligned) FROM iteration_windows").rows()
    assert windows == [(True,)]
    db.close()


def test_interrupt_cancels_a_running_query(faulty):
    """Ctrl-C during a query that cannot finish on its own cancels it; the connection still works.

    No timing: the interrupt is sent once the query is known to be running inside DuckDB (a
    function it calls as it starts says so), where ``connection.interrupt()`` can reach it.
    The function runs for one row only: a Python function called for every row was still
    being called after the cancel under CPU load, and the connection stayed busy.
    """
    import _thread
    import threading

    db, _, _ = faulty
    bigint = duckdb.sqltype("BIGINT")
    running = threading.Event()

    def mark_running(one: int) -> int:
        running.set()
        return one

    def interrupt_once_running() -> None:
        running.wait()
        _thread.interrupt_main()  # what Ctrl-C does: KeyboardInterrupt in the main thread

    db.connection.create_function("mark_running", mark_running, [bigint], bigint, side_effects=True)
    try:
        threading.Thread(target=interrupt_once_running, daemon=True).start()
        with pytest.raises(KeyboardInterrupt):
            # 10^12 rows after the one that signals: cannot finish on its own
            db.execute_interruptibly("SELECT sum(t.i * t.i) FROM (SELECT mark_running(1) AS one) m, "
                                     "range(1000000000000) t(i) WHERE m.one = 1")
        assert running.is_set()
        assert db.query("SELECT 2 AS still").rows() == [(2,)]
        assert db.query("SELECT count(*) FROM ranks").rows()[0][0] > 0
    finally:
        db.connection.remove_function("mark_running")
