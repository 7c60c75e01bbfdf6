"""The run report: ``build_summary(db)`` from the named SQL queries, shown by ``ReportView``
(terminal) or ``write_html`` (one self-contained page with interactive charts)."""

from mapp.report.html import render_html, write_html
from mapp.report.summary import RunSummary, build_summary, detect_verdict
from mapp.report.terminal import ReportView

__all__ = ["ReportView", "RunSummary", "build_summary", "detect_verdict", "render_html", "write_html"]
