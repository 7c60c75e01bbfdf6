"""Layer spans on a small torch model (no megatron, no torchrun): every layer's forward and
backward for every microbatch, adjacent layers sharing their boundary stamp, and CUDA events
(fake ones) each given back to the pool exactly once."""

from __future__ import annotations

import collections
import time

import pytest
import torch

from mapp.capture import CudaClock, Granularity, Tracer, TracerConfig, Window
from mapp.megatron_hooks.context import HookContext
from mapp.megatron_hooks.groups import GroupNames
from mapp.megatron_hooks.layers import LayerHooks
from tests.capture._read import read_v1
from tests.capture.test_cuda_clock import FakeGpu

LAYERS, MICROBATCHES = 5, 3


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, hidden_states):
        return torch.tanh(self.lin(hidden_states))


class Layer(torch.nn.Module):
    def __init__(self, number: int):
        super().__init__()
        self.layer_number = number
        self.self_attention = Block()
        self.mlp = Block()

    def forward(self, hidden_states):
        x = hidden_states + self.self_attention(hidden_states)
        return x + self.mlp(x)


def run(tmp_path, clock=None, iterations=2, leaf_input=True):
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[Layer(i + 1) for i in range(LAYERS)])
    tracer = Tracer(TracerConfig(trace_dir=str(tmp_path), rank=0, world_size=1, clock="host",
                                 window=Window(interval=1, length=1), granularity="op"), clock=clock)
    ctx = HookContext(tracer, GroupNames())
    hooks = LayerHooks(ctx)
    for layer in model:
        index = layer.layer_number - 1
        hooks.attach(layer, "layer", Granularity.LAYER, index, 0)
        hooks.attach(layer.self_attention, "attention", Granularity.OP, index, 0)
        hooks.attach(layer.mlp, "mlp", Granularity.OP, index, 0)
    for it in range(iterations):
        with tracer.iteration(it):
            for mb in range(MICROBATCHES):
                ctx.microbatch = mb
                x = torch.randn(4, 8, requires_grad=True)
                y = x * 2 if not leaf_input else x  # an input with a grad_fn, or a leaf
                model(y).sum().backward()
        time.sleep(0.002)
    hooks.remove()
    tracer.close()
    events = [e for e in read_v1(tmp_path / "rank-00000.json")[0] if e["ph"] == "X"]
    return tracer, events


def spans(events, name):
    return {(e["args"]["iteration"], e["args"]["microbatch"], e["args"]["layer"]): e
            for e in events if e["name"] == name}


@pytest.mark.parametrize("leaf_input", [True, False])
def test_every_layer_forward_and_backward_with_shared_boundaries(tmp_path, leaf_input):
    _, events = run(tmp_path, leaf_input=leaf_input)
    want = {(it, mb, layer) for it in range(2) for mb in range(MICROBATCHES) for layer in range(LAYERS)}
    counts = collections.Counter((e["name"], e["args"]["iteration"], e["args"]["microbatch"], e["args"]["layer"])
                                 for e in events if "layer" in e["args"])
    assert set(counts.values()) == {1}  # nothing twice
    for name in ("layer.forward", "layer.backward", "attention.forward", "mlp.backward"):
        assert set(spans(events, name)) == want, name
    fwd, bwd = spans(events, "layer.forward"), spans(events, "layer.backward")
    att = spans(events, "attention.forward")
    for (it, mb, layer), e in fwd.items():
        end = e["ts"] + e["dur"]
        assert e["ts"] <= att[(it, mb, layer)]["ts"] and att[(it, mb, layer)]["ts"] <= end
        if layer + 1 < LAYERS:  # the next layer starts where this one ended: one stamp
            assert fwd[(it, mb, layer + 1)]["ts"] == pytest.approx(end, abs=0.0015)
    for (it, mb, layer), e in bwd.items():
        assert e["dur"] > 0
        assert e["ts"] >= fwd[(it, mb, LAYERS - 1)]["ts"] + fwd[(it, mb, LAYERS - 1)]["dur"] - 0.0015
        if layer > 0:  # backward runs top down: this layer's end is the one below's start
            assert bwd[(it, mb, layer - 1)]["ts"] == pytest.approx(e["ts"] + e["dur"], abs=0.0015)


def test_cuda_events_go_back_to_the_pool_once(tmp_path):
    gpu = FakeGpu()
    clock = CudaClock(pool_size=4096, event_factory=gpu.event, synchronize=gpu.synchronize)
    tracer, events = run(tmp_path, clock=clock, iterations=6)
    free = list(clock._free)
    assert len({id(e) for e in free}) == len(free), "an event was given back twice"
    assert len(free) == clock._made, "an event was never given back"
    fwd = spans(events, "layer.forward")
    assert len(fwd) == 6 * MICROBATCHES * LAYERS


def test_adjacent_layers_take_one_event_per_boundary(tmp_path):
    # One traced iteration (nothing goes back to the pool before it ends): two events per span
    # plus the iteration's anchor, less one per shared boundary: LAYERS - 1 forward and
    # LAYERS - 1 backward in each microbatch.
    gpu = FakeGpu()
    clock = CudaClock(pool_size=4096, event_factory=gpu.event, synchronize=gpu.synchronize)
    _, events = run(tmp_path, clock=clock, iterations=1)
    assert clock._made == 2 * len(events) + 1 - 2 * (LAYERS - 1) * MICROBATCHES
