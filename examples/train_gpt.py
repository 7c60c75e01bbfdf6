"""Train a small GPT on megatron-core with synthetic tokens, optionally traced by mapp.

    torchrun --nproc_per_node=4 examples/train_gpt.py --tp 2 --pp 2 [--vpp 2] --iterations 4 \\
        --trace --trace-dir DIR --trace-interval 1 --continuous-trace-iterations 2 \\
        --slow-rank 3 --slow-factor 2.0

Data parallelism is what the world size leaves (world = tp * pp * dp). CPU with gloo or
GPU with NCCL is chosen by what the machine has.

Software fault injectors (``--slow-rank R`` picks the rank, or ``R,S`` several slowed alike as
one slow node's; ``--slow-mode`` what it does):

- ``layer`` (default), with ``--slow-factor F``: rank R does extra work inside every
  transformer layer so that its attention and MLP take about F times as long, forward and
  backward. ``--slow-work`` says how: ``sleep`` (the CPU default: the other ranks sharing the
  cores are not slowed too) or ``matmul`` (real matmuls of the layer's activations, for
  (F-1) x the module's measured time on CPU, (F-1) x its FLOPs on GPU; the GPU default).
- ``before-microbatch``, with ``--slow-ms MS``: real matmuls for about MS ms before each
  microbatch's forward (in the forward step function, outside the model: a profiler sees the
  extra aten ops, mapp's capture sees untraced time inside the schedule's ``forward`` span).
  ``--slow-jitter SIGMA`` makes it jitter: each microbatch's MS is multiplied by
  ``exp(SIGMA * N(0, 1))`` drawn from ``--seed`` (a stage that is slow by turns, not steadily).
- ``host-sleep``, with ``--slow-ms MS``: ``time.sleep(MS/1000)`` in the data iterator before
  each microbatch is handed out (a slow data path / host).
- ``gpu-hog`` (GPUs only), with ``--slow-duty D``: another process on rank R's GPU runs bf16
  matmuls for D of every 20 ms (as measured alone), and the GPU time-slices between the two
  contexts: every kernel of rank R, collectives included, may wait behind the other's (a
  neighbour sharing the GPU; nothing in rank R's own program changes). ``--slow-jitter SIGMA``
  makes its bursts irregular, as a neighbour serving requests: each burst's length and the wait
  to the next are multiplied by ``exp(SIGMA * N(0, 1))`` draws of their own (the median duty
  stays D).
- ``cpu-hog`` (CPUs only), with ``--slow-duty D``: rank R's main thread (where it computes) is
  pinned to one core of those it may use and another process, pinned to the same core, spins for
  D of every 20 ms (``--slow-jitter`` as for ``gpu-hog``): the kernel's scheduler shares the core
  between the two, so rank R's ops may run at up to half speed while the neighbour spins (a stray
  process on a training node; nothing in rank R's own program changes; gloo's worker threads,
  started before, keep their cores).

``--slow-from K`` makes the fault set in midway, as a fail-slow does: ``layer``,
``before-microbatch`` and ``host-sleep`` act from iteration K (0-based) on, not before.

``--link-slow SRC,DST --link-extra-bytes N`` makes one pipeline link carry more traffic:
every pipeline exchange between the two ranks (activations forward, gradients backward)
also moves an extra N-byte tensor between them, on a process group of its own and inside
megatron-core's ``P2PCommunicator._communicate`` (so a tracer of that call sees a slower
transfer of the same recorded size).

Workload imbalance without a fault: ``--last-stage-layers N`` gives the last pipeline stage N
of the ``--layers`` (megatron-core's ``num_layers_in_last_pipeline_stage``);
``--seq-lognormal SIGMA`` draws every microbatch's sequence length independently per data
parallel replica, ``min(--seq, max(8, round(--seq/4 * exp(SIGMA * N(0, 1)))))`` (with
``variable_seq_lengths`` so that pipeline stages exchange shapes).

Model features production jobs run: ``--recompute full`` (every layer's forward again inside its
backward, one layer at a time) or ``selective`` (the attention core only); ``--moe-experts N
--ep E``, a mixture of N experts in every layer's MLP over E expert-parallel ranks (top-2
routing, tokens sent by all-to-all; on CPU through ``mapp.megatron_hooks.cpu_patches``);
``--moe-skew B`` adds B to every router's logits of the first expert rank's experts, so that rank
computes for more tokens (a router collapsed onto a few experts: imbalance, no fault).

``--profile-dir DIR`` traces the run with ``torch.profiler`` instead (CPU activity, and CUDA on
a GPU; ``record_shapes``, or ``--profile-record default`` for the profiler's own defaults and
``tutorial`` for shapes, memory and Python stacks; ``--profile-wait`` iterations skipped,
``--profile-warmup`` warm-up, ``--profile-active`` recorded), one ``rank-<r>.json`` per rank;
``--profile-stop plain`` lets each rank stop its trace as soon as it ends its last recorded
iteration, as a plain profiler does, instead of waiting for every rank to end it first.

``--groups-json PATH`` writes, from rank 0, the process groups megatron-core built (global
ranks per TP/PP/DP group), which tests compare with the trace.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import select
import statistics
import subprocess
import sys
import time

import torch
import torch.distributed as dist

from mapp.megatron_hooks.teardown import exit_now, leave_distributed


def _ranks(text: str) -> list[int]:
    """``--slow-rank``'s value: "3" or "2,3" (several ranks slowed alike, as a slow node's)."""
    try:
        ranks = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a rank or comma-separated ranks (e.g. 3 or 2,3)") from None
    if any(r < 0 for r in ranks):
        raise argparse.ArgumentTypeError(f"{text!r}: ranks are 0 or more")
    return ranks


def parse_args(argv=None) -> argparse.Namespace:
    from mapp.megatron_hooks.flags import add_trace_args

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel size")
    p.add_argument("--pp", type=int, default=1, help="pipeline-parallel size")
    p.add_argument("--vpp", type=int, default=None, help="virtual pipeline stages per rank (interleaved 1F1B)")
    p.add_argument("--iterations", type=int, default=4)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--ffn-hidden", type=int, default=None)
    p.add_argument("--seq", type=int, default=32)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--micro-batch-size", type=int, default=2)
    p.add_argument("--num-microbatches", type=int, default=4)
    p.add_argument("--bf16", action="store_true", help="bf16 weights and activations (GPU)")
    p.add_argument("--overlap-grad-reduce", action="store_true")
    p.add_argument("--distributed-optimizer", action="store_true",
                   help="shard the optimizer state over DP (gradients reduce-scattered, parameters all-gathered; GPU)")
    p.add_argument("--overlap-param-gather", action="store_true",
                   help="all-gather the next step's parameters during the forward (needs --distributed-optimizer "
                        "and --overlap-grad-reduce)")
    p.add_argument("--recompute", default=None, choices=["full", "selective"],
                   help="activation recomputation: every layer's forward again in its backward (full), or "
                        "only core attention (selective)")
    p.add_argument("--moe-experts", type=int, default=None, metavar="N",
                   help="mixture of experts: N experts in every layer's MLP (top-2 routing, all-to-all dispatch)")
    p.add_argument("--ep", type=int, default=1, help="expert-parallel size (needs --moe-experts)")
    p.add_argument("--moe-skew", type=float, default=0.0, metavar="B",
                   help="add B to every router's logits of the first expert rank's experts (a router "
                        "collapsed onto some experts: that rank gets more tokens; imbalance, not a fault)")
    p.add_argument("--sequence-parallel", action="store_true",
                   help="split the layer norms and dropouts over TP along the sequence (needs --tp > 1)")
    p.add_argument("--optimizer", default="adam", choices=["adam", "sgd"])
    p.add_argument("--clip-grad", type=float, default=1.0, help="gradient clipping norm (0: none)")
    p.add_argument("--slow-rank", type=_ranks, default=None, metavar="R[,R...]",
                   help="rank(s) to slow down (fault injector): one rank, or several (a slow node's) comma-separated")
    p.add_argument("--slow-factor", type=float, default=1.0, help="compute slowdown of --slow-rank")
    p.add_argument("--slow-mode", default="layer", choices=["layer", "before-microbatch", "host-sleep", "gpu-hog", "cpu-hog"],
                   help="what --slow-rank does (see the module doc)")
    p.add_argument("--slow-work", default="auto", choices=["auto", "sleep", "matmul"],
                   help="--slow-mode layer: sleep or real matmuls (auto: sleep on CPU, matmuls on GPU)")
    p.add_argument("--slow-ms", type=float, default=20.0,
                   help="--slow-mode before-microbatch/host-sleep: ms of extra work/sleep per microbatch")
    p.add_argument("--slow-duty", type=float, default=0.3,
                   help="--slow-mode gpu-hog / cpu-hog: share of each 20 ms the other process keeps the GPU / core busy")
    p.add_argument("--slow-jitter", type=float, default=0.0, metavar="SIGMA",
                   help="--slow-mode before-microbatch: each microbatch's --slow-ms times exp(SIGMA * N(0, 1)); "
                        "gpu-hog, cpu-hog: each burst's length and period so")
    p.add_argument("--slow-from", type=int, default=0, metavar="K",
                   help="--slow-mode layer/before-microbatch/host-sleep: act from iteration K on (a fault that "
                        "sets in midway; default 0, from the start)")
    p.add_argument("--link-slow", default=None, metavar="SRC,DST",
                   help="two ranks of one pipeline link that exchange extra bytes with every p2p")
    p.add_argument("--link-extra-bytes", type=int, default=0, help="bytes of the extra tensor (--link-slow)")
    p.add_argument("--last-stage-layers", type=int, default=None,
                   help="transformer layers of the last pipeline stage (uneven split)")
    p.add_argument("--seq-lognormal", type=float, default=None, metavar="SIGMA",
                   help="heavy-tailed per-microbatch sequence lengths, independent per DP replica")
    p.add_argument("--profile-dir", default=None, help="trace with torch.profiler: rank-<r>.json here")
    p.add_argument("--profile-wait", type=int, default=1, help="iterations before the profiler starts")
    p.add_argument("--profile-warmup", type=int, default=1, help="profiler warm-up iterations")
    p.add_argument("--profile-stop", default="synced", choices=["synced", "plain"],
                   help="synced: every rank ends its last recorded iteration before any stops its trace; "
                        "plain: each stops and writes its trace when it gets there, as a plain torch.profiler does")
    p.add_argument("--profile-active", type=int, default=None,
                   help="profiled iterations (default: the rest)")
    p.add_argument("--profile-record", default="shapes", choices=sorted(PROFILE_RECORDS),
                   help="what torch.profiler records besides ops: shapes (record_shapes), default (its "
                        "defaults: no shapes), tutorial (record_shapes, profile_memory, with_stack)")
    p.add_argument("--groups-json", default=None, help="rank 0 writes the parallel groups here")
    p.add_argument("--timings-json", default=None, help="each rank appends its step times here")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--scope-port", type=int, default=None,
                   help="MegaScope: serve the live model's internals on this port (127.0.0.1; 0: any free port)")
    p.add_argument("--scope-interval", type=int, default=10,
                   help="MegaScope: a snapshot of the probe prompts every N iterations")
    p.add_argument("--scope-host", default="127.0.0.1", help="MegaScope: address (not loopback: needs --scope-token)")
    p.add_argument("--scope-token", default=None, help="MegaScope: secret every connection must present")
    p.add_argument("--scope-dir", default=None,
                   help="MegaScope: also write each snapshot here (safetensors + JSON index; mapp sql reads them)")
    p.add_argument("--use-dpp", action="store_true",
                   help="MegaDPP: run each step's pipeline in a dynamic order planned from microbatch lengths")
    p.add_argument("--dpp-policy", default="adaptive", choices=["depth", "breadth", "adaptive"],
                   help="--use-dpp: which ready task a stage runs when its plan's next one is not ready")
    p.add_argument("--dpp-memory-budget", type=int, default=None,
                   help="--use-dpp adaptive: breadth-first below this many held activations (one microbatch, one chunk)")
    p.add_argument("--dpp-transport", default="auto", choices=["auto", "shm", "dist"],
                   help="--use-dpp: how stages exchange tensors (auto: shared memory and CUDA IPC on one host; "
                        "dist: torch.distributed, NCCL on GPUs)")
    p.add_argument("--grads-dir", default=None,
                   help="each rank saves its gradients of every iteration here (grads-rank<R>.pt), for comparisons")
    p.add_argument("--fbd", action="store_true",
                   help="MegaFBD: a forward and a backward worker per pipeline stage "
                        "(world = pp x (tp + --fbd-forward-tp))")
    p.add_argument("--fbd-forward-tp", type=int, default=None,
                   help="--fbd: tensor-parallel size of the forward workers (a divisor of --tp; default --tp)")
    p.add_argument("--fbd-placement", default="rank", choices=["rank", "split"],
                   help="--fbd on GPUs: each process on its local rank's GPU (rank), or backward workers on "
                        "the first half of the GPUs and forward workers on the second (split; one GPU: shared)")
    add_trace_args(p)
    return p.parse_args(argv)


def init_distributed(args) -> torch.device:
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group("nccl")
        return torch.device("cuda", torch.cuda.current_device())
    dist.init_process_group("gloo")
    return torch.device("cpu")


def _variable_seq_kwargs(args) -> dict:
    """Pipeline stages must exchange shapes when sequence lengths vary (megatron-core's
    ``variable_seq_lengths``; its config check also wants the (here unused) MoE dispatcher
    that supports them). Without pipelining nothing needs to be told."""
    if args.seq_lognormal is None or args.pp == 1:
        return {}
    return {"variable_seq_lengths": True, "moe_token_dispatcher_type": "alltoall"}


def gpt_config(args, device, tp: int | None = None):
    """The GPT's ``TransformerConfig`` (``tp``: the tensor-parallel size, default ``--tp``)."""
    from megatron.core.transformer.transformer_config import TransformerConfig

    dtype = torch.bfloat16 if args.bf16 else torch.float32
    return TransformerConfig(
        num_layers=args.layers,
        hidden_size=args.hidden,
        ffn_hidden_size=args.ffn_hidden,
        num_attention_heads=args.heads,
        tensor_model_parallel_size=args.tp if tp is None else tp,
        pipeline_model_parallel_size=args.pp,
        virtual_pipeline_model_parallel_size=args.vpp,
        pipeline_dtype=dtype,
        bf16=args.bf16,
        params_dtype=dtype,
        sequence_parallel=args.sequence_parallel,
        attention_dropout=0.0,
        hidden_dropout=0.0,
        use_cpu_initialization=device.type == "cpu",
        num_layers_in_last_pipeline_stage=args.last_stage_layers,
        # later dicts win: MoE names the dispatcher that variable lengths also ask for
        **{**_variable_seq_kwargs(args), **_recompute_kwargs(args), **_moe_kwargs(args)},
    )


def _recompute_kwargs(args) -> dict:
    """``--recompute``: full recomputes one layer at a time (megatron's ``uniform`` method), the
    way memory-bound production jobs run; selective only the attention core."""
    if args.recompute == "full":
        return {"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1}
    if args.recompute == "selective":
        return {"recompute_granularity": "selective"}
    return {}


def _moe_fixes() -> None:
    """Two megatron-core 0.16.1 MoE bugs this script meets. Its router names ``te_general_gemm``
    without defining it when Transformer Engine is absent (the import fails silently; None is
    what the router's check expects then). And with one expert rank and no TP (one GPU) an
    expert's row-parallel linear "reduces" over a group of one, a custom autograd function that
    hands back its input, which autograd then marks a view, and the expert adds its bias to it in
    place, which autograd forbids: over one rank the reduction is skipped, as it is a no-op."""
    from megatron.core.tensor_parallel import layers
    from megatron.core.transformer.moe import moe_utils

    if not hasattr(moe_utils, "te_general_gemm"):
        moe_utils.te_general_gemm = None
    reduce = layers.reduce_from_tensor_model_parallel_region
    if getattr(reduce, "_skips_one_rank", False):
        return

    def reduce_unless_alone(input_, group=None):
        return input_ if group is not None and group.size() == 1 else reduce(input_, group)

    reduce_unless_alone._skips_one_rank = True
    layers.reduce_from_tensor_model_parallel_region = reduce_unless_alone


def skew_routers(chunks, args) -> None:
    """``--moe-skew B``: every router favours the experts the first expert rank holds, by B added
    to their logits, as a router that collapsed onto a few experts does. The work moves, nothing
    is slowed: that rank's experts take more of every microbatch's tokens."""
    from megatron.core.transformer.moe.router import TopKRouter

    hot = args.moe_experts // args.ep
    for chunk in chunks:
        for module in chunk.modules():
            if isinstance(module, TopKRouter):
                gating = module.gating
                bias = torch.zeros(args.moe_experts)
                bias[:hot] = args.moe_skew
                placed: dict = {}   # the bias on the logits' device and dtype, copied there once

                def skewed(input, gating=gating, bias=bias, placed=placed):
                    logits = gating(input)
                    key = (logits.device, logits.dtype)
                    if key not in placed:
                        placed[key] = bias.to(device=logits.device, dtype=logits.dtype)
                    return logits + placed[key]

                module.gating = skewed


def _moe_kwargs(args) -> dict:
    """``--moe-experts``: top-2 routing over ``--ep`` expert-parallel ranks, tokens sent by
    all-to-all, each expert whole on its rank (no expert TP); no capacity limit, so that an
    expert's load follows the router."""
    if not args.moe_experts:
        return {}
    _moe_fixes()
    return {"num_moe_experts": args.moe_experts, "moe_router_topk": min(2, args.moe_experts),
            "moe_token_dispatcher_type": "alltoall", "expert_model_parallel_size": args.ep,
            "expert_tensor_parallel_size": 1,
            "moe_grouped_gemm": False}


class SequenceParallelLayerNorm(torch.nn.LayerNorm):
    """torch's LayerNorm for a sequence-parallel layer: megatron-core's local spec refuses
    ``sequence_parallel`` (its torch norm asserts; production jobs use Transformer Engine's). Each
    TP rank normalises its own slice of the sequence with the same weights, so the weights'
    gradients are partial sums over TP; ``sequence_parallel`` on a parameter tells
    megatron-core's ``finalize_model_grads`` to all-reduce them over TP, as it does TE's."""

    def __init__(self, config, hidden_size: int, eps: float = 1e-5, **_):
        super().__init__(hidden_size, eps=eps)
        for p in self.parameters():
            p.sequence_parallel = True


def layer_spec(cfg, vp: int | None = None):
    """The local layer spec; with sequence parallelism, the whole block's spec with
    :class:`SequenceParallelLayerNorm` for every norm."""
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.transformer_block import (TransformerBlockSubmodules,
                                                             get_num_layers_to_build)

    spec = get_gpt_layer_local_spec(num_experts=cfg.num_moe_experts, moe_grouped_gemm=False)
    if not cfg.sequence_parallel:
        return spec
    spec.submodules.input_layernorm = SequenceParallelLayerNorm
    spec.submodules.pre_mlp_layernorm = SequenceParallelLayerNorm
    return TransformerBlockSubmodules(layer_specs=[spec] * get_num_layers_to_build(cfg, vp_stage=vp),
                                      layer_norm=SequenceParallelLayerNorm)


def gpt_module(args, cfg, device, vp: int | None = None):
    """This rank's GPT stage (model chunk ``vp``), bf16-wrapped with ``--bf16``; no DDP."""
    from megatron.core import parallel_state as ps
    from megatron.core.models.gpt.gpt_model import GPTModel

    chunk = GPTModel(
        config=cfg,
        transformer_layer_spec=layer_spec(cfg, vp),
        vocab_size=args.vocab,
        max_sequence_length=args.seq,
        pre_process=ps.is_pipeline_first_stage(ignore_virtual=False, vp_stage=vp),
        post_process=ps.is_pipeline_last_stage(ignore_virtual=False, vp_stage=vp),
        vp_stage=vp,
    ).to(device)
    if args.bf16:
        from megatron.core.transformer.module import Float16Module

        chunk = Float16Module(cfg, chunk)
    return chunk


def build_model(args, device):
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig

    cfg = gpt_config(args, device)
    chunks = []
    for vp_stage in range(args.vpp or 1):
        chunk = gpt_module(args, cfg, device, vp_stage if args.vpp else None)
        ddp_cfg = DistributedDataParallelConfig(
            overlap_grad_reduce=args.overlap_grad_reduce, use_distributed_optimizer=args.distributed_optimizer,
            overlap_param_gather=args.overlap_param_gather,
        )
        chunk = DistributedDataParallel(
            config=cfg, ddp_config=ddp_cfg, module=chunk,
            disable_bucketing=vp_stage > 0,
        )
        chunks.append(chunk)
    cfg.no_sync_func = [c.no_sync for c in chunks] if args.vpp else chunks[0].no_sync
    cfg.finalize_model_grads_func = _finalize_grads
    return cfg, chunks


def _finalize_grads(model, *args, **kwargs):
    from megatron.core.distributed import finalize_model_grads

    return finalize_model_grads(model, *args, **kwargs)


def batches(args, device, replica: int = 0, delay_s: float = 0.0, injected=None):
    """Synthetic next-token batches (tokens, labels, positions, causal mask).

    ``replica``: the data-parallel rank; with ``--seq-lognormal`` it seeds the lengths, so that
    the TP ranks and pipeline stages of one replica draw the same ones and replicas differ.
    ``delay_s``: the host-sleep injector, slept before each batch is handed out."""
    gen = torch.Generator().manual_seed(args.seed)
    lengths = torch.Generator().manual_seed(args.seed * 1000 + 7919 * replica + 1)
    masks = {}
    while True:
        seq = args.seq
        if args.seq_lognormal is not None:
            z = torch.randn((), generator=lengths).item()
            seq = min(args.seq, max(8, round(args.seq / 4 * math.exp(args.seq_lognormal * z))))
            if args.sequence_parallel:   # each TP rank takes an equal slice of the sequence
                seq -= seq % args.tp
        if delay_s and (injected is None or injected.on):
            t0 = time.perf_counter()
            time.sleep(delay_s)
            if injected is not None:
                injected.add(time.perf_counter() - t0)
        tok = torch.randint(0, args.vocab, (args.micro_batch_size, seq + 1), generator=gen)
        tok = tok.to(device)
        if seq not in masks:
            masks[seq] = (torch.arange(seq, device=device).unsqueeze(0).expand(args.micro_batch_size, -1),
                          torch.tril(torch.ones(1, 1, seq, seq, device=device)) < 0.5)
        pos, mask = masks[seq]
        yield {"tokens": tok[:, :-1], "labels": tok[:, 1:], "pos": pos, "mask": mask}


_BEFORE_MICROBATCH = None  # set on the slow rank by --slow-mode before-microbatch


def forward_step(data, model):
    if _BEFORE_MICROBATCH is not None:
        _BEFORE_MICROBATCH()
    b = next(data)
    out = model(b["tokens"], b["pos"], b["mask"], labels=b["labels"])

    def loss_func(output):
        loss = output.float().mean()
        return loss, {"loss": loss.detach()}

    return out, loss_func


class Injected:
    """Seconds of work or sleep an injector added, per iteration (what the run measured), and
    whether the injectors act in this iteration (``--slow-from``: ``on`` from iteration
    ``start`` on; the training loop sets ``iteration``)."""

    def __init__(self, start: int = 0) -> None:
        self.now = 0.0
        self.per_iteration: list[float] = []
        self.start, self.iteration = start, 0

    @property
    def on(self) -> bool:
        return self.iteration >= self.start

    def add(self, seconds: float) -> None:
        self.now += seconds

    def close_iteration(self) -> None:
        self.per_iteration.append(self.now)
        self.now = 0.0


class CpuBurner:
    """CPU busy work that a profiler sees as a few real aten matmuls: ``x @ (hidden, width)``
    for an activation ``x``; ``width`` is ``hidden``, widened at the first call (on that ``x``)
    until one matmul takes about 0.5 ms: a millisecond of extra work is a handful of ops, not
    thousands of tiny ones."""

    def __init__(self, hidden: int, dtype, target_s: float = 5e-4):
        self.hidden, self.dtype, self.target_s = hidden, dtype, target_s
        self.weight = None

    def _calibrate(self, a: torch.Tensor) -> None:
        width = self.hidden        # (hidden x hidden) when that is already slow enough
        while True:
            w = torch.randn(self.hidden, width, dtype=self.dtype)
            torch.matmul(a, w)
            t0 = time.perf_counter()
            for _ in range(3):
                torch.matmul(a, w)
            per = (time.perf_counter() - t0) / 3
            if per >= self.target_s or width >= 1 << 15:
                break
            width = min(1 << 15, width * max(2, min(8, int(self.target_s / max(per, 1e-7)))))
        self.weight = w

    def burn_for(self, x: torch.Tensor, seconds: float) -> None:
        """Real matmuls of ``x`` (last dim ``hidden``) until ``seconds`` have passed."""
        t0 = time.perf_counter()
        a = x.detach().reshape(-1, x.shape[-1])
        with torch.no_grad():
            if self.weight is None:
                self._calibrate(a)
            while time.perf_counter() - t0 < seconds:
                torch.matmul(a, self.weight)


class SlowDown:
    """Fault injector: makes the attention and MLP of every transformer layer about ``factor``
    times slower on this rank, forward and backward. ``work="sleep"`` (the CPU default): sleeps
    for (factor-1) times the measured duration (sleep, not busy work, so that the other ranks
    sharing the cores are not slowed too). ``work="matmul"``: real matmuls of the module's
    activations; on GPU about (factor-1) times the module's FLOPs (the GPU default), on CPU
    repeated until (factor-1) times the module's measured duration has passed."""

    def __init__(self, factor: float, hidden: int, device: torch.device, dtype, tp: int, seq: int,
                 work: str = "auto", injected: Injected | None = None):
        self.extra = max(0.0, factor - 1.0)
        self.device = device
        self.work = ("matmul" if device.type == "cuda" else "sleep") if work == "auto" else work
        self.injected = injected if injected is not None else Injected()
        self.matmuls = {}
        if self.work == "matmul" and device.type == "cpu":
            self.burner = CpuBurner(hidden, dtype)
        if device.type == "cuda":
            # forward FLOPs per token / tp: attention ~ 8h^2 + 4sh, MLP ~ 16h^2;
            # one (tokens, h) @ (h, h) matmul is 2h^2 per token.
            self.weight = torch.randn(hidden, hidden, device=device, dtype=dtype)
            self.matmuls = {"attention": max(1, round(self.extra * (4 + 2 * seq / hidden) / tp)),
                            "mlp": max(1, round(self.extra * 8 / tp))}

    def attach(self, layers) -> None:
        """Wraps ``forward`` on the attention and MLP instances (before mapp installs, so that
        mapp's spans of those modules include the extra work, as a slow GPU's would)."""
        for layer in layers:
            for kind, module in (("attention", layer.self_attention), ("mlp", layer.mlp)):
                module._slow_kind = kind
                module.forward = self._wrap(module, module.forward)

    def _wrap(self, module, forward):
        def slow_forward(*args, **kwargs):
            self._pre(module, args, kwargs)
            out = forward(*args, **kwargs)
            self._post(module, args, out)
            return out

        return slow_forward

    def _burn(self, x: torch.Tensor, count: int) -> None:
        a = x.detach().reshape(-1, x.shape[-1])
        with torch.no_grad():
            for _ in range(count):
                torch.matmul(a, self.weight)

    def _spend(self, module, x: torch.Tensor, elapsed: float, backward: bool) -> None:
        if not self.injected.on:
            return
        t0 = time.perf_counter()
        if self.device.type == "cuda" and self.work == "matmul":
            self._burn(x, (2 if backward else 1) * self.matmuls[module._slow_kind])
        elif self.work == "matmul":
            self.burner.burn_for(x, self.extra * elapsed)
        else:
            time.sleep(self.extra * elapsed)
        self.injected.add(time.perf_counter() - t0)

    def _pre(self, module, args, kwargs):
        module._slow_t0 = time.perf_counter()
        x = args[0] if args else kwargs.get("hidden_states")
        if isinstance(x, torch.Tensor) and x.requires_grad and torch.is_grad_enabled():
            x.register_hook(lambda g, m=module: self._bwd_end(m, g))

    def _post(self, module, args, out):
        x = out[0] if isinstance(out, tuple) else out
        self._spend(module, x, time.perf_counter() - module._slow_t0, backward=False)
        if isinstance(x, torch.Tensor) and x.requires_grad and torch.is_grad_enabled():
            x.register_hook(lambda g, m=module: self._bwd_start(m, g))

    def _bwd_start(self, module, grad):
        module._slow_b0 = time.perf_counter()

    def _bwd_end(self, module, grad):
        if self.device.type == "cuda" or getattr(module, "_slow_b0", None) is not None:
            elapsed = time.perf_counter() - module._slow_b0 if getattr(module, "_slow_b0", None) else 0.0
            self._spend(module, grad, elapsed, backward=True)
            module._slow_b0 = None


# the neighbour of --slow-mode gpu-hog: a process of its own (its own CUDA context, so that the
# GPU time-slices between it and the rank, as between two jobs sharing a GPU), which leaves as
# soon as its parent is gone
_HOG = """
import os, sys, time, torch
import random
dev, duty, parent, sigma, seed = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
draw = random.Random(seed * 16 + dev)   # bursts differ between runs of other seeds
torch.cuda.set_device(dev)
a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
for _ in range(3):
    a @ a
torch.cuda.synchronize()
t = time.perf_counter()
for _ in range(20):
    a @ a
torch.cuda.synchronize()
n = max(1, round(duty * 0.02 / ((time.perf_counter() - t) / 20)))
print(f"gpu-hog: {n} matmuls of 4096x4096 every 20 ms on GPU {dev}", flush=True)
while os.getppid() == parent:
    t0 = time.perf_counter()
    for _ in range(max(1, round(n * draw.lognormvariate(0.0, sigma)))):
        a @ a
    torch.cuda.synchronize()
    time.sleep(max(0.0, 0.02 * draw.lognormvariate(0.0, sigma) - (time.perf_counter() - t0)))
"""


def start_gpu_hog(device: torch.device, duty: float, jitter: float = 0.0, seed: int = 0):
    """Starts the neighbour process of ``--slow-mode gpu-hog`` on ``device`` and returns it once it
    runs (its first line: it has measured its matmuls), so that every traced iteration shares the
    GPU; stop it with ``terminate``."""
    # (torch and CUDA start in seconds)
    return _start_neighbour("gpu-hog", _HOG, [device.index, f"{duty:g}", os.getpid(), f"{jitter:g}", seed], 120.0)


def _start_neighbour(mode: str, code: str, argv: list, wait_s: float):
    """Runs ``code`` in a process of its own with ``argv`` and returns it once it has printed its
    first line (which is printed here too), or exits with a one-line error if it did not."""
    hog = subprocess.Popen([sys.executable, "-c", code, *map(str, argv)], stdout=subprocess.PIPE, text=True)
    ready, _, _ = select.select([hog.stdout], [], [], wait_s)
    first = hog.stdout.readline().strip() if ready else ""
    if not first:
        hog.kill()
        raise SystemExit(f"--slow-mode {mode}: the neighbour process did not start (exit {hog.wait()})")
    print(first, flush=True)
    return hog


# the neighbour of --slow-mode cpu-hog: a process pinned to the slowed rank's core that spins
# for its duty of every 20 ms and leaves as soon as its parent is gone
_CPU_HOG = """
import os, random, sys, time
cpu, duty, parent, sigma, seed = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
os.sched_setaffinity(0, {cpu})
draw = random.Random(seed * 16 + cpu)
print(f"cpu-hog: spinning {duty:g} of every 20 ms on CPU {cpu}", flush=True)
while os.getppid() == parent:
    t0 = time.perf_counter()
    busy = 0.02 * duty * draw.lognormvariate(0.0, sigma)
    while time.perf_counter() - t0 < busy:
        pass
    time.sleep(max(0.0, 0.02 * (1.0 - duty) * draw.lognormvariate(0.0, sigma)))
"""


def start_cpu_hog(rank: int, duty: float, jitter: float = 0.0, seed: int = 0):
    """Pins the calling thread (the main one, where the rank computes) to one of the cores it may
    use (the ``rank``-th, wrapping) and starts the neighbour process of ``--slow-mode cpu-hog`` on
    the same core; returns it once it runs. Stop it with ``terminate``."""
    cpus = sorted(os.sched_getaffinity(0))
    cpu = cpus[rank % len(cpus)]
    os.sched_setaffinity(0, {cpu})
    return _start_neighbour("cpu-hog", _CPU_HOG, [cpu, f"{duty:g}", os.getpid(), f"{jitter:g}", seed], 60.0)


class BeforeMicrobatch:
    """Fault injector (``--slow-mode before-microbatch``): real matmuls for about ``ms`` ms
    before each microbatch's forward, outside the model. CPU: :class:`CpuBurner` matmuls of a
    (micro_batch * seq, hidden) activation until the time has passed. GPU: a count of (hidden x
    hidden) matmuls calibrated once (synchronised) to take about ``ms``; they run asynchronously."""

    def __init__(self, ms: float, args, device: torch.device, dtype, injected: Injected):
        self.seconds = ms / 1e3
        # --slow-jitter: a draw per call, from the run's seed (both schedules of a comparison
        # see the same sequence of draws)
        self.jitter = args.slow_jitter
        self.rng = random.Random(args.seed)
        self.device = device
        self.injected = injected
        self.a = torch.randn(args.micro_batch_size * args.seq, args.hidden, device=device, dtype=dtype)
        self.count = None
        if device.type == "cpu":
            self.burner = CpuBurner(args.hidden, dtype)
        else:
            self.weight = torch.randn(args.hidden, args.hidden, device=device, dtype=dtype)
            with torch.no_grad():
                for _ in range(10):
                    torch.matmul(self.a, self.weight)
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for _ in range(200):
                    torch.matmul(self.a, self.weight)
                torch.cuda.synchronize()
            per = (time.perf_counter() - t0) / 200
            self.count = max(1, round(self.seconds / per))

    def __call__(self) -> None:
        if not self.injected.on:
            return
        scale = math.exp(self.jitter * self.rng.gauss(0.0, 1.0)) if self.jitter else 1.0
        if self.count is not None:
            with torch.no_grad():
                for _ in range(max(1, round(self.count * scale))):
                    torch.matmul(self.a, self.weight)
            self.injected.add(self.seconds * scale)   # GPU: the calibrated estimate, not host time
            return
        t0 = time.perf_counter()
        self.burner.burn_for(self.a, self.seconds * scale)
        self.injected.add(time.perf_counter() - t0)


def install_link_slow(args, rank: int, device: torch.device, injected: Injected | None = None) -> None:
    """``--link-slow SRC,DST``: every pipeline exchange between SRC and DST also moves an extra
    ``--link-extra-bytes`` tensor between them (both directions: the side that sends a tensor to
    the other sends the extra one too, the receiving side receives it), on a 2-rank process
    group of its own. It wraps ``P2PCommunicator._communicate`` (before mapp's capture wraps
    it, so that mapp's send/recv spans include the extra transfer but record megatron's bytes).
    Every rank must call this (``new_group`` is collective)."""
    from megatron.core.pipeline_parallel import p2p_communication

    src, dst = (int(r) for r in args.link_slow.split(","))
    group = dist.new_group(sorted([src, dst]))
    if rank not in (src, dst):
        return
    peer = dst if rank == src else src
    n = max(1, args.link_extra_bytes // 4)
    out_buf = torch.ones(n, dtype=torch.float32, device=device)
    in_buf = torch.empty(n, dtype=torch.float32, device=device)
    cls = p2p_communication.P2PCommunicator
    original = cls._communicate

    def _communicate(self, *, tensor_send_next=None, tensor_send_prev=None, recv_prev=False, recv_next=False,
                     **kwargs):
        result = original(self, tensor_send_next=tensor_send_next, tensor_send_prev=tensor_send_prev,
                          recv_prev=recv_prev, recv_next=recv_next, **kwargs)
        sends = (tensor_send_next is not None and self.next_rank == peer) + \
                (tensor_send_prev is not None and self.prev_rank == peer)
        recvs = (recv_next and self.next_rank == peer) + (recv_prev and self.prev_rank == peer)
        ops = [dist.P2POp(dist.isend, out_buf, peer, group) for _ in range(sends)]
        ops += [dist.P2POp(dist.irecv, in_buf, peer, group) for _ in range(recvs)]
        if ops:
            t0 = time.perf_counter()
            for req in dist.batch_isend_irecv(ops):
                req.wait()
            if injected is not None:
                injected.add(time.perf_counter() - t0)
        return result

    cls._communicate = _communicate


def transformer_layers(chunks):
    from megatron.core.transformer.transformer_layer import TransformerLayer

    return [m for c in chunks for m in c.modules() if isinstance(m, TransformerLayer)]


def write_groups(path: str) -> None:
    """Rank 0 writes every TP/PP/DP group megatron-core built (global ranks, sorted)."""
    from megatron.core import parallel_state as ps

    world = dist.get_world_size()
    mine = {
        "tp": sorted(dist.get_process_group_ranks(ps.get_tensor_model_parallel_group())),
        "pp": sorted(dist.get_process_group_ranks(ps.get_pipeline_model_parallel_group())),
        "dp": sorted(dist.get_process_group_ranks(ps.get_data_parallel_group())),
    }
    gathered = [None] * world
    dist.all_gather_object(gathered, mine)
    if dist.get_rank() == 0:
        groups = {k: sorted({tuple(g[k]) for g in gathered}) for k in mine}
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "w") as f:
            json.dump({"world_size": world, "groups": {k: [list(r) for r in v] for k, v in groups.items()},
                       "by_rank": gathered}, f)


def store_barrier(name: str) -> None:
    """Wait until every rank got here, through the rendezvous store (no collective, so nothing
    that a profiler records)."""
    store = dist.distributed_c10d._get_default_store()
    store.add(name, 1)
    while store.add(name, 0) < dist.get_world_size():
        time.sleep(0.002)


_STOPS = [0]


def _synced_profile_class():
    from torch.profiler import profile

    class SyncedProfile(profile):
        """torch.profiler.profile whose ranks all finish their last recorded step before any of
        them stops the trace: stopping (processing the events) takes the CPU for a while, and
        on shared cores it would slow the ranks still in that step."""

        def stop_trace(self):
            if dist.is_initialized():
                _STOPS[0] += 1
                store_barrier(f"mapp-profiler-stop-{_STOPS[0]}")
            super().stop_trace()

    return SyncedProfile


# ``--profile-record``: torch.profiler's recording options (shapes; its defaults, which record none;
# PyTorch's profiler tutorial, with Python stacks and memory events); tests/corpus/_job.py holds the
# same for the corpus's plain jobs
PROFILE_RECORDS = {"shapes": dict(record_shapes=True), "default": {},
                   "tutorial": dict(record_shapes=True, profile_memory=True, with_stack=True)}


def make_profiler(args, rank: int, device: torch.device):
    """``--profile-dir``: a torch.profiler that writes ``rank-<r>.json``, or None."""
    if not args.profile_dir:
        return None
    from torch.profiler import ProfilerActivity, profile, schedule

    maker = _synced_profile_class() if args.profile_stop == "synced" else profile
    os.makedirs(args.profile_dir, exist_ok=True)
    active = args.profile_active or max(1, args.iterations - args.profile_wait - args.profile_warmup)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    path = os.path.join(args.profile_dir, f"rank-{rank}.json")
    return maker(activities=activities, **PROFILE_RECORDS[args.profile_record],
                 schedule=schedule(wait=args.profile_wait, warmup=args.profile_warmup, active=active, repeat=1),
                 on_trace_ready=lambda p: p.export_chrome_trace(path))


def start_scope(args, chunks):
    """MegaScope on the live model (``--scope-port``): rank 0 serves the page; every
    ``--scope-interval`` iterations all ranks take one captured forward pass of the probe
    prompts. Tokens are bytes (the synthetic data's vocabulary is 256 ids)."""
    if args.scope_port is None:
        return None
    if args.vpp:
        raise SystemExit("--scope-port follows one model chunk per rank: leave out --vpp")
    if args.vocab < 256:
        raise SystemExit("--scope-port shows tokens as bytes: it needs --vocab 256 or more")
    from mapp.scope.tokenizer import ByteTokenizer
    from mapp.scope.training import TrainingScope

    return TrainingScope(chunks, ByteTokenizer(), port=args.scope_port, interval=args.scope_interval,
                         host=args.scope_host, token=args.scope_token, snapshot_dir=args.scope_dir,
                         on_ready=lambda url: print(f"MegaScope serving at {url}", flush=True))


def make_forward_backward(args, tracer=None):
    """megatron-core's schedule, or MegaDPP's (which plans from each microbatch's length;
    ``tracer``: mapp's capture, which then records its messages)."""
    from megatron.core.pipeline_parallel.schedules import get_forward_backward_func

    if not args.use_dpp:
        return get_forward_backward_func()
    from mapp.scheduling.dpp import DynamicPipeline

    return DynamicPipeline(args.dpp_policy, memory_budget=args.dpp_memory_budget,
                           cost_of=lambda batch: batch["tokens"].shape[1], tracer=tracer,
                           transport_backend=args.dpp_transport)


def save_grads(chunks, path: str, iteration: int, saved: dict) -> None:
    """This rank's gradients after ``iteration`` (megatron DDP keeps them in ``main_grad``)."""
    saved[iteration] = {f"{i}.{name}": p.main_grad.detach().cpu().clone()
                        for i, c in enumerate(chunks) for name, p in c.named_parameters()}
    torch.save(saved, path)


def run_fbd(args) -> None:
    """``--fbd``: MegaFBD's training (it joins the launcher's rendezvous itself: its processes
    form two megatron-core worlds, not this example's one)."""
    from mapp.megatron_hooks.cpu_patches import apply_if_cpu
    from mapp.megatron_hooks.flags import install_from_args
    from mapp.scheduling.fbd.train import Example, main as fbd_main

    def patches() -> None:
        from mapp.megatron_hooks import p2p_order

        apply_if_cpu()
        if torch.cuda.is_available():
            p2p_order.apply()

    fbd_main(args, Example(build_model=build_model, gpt_config=gpt_config, gpt_module=gpt_module, batches=batches, forward_step=forward_step,
                           install_tracing=install_from_args, apply_cpu_patches=patches))
    leave_distributed()


def main(argv=None) -> None:
    global _BEFORE_MICROBATCH
    args = parse_args(argv)
    if args.fbd:
        return run_fbd(args)
    if args.fbd_forward_tp is not None or args.fbd_placement != "rank":
        raise SystemExit("--fbd-forward-tp and --fbd-placement need --fbd")
    if args.slow_mode == "gpu-hog" and not torch.cuda.is_available():
        raise SystemExit("--slow-mode gpu-hog needs a GPU: it shares the slowed rank's GPU with another process")
    if args.slow_mode == "cpu-hog" and torch.cuda.is_available():
        raise SystemExit("--slow-mode cpu-hog is for CPU runs (gloo): on a GPU use --slow-mode gpu-hog")
    if not 0 < args.slow_duty < 1:
        raise SystemExit("--slow-duty takes a share of the time between 0 and 1, e.g. 0.3")
    if args.slow_from and args.slow_rank is None:
        raise SystemExit("--slow-from needs --slow-rank: it delays that rank's injector (--link-slow acts from the start)")
    if args.slow_from and (args.slow_from < 0 or args.slow_mode not in ("layer", "before-microbatch", "host-sleep")):
        raise SystemExit("--slow-from takes an iteration >= 0 and needs --slow-mode layer, before-microbatch or host-sleep")
    if args.slow_jitter and (args.slow_jitter < 0 or args.slow_mode not in ("before-microbatch", "gpu-hog", "cpu-hog")):
        raise SystemExit("--slow-jitter takes a sigma >= 0 and needs --slow-mode before-microbatch, gpu-hog or cpu-hog")
    if args.overlap_param_gather and not (args.distributed_optimizer and args.overlap_grad_reduce):
        raise SystemExit("--overlap-param-gather needs --distributed-optimizer and --overlap-grad-reduce")
    if args.ep < 1 or (args.moe_experts is not None and args.moe_experts < 1):
        raise SystemExit("--ep and --moe-experts take a count of 1 or more, e.g. --moe-experts 8 --ep 2")
    if (args.ep > 1 or args.moe_skew) and not args.moe_experts:
        raise SystemExit("--ep and --moe-skew need --moe-experts")
    if args.moe_experts and args.moe_experts % args.ep:
        raise SystemExit(f"--moe-experts {args.moe_experts} does not split over --ep {args.ep}: give a multiple")
    if args.sequence_parallel and args.tp < 2:
        raise SystemExit("--sequence-parallel needs --tp 2 or more")
    if args.distributed_optimizer and not torch.cuda.is_available():
        raise SystemExit("--distributed-optimizer needs a GPU (megatron-core's distributed optimizer takes CUDA tensors only)")
    device = init_distributed(args)
    if args.bf16 and device.type == "cpu":
        raise SystemExit("--bf16 needs a GPU (megatron-core's bf16 optimizer takes CUDA tensors only)")
    from mapp.megatron_hooks import p2p_order
    from mapp.megatron_hooks.cpu_patches import apply_if_cpu

    apply_if_cpu()
    if device.type == "cuda":
        p2p_order.apply()   # two pipeline stages: megatron-core's batched p2p swaps directions (CPU: tagged)
    from megatron.core import parallel_state as ps
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed

    if args.moe_experts and (dist.get_world_size() // args.pp) % args.ep:
        raise SystemExit(f"--ep {args.ep} does not divide the {dist.get_world_size() // args.pp} ranks of a "
                         "pipeline stage: give a divisor")
    ps.initialize_model_parallel(
        tensor_model_parallel_size=args.tp,
        pipeline_model_parallel_size=args.pp,
        virtual_pipeline_model_parallel_size=args.vpp,
        expert_model_parallel_size=args.ep,
        # experts whole on each expert rank (no expert TP), as megatron-core wants of experts with biases
        expert_tensor_parallel_size=1 if args.moe_experts else None,
    )
    model_parallel_cuda_manual_seed(args.seed)
    # megatron-core initialises CPU-built weights from torch's default generator: seed it too,
    # so that two runs (two schedules) start from the same weights.
    torch.manual_seed(args.seed)
    rank = dist.get_rank()
    if args.groups_json:
        write_groups(args.groups_json)

    cfg, chunks = build_model(args, device)
    if args.moe_skew:
        skew_routers(chunks, args)
    injected = Injected(args.slow_from)
    slow = args.slow_rank is not None and rank in args.slow_rank
    if slow and args.slow_mode == "layer" and args.slow_factor > 1.0:
        SlowDown(args.slow_factor, args.hidden, device, cfg.params_dtype, args.tp, args.seq,
                 work=args.slow_work, injected=injected).attach(transformer_layers(chunks))
    if slow and args.slow_mode == "before-microbatch" and args.slow_ms > 0:
        _BEFORE_MICROBATCH = BeforeMicrobatch(args.slow_ms, args, device, cfg.params_dtype, injected)
    if args.link_slow:
        install_link_slow(args, rank, device, injected)
    hog = start_gpu_hog(device, args.slow_duty, args.slow_jitter, args.seed) if slow and args.slow_mode == "gpu-hog" else None
    if slow and args.slow_mode == "cpu-hog":
        hog = start_cpu_hog(rank, args.slow_duty, args.slow_jitter, args.seed)
    opt = get_megatron_optimizer(
        OptimizerConfig(optimizer=args.optimizer, lr=1e-4, bf16=args.bf16,
                        use_distributed_optimizer=args.distributed_optimizer,
                        clip_grad=args.clip_grad),
        chunks,
    )

    from mapp.megatron_hooks.flags import install_from_args

    tracer = install_from_args(args, model=chunks, optimizer=opt)

    scope = start_scope(args, chunks)
    fb = make_forward_backward(args, tracer.tracer)
    delay_s = args.slow_ms / 1e3 if slow and args.slow_mode == "host-sleep" else 0.0
    replica = ps.get_data_parallel_rank()
    data = [batches(args, device, replica, delay_s, injected) for _ in chunks]
    step_s, snapshot_s = [], []
    grads: dict = {}
    profiler = make_profiler(args, rank, device)
    if profiler is not None:
        profiler.start()
    for it in range(args.iterations):
        if device.type == "cuda":
            torch.cuda.synchronize()
        injected.iteration = it
        t0 = time.perf_counter()
        with tracer.iteration(it):
            for c in chunks:
                c.zero_grad_buffer()
            opt.zero_grad()
            losses = fb(
                forward_step_func=forward_step,
                data_iterator=data if args.vpp else data[0],
                model=chunks if args.vpp else chunks[0],
                num_microbatches=args.num_microbatches,
                seq_length=args.seq,
                micro_batch_size=args.micro_batch_size,
                forward_only=False,
            )
            if args.grads_dir:
                save_grads(chunks, os.path.join(args.grads_dir, f"grads-rank{rank}.pt"), it, grads)
            opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        step_s.append(time.perf_counter() - t0)
        if scope is not None:
            t1 = time.perf_counter()
            if scope.after_step(it):   # outside the step's timing: its own figure below
                snapshot_s.append(time.perf_counter() - t1)
        injected.close_iteration()
        if profiler is not None:
            profiler.step()
        if rank == dist.get_world_size() - 1 and losses:
            loss = torch.stack([x["loss"] for x in losses]).mean().item()
            print(f"iteration {it} loss {loss:.4f} step {step_s[-1] * 1e3:.1f} ms", flush=True)

    if profiler is not None:
        profiler.stop()
    if hog is not None:
        hog.terminate()
    tracer.close()
    if scope is not None:
        scope.close()
        if rank == 0 and snapshot_s:
            print(f"scope: {len(snapshot_s)} snapshots, median {statistics.median(snapshot_s) * 1e3:.1f} ms each",
                  flush=True)
    if args.timings_json:
        times = [None] * dist.get_world_size()
        # peak: the CUDA allocator's high-water mark over the whole run (None on CPU)
        peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
        dist.all_gather_object(times, {"step_s": step_s, "injected_s": injected.per_iteration, "peak_bytes": peak})
        if rank == 0:
            with open(args.timings_json, "w") as f:
                json.dump({"step_s": [t["step_s"] for t in times],
                           "injected_s": [t["injected_s"] for t in times],
                           "peak_bytes": [t["peak_bytes"] for t in times]}, f)
    if rank == 0:
        med = statistics.median(step_s[1:] or step_s)
        print(f"done: {args.iterations} iterations, median step {med * 1e3:.1f} ms "
              f"(tp{args.tp} pp{args.pp} vpp{args.vpp or 1} dp{dist.get_world_size() // (args.tp * args.pp)})",
              flush=True)
    if hasattr(fb, "close"):   # DPP's transport says goodbye to its peers while the groups exist
        fb.close()
    leave_distributed()


if __name__ == "__main__":
    main()
    exit_now()
