-- slowest_ops: the longest single op instances, and how much slower each is than usual.
--
-- The `limit` longest events of category `cat`, each compared with the median duration of the
-- same op (same name, category, pipeline stage and model chunk) over all ranks. A rank with a
-- slow GPU fills the top of this list with compute ops well above 1x their median.
--
-- @param cat VARCHAR = 'compute'  event category to rank (compute, collective, p2p, optimizer, ...)
-- @param limit INTEGER = 20  rows to return
-- @column rank INTEGER  global rank
-- @column pp INTEGER  pipeline stage
-- @column tp INTEGER  tensor-parallel coordinate
-- @column dp INTEGER  data-parallel coordinate
-- @column name VARCHAR  op name
-- @column iteration INTEGER  training iteration
-- @column microbatch INTEGER  microbatch
-- @column chunk INTEGER  model chunk
-- @column dur_ns BIGINT  duration
-- @column median_ns DOUBLE  median duration of the same op over all ranks
-- @column vs_median DOUBLE  dur_ns / median_ns
-- @column ts_aligned_ns BIGINT  start on the reference clock (null without a clock model)
WITH top AS (
    SELECT rank, pp, tp, dp, name, cat, iteration, microbatch, chunk, dur_ns, ts_aligned_ns
    FROM events
    WHERE ph = 'X' AND cat = $cat
    ORDER BY dur_ns DESC
    LIMIT $limit
),
usual AS (
    SELECT name, cat, pp, chunk, median(dur_ns) AS median_ns
    FROM events
    WHERE ph = 'X' AND cat = $cat AND name IN (SELECT name FROM top)
    GROUP BY ALL
)
SELECT t.rank, t.pp, t.tp, t.dp, t.name, t.iteration, t.microbatch, t.chunk, t.dur_ns,
       u.median_ns, t.dur_ns / nullif(u.median_ns, 0) AS vs_median, t.ts_aligned_ns
FROM top t
LEFT JOIN usual u ON u.name = t.name AND u.cat = t.cat
     AND u.pp IS NOT DISTINCT FROM t.pp AND u.chunk IS NOT DISTINCT FROM t.chunk
ORDER BY t.dur_ns DESC, t.rank;
