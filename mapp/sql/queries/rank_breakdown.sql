-- rank_breakdown: where each rank's time went: compute, communication and idle.
--
-- Inside each iteration's window (table iteration_windows: the job's iteration on the reference
-- clock when the clocks are aligned, else the rank's own iteration), the union of the rank's compute intervals
-- (cat compute or optimizer), of its communication intervals (collective or p2p) and of all
-- its events; overlapping intervals count once. Communication while the rank computes is
-- overlapped; the rest is exposed. Idle time is covered by no event (pipeline bubbles, waiting
-- on a slow peer's data...). compute + exposed_comm + other + idle = window.
--
-- @param skip INTEGER = 0  leave out the first `skip` iterations (warm-up)
-- @column rank INTEGER  global rank
-- @column pp INTEGER  pipeline stage
-- @column tp INTEGER  tensor-parallel coordinate
-- @column dp INTEGER  data-parallel coordinate
-- @column iterations BIGINT  iterations summed over
-- @column window_ns BIGINT  time inside those iterations' windows
-- @column compute_ns BIGINT  time computing
-- @column comm_ns BIGINT  time communicating, overlapped or not
-- @column overlap_ns BIGINT  time communicating while computing
-- @column exposed_comm_ns BIGINT  time communicating while not computing
-- @column other_ns BIGINT  time in other events only (data loading, ...)
-- @column idle_ns BIGINT  time in no event
-- @column compute_frac DOUBLE  compute_ns / window_ns
-- @column exposed_comm_frac DOUBLE  exposed_comm_ns / window_ns
-- @column idle_frac DOUBLE  idle_ns / window_ns
WITH win AS (
    SELECT rank, iteration, start_ns AS w0, end_ns AS w1 FROM iteration_windows
),
per_rank AS (
    -- _rank_coverage: covered time per (rank, iteration window), see mapp/sql/schema.py
    SELECT rank, sum(compute_ns) AS compute_ns, sum(comm_ns) AS comm_ns, sum(cc_ns) AS cc_ns, sum(all_ns) AS all_ns
    FROM _rank_coverage
    WHERE iteration >= (SELECT min(iteration) FROM win) + $skip
    GROUP BY rank
),
windows AS (
    SELECT rank, count(*) AS iterations, sum(w1 - w0) AS window_ns FROM win
    WHERE iteration >= (SELECT min(iteration) FROM win) + $skip GROUP BY rank
)
SELECT
    w.rank, r.pp, r.tp, r.dp, w.iterations, CAST(w.window_ns AS BIGINT) AS window_ns,
    CAST(coalesce(p.compute_ns, 0) AS BIGINT) AS compute_ns,
    CAST(coalesce(p.comm_ns, 0) AS BIGINT) AS comm_ns,
    CAST(coalesce(p.compute_ns + p.comm_ns - p.cc_ns, 0) AS BIGINT) AS overlap_ns,
    CAST(coalesce(p.cc_ns - p.compute_ns, 0) AS BIGINT) AS exposed_comm_ns,
    CAST(coalesce(p.all_ns - p.cc_ns, 0) AS BIGINT) AS other_ns,
    CAST(w.window_ns - coalesce(p.all_ns, 0) AS BIGINT) AS idle_ns,
    coalesce(p.compute_ns, 0) / nullif(w.window_ns, 0) AS compute_frac,
    coalesce(p.cc_ns - p.compute_ns, 0) / nullif(w.window_ns, 0) AS exposed_comm_frac,
    (w.window_ns - coalesce(p.all_ns, 0)) / nullif(w.window_ns, 0) AS idle_frac
FROM windows w
JOIN ranks r USING (rank)
LEFT JOIN per_rank p USING (rank)
ORDER BY r.pp, w.rank;
