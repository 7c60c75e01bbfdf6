"""The clock mapping has one definition (``clock_mapping``); its Python, polars, SQL and text
forms agree on sample times, including shifts that end in exactly half a nanosecond."""

from __future__ import annotations

import duckdb
import polars as pl
import pytest

import mapp.analysis.align.clock as clock_module
from mapp.analysis.align.clock import MAPPING, SLOPE, ClockModel, RankClock, slope_from_drift, sql_mapping

T0 = 1_732_500_000_123_456_789  # an epoch time in ns: large, as real traces' are

CLOCKS = [
    RankClock(rank=0, offset_ns=0.0, drift_ppm=0.0, t0_ns=T0),
    RankClock(rank=1, offset_ns=-50_000_123.4, drift_ppm=12.5, t0_ns=T0 + 777),
    RankClock(rank=2, offset_ns=987_654_321.9, drift_ppm=-33.25, t0_ns=T0 - 1_000_000),
    # shifts of exactly k + 1/2 ns (no drift): rounded halves to even in every form
    RankClock(rank=3, offset_ns=0.5, drift_ppm=0.0, t0_ns=T0),
    RankClock(rank=4, offset_ns=1.5, drift_ppm=0.0, t0_ns=T0),
    RankClock(rank=5, offset_ns=-2.5, drift_ppm=0.0, t0_ns=T0),
    RankClock(rank=6, offset_ns=-0.5, drift_ppm=0.0, t0_ns=5),
    RankClock(rank=7, offset_ns=3.0, drift_ppm=250.0, t0_ns=0),  # small raw times too
]
DELTAS = [0, 1, 999, 1_000_000, 123_456_789_012, 3_600 * 10**9, -5_000]


def samples() -> pl.DataFrame:
    rows = [(c.rank, max(c.t0_ns + d, 0)) for c in CLOCKS for d in DELTAS]
    return pl.DataFrame(rows, schema={"rank": pl.Int32, "ts_ns": pl.Int64}, orient="row")


def python_form(frame: pl.DataFrame) -> list[int]:
    by_rank = {c.rank: c for c in CLOCKS}
    return [by_rank[r].aligned_ns(ts) for r, ts in frame.iter_rows()]


def polars_form(frame: pl.DataFrame) -> list[int]:
    model = ClockModel(0, {c.rank: c for c in CLOCKS}, [[c.rank for c in CLOCKS]])
    return model.apply(frame)["ts_aligned_ns"].to_list()


def sql_form(frame: pl.DataFrame) -> list[int]:
    con = duckdb.connect()
    clock = pl.DataFrame([{"rank": c.rank, "offset_ns": c.offset_ns, "slope": c.slope, "t0_ns": c.t0_ns}
                          for c in CLOCKS], schema={"rank": pl.Int32, "offset_ns": pl.Float64, "slope": pl.Float64,
                                                    "t0_ns": pl.Int64})
    con.register("_clock", clock.to_arrow())
    con.register("e", frame.with_row_index("i").to_arrow())
    rows = con.execute(f"SELECT {sql_mapping('e.ts_ns', 'c')} FROM e LEFT JOIN _clock c ON c.rank = e.rank "
                       "ORDER BY e.i").fetchall()
    return [r[0] for r in rows]


def text_form(frame: pl.DataFrame) -> list[int]:
    """``MAPPING`` and ``SLOPE``, the lines written into clock.json, evaluated as Python."""
    by_rank = {c.rank: c for c in CLOCKS}
    lhs, rhs = (part.strip() for part in MAPPING.split("=", 1))
    assert lhs == "aligned_ns"
    out = []
    for r, ts in frame.iter_rows():
        c = by_rank[r]
        slope = eval(SLOPE.split("=", 1)[1], {}, {"drift_ppm": c.drift_ppm})
        out.append(eval(rhs, {"round_half_even": lambda x: int(round(x))},
                        {"ts_ns": ts, "offset_ns": c.offset_ns, "slope": slope, "t0_ns": c.t0_ns}))
    return out


def test_every_form_of_the_mapping_agrees():
    frame = samples()
    expected = python_form(frame)
    assert polars_form(frame) == expected
    assert sql_form(frame) == expected
    assert text_form(frame) == expected


def test_halves_round_to_even_everywhere():
    frame = pl.DataFrame({"rank": [3, 4, 5, 6], "ts_ns": [T0, T0, T0, 5]}, schema={"rank": pl.Int32, "ts_ns": pl.Int64})
    shifts = [a - ts for a, ts in zip(python_form(frame), frame["ts_ns"].to_list())]
    assert shifts == [0, 2, -2, 0]  # 0.5, 1.5, -2.5, -0.5
    assert polars_form(frame) == sql_form(frame) == python_form(frame)


def test_slope_text_is_the_function():
    for drift in (0.0, 12.5, -33.25, 1e3):
        assert eval(SLOPE.split("=", 1)[1], {}, {"drift_ppm": drift}) == slope_from_drift(drift)


def test_the_module_doc_states_the_generated_mapping():
    assert MAPPING in clock_module.__doc__ and SLOPE in clock_module.__doc__


def test_sql_form_is_what_the_schema_uses():
    assert sql_mapping("e.ts_ns") == ("e.ts_ns + CAST(round_even(c.offset_ns + c.slope * (e.ts_ns - c.t0_ns), 0) "
                                      "AS BIGINT)")


@pytest.mark.parametrize("expr, text", [
    (lambda a, b, c: a - (b + c), "a - (b + c)"), (lambda a, b, c: (a - b) + c, "a - b + c"),
    (lambda a, b, c: a * (b + c), "a * (b + c)"), (lambda a, b, c: a + b * c, "a + b * c"),
    (lambda a, b, c: a - (b - c), "a - (b - c)"), (lambda a, b, c: 2 * a - c, "2 * a - c"),
])
def test_sql_builder_keeps_precedence(expr, text):
    s = clock_module._Sql
    assert expr(s("a"), s("b"), s("c")).text == text
