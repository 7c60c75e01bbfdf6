-- p2p_bandwidth: achieved bandwidth of every point-to-point link, as a src x dst list.
--
-- Per (src, dst) pair: messages, bytes and the achieved bandwidth, bytes over transfer time.
-- A message's transfer time is the shorter of its send and its receive call: whichever side
-- posted last waited only for the wire, so no clock alignment is needed. A slow link shows as a
-- pair well below the median link (vs_median).
--
-- @column src INTEGER  sending rank
-- @column dst INTEGER  receiving rank
-- @column messages BIGINT  matched messages
-- @column bytes BIGINT  payload bytes
-- @column transfer_ns BIGINT  transfer time summed over the messages
-- @column bandwidth_gbs DOUBLE  bytes / transfer_ns (GB/s)
-- @column p50_bandwidth_gbs DOUBLE  median of the messages' own bandwidth
-- @column vs_median DOUBLE  bandwidth_gbs / the median link's bandwidth_gbs
WITH links AS (
    SELECT src, dst, count(*) AS messages, CAST(sum(bytes) AS BIGINT) AS bytes, CAST(sum(transfer_ns) AS BIGINT) AS transfer_ns,
           sum(bytes) / nullif(sum(transfer_ns), 0) AS bandwidth_gbs,
           median(bandwidth_gbs) AS p50_bandwidth_gbs
    FROM p2p
    WHERE transfer_ns > 0 AND bytes IS NOT NULL
    GROUP BY src, dst
)
SELECT src, dst, messages, bytes, transfer_ns, bandwidth_gbs, p50_bandwidth_gbs,
       bandwidth_gbs / nullif(median(bandwidth_gbs) OVER (), 0) AS vs_median
FROM links
ORDER BY src, dst;
