"""The SQL schema over one trace bundle: what each table holds, and how it is built in DuckDB.

``events`` is a view over the bundle's Parquet events table (nothing is copied unless the
database is persisted with ``--db``), with each rank's raw times (``ts_ns``, ``dur_ns``,
``end_ns``) and, where a clock model exists, the same instants on the reference rank's clock
(``ts_aligned_ns``, ``end_aligned_ns``). The communication tables come from
``mapp.analysis.graph`` (matching) and ``mapp.analysis.align`` (clock model); when those cannot
run, the tables exist but are empty and ``bundle.notes`` says why.

Every table and column is described in ``TABLES``; ``.schema`` in the shell prints it, and the
"Tables" section of mapp/sql/README.md is generated from it (``markdown_tables``). The
communication tables take their columns' meanings from ``mapp.analysis.graph.schema``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import polars as pl
import pyarrow.dataset as ds

from mapp import __version__
from mapp.analysis.align.clock import sql_mapping
from mapp.analysis.graph.schema import COLLECTIVES, MEMBERS, P2P, MatchingTable
from mapp.analysis.ingest.schema import COMM_KERNEL_PATTERN, COMM_WAIT_NAMES
from mapp.trace_format import GPU_COUNTER, GPU_COUNTER_FIELDS

__all__ = ["TABLES", "Table", "SchemaInfo", "build_schema", "describe", "bundle_fingerprint", "markdown_tables",
           "SCHEMA_VERSION"]

SCHEMA_VERSION = 2
"""Raised when a table or view is added or changed: a persisted database (``--db``) of another
version is rebuilt. 2: ``gpu_counters``."""


@dataclass(frozen=True, slots=True)
class Table:
    """A public table or view: what one row is, and each column's meaning."""

    name: str
    row: str
    columns: dict[str, str]


_WHEN_ALIGNED = " (reference clock when aligned)"


# The columns each communication table takes from matching, in the table's order (used to
# build the table and to describe it).
_COLLECTIVE_BASE = [c.name for c in COLLECTIVES.raw]
_MEMBER_COLUMNS = ["instance_id", "rank", "op", "lane", "bytes", "start_ns", "end_ns", "start_aligned_ns",
                   "end_aligned_ns"]
_P2P_COLUMNS = [c.name for c in P2P.raw if c.name != "bytes_match"] + [c.name for c in P2P.aligned] + ["bytes_match"]


def _from_matching(table: MatchingTable, names: list[str]) -> dict[str, str]:
    """The meanings of ``names`` as the matching schema states them, and what differs in SQL: an
    aligned column is null here without a clock model (matching leaves it out), and "group" is
    a keyword."""
    aligned = {c.name for c in table.aligned}
    notes = {"group": '; quote it: "group"'}
    return {n: table.column(n).meaning + notes.get(n, "") + (" (null without a clock model)" if n in aligned else "")
            for n in names}


TABLES: dict[str, Table] = {t.name: t for t in [
    Table("events", "one trace event (X, i or C) of one rank", {
        "rank": "global rank that recorded the event",
        "tp": "tensor-parallel coordinate of the rank", "pp": "pipeline stage of the rank",
        "dp": "data-parallel coordinate", "cp": "context-parallel coordinate", "ep": "expert-parallel coordinate",
        "ph": "phase: X (complete), i (instant), C (counter)",
        "name": "event name (forward, all_reduce, send, a kernel name...)",
        "cat": "compute, collective, p2p, optimizer, data, iteration or other",
        "lane": "timeline row inside the rank (compute, comm, ...)",
        "ts_ns": "start, ns on the rank's own clock", "dur_ns": "duration, ns",
        "iteration": "training iteration", "microbatch": "microbatch within the iteration",
        "chunk": "virtual pipeline chunk", "layer": "transformer layer index",
        "group": "process-group label of a collective (tp, dp, ...); quote it: \"group\"",
        "group_ranks": "global ranks of the collective's group, sorted",
        "seq": "per-group (collective) or per-peer-per-direction (p2p) call count",
        "peer": "the other rank of a p2p call", "bytes": "payload bytes",
        "src_file": "trace file the event came from", "src_line": "line in that file",
        "args": "the event's original args as JSON text",
        "launch_ns": "GPU work: start of the runtime call that launched it (ts_ns - launch_ns: its wait in the queue); null otherwise",
        "thread_dur_ns": "a span timed on the host by mapp's capture: its thread's CPU time (the trace's tdur); null otherwise",
        "runnable_ns": "the same spans: time its thread was runnable but waited for a core (rdur); dur_ns - runnable_ns is the span's own time on shared cores",
        "end_ns": "ts_ns + dur_ns (rank's own clock)",
        "ts_aligned_ns": "start on the reference rank's clock (null without a clock model)",
        "end_aligned_ns": "end on the reference rank's clock (null without a clock model)",
    }),
    Table("ranks", "one traced rank", {
        "rank": "global rank", "world_size": "ranks in the job",
        "tp": "tensor-parallel coordinate", "pp": "pipeline stage", "dp": "data-parallel coordinate",
        "cp": "context-parallel coordinate", "ep": "expert-parallel coordinate",
        "host": "host name", "device": "device name", "clock": "cuda or host: what timed the events",
        "run_id": "id shared by the ranks of one run", "format": "reader that produced the rank",
        "src_file": "the rank's trace file",
        "first_ts_ns": "start of the rank's first event, own clock",
        "last_end_ns": "end of the rank's last event, own clock",
        "clock_offset_ns": "ns added to the rank's raw time at its first event to reach the reference clock",
        "clock_drift_ppm": "rate of the rank's clock relative to the reference (positive: runs fast)",
        "clock_residual_ns": "RMS of the alignment anchors' residuals touching this rank",
        "clock_anchors": "alignment anchors that involve this rank",
    }),
    # The communication tables: every column that comes from matching takes its meaning from
    # mapp.analysis.graph.schema (the one statement of the matching tables); the rest are SQL's.
    Table("collectives", COLLECTIVES.row, {
        **_from_matching(COLLECTIVES, _COLLECTIVE_BASE),
        "first_arrival_ns": "earliest member start" + _WHEN_ALIGNED,
        "last_arrival_ns": COLLECTIVES.column("last_arrival_ns").meaning + _WHEN_ALIGNED,
        "end_ns": "latest member end" + _WHEN_ALIGNED,
        **_from_matching(COLLECTIVES, ["arrival_spread_ns", "end_spread_ns", "last_arriver"]),
        "transfer_ns": "end_ns - last_arrival_ns: time after everyone had arrived",
    }),
    Table("collective_members", MEMBERS.row, {
        **_from_matching(MEMBERS, _MEMBER_COLUMNS),
        "wait_ns": "how long this rank waited for the last arriver (0 for the last arriver)",
        "is_last": "this rank arrived last",
    }),
    Table("p2p", P2P.row, {
        **_from_matching(P2P, _P2P_COLUMNS),
        "transfer_ns": "the shorter of the two calls: the side that posted last waited for nothing but the wire "
                       "(not a transfer time where send_async or recv_async: that side's span is only its post)",
        "bandwidth_gbs": "bytes / transfer_ns, GB/s",
    }),
    Table("iterations", "one training iteration on one rank", {
        "rank": "global rank", "iteration": "training iteration",
        "ts_ns": "start, own clock", "dur_ns": "duration, ns", "end_ns": "end, own clock",
        "ts_aligned_ns": "start, reference clock (null without a clock model)",
        "end_aligned_ns": "end, reference clock (null without a clock model)",
        "marked": "true: from an iteration marker event; false: spanned from the iteration's events",
    }),
    Table("iteration_windows", "the slice of time that counts as one iteration for one rank", {
        "rank": "global rank", "iteration": "training iteration",
        "start_ns": "window start: the job's previous iteration end (its first event for the first one)",
        "end_ns": "window end: the last end of any rank's event of this iteration",
        "aligned": "true: job-wide windows on the reference clock (compare with *_aligned_ns); "
                   "false: each rank's own iterations on its own clock (compare with ts_ns)",
    }),
    Table("gpu_counters", "one device-counter sample (NVML) of one rank, taken once per traced iteration "
          "by mapp's capture on a GPU; empty for other traces", {
        "rank": "global rank", "ts_ns": "when sampled, own clock",
        "ts_aligned_ns": "when sampled, reference clock (null without a clock model)",
        "device": "NVML's index of the rank's GPU", "sm_clock_mhz": "SM clock, MHz", "power_w": "power draw, W",
        "temperature_c": "GPU temperature, C",
        "throttle_reasons": "NVML's clock-event reasons bit mask (0: none)",
        "sm_pct": "share of NVML's last sampling period in which this rank's process ran a kernel, %",
        "other_sm_pct": "the same, summed over every other process on the GPU (a neighbour time-slicing it), %; "
                        "a snapshot: a neighbour that bursts shows in some samples only",
        "other_processes": "how many other processes ran a kernel on the GPU in that period",
    }),
    Table("findings", "one problem (or note) found while matching communication", {
        "kind": "missing_member, op_mismatch, unmatched_send, ...", "severity": "error, warning or info",
        "message": "one line saying what is wrong",
    }),
    Table("bundle", "the run (one row)", {
        "directory": "bundle directory", "format": "input format", "world_size": "ranks in the job",
        "traced_ranks": "ranks with a trace", "events": "rows of events",
        "tp": "tensor-parallel size", "pp": "pipeline-parallel size", "dp": "data-parallel size",
        "cp": "context-parallel size", "ep": "expert-parallel size", "vpp": "virtual pipeline size",
        "aligned": "a clock model maps every rank onto the reference clock",
        "reference_rank": "the rank whose clock is the reference",
        "notes": "why a table is empty or times are not aligned, one line each",
        "mapp_version": "mapp that built this schema", "schema_version": "version of this schema",
    }),
    Table("snapshots", "one tensor of one MegaScope snapshot found under the bundle directory "
          "(training with --scope-dir; empty when there is none)", {
        "step": "training iteration of the snapshot", "source": "what took it (training)",
        "tensor": "name in the .safetensors file, layer<N>.<kind>", "layer": "layer number (0: embeddings)",
        "kind": "q, k, v, fc1, fc2, residual (reduced rows), attention, hidden (full)",
        "numel": "elements stored", "mean": "mean of the full activation", "std": "its standard deviation",
        "min": "its smallest value", "max": "its largest value", "absmax": "its largest magnitude",
        "rms": "its root mean square", "zeros": "fraction of its elements that are exactly 0",
        "file": "the snapshot's JSON index (read it with mapp.snapshot_format.read_snapshot)",
    }),
]}


@dataclass(slots=True)
class SchemaInfo:
    """What ``build_schema`` built."""

    aligned: bool
    notes: list[str] = field(default_factory=list)


_CLOCK_COLUMNS = {"rank": pl.Int32, "offset_ns": pl.Float64, "slope": pl.Float64, "t0_ns": pl.Int64,
                  "drift_ppm": pl.Float64, "residual_ns": pl.Float64, "anchors": pl.Int64}


def _sql_path(path: Path) -> str:
    return "'" + str(Path(path).resolve()).replace("'", "''") + "'"


def _match_and_align(analysis, notes: list[str]):
    """Matching (with aligned times) and the clock model (None when not aligned)."""
    notes.extend(analysis.notes)
    matching, clock = analysis.matching, analysis.clock
    if clock is None:
        return matching, None
    if not clock.connected:
        notes.append(f"ranks form {len(clock.components)} groups with no communication between them; "
                     f"only the group of rank {clock.reference_rank} shares its clock")
    return matching, clock


def _clock_frame(clock) -> pl.DataFrame:
    if clock is None:
        return pl.DataFrame(schema=_CLOCK_COLUMNS)
    rows = [{"rank": r, "offset_ns": c.offset_ns, "slope": c.slope, "t0_ns": c.t0_ns, "drift_ppm": c.drift_ppm,
             "residual_ns": c.residual_ns, "anchors": c.anchors} for r, c in sorted(clock.ranks.items())]
    return pl.DataFrame(rows, schema=_CLOCK_COLUMNS)


def _create_from_frame(con: duckdb.DuckDBPyConnection, name: str, frame: pl.DataFrame) -> None:
    con.register("_mapp_frame", frame.to_arrow())
    try:
        con.execute(f"CREATE TABLE {name} AS SELECT * FROM _mapp_frame")
    finally:
        con.unregister("_mapp_frame")


def _aligned(column: str) -> str:
    """``e.column`` on the reference clock: the clock mapping's SQL form, from the ``_clock`` row ``c``."""
    return sql_mapping(f"e.{column}", "c")


def build_schema(
    con: duckdb.DuckDBPyConnection,
    analysis,
    *,
    persist: bool = False,
    warn: Callable[[str], None] | None = None,
    via_arrow: bool = False,
) -> SchemaInfo:
    """Create every table of ``TABLES`` in ``con`` for ``analysis`` (``mapp.analysis.run.Analysis``).

    ``persist``: copy the events into a table (for a database file) instead of a view over the
    bundle's Parquet file. Without a clock every ``*_aligned_ns`` column is null.
    ``via_arrow``: the view reads the file through Arrow (for a connection that may write files).
    """
    bundle = analysis.bundle
    notes: list[str] = []
    matching, clock = _match_and_align(analysis, notes)
    _create_from_frame(con, "_clock", _clock_frame(clock))
    if via_arrow and not persist:
        # Read through Arrow, not DuckDB's file system, the events file is out of reach of any
        # statement (see database._seal); DuckDB's own reader is several times faster.
        con.register("_events_file", ds.dataset([str(p) for p in bundle.parts], format="parquet"))
        source = "_events_file"
    else:
        source = f"read_parquet([{', '.join(_sql_path(p) for p in bundle.parts)}])"
    events_sql = (
        f"SELECT e.*, e.ts_ns + e.dur_ns AS end_ns, {_aligned('ts_ns')} AS ts_aligned_ns, "
        f"{_aligned('ts_ns')} + e.dur_ns AS end_aligned_ns "
        f"FROM {source} e LEFT JOIN _clock c ON c.rank = e.rank"
    )
    con.execute(f"CREATE {'TABLE' if persist else 'VIEW'} events AS {events_sql}")
    _build_ranks(con, bundle)
    _build_comm(con, matching)
    _build_iterations(con)
    _build_gpu_counters(con)
    _build_windows(con, clock is not None)
    findings = matching.findings_frame()
    if findings is None or findings.is_empty():
        findings = pl.DataFrame(schema={"kind": pl.String, "severity": pl.String, "message": pl.String})
    _create_from_frame(con, "findings", findings.select(
        *[c for c in findings.columns if c in ("kind", "severity", "message")],
        *[c for c in findings.columns if c not in ("kind", "severity", "message")]))
    _build_bundle(con, bundle, clock, notes)
    _build_window_pieces(con)
    _build_coverage(con, persist)
    _build_snapshots(con, bundle.directory)
    for note in notes:
        if warn:
            warn(note)
    return SchemaInfo(aligned=clock is not None, notes=notes)


def _build_ranks(con: duckdb.DuckDBPyConnection, bundle) -> None:
    keep = ["rank", "world_size", "tp", "pp", "dp", "cp", "ep", "host", "device", "clock", "run_id", "format",
            "src_file"]
    _create_from_frame(con, "_ranks_meta", bundle.ranks.select([c for c in keep if c in bundle.ranks.columns]))
    con.execute("""
        CREATE TABLE ranks AS
        WITH span AS (SELECT rank, min(ts_ns) AS first_ts_ns, max(ts_ns + dur_ns) AS last_end_ns
                      FROM events GROUP BY rank)
        SELECT m.*, s.first_ts_ns, s.last_end_ns,
               CAST(round(c.offset_ns) AS BIGINT) AS clock_offset_ns, c.drift_ppm AS clock_drift_ppm,
               c.residual_ns AS clock_residual_ns, c.anchors AS clock_anchors
        FROM _ranks_meta m LEFT JOIN span s USING (rank) LEFT JOIN _clock c USING (rank)
        ORDER BY rank""")
    con.execute("DROP TABLE _ranks_meta")


def _build_comm(con: duckdb.DuckDBPyConnection, matching) -> None:
    instances, members, pairs = matching.collectives, matching.members, matching.p2p
    if "start_aligned_ns" not in members.columns:
        members = members.with_columns(start_aligned_ns=pl.lit(None, pl.Int64), end_aligned_ns=pl.lit(None, pl.Int64))
    for side in ("send", "recv"):
        for edge in ("start", "end"):
            if f"{side}_{edge}_aligned_ns" not in pairs.columns:
                pairs = pairs.with_columns(pl.lit(None, pl.Int64).alias(f"{side}_{edge}_aligned_ns"))
    _create_from_frame(con, "_members", members.select(_MEMBER_COLUMNS))
    _create_from_frame(con, "_instances", instances.select(_COLLECTIVE_BASE))
    con.execute("""
        CREATE TABLE _timing AS
        SELECT instance_id,
               min(coalesce(start_aligned_ns, start_ns)) AS first_arrival_ns,
               max(coalesce(start_aligned_ns, start_ns)) AS last_arrival_ns,
               max(coalesce(end_aligned_ns, end_ns)) AS end_ns,
               max(coalesce(end_aligned_ns, end_ns)) - min(coalesce(end_aligned_ns, end_ns)) AS end_spread_ns,
               arg_max(rank, coalesce(start_aligned_ns, start_ns)) AS last_arriver
        FROM _members GROUP BY instance_id""")
    con.execute("""
        CREATE TABLE collectives AS
        SELECT i.*, t.first_arrival_ns, t.last_arrival_ns, t.end_ns,
               t.last_arrival_ns - t.first_arrival_ns AS arrival_spread_ns, t.end_spread_ns, t.last_arriver,
               t.end_ns - t.last_arrival_ns AS transfer_ns
        FROM _instances i LEFT JOIN _timing t USING (instance_id) ORDER BY instance_id""")
    con.execute("""
        CREATE TABLE collective_members AS
        SELECT m.*, t.last_arrival_ns - coalesce(m.start_aligned_ns, m.start_ns) AS wait_ns,
               m.rank = t.last_arriver AS is_last
        FROM _members m JOIN _timing t USING (instance_id) ORDER BY instance_id, rank""")
    con.execute("DROP TABLE _members; DROP TABLE _instances; DROP TABLE _timing")
    _create_from_frame(con, "_pairs", pairs.select(_P2P_COLUMNS))
    con.execute("""
        CREATE TABLE p2p AS
        SELECT *,
               least(send_end_ns - send_start_ns, recv_end_ns - recv_start_ns) AS transfer_ns,
               bytes / nullif(least(send_end_ns - send_start_ns, recv_end_ns - recv_start_ns), 0) AS bandwidth_gbs
        FROM _pairs ORDER BY pair_id""")
    con.execute("DROP TABLE _pairs")


def _build_iterations(con: duckdb.DuckDBPyConnection) -> None:
    con.execute("""
        CREATE TABLE iterations AS
        WITH marks AS (
            SELECT rank, iteration, min(ts_ns) AS ts_ns, max(end_ns) AS end_ns,
                   min(ts_aligned_ns) AS ts_aligned_ns, max(end_aligned_ns) AS end_aligned_ns, true AS marked
            FROM events WHERE cat = 'iteration' AND ph = 'X' AND iteration IS NOT NULL GROUP BY rank, iteration),
        spans AS (
            SELECT rank, iteration, min(ts_ns) AS ts_ns, max(end_ns) AS end_ns,
                   min(ts_aligned_ns) AS ts_aligned_ns, max(end_aligned_ns) AS end_aligned_ns, false AS marked
            FROM events WHERE ph = 'X' AND iteration IS NOT NULL
              AND rank NOT IN (SELECT rank FROM marks) GROUP BY rank, iteration)
        SELECT rank, iteration, ts_ns, end_ns - ts_ns AS dur_ns, end_ns, ts_aligned_ns, end_aligned_ns, marked
        FROM (SELECT * FROM marks UNION ALL SELECT * FROM spans)
        ORDER BY rank, iteration""")


_SQL_TYPES = {"int32": "INTEGER", "int64": "BIGINT", "float64": "DOUBLE"}


def _build_gpu_counters(con: duckdb.DuckDBPyConnection) -> None:
    """``gpu_counters``: the capture's ``gpu`` counter events, one column per field of their
    args (``mapp.capture.nvml``); a field a sample lacks (an older capture, NVML refusing) is
    null."""
    fields = ", ".join(f"TRY_CAST(json_extract_string(args, '$.{name}') AS {_SQL_TYPES[kind]}) AS {name}"
                       for name, kind in GPU_COUNTER_FIELDS.items())
    con.execute(f"""
        CREATE VIEW gpu_counters AS
        SELECT rank, ts_ns, ts_aligned_ns, {fields}
        FROM events WHERE ph = 'C' AND name = '{GPU_COUNTER}' AND json_valid(args) ORDER BY rank, ts_ns""")


def _build_windows(con: duckdb.DuckDBPyConnection, aligned: bool) -> None:
    if aligned:
        con.execute("""
            CREATE TABLE iteration_windows AS
            WITH job AS (SELECT iteration, min(ts_aligned_ns) AS first_ns, max(end_aligned_ns) AS last_ns
                         FROM iterations GROUP BY iteration),
            spans AS (SELECT iteration, coalesce(lag(last_ns) OVER (ORDER BY iteration), first_ns) AS start_ns,
                             last_ns AS end_ns FROM job)
            SELECT r.rank, s.iteration, s.start_ns, s.end_ns, true AS aligned
            FROM spans s CROSS JOIN (SELECT DISTINCT rank FROM iterations) r
            ORDER BY r.rank, s.iteration""")
    else:
        con.execute("""
            CREATE TABLE iteration_windows AS
            SELECT rank, iteration,
                   coalesce(lag(end_ns) OVER (PARTITION BY rank ORDER BY iteration), ts_ns) AS start_ns,
                   end_ns, false AS aligned
            FROM iterations ORDER BY rank, iteration""")


def _build_window_pieces(con: duckdb.DuckDBPyConnection) -> None:
    """``_window_pieces`` (internal, for the covered-time queries): every timed event (not the
    iteration markers) as (rank, cat, iteration, s, e) on the clock of ``iteration_windows``,
    cut at window boundaries so that each piece lies inside one iteration's window. GPU
    communication kernels that no comm event stands for (``COMM_KERNEL_PATTERN``: megatron's
    coalesced NCCL SendRecv) get ``cat`` ``comm_kernel``: communication, as HTA counts them; a
    host's waits for overlapped DP communication (``COMM_WAIT_NAMES``) get ``comm_wait``."""
    pattern = "'" + COMM_KERNEL_PATTERN.replace("'", "''") + "'"
    waits = ", ".join("'" + n.replace("'", "''") + "'" for n in COMM_WAIT_NAMES)
    con.execute(f"""
        CREATE VIEW _window_pieces AS
        WITH win AS (SELECT rank, iteration, start_ns AS w0, end_ns AS w1 FROM iteration_windows),
        ev AS (
            SELECT e.rank,
                   CASE WHEN e.cat = 'other' AND e.lane LIKE 'stream:%' AND regexp_matches(e.name, {pattern}, 'i')
                        THEN 'comm_kernel'
                        WHEN e.cat = 'other' AND e.name IN ({waits}) THEN 'comm_wait' ELSE e.cat END AS cat,
                   CASE WHEN b.aligned THEN e.ts_aligned_ns ELSE e.ts_ns END AS s,
                   CASE WHEN b.aligned THEN e.end_aligned_ns ELSE e.end_ns END AS e
            FROM events e, (SELECT aligned FROM bundle) b
            WHERE e.ph = 'X' AND e.cat <> 'iteration' AND e.dur_ns > 0
        ),
        assigned AS (
            SELECT ev.rank, ev.cat, ev.s, ev.e, w.iteration, w.w1
            FROM ev ASOF JOIN win w ON ev.rank = w.rank AND ev.s >= w.w0
        ),
        pieces AS (
            SELECT rank, cat, iteration, s, least(e, w1) AS e FROM assigned
            UNION ALL
            SELECT a.rank, a.cat, n.iteration, a.w1 AS s, least(a.e, n.w1) AS e
            FROM assigned a JOIN win n ON n.rank = a.rank AND n.w0 = a.w1
            WHERE a.e > a.w1
        )
        SELECT * FROM pieces WHERE e > s""")


# Covered time (the union of a rank's intervals, overlaps counted once) per rank and iteration:
# the expensive part of rank_breakdown and comm_overlap (a sort of every event). Views, or with
# ``persist`` (a --db file) tables computed once at load, so the queries then read a few rows.
# Each is summed over one sort per partition: a row adds what lies past the furthest end among
# the earlier rows of its class.
_COVERAGE = {
    # per (rank, iteration window): compute, communication, either, and any event
    "_rank_coverage": """
        WITH flagged AS (
            SELECT rank, iteration, s, e,
                   cat IN ('compute', 'optimizer') AS is_compute, cat IN ('collective', 'p2p', 'comm_kernel', 'comm_wait') AS is_comm
            FROM _window_pieces
        ),
        reach AS (
            SELECT *,
                   max(CASE WHEN is_compute THEN e END) OVER w AS r_compute,
                   max(CASE WHEN is_comm THEN e END) OVER w AS r_comm,
                   max(CASE WHEN is_compute OR is_comm THEN e END) OVER w AS r_cc,
                   max(e) OVER w AS r_all
            FROM flagged
            WINDOW w AS (PARTITION BY rank, iteration ORDER BY s ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
        )
        SELECT rank, iteration,
               coalesce(sum(greatest(0, e - greatest(s, coalesce(r_compute, s)))) FILTER (is_compute), 0) AS compute_ns,
               coalesce(sum(greatest(0, e - greatest(s, coalesce(r_comm, s)))) FILTER (is_comm), 0) AS comm_ns,
               coalesce(sum(greatest(0, e - greatest(s, coalesce(r_cc, s)))) FILTER (is_compute OR is_comm), 0) AS cc_ns,
               coalesce(sum(greatest(0, e - greatest(s, coalesce(r_all, s)))), 0) AS all_ns
        FROM reach GROUP BY rank, iteration""",
    # per (rank, event iteration, kind of communication): compute, that kind, and their union;
    # the rank's compute is compared with every kind the rank has
    "_kind_coverage": """
        WITH selected AS (
            SELECT rank, iteration, cat, "group", ts_ns AS s, end_ns AS e
            FROM events
            WHERE ph = 'X' AND dur_ns > 0 AND cat IN ('compute', 'optimizer', 'collective', 'p2p')
        ),
        kinds AS (
            SELECT DISTINCT rank, CASE WHEN cat = 'p2p' THEN 'p2p' ELSE coalesce("group", 'collective') END AS kind
            FROM selected WHERE cat IN ('collective', 'p2p')
        ),
        rows AS (
            SELECT rank, iteration, s, e, CASE WHEN cat = 'p2p' THEN 'p2p' ELSE coalesce("group", 'collective') END AS kind,
                   false AS is_compute
            FROM selected WHERE cat IN ('collective', 'p2p')
            UNION ALL
            SELECT x.rank, x.iteration, x.s, x.e, k.kind, true
            FROM selected x JOIN kinds k USING (rank) WHERE x.cat IN ('compute', 'optimizer')
        ),
        reach AS (
            SELECT *,
                   max(CASE WHEN is_compute THEN e END) OVER w AS r_compute,
                   max(CASE WHEN NOT is_compute THEN e END) OVER w AS r_comm,
                   max(e) OVER w AS r_union
            FROM rows
            WINDOW w AS (PARTITION BY rank, iteration, kind ORDER BY s ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
        )
        SELECT rank, iteration, kind,
               count(*) FILTER (NOT is_compute) AS comm_calls,
               coalesce(sum(greatest(0, e - greatest(s, coalesce(r_compute, s)))) FILTER (is_compute), 0) AS compute_ns,
               coalesce(sum(greatest(0, e - greatest(s, coalesce(r_comm, s)))) FILTER (NOT is_compute), 0) AS comm_ns,
               coalesce(sum(greatest(0, e - greatest(s, coalesce(r_union, s)))), 0) AS union_ns
        FROM reach GROUP BY rank, iteration, kind""",
}


def _build_coverage(con: duckdb.DuckDBPyConnection, persist: bool) -> None:
    for name, sql in _COVERAGE.items():
        con.execute(f"CREATE {'TABLE' if persist else 'VIEW'} {name} AS {sql}")


def _build_bundle(con: duckdb.DuckDBPyConnection, bundle, clock, notes: list[str]) -> None:
    layout = bundle.layout
    events = con.execute("SELECT count(*) FROM events").fetchall()[0][0]
    row = {
        "directory": str(bundle.directory), "format": bundle.format, "world_size": bundle.world_size,
        "traced_ranks": len(bundle.ranks), "events": events,
        **{axis: layout.get(axis) for axis in ("tp", "pp", "dp", "cp", "ep", "vpp")},
        "aligned": clock is not None, "reference_rank": clock.reference_rank if clock is not None else None,
        "notes": notes, "mapp_version": __version__, "schema_version": SCHEMA_VERSION,
    }
    schema = {"directory": pl.String, "format": pl.String, "world_size": pl.Int32, "traced_ranks": pl.Int32,
              "events": pl.Int64, **{a: pl.Int32 for a in ("tp", "pp", "dp", "cp", "ep", "vpp")},
              "aligned": pl.Boolean, "reference_rank": pl.Int32, "notes": pl.List(pl.String),
              "mapp_version": pl.String, "schema_version": pl.Int32}
    _create_from_frame(con, "bundle", pl.DataFrame([row], schema=schema))


def markdown_tables() -> str:
    """``TABLES`` as the Markdown of mapp/sql/README.md's "Tables" section (a test keeps the
    README equal to it; ``python -m mapp.sql.schema`` prints it)."""
    parts = []
    for t in TABLES.values():
        rows = "\n".join(f"| `{name}` | {meaning} |" for name, meaning in t.columns.items())
        parts.append(f"### `{t.name}`: {t.row}\n\n| column | meaning |\n|---|---|\n{rows}\n")
    return "\n".join(parts)


def _build_snapshots(con: duckdb.DuckDBPyConnection, directory: Path) -> None:
    """MegaScope's per-tensor statistics (``mapp.snapshot_format``), from the JSON indexes only."""
    from mapp.snapshot_format import snapshot_stats

    floats = ("mean", "std", "min", "max", "absmax", "rms", "zeros")
    schema = {"step": pl.Int64, "source": pl.String, "tensor": pl.String, "layer": pl.Int32, "kind": pl.String,
              "numel": pl.Int64, **{name: pl.Float64 for name in floats}, "file": pl.String}
    _create_from_frame(con, "snapshots", pl.DataFrame(list(snapshot_stats(directory)), schema=schema))


def describe(con: duckdb.DuckDBPyConnection) -> dict:
    """The ``bundle`` row as a dict (for headers and the report)."""
    cursor = con.execute("SELECT * FROM bundle")
    names = [d[0] for d in cursor.description]
    values = cursor.fetchall()
    return dict(zip(names, values[0])) if values else {}


def bundle_fingerprint(bundle) -> str:
    """What a persisted database was built from: the events file's identity and the schema version."""
    size, mtime_ns = bundle.events_stamp()
    return json.dumps({"events": str(Path(bundle.events_path).resolve()), "size": size,
                       "mtime_ns": mtime_ns, "schema": SCHEMA_VERSION, "mapp": __version__})


if __name__ == "__main__":
    print(markdown_tables(), end="")
