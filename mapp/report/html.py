"""The run report as one self-contained HTML file with interactive Plotly charts.

No network at view time: plotly.js (from the ``plotly`` package), the styles, the data and the
figures (JSON) are all inline. The page template, its CSS and its small script are files in
``mapp/report/assets/``; the figures are built here with ``plotly.graph_objects`` from the
``RunSummary`` and drawn by plotly.js (values on hover, legends toggle series, tables sort by
clicking a header). ``document.body.dataset.rendered`` holds the number of charts drawn and
``dataset.errors`` any script error, so a headless browser can check the page.

plotly is imported when a page is rendered, never when the CLI starts.
"""

from __future__ import annotations

import html
import io
import json
import math
import re
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import polars as pl
from rich.console import Console

from mapp.errors import OutputError
from mapp.output import write_text
from mapp.report.summary import RunSummary, renderable
from mapp.sql.render import json_value

__all__ = ["render_html", "write_html", "CHARTS"]

CHARTS = ("iterations", "breakdown", "overlap", "skew", "bandwidth", "bubbles", "top-ops")
"""Chart ids; each is drawn by plotly.js into ``<div id="chart-ID">`` when it has data."""

EMPTY = {"bandwidth": "no p2p messages"}
"""What a chart's box says when the run has no data for it (default: "no data")."""

COLORS = {"compute": "#2e9d5b", "exposed": "#d9534f", "other": "#4a78c2", "idle": "#b8bec8",
          "hidden": "#2e9d5b", "bar": "#4a78c2", "slow": "#c0392b"}

TEMPLATE = "plotly_white"
"""The Plotly template; stored once in the page and applied to every figure there."""


@cache
def asset(name: str) -> str:
    """The text of ``mapp/report/assets/NAME`` (package data)."""
    return resources.files("mapp.report").joinpath("assets", name).read_text(encoding="utf-8")


def _finite(value: Any) -> Any:
    """``value`` with NaN and infinities as None (JSON has neither)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, list):
        return [_finite(v) for v in value]
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    return value


def _rows(frame: pl.DataFrame) -> list[dict[str, Any]]:
    return [{k: _finite(json_value(v)) for k, v in row.items()} for row in frame.to_dicts()]


def _verdict_text(verdict: Any) -> str | None:
    if verdict is None:
        return None
    console = Console(file=io.StringIO(), width=100, record=True, color_system=None)
    console.print(renderable(verdict))
    return console.export_text()


def _unique(labels: list[str]) -> list[str]:
    """Category labels made distinct (Plotly merges bars that share one)."""
    seen: dict[str, int] = {}
    out = []
    for label in labels:
        seen[label] = seen.get(label, 0) + 1
        out.append(label if seen[label] == 1 else f"{label} [{seen[label]}]")
    return out


def _fmt(value: float, digits: int = 3) -> str:
    """A number as the tables show it: whole from 100 up, else ``digits`` decimals."""
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.{digits}f}"


def _ms(values: list[Any]) -> list[float | None]:
    return [None if v is None else v / 1e6 for v in values]


def _bars(go: Any, labels: list[str], series: list[tuple[str, list[Any], str]], *, stacked: bool = False,
          unit: str = " ms", percent: bool = False, customdata: list[Any] | None = None,
          hovertemplate: str | None = None) -> Any:
    """Horizontal bars, one row per label (first label on top); several series stack or group."""
    labels = _unique(labels)
    number = "%{x:.1%}" if percent else "%{x:.3~f}" + unit
    traces = []
    for name, values, color in series:
        single = len(series) == 1
        traces.append(go.Bar(
            name=name, orientation="h", y=labels, x=values, marker_color=color,
            text=[None if v is None else (f"{100 * v:.1f}%" if percent else _fmt(v) + unit) for v in values]
            if single else None,
            textposition="outside" if single else None, cliponaxis=False,
            customdata=customdata if single else None,
            hovertemplate=(hovertemplate if single and hovertemplate else f"%{{y}}<br>{name}: {number}<extra></extra>"),
        ))
    row = 14 if len(labels) > 24 else 22
    figure = go.Figure(traces)
    figure.update_layout(
        barmode="stack" if stacked else "group", height=90 + row * len(labels) + (30 if len(series) > 1 else 0),
        margin=dict(l=10, r=60, t=40 if len(series) > 1 else 10, b=40), showlegend=len(series) > 1,
        legend=dict(orientation="h", x=0, y=1.0, yanchor="bottom", traceorder="normal"), bargap=0.2,
    )
    figure.update_yaxes(autorange="reversed", automargin=True, type="category")
    suffix = unit.strip()
    figure.update_xaxes(tickformat=".0%" if percent else None, ticksuffix=f" {suffix}" if suffix and not percent else None,
                        rangemode="tozero", automargin=True)
    return figure


def _bandwidth(go: Any, rows: list[dict[str, Any]]) -> Any:
    """Heatmap of achieved GB/s, sender down, receiver across; slow links (< 0.8x median) outlined."""
    srcs = sorted({r["src"] for r in rows})
    dsts = sorted({r["dst"] for r in rows})
    z: list[list[Any]] = [[None] * len(dsts) for _ in srcs]
    custom: list[list[Any]] = [[[None, None]] * len(dsts) for _ in srcs]
    for r in rows:
        i, j = srcs.index(r["src"]), dsts.index(r["dst"])
        z[i][j] = r["bandwidth_gbs"]
        custom[i][j] = [r["vs_median"], r["messages"]]
    slow = [r for r in rows if r["vs_median"] is not None and r["vs_median"] < 0.8]
    figure = go.Figure([
        go.Heatmap(name="GB/s", x=dsts, y=srcs, z=z, customdata=custom, colorscale="Blues", zmin=0,
                   zmax=max((r["bandwidth_gbs"] or 0 for r in rows), default=0) or 1,
                   xgap=1, ygap=1, colorbar=dict(title=dict(text="GB/s")), hoverongaps=False,
                   hovertemplate="%{y} -> %{x}: %{z:.1f} GB/s (%{customdata[0]:.2f}x median), "
                                 "%{customdata[1]} messages<extra></extra>"),
        go.Scatter(name="< 0.8x median", x=[r["dst"] for r in slow], y=[r["src"] for r in slow], mode="markers",
                   marker=dict(symbol="square-open", size=14, color=COLORS["slow"], line=dict(width=2)),
                   customdata=[[r["bandwidth_gbs"], r["vs_median"], r["messages"]] for r in slow],
                   hovertemplate="%{y} -> %{x}: %{customdata[0]:.1f} GB/s (%{customdata[1]:.2f}x median), "
                                 "%{customdata[2]} messages<extra>slow link</extra>"),
    ])
    cell = max(10, min(36, 840 // max(len(dsts), 1)))
    figure.update_layout(height=130 + cell * len(srcs), margin=dict(l=10, r=10, t=30, b=50),
                         legend=dict(orientation="h", x=0, y=1.0, yanchor="bottom"), showlegend=bool(slow))
    figure.update_xaxes(type="category", title_text="receiver", automargin=True, side="bottom")
    figure.update_yaxes(type="category", title_text="sender", autorange="reversed", automargin=True)
    return figure


def _figures(data: dict[str, Any]) -> dict[str, Any]:
    """One Plotly figure (as JSON-able ``{data, layout}``) per chart id, None where there is no data."""
    import plotly.graph_objects as go

    figures: dict[str, Any] = {}
    it = data["job_iterations"]
    figures["iterations"] = _bars(
        go, [f"iteration {r['iteration']}" for r in it],
        [("job time (ms)", _ms([r["time_ns"] for r in it]), COLORS["bar"])],
        customdata=[[r["slowest_rank"], r["spread"]] for r in it],
        hovertemplate="%{y}: %{x:.3f} ms<br>slowest rank %{customdata[0]} "
                      "(%{customdata[1]:.3f}x the fastest)<extra></extra>") if it else None
    br = data["breakdown"]
    figures["breakdown"] = _bars(
        go, [f"rank {r['rank']} (pp{r['pp']})" for r in br],
        [("compute", [r["compute_frac"] for r in br], COLORS["compute"]),
         ("exposed comm", [r["exposed_comm_frac"] for r in br], COLORS["exposed"]),
         ("other", [(r["other_ns"] or 0) / (r["window_ns"] or 1) for r in br], COLORS["other"]),
         ("idle", [r["idle_frac"] for r in br], COLORS["idle"])],
        stacked=True, percent=True) if br else None
    ov = data["overlap"]
    figures["overlap"] = _bars(
        go, [r["kind"] for r in ov],
        [("hidden behind compute", _ms([r["overlapped_ns"] for r in ov]), COLORS["hidden"]),
         ("exposed", _ms([r["exposed_ns"] for r in ov]), COLORS["exposed"])], stacked=True) if ov else None
    sk = data["skew"]
    figures["skew"] = _bars(
        go, [f"{r['group']} {r['op']}" for r in sk],
        [("mean arrival spread (ms)", _ms([r["mean_spread_ns"] for r in sk]), COLORS["exposed"])]) if sk else None
    figures["bandwidth"] = _bandwidth(go, data["bandwidth"]) if data["bandwidth"] else None
    bu = data["bubbles"]
    figures["bubbles"] = _bars(
        go, [f"stage {r['pp']}" for r in bu],
        [("bubble ratio", [r["bubble_ratio"] for r in bu], COLORS["idle"])], percent=True) if bu else None
    top = data["top_ops"]
    names = [r["name"] for r in top]
    figures["top-ops"] = _bars(
        go, [f"{r['name']} ({r['cat']})" if names.count(r["name"]) > 1 else r["name"] for r in top],
        [("total time (ms)", _ms([r["total_ns"] for r in top]), COLORS["bar"])]) if top else None
    out = {}
    for chart in CHARTS:
        figure = figures[chart]
        if figure is None:
            out[chart] = None
            continue
        spec = figure.to_plotly_json()
        spec["layout"].pop("template", None)
        out[chart] = {"data": spec["data"], "layout": spec["layout"]}
    return out


def _template() -> dict[str, Any]:
    import plotly.io as pio

    return pio.templates[TEMPLATE].to_plotly_json()


def _data(summary: RunSummary) -> dict[str, Any]:
    data: dict[str, Any] = {
        "bundle": {k: json_value(v) for k, v in summary.bundle.items()},
        "skip": summary.skip,
        "median_iteration_ns": summary.median_iteration_ns,
        "job_iterations": _rows(summary.job_iterations),
        "breakdown": _rows(summary.breakdown),
        "stages": _rows(summary.stages),
        "overlap": _rows(summary.overlap),
        "skew": _rows(summary.skew),
        "last_arrivers": _rows(summary.last_arrivers),
        "bandwidth": _rows(summary.bandwidth),
        "bubbles": _rows(summary.bubbles),
        "top_ops": _rows(summary.top_ops),
        "slowest_ops": _rows(summary.slowest_ops),
        "findings": _rows(summary.findings.filter(pl.col("severity") != "info")) if len(summary.findings) else [],
        "verdict": _verdict_text(summary.verdict),
        "verdict_json": json_value(summary.verdict.to_json()) if hasattr(summary.verdict, "to_json") else None,
        "notes": summary.notes,
    }
    data["figures"] = _figures(data)
    data["template"] = _template()
    data["empty"] = EMPTY
    return data


def _plotlyjs() -> str:
    """plotly.js as the ``plotly`` package ships it (no CDN)."""
    from plotly.offline import get_plotlyjs

    return get_plotlyjs()


def render_html(summary: RunSummary) -> str:
    """The whole page as a string."""
    data = json.dumps(_finite(_data(summary)), separators=(",", ":"), allow_nan=False).replace("</", "<\\/")
    title = html.escape(f"mapp report: {summary.bundle.get('directory', '')}")
    parts = {"@TITLE@": title, "@STYLE@": asset("report.css"), "@DATA@": data,
             "@SCRIPT@": asset("report.js"), "@PLOTLY@": _plotlyjs().replace("</script", "<\\/script")}
    # One pass: a placeholder's text inside a part (the data, plotly.js) is left as it is.
    return re.sub(r"@(TITLE|STYLE|DATA|SCRIPT|PLOTLY)@", lambda m: parts[m.group(0)], asset("page.html"))


def write_html(summary: RunSummary, path: Path) -> Path:
    """Write the page to ``path`` atomically; ``OutputError`` if it cannot be written."""
    path = Path(path)
    text = render_html(summary)
    try:
        write_text(path, text)
    except OSError as error:
        raise OutputError(f"--html {path}: cannot write ({error.strerror})", "choose another path") from None
    return path
