-- iteration_times: how long each training iteration took on every rank.
--
-- One row per (rank, iteration): the iteration's duration on the rank's own clock, when it
-- started and ended on the reference clock, and how it compares with the median rank of the
-- same iteration. The job's iteration time is its slowest rank's.
--
-- @param skip INTEGER = 0  leave out the first `skip` iterations (warm-up)
-- @column rank INTEGER  global rank
-- @column pp INTEGER  pipeline stage
-- @column tp INTEGER  tensor-parallel coordinate
-- @column dp INTEGER  data-parallel coordinate
-- @column iteration INTEGER  training iteration
-- @column dur_ns BIGINT  iteration duration on the rank's own clock
-- @column start_aligned_ns BIGINT  iteration start on the reference clock (null without a clock model)
-- @column end_aligned_ns BIGINT  iteration end on the reference clock (null without a clock model)
-- @column vs_median DOUBLE  dur_ns / the median dur_ns of this iteration over all ranks
SELECT
    i.rank, r.pp, r.tp, r.dp, i.iteration, i.dur_ns,
    i.ts_aligned_ns AS start_aligned_ns,
    i.end_aligned_ns,
    i.dur_ns / median(i.dur_ns) OVER (PARTITION BY i.iteration) AS vs_median
FROM iterations i
JOIN ranks r USING (rank)
WHERE i.iteration >= (SELECT min(iteration) FROM iterations) + $skip
ORDER BY i.iteration, i.rank;
