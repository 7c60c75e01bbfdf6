"""The HTML report is one self-contained file whose charts render in headless Chromium.

Needs Debian's chromium (``apt-get install -y chromium``); skipped with that hint without it.
"""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from mapp.report import write_html
from mapp.report.html import CHARTS

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium absent: apt-get install -y chromium")


def test_the_file_is_self_contained(summary, tmp_path):
    page = write_html(summary, tmp_path / "report.html").read_text()
    assert "<script src" not in page and "<link" not in page and "@import" not in page
    assert not re.search(r"""(src|href)=["']https?://""", page)
    assert "</script>" in page and page.count("<script") == 2
    for chart in CHARTS:
        assert f'id="chart-{chart}"' in page


def _chromium_dom(path, tmp_path) -> tuple[str, str]:
    result = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--no-first-run", "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}",
         "--enable-logging=stderr", "--v=0", "--virtual-time-budget=5000", "--dump-dom", path.resolve().as_uri()],
        capture_output=True, text=True, timeout=120,
    )
    return result.stdout, result.stderr


def _console_errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]


@needs_chromium
def test_charts_render_in_chromium_without_errors(summary, tmp_path):
    path = write_html(summary, tmp_path / "report.html")
    dom, stderr = _chromium_dom(path, tmp_path)
    assert _console_errors(stderr) == []
    assert "data-errors" not in dom
    assert f'data-rendered="{len(CHARTS)}"' in dom
    for chart in CHARTS:
        block = dom.split(f'id="chart-{chart}"', 1)[1].split("</section>", 1)[0]
        assert f'data-chart="chart-{chart}"' in block, chart
        assert "<rect" in block, chart
    # Hover text is there for every bar, including the slow link's cell.
    assert re.search(r'data-tip="1 -&gt; 5: [0-9.]+ GB/s \(0\.2[0-9]x median\)', dom)
    assert dom.count('class="slow"') == 2


@needs_chromium
def test_a_script_error_would_be_caught(summary, tmp_path):
    """The check above can fail: a page whose data is broken reports its error."""
    path = write_html(summary, tmp_path / "report.html")
    path.write_text(path.read_text().replace('"job_iterations":', '"job_iterations_gone":', 1))
    dom, stderr = _chromium_dom(path, tmp_path)
    assert _console_errors(stderr) or "data-errors" in dom
    assert f'data-rendered="{len(CHARTS)}"' not in dom
