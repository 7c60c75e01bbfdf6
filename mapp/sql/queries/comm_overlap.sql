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
classed AS (
    SELECT rank, iteration, s, e, 'k:' || CASE WHEN cat = 'p2p' THEN 'p2p' ELSE coalesce("group", 'collective') END AS cls
    FROM selected WHERE cat IN ('collective', 'p2p')
    UNION ALL
    SELECT rank, iteration, s, e, 'u:' || CASE WHEN cat = 'p2p' THEN 'p2p' ELSE coalesce("group", 'collective') END
    FROM selected WHERE cat IN ('collective', 'p2p')
    UNION ALL
    SELECT s.rank, s.iteration, s.s, s.e, 'u:' || k.kind
    FROM selected s JOIN kinds k USING (rank) WHERE s.cat IN ('compute', 'optimizer')
    UNION ALL
    SELECT rank, iteration, s, e, 'compute' FROM selected WHERE cat IN ('compute', 'optimizer')
),
reach AS (
    -- Sorted by start, each interval adds what lies past the furthest end before it: the union.
    SELECT *, lag(furthest) OVER (PARTITION BY rank, iteration, cls ORDER BY s, e) AS reach
    FROM (SELECT *, max(e) OVER (PARTITION BY rank, iteration, cls ORDER BY s, e ROWS UNBOUNDED PRECEDING) AS furthest
          FROM classed)
),
covered AS (
    SELECT rank, cls, sum(greatest(0, e - greatest(s, coalesce(reach, s)))) AS ns FROM reach GROUP BY rank, cls
),
per_kind AS (
    SELECT k.rank, k.kind,
           coalesce(c.ns, 0) AS compute_ns,
           coalesce((SELECT ns FROM covered x WHERE x.rank = k.rank AND x.cls = 'k:' || k.kind), 0) AS comm_ns,
           coalesce((SELECT ns FROM covered x WHERE x.rank = k.rank AND x.cls = 'u:' || k.kind), 0) AS union_ns
    FROM kinds k LEFT JOIN covered c ON c.rank = k.rank AND c.cls = 'compute'
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
