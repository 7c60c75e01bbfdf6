"""Sequence lengths that differ between data-parallel replicas are not a slow GPU.

A real DP2 job (megatron-core, gloo) whose replica 0 draws about twice the tokens of replica 1
over the traced steps (``--seq-lognormal 0.8 --seed 70``): its layers take longer because they
have more work. mapp's capture records each layer call's tokens, and the detector takes out of
each op's time what its tokens explain; without the token counts rank 0 reads far slower.
"""

from __future__ import annotations

import polars as pl
import pytest

pytest.importorskip("megatron.core")

from mapp.analysis.detect import detect_bundle  # noqa: E402
from mapp.analysis.ingest import load_bundle  # noqa: E402
from tests.megatron_hooks._torchrun import run_example  # noqa: E402

MODEL = ["--layers", "4", "--hidden", "256", "--heads", "4", "--seq", "512", "--micro-batch-size", "2",
         "--num-microbatches", "4", "--iterations", "6", "--seq-lognormal", "0.8", "--seed", "70",
         "--trace-interval", "1", "--trace-start", "2", "--continuous-trace-iterations", "4"]


@pytest.fixture(scope="module")
def uneven(tmp_path_factory):
    trace = tmp_path_factory.mktemp("tokens") / "trace"
    run = run_example(trace, MODEL, nproc=2, timeout=400)
    tokens = {r: sum(e["args"]["tokens"] for e in evs if e.get("name") == "layer.forward")
              for r, evs in run.events.items()}
    return trace, tokens


def test_the_capture_records_the_tokens_of_each_layer_call(uneven):
    _, tokens = uneven
    assert tokens[0] > 1.5 * tokens[1]   # the seed's lengths: replica 0 has about twice the work


def _stage1(bundle, monkeypatch, *, tokens: bool) -> tuple[dict[int, float], list]:
    """Stage 1's slowdown per rank over all traced iterations (the median of its per-iteration
    effects against its peer; the verdict weighs these) and the verdict's suspects."""
    import math

    from mapp.analysis.detect import detector, peers

    seen = {}
    combine = detector.combine

    def spy(evidence, *args, **kwargs):
        per = evidence.rank_iterations.group_by("rank").agg(pl.col("effect").median())
        seen.update({r["rank"]: math.exp(r["effect"]) for r in per.iter_rows(named=True)})
        return combine(evidence, *args, **kwargs)

    monkeypatch.setattr(detector, "combine", spy)
    if not tokens:
        monkeypatch.setattr(peers, "_token_slope", lambda ops, g: None)
    verdict = detect_bundle(bundle, threshold=0.1)
    monkeypatch.undo()
    return seen, [(s.rank, s.kind) for s in verdict.suspects]


def test_more_tokens_are_not_a_slow_gpu(uneven, monkeypatch):
    trace, _ = uneven
    bundle = load_bundle(trace)
    with_tokens, _ = _stage1(bundle, monkeypatch, tokens=True)
    without, _ = _stage1(bundle, monkeypatch, tokens=False)
    # without the token counts rank 0 looks ~1.6x slower (its replica's extra work; 1.22x in
    # one run on 2 cores shared with a second test suite); with them most of that is explained
    # (on a quiet machine all of it: no suspect at all; on shared cores the ranks' speeds also
    # differ by chance, so no exact figure is asserted)
    assert without[0] > 1.1, without
    assert with_tokens[0] - 1 <= 0.5 * (without[0] - 1), (with_tokens, without)
