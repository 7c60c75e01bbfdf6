"""``examples/train_gpt.py --sequence-parallel`` on CPU (TP2, gloo): the same gradients as without
it, TP's communication traced as all-gathers and reduce-scatters; and the production flags'
one-line refusals."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from tests.megatron_hooks._torchrun import EXAMPLE, ROOT, env, run_example


def _grads(tmp_path, name: str, extra: list[str]) -> dict:
    grads = tmp_path / f"grads-{name}"
    grads.mkdir()
    run_example(tmp_path / name, ["--tp", "2", "--iterations", "2", "--layers", "2",
                                  "--grads-dir", str(grads), *extra], nproc=2)
    return torch.load(grads / "grads-rank0.pt")


def test_sequence_parallel_trains_as_tensor_parallel_does(tmp_path):
    plain, split = _grads(tmp_path, "tp", []), _grads(tmp_path, "sp", ["--sequence-parallel"])
    assert plain.keys() == split.keys() == {0, 1}
    norms = [k for k in plain[0] if "layernorm" in k]
    assert len(norms) == 2 * (2 * 2 + 1)   # weight and bias of 2 norms per layer, and the final one
    for it in plain:
        for name, grad in plain[it].items():
            # each TP rank normalises half of the sequence: without the norms' gradients summed
            # over TP they would be about half of these
            torch.testing.assert_close(split[it][name], grad, rtol=1e-4, atol=1e-7, msg=name)


def test_sequence_parallel_is_traced_as_gathers_and_reduce_scatters(tmp_path):
    run = run_example(tmp_path / "sp", ["--tp", "2", "--iterations", "2", "--layers", "2",
                                        "--sequence-parallel"], nproc=2)
    names = {e.get("name") for e in run.events[0] if e.get("ph") == "X"}
    assert {"all_gather", "reduce_scatter"} <= names
    plain = run_example(tmp_path / "tp", ["--tp", "2", "--iterations", "2", "--layers", "2"], nproc=2)
    assert "reduce_scatter" not in {e.get("name") for e in plain.events[0] if e.get("ph") == "X"}


@pytest.mark.parametrize("flags, message", [
    (["--sequence-parallel"], "--sequence-parallel needs --tp 2 or more"),
    (["--overlap-param-gather"], "--overlap-param-gather needs --distributed-optimizer and --overlap-grad-reduce"),
    (["--distributed-optimizer"], "--distributed-optimizer needs a GPU"),
])
def test_production_flags_refuse_what_cannot_run_in_one_line(flags, message):
    proc = subprocess.run([sys.executable, str(EXAMPLE), *flags], capture_output=True, text=True,
                          env=env(), cwd=ROOT, timeout=120)
    assert proc.returncode != 0
    assert message in proc.stderr and "Traceback" not in proc.stderr
