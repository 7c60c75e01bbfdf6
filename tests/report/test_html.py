"""The HTML report is one self-contained file whose Plotly charts render in headless Chromium, offline.

The browser tests drive Debian's chromium (``apt-get install -y chromium``) with Playwright (the
``dev`` extra); they skip with that hint without either. Every request the page makes is recorded
and refused unless it is the page's own file, so a chart that needed the network would fail here.
The numbers the charts hold are compared with the ``RunSummary`` frames, computed here.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import math
import re
import subprocess
import sys
import tomllib
from importlib import resources
from pathlib import Path

import polars as pl
import pytest

from mapp.report import write_html
from mapp.report.html import CHARTS
from tests._browser import browser, needs_browser  # noqa: F401  (browser: a fixture)
from tests.analysis.detect._sim import simulated

ROOT = Path(__file__).resolve().parents[2]
ASSETS = ("page.html", "report.css", "report.js")


# -- the file ------------------------------------------------------------------------------------

def _outside_plotlyjs(page: str) -> str:
    """The page less its first <script> (plotly.js, whose own source names URLs it never loads here)."""
    start = page.index("<script>")
    end = page.index("</script>", start)
    assert "Plotly" in page[start:end] and len(page[start:end]) > 1_000_000
    return page[:start] + page[end:]


def test_the_file_is_self_contained(summary, tmp_path):
    page = write_html(summary, tmp_path / "report.html").read_text()
    assert "<script src" not in page and "<link" not in page and "@import" not in page
    rest = _outside_plotlyjs(page)
    assert not re.search(r"""(src|href)=["']https?://""", rest)
    assert not re.search(r"https?://(?!www\.w3\.org/)", rest)
    assert rest.count("<script") == 2 and page.count("</script>") == 3
    assert not re.search(r"@(TITLE|STYLE|DATA|SCRIPT|PLOTLY)@", rest)
    for chart in CHARTS:
        assert f'id="chart-{chart}"' in page


def test_the_assets_are_package_data():
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["mapp"]
    for name in ASSETS:
        assert resources.files("mapp.report").joinpath("assets", name).is_file(), name
        assert any(fnmatch.fnmatch(f"report/assets/{name}", p) for p in patterns), name


def test_plotly_waits_for_a_page_to_be_rendered():
    """``mapp --help`` and importing the report package pay for neither plotly nor torch."""
    code = (
        "import sys, mapp.cli.app, mapp.report, mapp.report.html\n"
        "print(','.join(sorted(n for n in sys.modules if n.split('.')[0] in ('plotly', 'torch'))))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == ""


def test_rendering_imports_no_torch(tmp_path):
    # in a process of its own: other tests in this one may have imported torch already
    out, _ = simulated(tmp_path, tp=2, pp=1, dp=2)
    code = ("import sys\nfrom mapp.analysis.ingest import load_bundle\nfrom mapp.report import build_summary, render_html\n"
            "from mapp.sql import open_database\n"
            f"db = open_database({str(out)!r})\nrender_html(build_summary(db))\n"
            "print(','.join(sorted(n for n in sys.modules if n.split('.')[0] == 'torch')))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == ""


# -- in the browser ------------------------------------------------------------------------------

@dataclasses.dataclass
class Loaded:
    page: object
    requests: list[str]
    errors: list[str]


def _open(browser, path: Path, *, wait: str = "body[data-rendered]") -> Loaded:
    """``path`` in a fresh offline context; every request but the page's own file refused."""
    context = browser.new_context(offline=True, viewport={"width": 1280, "height": 900})
    requests: list[str] = []
    errors: list[str] = []
    own = path.resolve().as_uri()

    def route(r):
        requests.append(r.request.url)
        if r.request.url == own:
            r.continue_()
        else:
            r.abort()

    context.route("**/*", route)
    page = context.new_page()
    page.on("console", lambda m: errors.append(f"console.{m.type}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(f"pageerror: {e}"))
    page.on("requestfailed", lambda r: errors.append(f"request failed: {r.url}"))
    page.goto(own)
    page.wait_for_selector(wait, state="attached", timeout=120_000)
    return Loaded(page, requests, errors)


@pytest.fixture(scope="module")
def loaded(summary, browser, tmp_path_factory):
    path = write_html(summary, tmp_path_factory.mktemp("html") / "report.html")
    loaded = _open(browser, path)
    yield loaded
    loaded.page.context.close()


def _data(page, chart: str) -> list[dict]:
    return page.evaluate(f"document.getElementById('chart-{chart}').data")


def _close(got, want) -> bool:
    if want is None or (isinstance(want, float) and math.isnan(want)):
        return got is None
    return got is not None and math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-12)


def _assert_values(got: list, want: list, what: str) -> None:
    assert len(got) == len(want), what
    bad = [(i, g, w) for i, (g, w) in enumerate(zip(got, want)) if not _close(g, w)]
    assert not bad, f"{what}: {bad[:5]}"


@needs_browser
def test_the_page_renders_offline_without_errors(loaded):
    page = loaded.page
    assert loaded.errors == []
    assert page.evaluate("document.body.dataset.errors") is None
    assert [u for u in loaded.requests if not u.startswith("file:")] == []
    assert len(loaded.requests) == 1
    assert page.evaluate("document.body.dataset.rendered") == str(len(CHARTS))
    assert page.locator(".js-plotly-plot").count() == len(CHARTS)
    assert page.evaluate("typeof Plotly.version") == "string"


@needs_browser
def test_every_chart_is_drawn(loaded, summary):
    page = loaded.page
    for chart in CHARTS:
        root = f"#chart-{chart}.js-plotly-plot .main-svg"
        assert page.locator(root).count() >= 1, chart
        if chart == "bandwidth":
            assert page.locator(f"#chart-{chart} .heatmaplayer .hm image").count() == 1
            continue
        bars = sum(len(t["x"]) for t in _data(page, chart))
        assert page.locator(f"#chart-{chart} .barlayer .trace.bars .point path").count() == bars, chart
    # the tables beside the charts, one row per summary row
    assert page.locator("#table-breakdown tbody tr").count() == len(summary.breakdown)
    assert page.locator("#table-skew tbody tr").count() == len(summary.skew)
    assert page.locator("#table-slowest tbody tr").count() == len(summary.slowest_ops)
    assert page.locator("#table-last tbody tr").count() == min(10, len(summary.last_arrivers))
    assert "rank 5 is slow" in page.inner_text("#verdict")


@needs_browser
def test_chart_data_are_the_summary_numbers(loaded, summary):
    page = loaded.page
    s = summary

    [it] = _data(page, "iterations")
    _assert_values(it["x"], [v / 1e6 for v in s.job_iterations["time_ns"]], "iteration ms")
    assert it["y"] == [f"iteration {i}" for i in s.job_iterations["iteration"]]
    assert [c[0] for c in it["customdata"]] == s.job_iterations["slowest_rank"].to_list()

    br = s.breakdown
    series = {t["name"]: t for t in _data(page, "breakdown")}
    assert list(series) == ["compute", "exposed comm", "other", "idle"]
    _assert_values(series["compute"]["x"], br["compute_frac"].to_list(), "compute")
    _assert_values(series["exposed comm"]["x"], br["exposed_comm_frac"].to_list(), "exposed comm")
    _assert_values(series["idle"]["x"], br["idle_frac"].to_list(), "idle")
    _assert_values(series["other"]["x"], (br["other_ns"] / br["window_ns"]).to_list(), "other")
    assert series["compute"]["y"] == [f"rank {r} (pp{p})" for r, p in zip(br["rank"], br["pp"])]

    ov = s.overlap
    hidden, exposed = _data(page, "overlap")
    assert hidden["y"] == ov["kind"].to_list() == exposed["y"]
    _assert_values(hidden["x"], [v / 1e6 for v in ov["overlapped_ns"]], "overlapped")
    _assert_values(exposed["x"], [v / 1e6 for v in ov["exposed_ns"]], "exposed")

    [skew] = _data(page, "skew")
    assert skew["y"] == [f"{g} {o}" for g, o in zip(s.skew["group"], s.skew["op"])]
    _assert_values(skew["x"], [v / 1e6 for v in s.skew["mean_spread_ns"]], "skew")

    [bubbles] = _data(page, "bubbles")
    assert bubbles["y"] == [f"stage {p}" for p in s.bubbles["pp"]]
    _assert_values(bubbles["x"], s.bubbles["bubble_ratio"].to_list(), "bubbles")

    [top] = _data(page, "top-ops")
    assert len(top["y"]) == len(set(top["y"])) == len(s.top_ops)
    assert all(label.startswith(name) for label, name in zip(top["y"], s.top_ops["name"]))
    _assert_values(top["x"], [v / 1e6 for v in s.top_ops["total_ns"]], "top ops")

    heat, slow = _data(page, "bandwidth")
    bw = s.bandwidth
    assert heat["x"] == sorted(set(bw["dst"])) and heat["y"] == sorted(set(bw["src"]))
    cells = {(r["src"], r["dst"]): r["bandwidth_gbs"] for r in bw.to_dicts()}
    for i, src in enumerate(heat["y"]):
        for j, dst in enumerate(heat["x"]):
            assert _close(heat["z"][i][j], cells.get((src, dst))), (src, dst)
    slow_links = bw.filter(pl.col("vs_median") < 0.8)
    assert sorted(zip(slow["y"], slow["x"])) == sorted(zip(slow_links["src"], slow_links["dst"]))
    assert (1, 5) in set(zip(slow["y"], slow["x"])) and len(slow["x"]) == 2


@needs_browser
def test_hover_names_the_slow_link(loaded, summary):
    page = loaded.page
    link = summary.bandwidth.filter((pl.col("src") == 1) & (pl.col("dst") == 5)).row(0, named=True)
    index = page.evaluate("document.getElementById('chart-bandwidth').data[1].y.findIndex("
                          "(y, i, ys) => y === 1 && document.getElementById('chart-bandwidth').data[1].x[i] === 5)")
    page.evaluate(f"Plotly.Fx.hover('chart-bandwidth', [{{curveNumber: 1, pointNumber: {index}}}])")
    page.wait_for_selector("#chart-bandwidth .hoverlayer .hovertext", state="attached")
    text = page.locator("#chart-bandwidth .hoverlayer .hovertext").text_content()
    assert re.search(rf"1 -> 5: {link['bandwidth_gbs']:.1f} GB/s \(0\.2[0-9]x median\)", text), text


@needs_browser
def test_a_chart_without_data_says_so(summary, browser, tmp_path):
    empty = dataclasses.replace(summary, bandwidth=summary.bandwidth.clear(), bubbles=summary.bubbles.clear())
    loaded = _open(browser, write_html(empty, tmp_path / "report.html"))
    try:
        assert loaded.errors == []
        assert loaded.page.evaluate("document.body.dataset.rendered") == str(len(CHARTS) - 2)
        assert loaded.page.locator(".js-plotly-plot").count() == len(CHARTS) - 2
        assert loaded.page.inner_text("#chart-bandwidth") == "no p2p messages"
        assert loaded.page.inner_text("#chart-bubbles") == "no data"
    finally:
        loaded.page.context.close()


@needs_browser
def test_a_script_error_would_be_caught(summary, browser, tmp_path):
    """The checks above can fail: a page whose data is broken reports its error."""
    path = write_html(summary, tmp_path / "report.html")
    path.write_text(path.read_text().replace('"figures":', '"figures_gone":', 1))
    loaded = _open(browser, path, wait="body[data-errors]")
    try:
        assert loaded.errors
        assert loaded.page.evaluate("document.body.dataset.rendered") is None
        assert loaded.page.locator(".js-plotly-plot").count() == 0
    finally:
        loaded.page.context.close()
