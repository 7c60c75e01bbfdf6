"""Device counters beside the verdict: a suspect's SM clock, power, temperature and throttle
reasons against its peers', from the ``gpu`` counter events the capture hooks sample (NVML)
once per traced iteration, and the other processes seen computing on a rank's GPU.

No verdict is made from counters alone. A neighbour seen on a rank's GPU (``neighbours``) is
what lets ``time_slices`` read that rank's summed time as its own loss where its slowed ops
cluster as structure would (a neighbour that bursts for several ops at a time); the rank must
still be slower in nearly every step and keep its peers waiting.
"""

from __future__ import annotations

import polars as pl

from mapp.trace_format import GPU_COUNTER, GPU_COUNTER_FIELDS

__all__ = ["NEIGHBOUR_SM_PCT", "device_counters", "device_evidence", "neighbours"]

NEIGHBOUR_SM_PCT = 0.0
"""Another process that kept more than this share of a GPU's SMs (%) busy in one of NVML's
samples is a neighbour: any kernel at all (NVML lists a process only where it ran one in the
sampling period; one that merely holds a context on the device, a peer rank's say, is not
listed). A sample is a snapshot of NVML's last sampling period, so what one reads says nothing
of what the neighbour costs (the trace says that: ``time_slices``). 2 H200s, another process
running matmuls for 0.15-0.3 of every 20 ms on one rank's GPU, six jobs under mapp's capture: on
that rank 2-8% in the first sample of every job, 33-66% where a later one caught a burst and 0
in the rest; 0 in every sample of every other rank (14 ranks: the neighbours' peers and healthy,
imbalanced and layer-fault jobs). A floor of 10% set before that held-out run missed two of its
three bursty neighbours (read 3% and 5%).
"""

_FIELDS = {name: pl.Int64 if GPU_COUNTER_FIELDS[name] == "int64" else pl.Float64
           for name in ("sm_clock_mhz", "power_w", "temperature_c", "throttle_reasons", "other_sm_pct")}


def device_counters(scan: pl.LazyFrame) -> pl.DataFrame:
    """Per rank: the median of each sampled counter, the throttle reasons seen (bitwise or of the
    samples' ``throttle_reasons``), the most of its SMs another process kept busy
    (``other_sm_pct``, null where not sampled) and in how many samples a neighbour was seen
    (``neighbour_samples``). Empty when the traces carry no ``gpu`` counters."""
    samples = scan.filter((pl.col("ph") == "C") & (pl.col("name") == GPU_COUNTER)).select("rank", "args").collect()
    if samples.is_empty():
        return pl.DataFrame(schema={"rank": pl.Int32, **_FIELDS, "neighbour_samples": pl.UInt32, "samples": pl.UInt32})
    samples = samples.with_columns(
        pl.col("args").str.json_path_match(f"$.{name}").cast(dtype, strict=False).alias(name)
        for name, dtype in _FIELDS.items()
    )
    return samples.group_by("rank").agg(
        *(pl.col(name).median() for name in ("sm_clock_mhz", "power_w", "temperature_c")),
        pl.col("throttle_reasons").drop_nulls().bitwise_or().alias("throttle_reasons"),
        pl.col("other_sm_pct").max(),
        (pl.col("other_sm_pct") > NEIGHBOUR_SM_PCT).sum().cast(pl.UInt32).alias("neighbour_samples"),
        pl.len().alias("samples"),
    ).sort("rank")


def device_evidence(counters: pl.DataFrame, rank: int) -> dict | None:
    """``rank``'s counters and the median of every other rank's, or None without counters."""
    if counters.is_empty() or rank not in counters["rank"]:
        return None
    mine = counters.filter(pl.col("rank") == rank).row(0, named=True)
    others = counters.filter(pl.col("rank") != rank)
    out: dict = {"samples": int(mine["samples"])}
    for name in ("sm_clock_mhz", "power_w", "temperature_c"):
        if mine[name] is not None:
            out[name] = round(float(mine[name]), 1)
            if len(others) and others[name].drop_nulls().len():
                out[f"peers_{name}"] = round(float(others[name].median()), 1)
    if mine["throttle_reasons"] is not None:
        out["throttle_reasons"] = int(mine["throttle_reasons"])
    if mine["other_sm_pct"] is not None:
        out["other_sm_pct"] = round(float(mine["other_sm_pct"]), 1)
        out["neighbour_samples"] = int(mine["neighbour_samples"])
    return out


def neighbours(counters: pl.DataFrame | None) -> dict[int, dict]:
    """Per rank on whose GPU another process was seen computing (more than ``NEIGHBOUR_SM_PCT`` of
    its SMs in some sample): the most it took (``other_sm_pct``), in how many samples of how
    many (``seen``, ``samples``)."""
    if counters is None or counters.is_empty():
        return {}
    return {row["rank"]: {"other_sm_pct": round(float(row["other_sm_pct"]), 1), "seen": int(row["neighbour_samples"]),
                          "samples": int(row["samples"])}
            for row in counters.filter(pl.col("neighbour_samples") > 0).iter_rows(named=True)}
