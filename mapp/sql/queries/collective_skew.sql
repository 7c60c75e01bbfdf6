-- collective_skew: how long the members of each kind of collective wait for each other.
--
-- Per group label and op: how many operations, their arrival spread (last member's start minus
-- the first's, on the reference clock when aligned), and which rank most often arrives last.
-- A large spread means ranks waited inside the collective for a late member: the late rank, not
-- the network, is what to look at.
--
-- @column group VARCHAR  group label (tp, dp, ...)
-- @column op VARCHAR  collective op
-- @column instances BIGINT  operations with two or more members
-- @column mean_spread_ns DOUBLE  mean arrival spread
-- @column p50_spread_ns DOUBLE  median arrival spread
-- @column max_spread_ns BIGINT  largest arrival spread
-- @column total_spread_ns BIGINT  arrival spread summed over the operations
-- @column mean_transfer_ns DOUBLE  mean time from the last arrival to the end
-- @column top_last_arriver INTEGER  rank that arrived last most often
-- @column top_last_share DOUBLE  share of the operations in which it was last
WITH c AS (SELECT * FROM collectives WHERE n_members > 1),
counts AS (
    SELECT "group", op, last_arriver, count(*) AS n,
           row_number() OVER (PARTITION BY "group", op ORDER BY count(*) DESC, last_arriver) AS place
    FROM c GROUP BY "group", op, last_arriver
)
SELECT
    c."group", c.op, count(*) AS instances,
    avg(c.arrival_spread_ns) AS mean_spread_ns,
    median(c.arrival_spread_ns) AS p50_spread_ns,
    max(c.arrival_spread_ns) AS max_spread_ns,
    CAST(sum(c.arrival_spread_ns) AS BIGINT) AS total_spread_ns,
    avg(c.transfer_ns) AS mean_transfer_ns,
    any_value(t.last_arriver) AS top_last_arriver,
    any_value(t.n) / count(*) AS top_last_share
FROM c
LEFT JOIN counts t ON t."group" IS NOT DISTINCT FROM c."group" AND t.op = c.op AND t.place = 1
GROUP BY c."group", c.op
ORDER BY total_spread_ns DESC, c."group", c.op;
