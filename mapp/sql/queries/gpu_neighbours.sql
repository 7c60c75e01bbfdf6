-- gpu_neighbours: which ranks' GPUs other processes computed on, and what the ranks' clocks did.
--
-- Per rank with device counters (mapp's capture on a GPU samples NVML once per traced
-- iteration): how many samples, in how many of them another process ran a kernel on the GPU (a
-- neighbour time-slicing it: another job, a stray server), the most of the SMs it took in one
-- sample, and the rank's median SM clock and power. Each sample is a snapshot of NVML's last
-- sampling period, so a neighbour that bursts shows in some samples only; mapp detect names the
-- rank where it also kept its peers waiting and its ops were slower than theirs in nearly every
-- step (in most, where the collectives measure who waits: ``time_slices.SEEN_MOST``). ("Another
-- process ran a kernel" is other_sm_pct > 0, as the detector's ``device.NEIGHBOUR_SM_PCT``.)
--
-- @param limit INTEGER = 1000  rows to return (ranks with a neighbour seen most often first)
-- @column rank INTEGER  global rank
-- @column device INTEGER  NVML's index of its GPU
-- @column samples BIGINT  counter samples
-- @column neighbour_samples BIGINT  samples in which another process ran a kernel on its GPU
-- @column max_other_sm_pct DOUBLE  the most of its SMs other processes took in one sample, %
-- @column median_sm_clock_mhz DOUBLE  its SM clock, median of its samples
-- @column median_power_w DOUBLE  its power draw, median of its samples
SELECT
    rank,
    any_value(device) AS device,
    count(*) AS samples,
    count(*) FILTER (WHERE other_sm_pct > 0) AS neighbour_samples,
    max(other_sm_pct) AS max_other_sm_pct,
    median(sm_clock_mhz) AS median_sm_clock_mhz,
    median(power_w) AS median_power_w
FROM gpu_counters
GROUP BY rank
ORDER BY neighbour_samples DESC, max_other_sm_pct DESC NULLS LAST, rank
LIMIT $limit;
