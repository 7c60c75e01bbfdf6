"""MegaScope capture on a real megatron-core GPT (one process, CPU): the fused QKV split
checked against an unfused computation, GQA included; attention probabilities read where the
local path forms them and recomputed where a kernel would not; nothing installed when off;
perturbations reversible, bit-identical at strength 0, and safe for autograd."""

from __future__ import annotations

import math

import pytest
import torch

pytest.importorskip("megatron.core")

from mapp.megatron_hooks.perturb import Perturbation, Perturber, flip_bits  # noqa: E402
from mapp.megatron_hooks.scope import ScopeCapture, attention_from_qk  # noqa: E402
from mapp.scope.model import ModelSpec, build_model, ensure_model_parallel  # noqa: E402

EXACT = 1 << 20  # more bins than features: "mean" over one feature is the feature itself

SPEC = ModelSpec(num_layers=2, hidden_size=64, num_attention_heads=4, num_query_groups=2,
                 ffn_hidden_size=128, vocab_size=96, max_sequence_length=32)


@pytest.fixture(scope="module")
def model():
    ensure_model_parallel()
    torch.manual_seed(3)
    m = build_model(SPEC)   # the CPU here; the GPU where there is one (megatron's buffers live there)
    with torch.no_grad():   # non-zero biases, so that a split that drops or misplaces them shows
        for name, p in m.named_parameters():
            if name.endswith("bias"):
                p.normal_(0, 0.1)
    return m.eval()


def _device():
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def _batch(b=2, s=9):
    gen = torch.Generator().manual_seed(11)
    tokens = torch.randint(0, SPEC.vocab_size, (b, s), generator=gen)
    positions = torch.arange(s).unsqueeze(0).expand(b, -1)
    mask = torch.ones(1, 1, s, s, dtype=torch.bool).triu(1)
    return tokens.to(_device()), positions.to(_device()), mask.to(_device())


def _run(model, capture=None, inputs=None):
    tokens, positions, mask = inputs or _batch()
    with torch.no_grad():
        if capture is None:
            return model(tokens, positions, mask)
        with capture:
            return model(tokens, positions, mask)


def test_qkv_split_matches_an_unfused_gqa_attention(model):
    """The reference rebuilds layer 1's attention from separate Wq, Wk, Wv read off megatron's
    per-group layout and must reproduce megatron's own attention output: that fixes the
    layout. The captured Q, K, V must then equal x @ Wq, x @ Wk, x @ Wv."""
    layer = model.decoder.layers[0]
    attn = layer.self_attention
    seen = {}
    hooks = [attn.linear_qkv.register_forward_hook(lambda m, i, o: seen.update(x=i[0])),
             attn.linear_proj.register_forward_hook(lambda m, i, o: seen.update(out=o[0] + o[1] if o[1] is not None else o[0]))]
    capture = ScopeCapture(model, reducer="mean", bins=EXACT, keep_full=True)
    _run(model, capture)
    for h in hooks:
        h.remove()

    heads, groups, hd = SPEC.num_attention_heads, SPEC.num_query_groups, SPEC.hidden_size // SPEC.num_attention_heads
    per = heads // groups
    w = attn.linear_qkv.weight.detach().reshape(groups, (per + 2) * hd, SPEC.hidden_size)
    bias = attn.linear_qkv.bias.detach().reshape(groups, (per + 2) * hd)
    wq, wk, wv = w[:, : per * hd].reshape(heads * hd, -1), w[:, per * hd: (per + 1) * hd].reshape(groups * hd, -1), w[:, (per + 1) * hd:].reshape(groups * hd, -1)
    bq, bk, bv = bias[:, : per * hd].reshape(-1), bias[:, per * hd: (per + 1) * hd].reshape(-1), bias[:, (per + 1) * hd:].reshape(-1)
    x = seen["x"]                                            # [s, b, hidden]
    q = (x @ wq.T + bq).reshape(*x.shape[:2], heads, hd)
    k = (x @ wk.T + bk).reshape(*x.shape[:2], groups, hd)
    v = (x @ wv.T + bv).reshape(*x.shape[:2], groups, hd)
    # plain GQA attention: query head h uses key/value group h // (heads/groups)
    scores = torch.einsum("qbhd,kbhd->bhqk", q, k.repeat_interleave(per, dim=2)) / math.sqrt(hd)
    s = x.shape[0]
    probs = scores.masked_fill(torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1), float("-inf")).softmax(-1)
    context = torch.einsum("bhqk,kbhd->qbhd", probs, v.repeat_interleave(per, dim=2)).reshape(s, x.shape[1], -1)
    proj = attn.linear_proj
    out = context @ proj.weight.detach().T + proj.bias.detach()
    torch.testing.assert_close(out, seen["out"], atol=1e-5, rtol=1e-5)

    def rows(t):  # [s, b, ...] -> [b, s, features], as the capture stores them
        return t.reshape(*t.shape[:2], -1).transpose(0, 1)

    torch.testing.assert_close(capture.rows["q"][1], rows(q), atol=1e-5, rtol=0)
    torch.testing.assert_close(capture.rows["k"][1], rows(k), atol=1e-5, rtol=0)
    torch.testing.assert_close(capture.rows["v"][1], rows(v), atol=1e-5, rtol=0)
    torch.testing.assert_close(capture.attention[1], probs, atol=1e-6, rtol=0)


def test_recomputed_attention_equals_the_materialised_one(model):
    """A fused kernel never forms the probabilities; recomputing them from the query and key
    that core_attention receives must give what the local path materialises."""
    seen = {}
    core = model.decoder.layers[1].self_attention.core_attention
    hook = core.register_forward_pre_hook(lambda m, args: seen.update(q=args[0], k=args[1]))
    capture = ScopeCapture(model, reducer="mean", bins=4, keep_full=True)
    _run(model, capture)
    hook.remove()
    recomputed = attention_from_qk(seen["q"], seen["k"], core.softmax_scale)
    torch.testing.assert_close(recomputed, capture.attention[2], atol=1e-6, rtol=0)
    assert capture.attention[2].shape == (2, SPEC.num_attention_heads, 9, 9)
    # causal: nothing attends to a later token, and each row is a distribution
    assert torch.all(capture.attention[2].triu(1) == 0)
    torch.testing.assert_close(capture.attention[2].sum(-1), torch.ones(2, 4, 9, device=_device()))


def test_capture_covers_every_layer_and_the_logits_and_leaves_no_hook(model):
    capture = ScopeCapture(model, reducer="rms", bins=8, keep_full=True)
    logits = _run(model, capture)
    assert not capture.installed
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())
    assert {k: sorted(v) for k, v in capture.rows.items()} == {k: [1, 2] for k in ("q", "k", "v", "fc1", "fc2", "residual")}
    assert capture.rows["fc1"][1].shape == (2, 9, 8)
    torch.testing.assert_close(capture.logits, logits)
    # the residual stream after the last layer, reduced, is the rms of the full one
    full = capture.residual[2]
    expected = full.reshape(2, 9, 8, -1).square().mean(-1).sqrt()
    torch.testing.assert_close(capture.rows["residual"][2], expected)
    assert sorted(capture.residual) == [0, 1, 2]    # 0: the embeddings


@pytest.mark.parametrize("target,kind", [("weights", "gaussian"), ("weights", "uniform"), ("weights", "bitflip"),
                                         ("mlp", "gaussian"), ("mlp", "uniform"), ("residual", "offset"),
                                         ("residual", "noise")])
def test_strength_zero_is_bit_identical_and_switching_off_restores_everything(model, target, kind):
    clean = _run(model)
    weights = {n: p.detach().clone() for n, p in model.named_parameters()}
    perturber = Perturber(model)
    perturber.set(Perturbation(target, kind, 0.0, layer=None, seed=5))
    assert torch.equal(_run(model), clean)
    perturber.set(Perturbation(target, kind, 0.01 if kind == "bitflip" else 0.5, layer=1, seed=5))
    assert not torch.equal(_run(model), clean)
    # the stored weights are never written, even while the perturbation is on
    assert all(torch.equal(p, weights[n]) for n, p in model.named_parameters())
    perturber.clear()
    assert torch.equal(_run(model), clean)


def test_kl_grows_with_strength(model):
    clean = torch.log_softmax(_run(model)[:, -1], -1)
    perturber = Perturber(model)
    kls = []
    for strength in (0.05, 0.1, 0.2, 0.4, 0.8):
        perturber.set(Perturbation("weights", "gaussian", strength, layer=None, seed=2))
        noisy = torch.log_softmax(_run(model)[:, -1], -1)
        kls.append(float((clean.exp() * (clean - noisy)).sum(-1).mean()))
    perturber.clear()
    assert kls == sorted(kls) and kls[0] > 0


def test_training_through_a_perturbation_keeps_autograd_and_the_weights():
    """Forward and backward with a weight and an activation fault on: gradients reach every
    parameter and are finite, and the weights afterwards are bit for bit the ones before."""
    ensure_model_parallel()
    torch.manual_seed(4)
    m = build_model(SPEC).train()
    before = {n: p.detach().clone() for n, p in m.named_parameters()}
    perturber = Perturber(m)
    perturber.set(Perturbation("weights", "gaussian", 0.3, layer=1, seed=1))
    perturber.set(Perturbation("mlp", "gaussian", 0.3, layer=2, seed=1))
    tokens, positions, mask = _batch()
    loss = m(tokens, positions, mask).float().logsumexp(-1).mean()
    loss.backward()
    perturber.clear()
    grads = {n: p.grad for n, p in m.named_parameters()}
    assert all(g is not None and torch.isfinite(g).all() for g in grads.values())
    assert all(torch.equal(p, before[n]) for n, p in m.named_parameters())


def test_bit_flips_are_nested_and_stay_in_the_stored_dtype():
    x = torch.linspace(-2, 2, 1000, dtype=torch.bfloat16)
    small = flip_bits(x, 0.01, torch.Generator().manual_seed(0))
    large = flip_bits(x, 0.2, torch.Generator().manual_seed(0))
    assert small.dtype == torch.bfloat16
    changed_small = small.view(torch.int16) != x.view(torch.int16)
    changed_large = large.view(torch.int16) != x.view(torch.int16)
    assert 0 < int(changed_small.sum()) < int(changed_large.sum())
    assert torch.all(changed_large[changed_small])        # every small-strength flip is also a large-strength one
    diff = (large.view(torch.int16) ^ x.view(torch.int16))[changed_large]
    # exactly one bit per changed element
    assert all(bin(int(d) & 0xFFFF).count("1") == 1 for d in diff)


def test_plain_decoding_picks_the_tokens_generation_shows(model):
    # Engine.decode is the baseline capture's cost is measured against: the same greedy tokens
    # as a captured generation, with nothing installed
    from mapp.scope.engine import Engine
    from mapp.scope.tokenizer import ByteTokenizer

    engine = Engine(model, ByteTokenizer(), vocab=SPEC.vocab_size)
    prompts = ["+-", "012"]   # bytes under the model's vocabulary of 96
    frames = []
    engine.generate({"prompts": prompts, "max_new_tokens": 5, "reducer": "rms", "bins": 4, "top_k": 2},
                    frames.append)
    chosen = [list(ids) for ids in zip(*(f["token_ids"] for f in frames if f["type"] == "step"))]
    seqs = [list(p.encode()) for p in prompts]
    engine.decode(seqs, 5)
    assert [s[len(p):] for s, p in zip(seqs, prompts)] == chosen and len(chosen[0]) == 5
    assert not any(m._forward_hooks for m in model.modules())
