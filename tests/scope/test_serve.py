"""``mapp scope serve`` end to end on a real checkpoint: one process, TP=2 and PP=2 under
torchrun (gloo, CPU). What a sharded model shows must equal the unsharded one: the gathered
Q/K/V, MLP and residual rows (reducer "mean" with more bins than features gives the raw
values), the attention matrices and the top-k, within 1e-5 in fp32."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

pytest.importorskip("megatron.core")
pytest.importorskip("websockets")
from websockets.sync.client import connect  # noqa: E402

from mapp.scope.model import ModelSpec, build_model, ensure_model_parallel, save_checkpoint  # noqa: E402
from tests.scope._serve import Served, request  # noqa: E402

SPEC = ModelSpec(num_layers=4, hidden_size=64, num_attention_heads=4, num_query_groups=2,
                 ffn_hidden_size=128, vocab_size=256, max_sequence_length=64)
PROMPTS = ["The cat sat", "on a mat, and"]
GENERATE = {"type": "generate", "prompts": PROMPTS, "max_new_tokens": 8, "reducer": "mean", "bins": 256, "top_k": 5}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    ensure_model_parallel()
    torch.manual_seed(7)
    model = build_model(SPEC, device="cpu")
    directory = tmp_path_factory.mktemp("scope") / "ckpt"
    save_checkpoint(model, SPEC, directory)
    return directory


def _session(served: Served) -> dict:
    """Everything one page session would see: generation frames, every attention head, a PCA."""
    with connect(served.ws_url, max_size=None) as ws:
        hello = json.loads(ws.recv(timeout=30))
        frames = request(ws, GENERATE, until="done")
        attention = {}
        for layer in range(1, SPEC.num_layers + 1):
            for head in range(SPEC.num_attention_heads):
                for prompt in range(len(PROMPTS)):
                    view = request(ws, {"type": "attention", "layer": layer, "head": head, "prompt": prompt}, until="attention")[-1]
                    attention[layer, head, prompt] = np.array(view["matrix"])
        pca = request(ws, {"type": "pca", "layer": 2}, until="pca")[-1]
    return {"hello": hello, "frames": frames, "attention": attention, "pca": pca}


@pytest.fixture(scope="module")
def single(checkpoint):
    with Served(checkpoint) as served:
        return _session(served)


def test_generation_streams_every_step_with_every_layer(single):
    frames = single["frames"]
    assert single["hello"]["layers"] == 4 and single["hello"]["query_groups"] == 2
    assert [f["type"] for f in frames] == ["start"] + ["step"] * 8 + ["done"]
    steps, done = frames[1:-1], frames[-1]
    prompt_lengths = [len(p) for p in single["frames"][0]["prompts"]]
    assert prompt_lengths == [len(p.encode()) for p in PROMPTS]
    for i, step in enumerate(steps):
        assert step["step"] == i and len(step["tokens"]) == 2
        assert [len(t) for t in step["topk"]] == [5, 5]
        assert step["token_ids"] == [t[0]["id"] for t in step["topk"]]      # greedy
        assert [layer["layer"] for layer in step["layers"]] == [1, 2, 3, 4]
        # step 0 carries the prompt's rows, later steps one new row per prompt
        rows = [len(r) for r in step["layers"][0]["q"]]
        assert rows == (prompt_lengths if i == 0 else [1, 1])
    assert [len(t) for t in done["tokens"]] == [n + 8 for n in prompt_lengths]
    for layer in done["layers"]:
        for kind in ("q", "k", "v", "fc1", "fc2", "residual"):
            assert [len(r) for r in layer[kind]] == [n + 8 for n in prompt_lengths]
        # raw values: q has heads x head_dim = 64 features, k groups x head_dim = 32, fc1 128
        assert len(layer["q"][0][0]) == 64 and len(layer["k"][0][0]) == 32 and len(layer["fc1"][0][0]) == 128
    # the rows streamed step by step are the rows done repeats
    q0 = np.concatenate([np.array(s["layers"][0]["q"][0]).reshape(-1, 64) for s in steps])
    assert np.allclose(q0, np.array(done["layers"][0]["q"][0])[: len(q0)], atol=1e-5)
    assert len(single["pca"]["points"][1]) == prompt_lengths[1] + 8


def _compare(a: dict, b: dict) -> None:
    fa, fb = a["frames"], b["frames"]
    assert [f["type"] for f in fa] == [f["type"] for f in fb]
    for x, y in zip(fa[1:-1], fb[1:-1]):
        assert x["token_ids"] == y["token_ids"]
        for tx, ty in zip(x["topk"], y["topk"]):
            assert [t["id"] for t in tx] == [t["id"] for t in ty]
            assert np.allclose([t["p"] for t in tx], [t["p"] for t in ty], atol=1e-5)
    for la, lb in zip(fa[-1]["layers"], fb[-1]["layers"]):
        assert la["layer"] == lb["layer"]
        for kind in ("q", "k", "v", "fc1", "fc2", "residual"):
            for ra, rb in zip(la[kind], lb[kind]):
                np.testing.assert_allclose(np.array(ra), np.array(rb), atol=1e-5, rtol=0, err_msg=f"layer {la['layer']} {kind}")
    assert a["attention"].keys() == b["attention"].keys()
    for key in a["attention"]:
        np.testing.assert_allclose(a["attention"][key], b["attention"][key], atol=1e-5, rtol=0, err_msg=str(key))


def test_tp2_shows_what_tp1_shows(checkpoint, single):
    with Served(checkpoint, nproc=2, args=["--tp", "2"]) as served:
        tp2 = _session(served)
    assert tp2["hello"]["tp"] == 2
    _compare(single, tp2)


def test_pp2_shows_the_layers_of_both_stages(checkpoint, single):
    with Served(checkpoint, nproc=2, args=["--pp", "2"]) as served:
        pp2 = _session(served)
    assert pp2["hello"]["pp"] == 2
    assert [layer["layer"] for layer in pp2["frames"][-1]["layers"]] == [1, 2, 3, 4]
    _compare(single, pp2)


def test_perturbation_from_the_page(checkpoint, single):
    clean_steps = single["frames"][1:-1]
    with Served(checkpoint) as served, connect(served.ws_url, max_size=None) as ws:
        json.loads(ws.recv(timeout=30))
        off = request(ws, {"type": "perturb", "target": "weights", "kind": "gaussian", "strength": 0.0}, until="perturbations")
        assert off[-1]["active"] == []
        same = request(ws, GENERATE, until="done")
        assert [f["token_ids"] for f in same[1:-1]] == [f["token_ids"] for f in clean_steps]
        assert same[-1]["layers"] == single["frames"][-1]["layers"]        # bit-identical rows
        on = request(ws, {"type": "perturb", "target": "mlp", "kind": "gaussian", "strength": 2.0, "layer": 2, "seed": 1},
                     until="perturbations")
        assert on[-1]["active"] == [{"target": "mlp", "kind": "gaussian", "strength": 2.0, "layer": 2, "seed": 1}]
        noisy = request(ws, GENERATE, until="done")
        first = noisy[1]
        assert first["clean_topk"] == clean_steps[0]["topk"]
        assert all(k is not None and k > 0 for k in first["kl"])
        cleared = request(ws, {"type": "clear"}, until="perturbations")
        assert cleared[-1]["active"] == []
        again = request(ws, GENERATE, until="done")
        assert again[-1]["layers"] == single["frames"][-1]["layers"]
