"""Device counters beside the verdict: a suspect's SM clock, power, temperature and throttle
reasons against its peers', from the ``gpu`` counter events the capture hooks sample (NVML)
once per traced iteration. Evidence only: no verdict is made from counters alone.
"""

from __future__ import annotations

import polars as pl

__all__ = ["device_counters", "device_evidence"]

_FIELDS = {"sm_clock_mhz": pl.Float64, "power_w": pl.Float64, "temperature_c": pl.Float64,
           "throttle_reasons": pl.Int64}


def device_counters(scan: pl.LazyFrame) -> pl.DataFrame:
    """Per rank: the median of each sampled counter, and the throttle reasons seen (bitwise or
    of the samples' ``throttle_reasons``). Empty when the traces carry no ``gpu`` counters."""
    samples = scan.filter((pl.col("ph") == "C") & (pl.col("name") == "gpu")).select("rank", "args").collect()
    if samples.is_empty():
        return pl.DataFrame(schema={"rank": pl.Int32, **{k: v for k, v in _FIELDS.items()}, "samples": pl.UInt32})
    samples = samples.with_columns(
        pl.col("args").str.json_path_match(f"$.{name}").cast(dtype, strict=False).alias(name)
        for name, dtype in _FIELDS.items()
    )
    return samples.group_by("rank").agg(
        *(pl.col(name).median() for name in ("sm_clock_mhz", "power_w", "temperature_c")),
        pl.col("throttle_reasons").drop_nulls().bitwise_or().alias("throttle_reasons"),
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
    return out
