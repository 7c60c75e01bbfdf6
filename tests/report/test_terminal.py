"""The terminal report renders every section from the named queries, at a fixed width."""

from __future__ import annotations

import io

from rich.console import Console

from mapp.report.theme import THEME
from mapp.report import ReportView


def _render(summary) -> str:
    out = io.StringIO()
    Console(file=out, width=120, theme=THEME, color_system=None).print(ReportView(summary))
    return out.getvalue()


def test_every_section_is_there(summary):
    text = _render(summary)
    for heading in ("mapp report", "TP2 x PP2 x DP2", "iteration time", "time per pipeline stage", "time per rank",
                    "communication / computation overlap", "collective skew", "last arrivers", "p2p bandwidth",
                    "pipeline bubbles", "top ops by total time", "slowest op instances", "straggler verdict",
                    "rank 5 is slow"):
        assert heading in text, heading


def test_the_figures_point_at_the_faults(summary):
    assert summary.last_arrivers.row(0, named=True)["rank"] == 5
    slowest = summary.bandwidth.sort("vs_median").head(2)
    assert {(r["src"], r["dst"]) for r in slowest.iter_rows(named=True)} == {(1, 5), (5, 1)}
    assert summary.stages["ranks"].to_list() == [4, 4]
    assert summary.median_iteration_ns > 0
    text = _render(summary)
    assert "1 -> 5" in text and "0.25x" in text


def test_many_ranks_show_the_extremes_only(summary):
    import polars as pl

    wide = summary.breakdown
    many = pl.concat([wide.with_columns(rank=pl.col("rank") + 8 * k) for k in range(4)])
    from dataclasses import replace

    text = _render(replace(summary, breakdown=many))
    assert "least and most computing of 32" in text


def test_a_job_without_a_layout_shows_no_none():
    # a plain DDP job under the profiler (tests/corpus/cases-users): no pp, tp or dp anywhere;
    # the tables showed "None" in each such cell
    import re
    from pathlib import Path

    from mapp.report import build_summary
    from mapp.sql import open_database

    case = Path(__file__).resolve().parents[1] / "corpus" / "cases-users" / "ddp4-transformer-tb-fwd1.4x-r0"
    db = open_database(case)
    try:
        text = _render(build_summary(db))
    finally:
        db.close()
    assert "time per rank" in text and "last arrivers" in text
    assert "None" not in text
    assert re.search(r"│ 0\s+│ -\s+│ -\s+│ -\s+│", text)


def test_a_lone_process_s_trace_has_no_world_size_to_show(tmp_path):
    # one process profiled without torch.distributed: "1 ranks traced of None:" before
    import gzip
    import json
    import re
    from pathlib import Path

    from mapp.report import build_summary
    from mapp.sql import open_database

    src = Path(__file__).resolve().parents[1] / "fixtures" / "kineto_gloo" / "rank-0.json"
    doc = json.loads(src.read_bytes())
    doc.pop("distributedInfo")
    (tmp_path / "trace.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode()))
    db = open_database(tmp_path)
    try:
        text = _render(build_summary(db))
    finally:
        db.close()
    assert re.search(r"│ 1 rank traced\s+│", text)
    assert "None" not in text
