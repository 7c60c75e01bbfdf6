"""On the demo model: a perturbation's KL divergence from the clean prediction grows with its
strength (the draws are fixed by the seed, so a stronger fault is the same fault, larger), and
strength 0 moves nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("megatron.core")

from tests.scope._serve import ROOT, env  # noqa: E402

JOB = Path(__file__).with_name("_kl_job.py")


def test_kl_grows_with_strength_on_the_demo_model(tmp_path):
    proc = subprocess.run([sys.executable, str(JOB), str(tmp_path / "demo"), "60"], capture_output=True,
                          text=True, timeout=400, env=env(), cwd=ROOT)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    for name, kls in result["kl"].items():
        assert kls[0] is None, name                       # strength 0: nothing perturbed, no clean pass
        grown = kls[1:]
        assert all(k is not None for k in grown), (name, grown)
        # monotone up to float noise in the smallest values
        assert all(b >= a - 1e-6 for a, b in zip(grown, grown[1:])), (name, grown)
        assert grown[-1] > 10 * max(grown[0], 1e-7), (name, grown)
