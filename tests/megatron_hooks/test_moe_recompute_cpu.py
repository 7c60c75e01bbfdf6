"""What mapp's capture records of two features production Megatron jobs run, on CPU (torchrun,
gloo, 2 ranks, the tiny GPT of ``_torchrun.TINY``):

- full activation recomputation (``--recompute full``): every layer's forward runs twice, first
  without autograd, then again inside the backward, and the layer's backward follows that second
  forward;
- a mixture of experts over two expert-parallel ranks (``--moe-experts 4 --ep 2``): the token
  dispatcher gathers token counts over the expert groups and sends tokens by all-to-all inside
  every layer's MLP, forward and backward.

Without these spans a rank's layer time holds its waits for the other experts (its own time
is what the detector compares) and its backward under recomputation reads as idle host time.
"""

from __future__ import annotations

import collections
import subprocess
import sys

import pytest

from ._torchrun import EXAMPLE, Run, run_example

LAYERS, MICROBATCHES = 4, 4
COMMON = ["--iterations", "3", "--trace-start", "1", "--trace-interval", "10",
          "--continuous-trace-iterations", "2"]
TRACED = (1, 2)


@pytest.fixture(scope="module")
def recompute(tmp_path_factory) -> Run:
    return run_example(tmp_path_factory.mktemp("rc") / "trace", ["--pp", "2", "--recompute", "full", *COMMON],
                       nproc=2)


@pytest.fixture(scope="module")
def moe(tmp_path_factory) -> Run:
    return run_example(tmp_path_factory.mktemp("moe") / "trace", ["--moe-experts", "4", "--ep", "2", *COMMON],
                       nproc=2)


def spans(events: list[dict], name: str) -> list[dict]:
    return [e for e in events if e.get("ph") == "X" and e["name"] == name]


def key(e: dict) -> tuple:
    a = e["args"]
    return a["iteration"], a["microbatch"], a["layer"]


def test_under_full_recomputation_every_layer_has_its_forward_recompute_and_backward(recompute: Run):
    for rank, events in recompute.events.items():
        stage = recompute.meta[rank]["coords"]["pp"]
        layers = range(stage * LAYERS // 2, (stage + 1) * LAYERS // 2)
        want = collections.Counter({(it, mb, layer): 1 for it in TRACED for mb in range(MICROBATCHES)
                                    for layer in layers})
        for name in ("layer.forward", "layer.recompute", "layer.backward"):
            assert collections.Counter(key(e) for e in spans(events, name)) == want, (rank, name)


def test_a_layers_backward_follows_its_recompute_inside_the_backward_step(recompute: Run):
    for rank, events in recompute.events.items():
        again = {key(e): e for e in spans(events, "layer.recompute")}
        steps = {(e["args"]["iteration"], e["args"]["microbatch"]): e for e in spans(events, "backward")}
        assert spans(events, "layer.backward"), rank
        for e in spans(events, "layer.backward"):
            r, step = again[key(e)], steps[key(e)[:2]]
            assert r["ts"] + r["dur"] <= e["ts"] + 1.0, (rank, key(e))
            assert step["ts"] <= r["ts"] and e["ts"] + e["dur"] <= step["ts"] + step["dur"] + 1.0, (rank, key(e))


def test_the_expert_all_to_alls_are_recorded_on_the_expert_group_in_step_on_both_ranks(moe: Run):
    calls = {}
    for rank, events in moe.events.items():
        a2a = [e for e in events if e.get("ph") == "X" and e.get("cat") == "collective"
               and e["args"].get("op") == "all_to_all"]
        assert a2a, rank
        assert {e["args"]["group"] for e in a2a} == {"ep"}
        assert all(e["args"]["group_ranks"] == [0, 1] for e in a2a)
        # tokens and their routing weights there and the tokens back: 3 a layer's forward, 3 its backward
        per_layer_call = collections.Counter((e["args"]["iteration"], e["args"]["microbatch"]) for e in a2a)
        assert set(per_layer_call.values()) == {6 * LAYERS}, rank
        calls[rank] = sorted(e["args"]["seq"] for e in a2a)
        # the token counts are gathered over the expert groups, named so
        gathers = [e for e in events if e.get("ph") == "X" and e.get("cat") == "collective"
                   and e["args"].get("op") == "all_gather"]
        assert gathers and {e["args"]["group"] for e in gathers} == {"tp_ep"}, rank
    assert calls[0] == calls[1]   # the same calls, matched by their group's counter


def test_an_mlps_all_to_alls_lie_inside_its_layers_spans(moe: Run):
    for rank, events in moe.events.items():
        layers = spans(events, "layer.forward") + spans(events, "layer.backward")
        a2a = [e for e in events if e.get("ph") == "X" and e["args"].get("op") == "all_to_all"]
        assert a2a, rank
        for e in a2a:
            assert any(s["ts"] <= e["ts"] and e["ts"] + e["dur"] <= s["ts"] + s["dur"] + 1.0 for s in layers), \
                (rank, e["args"]["seq"])


def test_a_mixture_of_experts_trains_on_one_rank(tmp_path):
    # one expert rank and no TP, as on one GPU: megatron-core 0.16.1's experts add their bias in
    # place to what a reduction over that one rank handed back (train_gpt._moe_fixes)
    run = run_example(tmp_path / "trace", ["--moe-experts", "4", *COMMON], nproc=1)
    assert "done: 3 iterations" in run.output
    assert len(spans(run.events[0], "layer.backward")) == len(TRACED) * MICROBATCHES * LAYERS


def test_a_skewed_router_sends_the_first_expert_rank_more_tokens(tmp_path):
    # --moe-skew: imbalance without a fault, its tokens seen in what the all-to-alls move
    run = run_example(tmp_path / "trace", ["--moe-experts", "4", "--ep", "2", "--moe-skew", "3", *COMMON], nproc=2)
    received = {}
    for rank, events in run.events.items():
        a2a = [e["args"] for e in events if e.get("ph") == "X" and e["args"].get("op") == "all_to_all"]
        received[rank] = sum(a.get("out_bytes", a["bytes"]) for a in a2a)
    assert received[0] > 1.5 * received[1], received


def test_at_op_granularity_the_experts_spans_carry_the_tokens_routed_to_the_rank(tmp_path):
    # the experts' input is [tokens, hidden]: its rows are their load, which a skewed router
    # puts on rank 0 (its two experts hold most of every microbatch's 2 x top-2 routed tokens)
    run = run_example(tmp_path / "trace", ["--moe-experts", "4", "--ep", "2", "--moe-skew", "3",
                                           "--trace-granularity", "op", *COMMON], nproc=2)
    load = {}
    for rank, events in run.events.items():
        calls = spans(events, "experts.forward")
        assert len(calls) == len(TRACED) * MICROBATCHES * LAYERS, rank
        load[rank] = sum(e["args"]["tokens"] for e in calls)
        layer_tokens = {e["args"]["tokens"] for e in spans(events, "layer.forward")}
        assert layer_tokens == {32 * 2}   # seq x micro-batch (TINY)
        assert all(e["args"]["tokens"] <= 2 * 2 * 32 * 2 for e in calls)   # ranks x top-2 x tokens
    assert load[0] > 2 * load[1], load


def test_experts_beside_tensor_parallelism_record_each_group_by_its_name(tmp_path):
    # TP2 x DP2 with sequence parallelism, 4 experts over 2 expert ranks, each expert whole on
    # its rank: the expert group spans the TP pair, and the experts' gradients reduce over the
    # expert data-parallel group, beside the dense parameters' over DP
    run = run_example(tmp_path / "trace", ["--tp", "2", "--sequence-parallel", "--moe-experts", "4", "--ep", "2",
                                           *COMMON])
    for rank, events in run.events.items():
        groups = {(e["args"]["op"] if e["name"] != "grad_reduce" else "grad_reduce", e["args"]["group"])
                  for e in events if e.get("ph") == "X" and e.get("cat") == "collective"}
        assert {("all_to_all", "ep"), ("grad_reduce", "dp"), ("grad_reduce", "expt_dp")} <= groups, (rank, groups)
        ep = {tuple(e["args"]["group_ranks"]) for e in events if e.get("ph") == "X" and e["args"].get("group") == "ep"}
        tp = {tuple(e["args"]["group_ranks"]) for e in events if e.get("ph") == "X" and e["args"].get("group") == "tp"}
        assert ep == tp and len(ep) == 1 and rank in ep.pop(), rank


@pytest.mark.parametrize("args, said", [
    (["--ep", "0"], "--ep and --moe-experts take a count of 1 or more"),
    (["--moe-skew", "2"], "--ep and --moe-skew need --moe-experts"),
    (["--moe-experts", "4", "--ep", "3"], "does not split over --ep 3"),
])
def test_expert_flags_that_cannot_work_are_refused_in_one_line(args, said):
    # checked before any process group starts
    done = subprocess.run([sys.executable, str(EXAMPLE), *args], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert said in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
