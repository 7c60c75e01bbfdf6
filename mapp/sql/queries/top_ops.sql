-- top_ops: which ops take the most time in total, over all ranks.
--
-- Per op name and category: how many times it ran, its total, mean and longest duration, and
-- its share of all op time (iteration markers excluded). Overlapping ops each count in full, so
-- the shares of compute and communication ops can add up to more than the wall time.
--
-- @param limit INTEGER = 20  rows to return
-- @column name VARCHAR  op name
-- @column cat VARCHAR  category
-- @column count BIGINT  times it ran, all ranks
-- @column total_ns BIGINT  summed duration
-- @column mean_ns DOUBLE  mean duration
-- @column max_ns BIGINT  longest duration
-- @column share DOUBLE  total_ns / all op time
SELECT
    name, cat, count(*) AS count, CAST(sum(dur_ns) AS BIGINT) AS total_ns, avg(dur_ns) AS mean_ns, max(dur_ns) AS max_ns,
    sum(dur_ns) / sum(sum(dur_ns)) OVER () AS share
FROM events
WHERE ph = 'X' AND cat <> 'iteration'
GROUP BY name, cat
ORDER BY total_ns DESC, name
LIMIT $limit;
