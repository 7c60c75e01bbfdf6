-- last_arrivers: which ranks keep the others waiting in collectives.
--
-- Per rank: in how many collectives it took part, how often it was the last to arrive, and the
-- waiting it caused (the other members' time from their own arrival to its arrival, summed over
-- the operations where it was last) against the waiting it suffered. A straggler causes much
-- and suffers little; its victims the reverse.
--
-- @param limit INTEGER = 1000  rows to return (ranks with the most caused wait first)
-- @column rank INTEGER  global rank
-- @column pp INTEGER  pipeline stage
-- @column tp INTEGER  tensor-parallel coordinate
-- @column dp INTEGER  data-parallel coordinate
-- @column collectives BIGINT  operations (two or more members) it took part in
-- @column times_last BIGINT  operations in which it arrived last
-- @column last_share DOUBLE  times_last / collectives
-- @column caused_wait_ns BIGINT  the others' waiting for it, summed
-- @column waited_ns BIGINT  its own waiting for others, summed
WITH c AS (SELECT instance_id FROM collectives WHERE n_members > 1),
waits AS (
    SELECT instance_id, sum(wait_ns) AS total_wait
    FROM collective_members WHERE instance_id IN (SELECT instance_id FROM c) GROUP BY instance_id
)
SELECT
    m.rank, r.pp, r.tp, r.dp,
    count(*) AS collectives,
    count(*) FILTER (WHERE m.is_last) AS times_last,
    count(*) FILTER (WHERE m.is_last) / count(*) AS last_share,
    CAST(coalesce(sum(w.total_wait) FILTER (WHERE m.is_last), 0) AS BIGINT) AS caused_wait_ns,
    CAST(sum(m.wait_ns) AS BIGINT) AS waited_ns
FROM collective_members m
JOIN waits w USING (instance_id)
JOIN ranks r USING (rank)
GROUP BY m.rank, r.pp, r.tp, r.dp
ORDER BY caused_wait_ns DESC, m.rank
LIMIT $limit;
