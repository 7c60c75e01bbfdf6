"""The schema over a bundle: tables, aligned times, read-only bundle, --db persistence, errors."""

from __future__ import annotations


import signal

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
    # The simulator reads true time t (us) on rank r as t * (1 + drift_r * 1e-6) + offset_r
    # (ground_truth.json: "clock_model", "clocks"). Aligned onto rank 0's clock, a raw time ts of
    # rank r is then (ts - offset_r) * (1 + drift_0 * 1e-6) / (1 + drift_r * 1e-6) + offset_0, so
    # at the rank's first event clock_offset_ns must be that minus ts, and clock_drift_ppm the
    # rate of r's clock relative to rank 0's: (1 + drift_r * 1e-6) / (1 + drift_0 * 1e-6) - 1.
    assert truth["clock_model"] == "local_us = true_us * (1 + drift_ppm * 1e-6) + offset_us"
    clocks = {int(r): c for r, c in truth["clocks"].items()}
    rows = db.query("SELECT rank, clock_offset_ns, clock_drift_ppm, first_ts_ns FROM ranks ORDER BY rank").dicts()
    assert rows and sorted(r["rank"] for r in rows) == sorted(clocks) == list(range(truth["world_size"]))
    o0, d0 = clocks[0]["offset_us"], clocks[0]["drift_ppm"]
    expected_offsets = []
    for row in rows:
        o, d = clocks[row["rank"]]["offset_us"], clocks[row["rank"]]["drift_ppm"]
        t0_us = row["first_ts_ns"] / 1e3
        offset_ns = ((t0_us - o) * (1 + d0 * 1e-6) / (1 + d * 1e-6) + o0 - t0_us) * 1e3
        drift_ppm = ((1 + d * 1e-6) / (1 + d0 * 1e-6) - 1) * 1e6
        expected_offsets.append(offset_ns)
        # Collective ends are simultaneous in true time and stamped to the ns: the fit over a
        # ~40 ms trace lands within a few ns (1 us allowed); 0.5 ppm of drift is 20 ns over it.
        assert row["clock_offset_ns"] == pytest.approx(offset_ns, abs=1_000), row
        assert row["clock_drift_ppm"] == pytest.approx(drift_ppm, abs=0.5), row
    assert rows[0]["clock_offset_ns"] == 0 and rows[0]["clock_drift_ppm"] == 0
    # The offsets are real (up to +/-100 ms drawn), so the comparison above is not vacuous.
    assert max(abs(x) for x in expected_offsets) > 10_000_000
    # Events that are simultaneous in true time (a collective's end) agree once aligned, and
    # did not on the raw clocks.
    spread = db.query("SELECT max(end_spread_ns) AS worst FROM collectives").dicts()[0]["worst"]
    assert spread < 1_000  # ns
    raw = db.query("SELECT max(e) AS s FROM (SELECT instance_id, max(end_ns) - min(end_ns) AS e "
                   "FROM collective_members GROUP BY 1)").dicts()[0]["s"]
    assert raw > 1_000_000


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


def test_no_match_leaves_communication_empty_and_events_whole(faulty, tmp_path):
    full, _, directory = faulty
    db = open_database(directory, match=False, memory_limit="200MB")
    try:
        assert any("not matched (--no-match)" in n for n in db.info["notes"])
        for table in ("collectives", "collective_members", "p2p"):
            assert db.query(f"SELECT count(*) FROM {table}").rows() == [(0,)], table
            assert full.query(f"SELECT count(*) FROM {table}").rows()[0][0] > 0, table
        per_rank = "SELECT rank, count(*), sum(dur_ns), count(ts_aligned_ns) FROM events GROUP BY rank ORDER BY rank"
        got, want = db.query(per_rank).rows(), full.query(per_rank).rows()
        assert [r[:3] for r in got] == [r[:3] for r in want] and all(r[3] == 0 for r in got)
    finally:
        db.close()
    with pytest.raises(InputError, match="--no-match with --db"):
        open_database(directory, db=tmp_path / "x.duckdb", match=False)


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

    # Ctrl-C is KeyboardInterrupt only where SIGINT has Python's handler: a test run started in
    # the background (nohup, &) inherits SIGINT ignored, and interrupt_main() then does nothing
    # (the query ran on until the 300 s timeout, and 20 tests after it found the database busy)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    db.connection.create_function("mark_running", mark_running, [bigint], bigint, side_effects=True)
    try:
        threading.Thread(target=interrupt_once_running, daemon=True).start()
        with pytest.raises(KeyboardInterrupt):
            # 10^12 rows after the one that signals: cannot finish on its own
            # (i % 7, not i * i: a late interrupt under load once let i * i overflow INT64 first)
            db.execute_interruptibly("SELECT sum(t.i % 7) FROM (SELECT mark_running(1) AS one) m, "
                                     "range(1000000000000) t(i) WHERE m.one = 1")
        assert running.is_set()
        assert db.query("SELECT 2 AS still").rows() == [(2,)]
        assert db.query("SELECT count(*) FROM ranks").rows()[0][0] > 0
    finally:
        signal.signal(signal.SIGINT, previous)
        db.connection.remove_function("mark_running")


def test_ctrl_c_while_the_query_is_being_started_leaves_no_query_running(monkeypatch):
    """Ctrl-C landing while the worker thread starts (before the wait that catches it) must not
    leave the query running on: the connection then stayed busy for good (seen once under load).
    Here Ctrl-C is made to land there, after the thread has started, every time."""
    import threading

    from mapp.sql.database import TraceDatabase

    real_start = threading.Thread.start

    def start_then_ctrl_c(thread):
        real_start(thread)
        if thread.name == "mapp-sql-query":
            raise KeyboardInterrupt

    db = TraceDatabase(duckdb.connect())
    monkeypatch.setattr(threading.Thread, "start", start_then_ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        # cannot finish on its own, were it to start
        db.execute_interruptibly("SELECT sum(t.i % 7) FROM range(1000000000000) t(i)")
    monkeypatch.undo()
    try:
        assert db.query("SELECT 2 AS still").rows() == [(2,)]
    finally:
        db.connection.interrupt()   # (were the query running after all, the test ends anyway)
