-- pipeline_bubbles: the share of each pipeline stage's iteration spent not computing.
--
-- Per stage, averaged over its ranks and the selected iterations: the iteration window (table
-- iteration_windows: the job's iteration on the reference clock when aligned), the time
-- the stage computed in it (union of cat compute and optimizer) and the rest, the bubble.
-- A 1F1B schedule with p stages and m microbatches of equal cost has a bubble ratio of about
-- (p - 1) / (m + p - 1); a stage with more work than the others has a smaller one.
--
-- @param skip INTEGER = 0  leave out the first `skip` iterations (warm-up)
-- @column pp INTEGER  pipeline stage
-- @column ranks BIGINT  ranks of the stage
-- @column iterations BIGINT  iterations averaged over
-- @column window_ns DOUBLE  mean iteration window
-- @column compute_ns DOUBLE  mean compute time in it
-- @column bubble_ns DOUBLE  mean time not computing
-- @column bubble_ratio DOUBLE  bubble_ns / window_ns
-- @column max_rank_bubble_ratio DOUBLE  the largest ratio of one rank of the stage
WITH win AS (
    SELECT rank, iteration, start_ns AS w0, end_ns AS w1 FROM iteration_windows
),
clipped AS (
    -- _window_pieces: events cut at iteration-window boundaries (see mapp/sql/schema.py)
    SELECT * FROM _window_pieces
    WHERE iteration >= (SELECT min(iteration) FROM win) + $skip AND cat IN ('compute', 'optimizer')
),
reach AS (
    -- Sorted by start, each interval adds what lies past the furthest end before it: the union.
    SELECT *, max(e) OVER (PARTITION BY rank, iteration ORDER BY s ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS reach
    FROM clipped
),
busy AS (
    SELECT rank, iteration, sum(greatest(0, e - greatest(s, coalesce(reach, s)))) AS compute_ns
    FROM reach GROUP BY rank, iteration
),
per_rank AS (
    SELECT w.rank, r.pp, count(*) AS iterations, sum(w.w1 - w.w0) AS window_ns,
           sum(coalesce(b.compute_ns, 0)) AS compute_ns
    FROM win w JOIN ranks r USING (rank) LEFT JOIN busy b USING (rank, iteration)
    WHERE w.iteration >= (SELECT min(iteration) FROM win) + $skip
    GROUP BY w.rank, r.pp
)
SELECT
    pp, count(*) AS ranks, max(iterations) AS iterations,
    avg(window_ns / iterations) AS window_ns,
    avg(compute_ns / iterations) AS compute_ns,
    avg((window_ns - compute_ns) / iterations) AS bubble_ns,
    sum(window_ns - compute_ns) / nullif(sum(window_ns), 0) AS bubble_ratio,
    max((window_ns - compute_ns) / nullif(window_ns, 0)) AS max_rank_bubble_ratio
FROM per_rank
GROUP BY pp
ORDER BY pp;
