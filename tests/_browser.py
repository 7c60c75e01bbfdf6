"""Headless Chromium for the tests that render a page (the HTML report, the MegaScope page):
Debian's ``chromium`` driven by Playwright, never a downloaded browser. One place for finding
it, skipping without it, and launching it."""

from __future__ import annotations

import shutil

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _sync_playwright():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None
    return sync_playwright


needs_browser = pytest.mark.skipif(
    CHROMIUM is None or _sync_playwright() is None,
    reason="headless Chromium or Playwright absent: apt-get install -y chromium; pip install -e '.[dev]'",
)


@pytest.fixture(scope="module")
def browser():
    """One headless Chromium for a test module (use with ``needs_browser``)."""
    with _sync_playwright()() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        try:
            yield launched
        finally:
            launched.close()
