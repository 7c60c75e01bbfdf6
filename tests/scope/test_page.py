"""The MegaScope page in headless Chromium, against the real ``mapp scope serve``.

A tiny random megatron-core GPT (bytes tokenizer) is saved as a distributed checkpoint and
served by the CLI on a free port of 127.0.0.1; Playwright drives Debian's chromium
(``apt-get install -y chromium``) to type two prompts, generate 8 tokens and look at every
view: the activation heatmap and the overview, the attention matrix, the top-k bars and the PCA
trajectories must be drawn by Plotly with data of the right shape (attention rows are
probabilities; top-k descending). Every request the page makes is recorded; one that is not
for the server's own host and port is refused and fails the test, so the page works offline.
A screenshot is kept as a test artefact (``tmp_path/scope.png``, named in the JUnit
properties). Skips without chromium or Playwright.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from urllib.parse import urlsplit

import pytest

pytest.importorskip("megatron.core")
import torch  # noqa: E402

from mapp.scope.model import ModelSpec, build_model, ensure_model_parallel, save_checkpoint  # noqa: E402
from tests._browser import browser, needs_browser  # noqa: E402, F401  (browser: a fixture)
from tests.scope._serve import Served  # noqa: E402

CHARTS = ("heatmap", "overview", "attention", "topk", "pca")
PROMPTS = ("The cat sat on the", "Once upon a <b>time</b> &")   # markup in a prompt is text, not HTML
NEW_TOKENS = 8
LAYERS = 2
TOP_K = 5
START_S = 240   # a loaded 2-core CI machine imports torch and megatron slowly
RUN_MS = 180_000


pytestmark = needs_browser

SPEC = ModelSpec(num_layers=LAYERS, hidden_size=64, num_attention_heads=4, num_query_groups=2,
                 ffn_hidden_size=128, vocab_size=256, max_sequence_length=64, tokenizer="bytes")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    """A random tiny GPT: the page is tested, not the model."""
    ensure_model_parallel()
    torch.manual_seed(7)
    directory = tmp_path_factory.mktemp("scope") / "ckpt"
    save_checkpoint(build_model(SPEC).eval(), SPEC, directory)
    return directory


@pytest.fixture(scope="module")
def server(checkpoint):
    """``mapp scope serve CHECKPOINT --port 0`` (its output drained all along, so it never blocks)."""
    with Served(checkpoint, timeout=START_S) as served:
        yield served


class Session:
    """One page with every request, WebSocket and error it had recorded."""

    def __init__(self, browser, url: str):
        self.origin = urlsplit(url).netloc
        self.requests: list[str] = []
        self.refused: list[str] = []
        self.sockets: list[str] = []
        self.errors: list[str] = []
        self.context = browser.new_context(viewport={"width": 1400, "height": 1200})
        self.context.route("**/*", self._route)
        page = self.page = self.context.new_page()
        page.on("websocket", lambda ws: self.sockets.append(ws.url))
        page.on("console", lambda m: self.errors.append(f"console.{m.type}: {m.text}") if m.type == "error" else None)
        page.on("pageerror", lambda e: self.errors.append(f"pageerror: {e}"))
        page.on("requestfailed", lambda r: self.errors.append(f"request failed: {r.url}"))
        page.goto(url)

    def _route(self, route) -> None:
        url = route.request.url
        self.requests.append(url)
        parts = urlsplit(url)
        if parts.scheme == "http" and parts.netloc == self.origin and parts.hostname == "127.0.0.1":
            route.continue_()
        else:
            self.refused.append(url)
            route.abort()

    def data(self, chart: str) -> list[dict]:
        return self.page.evaluate(f"document.getElementById('{chart}').data")

    def wait_title(self, chart: str, text: str) -> None:
        """Until ``chart`` is drawn with the title ``text`` (while its data is on the way the
        container holds a note, not a plot)."""
        self.page.wait_for_function(
            "([id, text]) => { const el = document.getElementById(id);"
            " return el.dataset.drawn === '1' && el.layout && el.layout.title.text === text; }",
            arg=[chart, text], timeout=RUN_MS)

    def wait_drawn(self, *charts: str) -> None:
        for chart in charts:
            self.page.wait_for_selector(f"#{chart}[data-drawn='1']", state="attached", timeout=RUN_MS)

    @property
    def status(self) -> str:
        try:
            return self.page.inner_text("#status", timeout=1000)
        except Exception:  # the page may be gone
            return "?"

    def generate(self, runs: int) -> None:
        self.page.wait_for_selector("#generate:not([disabled])", timeout=RUN_MS)
        self.page.click("#generate")
        self.page.wait_for_selector(f"body[data-runs='{runs}']", state="attached", timeout=RUN_MS)


@pytest.fixture(scope="module")
def session(server, browser):
    s = Session(browser, server.url)
    page = s.page
    try:
        page.wait_for_selector("#status[data-state='connected']", timeout=RUN_MS)
        page.fill("#prompts", "\n".join(PROMPTS))
        page.fill("#max-new-tokens", str(NEW_TOKENS))
        page.fill("#top-k", str(TOP_K))
        s.generate(runs=1)
        s.wait_drawn(*CHARTS)
    except Exception as e:   # what the page and the server said, not only which wait timed out
        s.context.close()
        pytest.fail(f"{type(e).__name__}: {str(e)[:500]}\nstatus: {s.status}\npage errors: {s.errors}\n"
                    f"server:\n{server.tail()}")
    yield s
    s.context.close()


def _numbers(rows) -> list[float]:
    return [v for row in rows for v in row if v is not None]


def _sequence_lengths(session) -> list[int]:
    """Tokens per prompt as the page shows them: prompt tokens and generated ones."""
    return session.page.evaluate(
        "Array.from(document.querySelectorAll('#output .line'), l => l.querySelectorAll('.gen-tok').length)")


def test_two_prompts_generate_8_tokens_each(session):
    page = session.page
    assert page.locator("#output .line").count() == len(PROMPTS)
    assert _sequence_lengths(session) == [NEW_TOKENS] * len(PROMPTS)
    # the prompt is shown as typed: its markup is text
    assert page.locator("#output .line[data-prompt='1'] .prompt-tok").text_content() == PROMPTS[1]
    assert page.locator("#output b").count() == 0
    assert page.get_attribute("#status", "data-state") == "connected"


def test_every_view_is_drawn_with_data(session):
    n_prompt = len(PROMPTS[0].encode())   # the demo checkpoint's tokenizer is bytes
    rows = n_prompt + NEW_TOKENS          # done carries a row for every token, the last included

    [heat] = session.data("heatmap")
    assert heat["type"] == "heatmap"
    assert len(heat["z"]) == rows and len(heat["y"]) == rows
    assert all(len(r) == len(heat["x"]) == 16 for r in heat["z"])    # default bins
    assert all(math.isfinite(v) for v in _numbers(heat["z"])) and len(_numbers(heat["z"])) == rows * 16

    [over] = session.data("overview")
    assert len(over["z"]) == LAYERS and all(len(r) == rows for r in over["z"])
    assert len(_numbers(over["z"])) == LAYERS * rows

    [att] = session.data("attention")
    assert len(att["z"]) == rows and all(len(r) == rows for r in att["z"])
    for i, r in enumerate(att["z"]):
        assert math.isclose(sum(r), 1.0, abs_tol=1e-4), i               # each query's probabilities
        assert all(v == 0 or v is None for v in r[i + 1:]), i            # causal: no look ahead

    [bars] = session.data("topk")
    assert bars["type"] == "bar" and len(bars["x"]) == TOP_K
    assert all(0 <= p <= 1 for p in bars["x"]) and bars["x"] == sorted(bars["x"], reverse=True)

    pca = session.data("pca")
    assert len(pca) == len(PROMPTS)
    for trace, prompt in zip(pca, PROMPTS):
        assert trace["mode"] == "lines+markers"     # a trajectory: the points in token order, joined
        assert len(trace["x"]) == len(trace["y"]) == len(prompt.encode()) + NEW_TOKENS
        assert all(math.isfinite(v) for v in trace["x"] + trace["y"])


def test_the_page_asked_nothing_of_any_other_host(session, server):
    port = urlsplit(server.url).port
    assert session.refused == []
    assert session.errors == []
    assert session.page.evaluate("document.body.dataset.errors") is None
    assert session.sockets and all(u == f"ws://127.0.0.1:{port}/ws" for u in session.sockets), session.sockets
    assert {urlsplit(u).path for u in session.requests} == {"/", "/assets/scope.css", "/assets/scope.js",
                                                             "/assets/plotly.min.js"}


def test_selections_redraw_the_views(session):
    page = session.page
    # another head: the page asks the server for it and draws the answer
    page.select_option("#att-head", "1")
    session.wait_title("attention", "layer 1 · head 1 · prompt 0")
    # a generated token of the second prompt: its step's top-k, and that prompt everywhere
    page.click("#output .line[data-prompt='1'] .gen-tok[data-step='3']")
    session.wait_title("topk", "prompt 1 · step 3")
    session.wait_title("attention", "layer 1 · head 1 · prompt 1")
    assert page.input_value("#prompt") == "1"
    [heat] = session.data("heatmap")
    assert len(heat["z"]) == len(PROMPTS[1].encode()) + NEW_TOKENS
    # the prompt's markup is a label like any other text, escaped for Plotly's pseudo-HTML
    labels = "".join(row[0] for row in heat["text"])
    assert "a␣&lt;b&gt;time&lt;/b&gt;␣&amp;" in labels and "<b>" not in labels   # a lone space: ␣
    # the embeddings for the PCA
    page.select_option("#pca-layer", "0")
    session.wait_title("pca", "embeddings")
    assert len(session.data("pca")) == len(PROMPTS)
    assert session.errors == [] and session.refused == []


def test_a_perturbation_shows_clean_and_perturbed_top_k_with_kl(session, tmp_path, record_property):
    page = session.page
    page.select_option("#pert-target", "weights")
    page.select_option("#pert-kind", "gaussian")
    page.fill("#pert-strength", "0.5")
    page.click("#apply")
    page.wait_for_selector("#active li:not(.muted)", timeout=RUN_MS)
    assert "weights · gaussian · layer all · strength 0.5" in page.inner_text("#active")
    session.generate(runs=2)
    session.wait_drawn(*CHARTS)
    perturbed, clean = session.data("topk")
    assert len(perturbed["x"]) == len(clean["x"]) == TOP_K
    assert re.fullmatch(r"KL [0-9.e+-]+", page.inner_text("#kl"))
    shot = tmp_path / "scope.png"
    page.screenshot(path=str(shot), full_page=True)
    record_property("screenshot", str(shot))
    assert shot.stat().st_size > 10_000
    page.click("#clear")
    page.wait_for_selector("#active li.muted", timeout=RUN_MS)
    assert session.errors == [] and session.refused == []
