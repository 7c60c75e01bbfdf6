"""The rendering layer: what mapp shows, and the theme it is shown in.

``build_summary(db)`` from the named SQL queries, shown by ``ReportView`` (terminal) or
``write_html`` (one self-contained page with interactive charts); ``DetectReport`` renders the
detector's verdict (terminal and JSON); ``theme.THEME`` names every style. Names are imported
on first use, so that the CLI can take the theme without polars.
"""

from mapp._lazy import lazy_exports

__all__ = ["DetectReport", "ReportView", "RunSummary", "build_summary", "detect_verdict", "render_html", "write_html"]

__getattr__, __dir__ = lazy_exports(__name__, {
    "DetectReport": "verdict", "ReportView": "terminal", "RunSummary": "summary", "build_summary": "summary",
    "detect_verdict": "summary", "render_html": "html", "write_html": "html",
})
