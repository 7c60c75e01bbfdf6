-- comm_overlap: how much of each kind of communication is hidden behind computation.
--
-- Per rank and kind of communication (the collective's group label such as tp or dp, or p2p):
-- the union of that kind's intervals, and how much of it falls while the same rank computes
-- (cat compute or optimizer). A kind that is fully overlapped costs no time; what is exposed
-- adds to the iteration.
--
-- @param skip INTEGER = 0  leave out the first `skip` iterations (warm-up)
-- @column rank INTEGER  global rank
-- @column pp INTEGER  pipeline stage
-- @column kind VARCHAR  collective group label (tp, dp, ...), "collective" if unlabelled, or p2p
-- @column comm_ns BIGINT  time in this kind of communication
-- @column overlapped_ns BIGINT  of which while computing
-- @column exposed_ns BIGINT  of which while not computing
-- @column overlap_frac DOUBLE  overlapped_ns / comm_ns
WITH selected AS (
    SELECT rank, iteration, cat, "group", ts_ns AS s, end_ns AS e
    FROM events
    WHERE ph = 'X' AND dur_ns > 0 AND cat IN ('compute', 'optimizer', 'collective', 'p2p')
      AND iteration >= (SELECT min(iteration) FROM iterations) + $skip
),
kinds AS (
    SELECT DISTINCT rank, CASE WHEN cat = 'p2p' THEN 'p2p' ELSE coalesce("group", 'collective') END AS kind
    FROM selected WHERE cat IN ('collective', 'p2p')
),
rows AS (
    -- each communication interval under its kind; the rank's compute intervals under every
    -- kind the rank has, so that each kind's partition holds all it is compared with
    SELECT rank, iteration, s, e, CASE WHEN cat = 'p2p' THEN 'p2p' ELSE coalesce("group", 'collective') END AS kind,
           false AS is_compute
    FROM selected WHERE cat IN ('collective', 'p2p')
    UNION ALL
    SELECT x.rank, x.iteration, x.s, x.e, k.kind, true
    FROM selected x JOIN kinds k USING (rank) WHERE x.cat IN ('compute', 'optimizer')
),
reach AS (
    -- One sort per (rank, iteration, kind) by start. For each class (compute, this kind's
    -- communication, both), a row adds what lies past the furthest end among the earlier rows
    -- of that class: summed, that is the class's union.
    SELECT *,
           max(CASE WHEN is_compute THEN e END) OVER w AS r_compute,
           max(CASE WHEN NOT is_compute THEN e END) OVER w AS r_comm,
           max(e) OVER w AS r_union
    FROM rows
    WINDOW w AS (PARTITION BY rank, iteration, kind ORDER BY s ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
),
per_kind AS (
    SELECT rank, kind,
           coalesce(sum(greatest(0, e - greatest(s, coalesce(r_compute, s)))) FILTER (is_compute), 0) AS compute_ns,
           coalesce(sum(greatest(0, e - greatest(s, coalesce(r_comm, s)))) FILTER (NOT is_compute), 0) AS comm_ns,
           coalesce(sum(greatest(0, e - greatest(s, coalesce(r_union, s)))), 0) AS union_ns
    FROM reach GROUP BY rank, kind
)
SELECT
    p.rank, r.pp, p.kind,
    CAST(p.comm_ns AS BIGINT) AS comm_ns,
    CAST(p.compute_ns + p.comm_ns - p.union_ns AS BIGINT) AS overlapped_ns,
    CAST(p.union_ns - p.compute_ns AS BIGINT) AS exposed_ns,
    (p.compute_ns + p.comm_ns - p.union_ns) / nullif(p.comm_ns, 0) AS overlap_frac
FROM per_kind p
JOIN ranks r USING (rank)
ORDER BY p.kind, r.pp, p.rank;
