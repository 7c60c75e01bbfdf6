"""MegaScope in a training loop (one process, a real megatron-core GPT, a real server on a free
port): a snapshot every N steps and nothing in between (no hook left on the model), requests
from the page applied at the next snapshot, snapshots written to disk and read back without
torch's help."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

pytest.importorskip("megatron.core")
pytest.importorskip("websockets")
from websockets.sync.client import connect  # noqa: E402

from mapp.scope.model import ModelSpec, build_model, ensure_model_parallel  # noqa: E402
from mapp.scope.tokenizer import ByteTokenizer  # noqa: E402
from mapp.scope.training import TrainingScope  # noqa: E402
from mapp.snapshot_format import find_snapshots, read_snapshot, snapshot_stats  # noqa: E402

SPEC = ModelSpec(num_layers=2, hidden_size=32, num_attention_heads=4, num_query_groups=4,
                 ffn_hidden_size=64, vocab_size=256, max_sequence_length=48)


def _hooks(model) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


def test_snapshots_every_interval_and_nothing_between(tmp_path):
    ensure_model_parallel()
    torch.manual_seed(0)
    model = build_model(SPEC, parallel_output=True).train()   # as training builds it (CPU, or the GPU)
    device = next(model.parameters()).device
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    tokens = torch.randint(0, 256, (2, 17)).to(device)
    positions = torch.arange(16, device=device).unsqueeze(0).expand(2, -1)
    mask = torch.ones(1, 1, 16, 16, dtype=torch.bool, device=device).triu(1)
    scope = TrainingScope(model, ByteTokenizer(), port=0, interval=3, prompts=["abc abc", "xyz"],
                          snapshot_dir=str(tmp_path / "scope"))
    try:
        with connect(f"ws://127.0.0.1:{scope.server.port}/ws", max_size=None) as ws:
            hello = json.loads(ws.recv(timeout=10))
            assert hello["mode"] == "training" and hello["layers"] == 2
            ws.send(json.dumps({"type": "generate", "prompts": ["no"]}))
            ws.send(json.dumps({"type": "perturb", "target": "residual", "kind": "noise", "strength": 0.5, "layer": 1}))
            taken = []
            for it in range(7):
                opt.zero_grad()
                model(tokens[:, :-1], positions, mask, labels=tokens[:, 1:]).float().mean().backward()
                opt.step()
                taken.append(scope.after_step(it))
                # between snapshots the model carries only the perturbation's hook, never capture's
                assert _hooks(model) == 1
            assert taken == [True, False, False, True, False, False, True]
            frames = []
            while len([f for f in frames if f["type"] == "snapshot"]) < 3:
                frames.append(json.loads(ws.recv(timeout=30)))
        kinds = [f["type"] for f in frames]
        assert kinds[0] == "error" and "generation" in frames[0]["message"]
        assert kinds.count("perturbations") == 1 and kinds.index("perturbations") < kinds.index("snapshot")
        snaps = [f for f in frames if f["type"] == "snapshot"]
        assert [s["iteration"] for s in snaps] == [0, 3, 6]
        assert [layer["layer"] for layer in snaps[0]["layers"]] == [1, 2]
        assert [len(t) for t in snaps[0]["tokens"]] == [7, 3]
        # the model learns between snapshots: what it shows changes
        assert snaps[0]["layers"][1]["residual"] != snaps[2]["layers"][1]["residual"]
    finally:
        scope.close()
    assert _hooks(model) == 0

    paths = find_snapshots(tmp_path)
    assert [p.name for p in paths] == ["step-00000000.json", "step-00000003.json", "step-00000006.json"]
    snap = read_snapshot(paths[-1])
    assert snap.step == 6 and snap.meta["tokens"] == snaps[2]["tokens"]
    np.testing.assert_allclose(snap.get(2, "residual")[1, :3], np.array(snaps[2]["layers"][1]["residual"][1]), atol=1e-6)
    assert np.isnan(snap.get(2, "residual")[1, 3:]).all()          # the shorter prompt is padded with NaN
    assert snap.get(1, "attention").shape == (2, 4, 7, 7)
    rows = list(snapshot_stats(tmp_path))
    fc1 = [r for r in rows if r["step"] == 6 and r["tensor"] == "layer1.fc1"][0]
    assert fc1["numel"] > 0 and fc1["absmax"] >= abs(fc1["mean"]) and 0 <= fc1["zeros"] <= 1


def test_the_training_example_streams_a_tp2_pp2_job(tmp_path):
    """examples/train_gpt.py --scope-port under torchrun (4 ranks, TP=2 x PP=2): rank 0 serves,
    every rank takes part in each snapshot, and each snapshot holds the layers of both stages."""
    import subprocess
    import sys

    from tests.scope._serve import ROOT, env

    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=4",
           str(ROOT / "examples" / "train_gpt.py"), "--tp", "2", "--pp", "2", "--layers", "4", "--hidden", "64",
           "--heads", "4", "--seq", "32", "--iterations", "5", "--scope-port", "0", "--scope-interval", "2",
           "--scope-dir", str(tmp_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env(), cwd=ROOT)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-4000:]
    assert "MegaScope serving at http://127.0.0.1:" in output and "scope: 3 snapshots" in output
    paths = find_snapshots(tmp_path)
    assert [read_snapshot(p, tensors=False).step for p in paths] == [0, 2, 4]
    snap = read_snapshot(paths[-1])
    assert sorted({info["layer"] for info in snap.meta["tensors"].values()}) == [0, 1, 2, 3, 4]
    # the first probe prompt is longer than --seq 32: its last 32 tokens are shown
    assert snap.get(3, "attention").shape == (2, 4, 32, 32)
    assert np.isfinite(snap.get(4, "fc2")[0]).all()
