"""MegaFBD end to end: ``examples/train_gpt.py --fbd`` under torchrun on CPU (gloo, fp32).

The decoupled run (a forward and a backward worker per stage, real megatron-core stages and
process groups) must print the losses of the coupled run of the same ``--tp``/``--pp`` within
1e-5 for 5 steps, also with forward workers at a smaller TP than the backward workers; with
``--trace`` both kinds of worker write a trace that ``mapp trace merge`` puts side by side.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest
import torch

from ._runs import ROOT, env, run

pytest.importorskip("megatron.core")

TOLERANCE = 1e-5


def _same_losses(coupled, fbd) -> None:
    assert len(coupled.losses) == len(fbd.losses) == 5, (coupled.losses, fbd.losses)
    assert [i for i, _ in fbd.printed] == [0, 1, 2, 3, 4], fbd.output[-3000:]
    assert fbd.printed == coupled.printed
    worst = max(abs(a - b) for a, b in zip(coupled.losses, fbd.losses))
    assert worst <= TOLERANCE, (coupled.losses, fbd.losses)
    assert "done: 5 iterations" in fbd.output and "(fbd: " in fbd.output


@pytest.fixture(scope="module")
def coupled_pp2(tmp_path_factory):
    return run(tmp_path_factory.mktemp("coupled-pp2"), 2, ["--pp", "2"])


def test_pp2_decoupled_matches_coupled(tmp_path, coupled_pp2):
    fbd = run(tmp_path / "fbd", 4, ["--pp", "2", "--fbd"])
    _same_losses(coupled_pp2, fbd)


def test_forward_tp_smaller_than_backward_tp(tmp_path):
    coupled = run(tmp_path / "coupled", 4, ["--tp", "2", "--pp", "2"])
    fbd = run(tmp_path / "fbd", 6, ["--tp", "2", "--pp", "2", "--fbd", "--fbd-forward-tp", "1"])
    assert "forward tp1 x pp2 (ranks 4-5)" in fbd.output
    _same_losses(coupled, fbd)


def test_stale_forward_weights_would_be_caught(tmp_path, coupled_pp2):
    """The comparison is sharp enough to see the weight sync: forward workers that keep their
    first weights (``MAPP_FBD_TEST_STALE_WEIGHTS``, a fault of the test launcher) feed the
    backward workers other stage inputs, and the losses leave the tolerance."""
    coupled = coupled_pp2
    stale = run(tmp_path / "stale", 4, ["--pp", "2", "--fbd"], extra_env={"MAPP_FBD_TEST_STALE_WEIGHTS": "1"})
    assert coupled.losses[0] == pytest.approx(stale.losses[0], abs=TOLERANCE)  # step 0: same weights
    assert max(abs(a - b) for a, b in zip(coupled.losses[1:], stale.losses[1:])) > TOLERANCE


def test_both_workers_traced_and_merged(tmp_path):
    traces = tmp_path / "traces"
    fbd = run(tmp_path / "fbd", 4, ["--pp", "2", "--fbd", "--iterations", "2", "--trace", "--trace-dir", str(traces),
                                    "--trace-interval", "1", "--continuous-trace-iterations", "2",
                                    "--trace-granularity", "schedule"])
    assert len(fbd.printed) == 2
    files = sorted(p.name for p in traces.glob("rank-*.json"))
    assert files == [f"rank-{r:05d}.json" for r in range(4)]
    first = json.loads(traces.joinpath("rank-00002.json").read_text().splitlines()[1].rstrip(","))
    assert first["args"]["fbd"]["role"] == "forward" and first["args"]["fbd"]["partners"] == [0]

    merged = tmp_path / "merged.json"
    proc = subprocess.run([sys.executable, "-m", "mapp", "trace", "merge", str(traces), "-o", str(merged)],
                          capture_output=True, text=True, timeout=240, env=env(), cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(merged.read_text())
    events = data["traceEvents"] if isinstance(data, dict) else data
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"}
    # backward workers 0-1 have the coupled run's coordinates; forward workers 2-3 their stage
    assert names == {0: "rank 0 · dp0 pp0 tp0", 1: "rank 1 · dp0 pp1 tp0", 2: "rank 2 · pp0 tp0",
                     3: "rank 3 · pp1 tp0"}
    spans = {}
    for e in events:
        if e.get("ph") == "X":
            spans.setdefault(e["pid"], set()).add(e["name"])
    for backward in (0, 1):
        assert {"recompute", "backward", "iteration"} <= spans[backward], spans[backward]
        assert "forward" not in spans[backward]
    for forward in (2, 3):
        assert {"forward", "weights", "iteration"} <= spans[forward], spans[forward]
        assert not {"recompute", "backward"} & spans[forward]
    transfers = {(e["pid"], e["name"], e["args"]["peer"], e["args"]["kind"])
                 for e in events if e.get("ph") == "X" and e.get("cat") == "p2p"}
    assert {(0, "send", 2, "params"), (2, "recv", 0, "params"),      # weights to the forward worker
            (2, "send", 3, "activations"), (3, "recv", 2, "activations"),  # forward pipeline
            (3, "send", 1, "inputs"), (1, "recv", 3, "inputs"),      # stage input to recompute from
            (1, "send", 0, "grads"), (0, "recv", 1, "grads")} <= transfers, sorted(transfers)


def _example():
    spec = importlib.util.spec_from_file_location("train_gpt_fbd_flags", ROOT / "examples" / "train_gpt.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("argv, world, message", [
    (["--pp", "2", "--fbd", "--vpp", "2"], 4, "--fbd does not take --vpp"),
    (["--pp", "2", "--fbd", "--use-dpp"], 4, "--fbd does not take --use-dpp"),
    (["--tp", "2", "--fbd", "--fbd-forward-tp", "3"], 5, "must be a multiple of the forward TP"),
    (["--tp", "2", "--fbd", "--fbd-forward-tp", "0"], 2, "sizes must be positive"),
    (["--pp", "2", "--fbd-forward-tp", "1"], 2, "--fbd-forward-tp and --fbd-placement need --fbd"),
    (["--pp", "2", "--fbd"], 3, "needs 4 processes, got 3"),
    pytest.param(["--pp", "2", "--fbd", "--bf16"], 4, "--bf16 needs a GPU",
                 marks=pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU takes --bf16")),
])
def test_bad_flags_stop_with_one_line(monkeypatch, argv, world, message):
    monkeypatch.setenv("WORLD_SIZE", str(world))
    with pytest.raises(SystemExit) as stopped:
        _example().main(argv)
    text = str(stopped.value.code)
    assert message in text and "\n" not in text
