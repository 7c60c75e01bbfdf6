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
WITH per_kind AS (
    -- _kind_coverage: covered time per (rank, iteration, kind), see mapp/sql/schema.py
    SELECT rank, kind, sum(compute_ns) AS compute_ns, sum(comm_ns) AS comm_ns, sum(union_ns) AS union_ns
    FROM _kind_coverage
    WHERE iteration >= (SELECT min(iteration) FROM iterations) + $skip
    GROUP BY rank, kind
    HAVING sum(comm_calls) > 0
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
