"""A megatron-core GPT trained with mcore's DDP and its distributed optimizer (ZeRO-1), on CPU/gloo.

What it is
----------
Set up the way a Megatron user does: ``parallel_state.initialize_model_parallel(tp)``, a
``GPTModel`` from the local (no Transformer Engine) layer spec (RoPE, ``--layers`` layers of
``--hidden``), wrapped in megatron-core's ``DistributedDataParallel`` with
``DistributedDataParallelConfig(use_distributed_optimizer=True, overlap_grad_reduce=...,
overlap_param_gather=...)``, an optimizer from ``get_megatron_optimizer(OptimizerConfig(adam,
use_distributed_optimizer=True, clip_grad=...), [model])`` (no Apex/TE here, so mcore falls back to
torch AdamW on each rank's shard), and ``get_forward_backward_func()`` running ``--micro-batches``
microbatches per step. fp32 throughout (bf16 off on CPU). World 4: DP4 by default, ``--tp 2`` gives
TP2 x DP2 (ranks {0,1} and {2,3} are the TP groups).

Data is synthetic but learnable: a fixed random permutation ``perm``; each sequence starts at a
random token and follows ``next = perm[cur]``, with 20% of tokens replaced by noise. Loss starts at
~ln(512) = 6.27 and falls (default run: 6.27 -> ~4.0 in 10 steps). Seeded by (seed, DP rank, step).

Running megatron-core on CPU: mcore makes a few scratch tensors with ``device="cuda"``, sizes its
buffers on ``torch.cuda.current_device()`` and checks that parameters are
``'torch.cuda.FloatTensor'``. ``torch.cuda.current_device`` is pointed at the CPU and the job runs
under a small ``TorchFunctionMode`` (``CudaOnCpu``) that sends ``device="cuda"`` to the CPU and
lets CPU float tensors report the CUDA type name; mcore itself is not patched. gloo in torch 2.13
has ``reduce_scatter_tensor`` / ``all_gather_into_tensor`` (also under ``_coalescing_manager``).

Communication per step (DP group = all 4 ranks, or {0,2}/{1,3} with --tp 2)
---------------------------------------------------------------------------
* forward/backward of M microbatches, gradients accumulated into mcore's contiguous fp32 grad
  buffer (``no_sync`` for all but the last microbatch);
* without ``--overlap-grad-reduce``: after the last backward, ``finalize_model_grads`` ->
  ``finish_grad_sync``: one coalesced ``reduce_scatter_tensor`` per bucket over the DP group
  (``c10d::reduce_scatter_tensor_coalesced_``; gloo runs it as ``gloo:all_reduce``), each rank
  keeping its shard; with it (and ``--bucket-size``), each bucket's reduce-scatter is launched
  asynchronously from the backward hooks as soon as the bucket fills, and waited on at the end;
* optimizer step: grad-norm all-reduce for clipping plus a few small bookkeeping all-reduces
  (``c10d::allreduce_``, ~7 per step), AdamW on the local shard only, then the updated params are
  all-gathered (``c10d::allgather_into_tensor_coalesced_`` / ``gloo:all_gather``) back into the
  full param buffer: at the end of ``optimizer.step()``, or with ``--overlap-param-gather`` lazily,
  bucket by bucket, in the next step's forward pre-hooks;
* with ``--tp 2``: the column/row-parallel linears add all-reduces inside every layer (forward
  and backward) on the TP group, and the vocab-parallel cross-entropy its own all-reduces.

Profiling: ``torch.profiler`` CPU, ``schedule(wait=1, warmup=1, active=steps-2, repeat=1)``,
``prof.step()`` per step, ``record_shapes=--shapes``; user ranges ``sleep``, ``data``,
``data_sleep``, ``forward`` (per microbatch; backward runs inside mcore's schedule),
``slow_device_extra``, ``optimizer``. One file ``trace_rank{R}.json`` per rank in ``--out``.
Rank 0 prints the loss per step and, at the end, every rank's median step time
(``time.perf_counter``, over the traced steps).

Flags
-----
Common: --out DIR (required), --steps N (10), --seed S, --shapes.
Healthy knobs: --tp {1,2}, --layers, --hidden, --heads, --seq, --micro-batch-size,
  --micro-batches, --clip-grad (0 = off), --overlap-grad-reduce, --overlap-param-gather (needs the
  former), --bucket-size (elements; 0 = mcore's default, a single bucket), --lr.
Faults, only on --slow-rank R:
  --factor F        slower device: after each transformer layer's forward, its matmuls (qkv,
                    attention out, MLP fc1, fc2 with the layer's own weights and input) are redone
                    F-1 more times, the fraction part on that fraction of the rows. These matmuls
                    are only ~20-30% of a forward on this small CPU model, so F must be large.
  --sleep-ms MS     slow host: time.sleep in record_function("sleep") before each step.
  --hog             busy neighbour: a (non-daemon) thread doing 384x384 matmuls until the run ends;
                    stopped and joined before exit.
  --data-sleep-ms MS  (family fault) slow input pipeline: the rank's data iterator sleeps before
                    each microbatch (M sleeps per step).
Imbalance, every rank healthy:
  --seq-sigma S     each DP replica's sequence length per step ~ seq * lognormal(0, S) (rounded to
                    8, clamped to [16, 4*seq]), seeded by (seed, DP rank, step).
  --big-rank K --big X  the DP replica holding global rank K uses X times larger microbatches.

Measurements
------------
2-core box shared with another helper's 4-process jobs (load average 12-25 during these runs), so
step times swing +-40% between runs; each fault run came right after a healthy run of the same
knobs. Median step ms (traced steps), max over ranks; defaults hidden 256, 2 layers, seq 64,
mbs 4, 2 microbatches; "ovl" = --overlap-grad-reduce --overlap-param-gather --bucket-size 200000.

  setting                                  healthy  faulty   cost
  fwd 3x r1 (hidden 256)                     386      404     +5%   too small
  fwd 6x r1                                  502      495      0%   (2nd pair: 461 -> 575, +25%;
                                                                     slow_device_extra 194 ms/step)
  tp2, fwd 4x r2                             294      317     +8%   too small
  tp2, fwd 5x r2                             440      619    +41%
  ovl, fwd 6x r0                             493     1113   +126%
  sleep 100 ms r3                            682      588    -14%  (noise swamped it)
  sleep 200 ms r3                            409      513    +26%
  ovl, sleep 150 ms r0                       514      609    +19%
  ovl, sleep 150 ms r0 (2nd pair)            369      514    +39%
  data-sleep 50 ms r2 (x2 microbatches)      342      638    +87%  (noise)
  data-sleep 100 ms r2 (x2)                  491      464     -5%  (2nd pair: 461 -> 490, +6%)
  tp2 mb3, data-sleep 40 ms r1 (x3)          607      759    +25%
  tp2 mb3, data-sleep 60 ms r1 (x3)          681      931    +37%
  hog r3                                     434      496    +15%
  hog r3 (2nd pair)                          422     1126   +167%
  seq-sigma 0.5 (after healthy 502)           -       528     per-replica lengths differ
  tp2, seq-sigma 0.8 (after healthy 440)      -       664
  big-rank 1 --big 2 (after healthy 409)      -       563    +38%
  tp2 mb3, big-rank 2 --big 2 (after 681)     -       598    (noise)
  healthy: tp2 294-440, ovl 369-550, layers 3 hidden 192 no clip 598, tp2 mb3 607-681.

A sleep on one DP rank costs less than its length here: the box is oversubscribed, and while that
rank sleeps the other ranks get its CPU (data-sleep on DP4 stayed under 10% even at 2x100 ms/step);
with --tp 2 the TP partner stalls in every layer's all-reduce, so the same sleep shows clearly.
Trace size: ~8-9 MB per rank by default (10 steps), ~12 MB with --shapes; runs take 20-48 s wall.
"""

import argparse
import logging
import math
import os
import statistics
import threading
import time
import warnings
from datetime import timedelta
from functools import partial

import torch
import torch.distributed as dist
from torch.overrides import TorchFunctionMode
from torch.profiler import ProfilerActivity, profile, record_function, schedule

warnings.filterwarnings("ignore")  # megatron-core warns at import that TE and Apex are missing
logging.disable(logging.WARNING)

from megatron.core import parallel_state, tensor_parallel  # noqa: E402
from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig  # noqa: E402
from megatron.core.distributed import finalize_model_grads  # noqa: E402
from megatron.core.models.gpt import GPTModel  # noqa: E402
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec  # noqa: E402
from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer  # noqa: E402
from megatron.core.pipeline_parallel import get_forward_backward_func  # noqa: E402
from megatron.core.transformer.transformer_config import TransformerConfig  # noqa: E402


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="directory for the per-rank chrome traces")
    ap.add_argument("--steps", type=int, default=10, help="training steps (profiled: wait 1, warmup 1, rest active)")
    ap.add_argument("--seed", type=int, default=1234, help="seed for weights and data")
    ap.add_argument("--shapes", action="store_true", help="record input shapes in the profiler")
    # model / job shape
    ap.add_argument("--tp", type=int, default=1, help="tensor-parallel size (DP is world / tp)")
    ap.add_argument("--layers", type=int, default=2, help="transformer layers")
    ap.add_argument("--hidden", type=int, default=256, help="hidden size")
    ap.add_argument("--heads", type=int, default=4, help="attention heads")
    ap.add_argument("--seq", type=int, default=64, help="sequence length (the median one with --seq-sigma)")
    ap.add_argument("--vocab", type=int, default=512, help="vocabulary size")
    ap.add_argument("--micro-batch-size", type=int, default=4, help="sequences per microbatch")
    ap.add_argument("--micro-batches", type=int, default=2, help="microbatches per step (gradient accumulation)")
    ap.add_argument("--lr", type=float, default=2e-3, help="Adam learning rate")
    ap.add_argument("--clip-grad", type=float, default=1.0, help="global grad-norm clipping (0: off)")
    ap.add_argument("--overlap-grad-reduce", action="store_true",
                    help="DDP: launch each bucket's reduce-scatter from backward hooks as it fills")
    ap.add_argument("--overlap-param-gather", action="store_true",
                    help="dist. optimizer: all-gather updated params lazily in the next forward's pre-hooks")
    ap.add_argument("--bucket-size", type=int, default=0,
                    help="DDP bucket size in elements (0: mcore's default, one bucket for a model this small)")
    # faults (only on --slow-rank)
    ap.add_argument("--slow-rank", type=int, default=-1, help="global rank that gets the fault (-1: none)")
    ap.add_argument("--factor", type=float, default=1.0,
                    help="slow rank: every transformer layer's forward does F times its matmuls")
    ap.add_argument("--sleep-ms", type=float, default=0.0, help="slow rank: time.sleep before each step")
    ap.add_argument("--hog", action="store_true", help="slow rank: a thread doing matmuls all run long")
    ap.add_argument("--data-sleep-ms", type=float, default=0.0,
                    help="slow rank: the data iterator sleeps before each microbatch")
    # imbalance without a fault
    ap.add_argument("--seq-sigma", type=float, default=0.0,
                    help="per-step lognormal(0, S) sequence length per DP replica")
    ap.add_argument("--big-rank", type=int, default=-1,
                    help="the DP replica holding this global rank gets --big times larger microbatches")
    ap.add_argument("--big", type=float, default=1.0, help="batch multiplier for --big-rank's replica")
    args = ap.parse_args()
    if args.overlap_param_gather and not args.overlap_grad_reduce:
        ap.error("mcore needs --overlap-grad-reduce for --overlap-param-gather")
    return args


# --------------------------------------------------------------------------------------------
# megatron-core on a machine without a GPU
# --------------------------------------------------------------------------------------------

class CudaOnCpu(TorchFunctionMode):
    """megatron-core asks for "cuda" in a few places (scratch tensors made with device="cuda",
    a check that parameters are 'torch.cuda.FloatTensor'). Under this mode such requests land on
    the CPU and CPU float tensors report the CUDA type name, so mcore runs unchanged on CPU."""

    @staticmethod
    def _cpu(dev):
        if isinstance(dev, int):
            return "cpu"
        if isinstance(dev, (str, torch.device)) and torch.device(dev).type == "cuda":
            return "cpu"
        return dev

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func is torch.Tensor.cuda:
            return args[0]
        if func is torch.Tensor.type:
            if len(args) == 1 and not kwargs:
                name = func(args[0])
                return name.replace("torch.", "torch.cuda.", 1) if name.count(".") == 1 else name
            if len(args) > 1 and isinstance(args[1], str):
                args = (args[0], args[1].replace("torch.cuda.", "torch."), *args[2:])
        if "device" in kwargs:
            kwargs["device"] = self._cpu(kwargs["device"])
        if func is torch.Tensor.to and len(args) > 1 and isinstance(args[1], (str, torch.device, int)):
            args = (args[0], self._cpu(args[1]), *args[2:])
        return func(*args, **kwargs)


def init_parallel(args):
    dist.init_process_group(backend="gloo", timeout=timedelta(seconds=120))
    torch.cuda.current_device = lambda: torch.device("cpu")  # mcore sizes its buffers "on the current GPU"
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=args.tp,
                                             distributed_timeout_minutes=2)
    # model_parallel_cuda_manual_seed wants CUDA RNG states: seed the CPU generator the same on
    # every rank instead (TP shards are then cut from one master weight); forks are no-ops
    torch.manual_seed(args.seed)
    tensor_parallel.random.initialize_rng_tracker(inference_rng_tracker=True, force_reset=True)


def build(args):
    config = TransformerConfig(
        num_layers=args.layers, hidden_size=args.hidden, num_attention_heads=args.heads,
        tensor_model_parallel_size=args.tp, use_cpu_initialization=True,
        params_dtype=torch.float32, pipeline_dtype=torch.float32, bf16=False, fp16=False,
        hidden_dropout=0.0, attention_dropout=0.0,
        masked_softmax_fusion=False, bias_activation_fusion=False, bias_dropout_fusion=False,
        apply_rope_fusion=False, persist_layer_norm=False, gradient_accumulation_fusion=False)
    model = GPTModel(config=config, transformer_layer_spec=get_gpt_layer_local_spec(),
                     vocab_size=args.vocab, max_sequence_length=4 * args.seq,
                     position_embedding_type="rope")
    ddp_config = DistributedDataParallelConfig(
        grad_reduce_in_fp32=True, use_distributed_optimizer=True,
        overlap_grad_reduce=args.overlap_grad_reduce, overlap_param_gather=args.overlap_param_gather,
        bucket_size=args.bucket_size or None)
    model = DistributedDataParallel(config=config, ddp_config=ddp_config, module=model)
    config.no_sync_func = model.no_sync
    if args.overlap_grad_reduce:
        config.grad_sync_func = model.start_grad_sync
    if args.overlap_param_gather:
        config.param_sync_func = model.start_param_sync
    config.finalize_model_grads_func = finalize_model_grads
    opt_config = OptimizerConfig(
        optimizer="adam", lr=args.lr, weight_decay=0.01, adam_beta1=0.9, adam_beta2=0.95,
        clip_grad=args.clip_grad, bf16=False, fp16=False, params_dtype=torch.float32,
        use_distributed_optimizer=True, overlap_param_gather=args.overlap_param_gather)
    optimizer = get_megatron_optimizer(opt_config, [model])
    return model, config, optimizer


# --------------------------------------------------------------------------------------------
# data: learnable synthetic tokens
# --------------------------------------------------------------------------------------------

def seq_len_for(args, step):
    """This DP replica's sequence length for a step (the same on its TP ranks)."""
    if args.seq_sigma <= 0:
        return args.seq
    g = torch.Generator().manual_seed(args.seed * 1_000_003 + parallel_state.get_data_parallel_rank() * 7919 + step)
    draw = args.seq * math.exp(args.seq_sigma * torch.randn((), generator=g).item())
    return int(min(max(8 * round(draw / 8), 16), 4 * args.seq))


def chain_table(args):
    """powers[t, v] = perm applied t times to token v, for one fixed random permutation."""
    perm = torch.randperm(args.vocab, generator=torch.Generator().manual_seed(args.seed))
    powers = [torch.arange(args.vocab)]
    for _ in range(4 * args.seq):
        powers.append(perm[powers[-1]])
    return torch.stack(powers)


def batches(args, step, mbs, powers, sleep_s):
    """Microbatches of a fixed 'permutation chain' language: each sequence starts at a random
    token and follows next = perm[cur]; 20% of the tokens are replaced by uniform noise (noise
    does not derail the chain). Seeded by (seed, DP rank, step): the TP ranks of a replica see
    the same tokens. The loss starts near ln(vocab) and falls as the model learns perm."""
    seq = seq_len_for(args, step)
    g = torch.Generator().manual_seed(args.seed + 31 * parallel_state.get_data_parallel_rank() + 100_003 * step)
    mask = torch.triu(torch.ones(1, 1, seq, seq, dtype=torch.bool), diagonal=1)
    positions = torch.arange(seq).unsqueeze(0).expand(mbs, -1)
    for _ in range(args.micro_batches):
        if sleep_s:
            with record_function("data_sleep"):
                time.sleep(sleep_s)
        with record_function("data"):
            start = torch.randint(0, args.vocab, (mbs,), generator=g)
            tokens = powers[: seq + 1, start].t()
            noisy = torch.rand(mbs, seq + 1, generator=g) < 0.2
            tokens = torch.where(noisy, torch.randint(0, args.vocab, (mbs, seq + 1), generator=g), tokens)
        yield {"tokens": tokens[:, :-1], "labels": tokens[:, 1:], "position_ids": positions,
               "attention_mask": mask, "loss_mask": torch.ones(mbs, seq)}


def loss_func(loss_mask, output_tensor):
    loss = torch.sum(output_tensor.float().view(-1) * loss_mask.view(-1)) / loss_mask.sum()
    return loss, {"lm loss": loss.detach().clone()}  # the schedule scales loss in place


def forward_step_func(data_iterator, model):
    data = next(data_iterator)
    with record_function("forward"):
        output = model(data["tokens"], data["position_ids"], data["attention_mask"], labels=data["labels"])
    return output, partial(loss_func, data["loss_mask"])


# --------------------------------------------------------------------------------------------
# faults
# --------------------------------------------------------------------------------------------

def slow_forward(layer, factor):
    """A slower device: after each transformer layer's forward, redo its matmuls (qkv, attention
    out, MLP up, MLP down: the layer's own weights and shapes) factor - 1 more times; the
    fraction part as the same matmuls on that fraction of the rows."""
    attn, mlp = layer.self_attention, layer.mlp
    whole, frac = int(factor - 1.0), (factor - 1.0) - int(factor - 1.0)

    def redo(x):
        qkv = torch.matmul(x, attn.linear_qkv.weight.detach().t())
        torch.matmul(qkv[:, : attn.linear_proj.weight.shape[1]], attn.linear_proj.weight.detach().t())
        h = torch.matmul(x, mlp.linear_fc1.weight.detach().t())
        torch.matmul(h, mlp.linear_fc2.weight.detach().t())

    def hook(module, args, kwargs, output):
        x = (args[0] if args else kwargs["hidden_states"]).detach().flatten(0, -2)
        with torch.no_grad(), record_function("slow_device_extra"):
            for _ in range(whole):
                redo(x)
            if frac > 0:
                redo(x[: max(1, round(frac * x.shape[0]))])

    return layer.register_forward_hook(hook, with_kwargs=True)


def start_hog(stop):
    def run():
        a, b = torch.randn(384, 384), torch.randn(384, 384)
        while not stop.is_set():
            a = torch.tanh(a @ b)

    th = threading.Thread(target=run, name="hog")
    th.start()
    return th


# --------------------------------------------------------------------------------------------

def main():
    args = parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    init_parallel(args)
    rank, world = dist.get_rank(), dist.get_world_size()
    with CudaOnCpu():
        model, config, optimizer = build(args)
    n_params = sum(p.numel() for p in model.parameters())

    slow = rank == args.slow_rank
    if slow and args.factor > 1.0:
        for layer in model.module.decoder.layers:
            slow_forward(layer, args.factor)
    sleep_s = args.sleep_ms / 1000.0 if slow else 0.0
    data_sleep_s = args.data_sleep_ms / 1000.0 if slow else 0.0
    big = args.big_rank >= 0 and args.big_rank // args.tp == rank // args.tp  # TP groups are consecutive ranks
    mbs = max(1, round(args.micro_batch_size * args.big)) if big else args.micro_batch_size
    powers = chain_table(args)
    forward_backward = get_forward_backward_func()

    stop = threading.Event()
    hog = start_hog(stop) if slow and args.hog else None
    if rank == 0:
        print(f"[distopt] world={world} tp={args.tp} dp={world // args.tp} params/rank={n_params / 1e6:.2f}M "
              f"layers={args.layers} hidden={args.hidden} seq={args.seq} mbs={args.micro_batch_size} "
              f"x{args.micro_batches} overlap_grad={args.overlap_grad_reduce} "
              f"overlap_param={args.overlap_param_gather} clip={args.clip_grad}", flush=True)

    os.makedirs(args.out, exist_ok=True)
    step_times = []
    prof = profile(activities=[ProfilerActivity.CPU],
                   schedule=schedule(wait=1, warmup=1, active=max(1, args.steps - 2), repeat=1),
                   record_shapes=args.shapes)
    try:
        with CudaOnCpu(), prof:
            dist.barrier()
            for step in range(args.steps):
                t0 = time.perf_counter()
                if sleep_s:
                    with record_function("sleep"):
                        time.sleep(sleep_s)
                model.zero_grad_buffer()
                optimizer.zero_grad()
                seq = seq_len_for(args, step)
                losses = forward_backward(
                    forward_step_func=forward_step_func,
                    data_iterator=batches(args, step, mbs, powers, data_sleep_s),
                    model=[model], num_microbatches=args.micro_batches, seq_length=seq,
                    micro_batch_size=mbs, forward_only=False)
                with record_function("optimizer"):
                    ok, grad_norm, _ = optimizer.step()
                step_times.append(time.perf_counter() - t0)
                if rank == 0:
                    loss = sum(x["lm loss"].item() for x in losses) / len(losses)
                    print(f"step {step:3d} loss {loss:.4f} grad_norm {grad_norm:.3f} seq {seq} "
                          f"t {1000 * step_times[-1]:.1f} ms", flush=True)
                prof.step()
    finally:
        stop.set()
        if hog is not None:
            hog.join()

    prof.export_chrome_trace(os.path.join(args.out, f"trace_rank{rank}.json"))
    traced = step_times[2:] if len(step_times) > 2 else step_times
    med = statistics.median(traced)
    allmed = [None] * world
    dist.all_gather_object(allmed, med)
    if rank == 0:
        print("median step ms per rank: " + " ".join(f"r{r}={1000 * m:.1f}" for r, m in enumerate(allmed)),
              flush=True)
    dist.barrier()
    parallel_state.destroy_model_parallel()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
