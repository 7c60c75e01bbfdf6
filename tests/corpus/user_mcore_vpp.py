"""megatron-core GPT pretraining with the interleaved (virtual pipeline) 1F1B schedule, on CPU (gloo).

Measured figures: MEASURED at the end of this docstring.

What it is: the loop a Megatron user writes around megatron-core for interleaved pipelining,
run on CPUs with gloo. TP is 1; PP is --pp, the virtual pipeline size --vpp, DP what is left
of the world size (Megatron's rank order tp-cp-ep-dp-pp: with 4 ranks, --pp 2, ranks 0,1 are
pipeline stage 0 of replicas 0,1 and ranks 2,3 stage 1).

- ``parallel_state.initialize_model_parallel(pipeline_model_parallel_size=P,
  virtual_pipeline_model_parallel_size=V)`` (None when --vpp 1, which gives plain 1F1B).
- Model chunks as Megatron's ``get_model`` builds them: for each virtual stage ``vp`` of this
  rank, ``set_virtual_pipeline_model_parallel_rank(vp)`` and a ``GPTModel(vp_stage=vp)`` from
  the local (no Transformer Engine) layer spec, ``pre_process`` only on the first virtual stage
  of the first pipeline rank, ``post_process`` only on the last virtual stage of the last one.
  The ``--layers`` decoder layers are split evenly over the P x V chunks; chunk ``vp`` of
  pipeline rank ``p`` is virtual stage ``vp * P + p`` (with P=2, V=2: rank 0 holds stages 0 and
  2, rank 1 stages 1 and 3). Each chunk is wrapped in mcore ``DistributedDataParallel``
  (bucketing only on chunk 0, as Megatron does); ``config.no_sync_func`` is the list of the
  chunks' ``no_sync``, ``config.finalize_model_grads_func`` is mcore's ``finalize_model_grads``
  (DP all-reduce of each chunk's grad buffer after the flush).
- The optimizer is megatron's ``get_megatron_optimizer(OptimizerConfig(adam, clip_grad=1.0),
  chunks)`` (an FP32Optimizer over torch AdamW: no Apex/TE here), whose step computes the grad
  norm with an all-reduce over the model-parallel (pipeline) group and clips.
- ``get_forward_backward_func()`` (interleaved when V > 1) with ``model=[chunks]``, one data
  iterator per chunk, ``num_microbatches`` (a multiple of P), ``seq_length``,
  ``micro_batch_size``, ``forward_only=False``. The schedule's p2p goes through
  ``torch.distributed.isend/irecv`` on the pipeline group (``batch_p2p_comm=False``).

Data: random token sequences with a learnable rule, ``next = (5 * prev + 17) mod vocab`` with
10% of the tokens replaced by noise, drawn from a generator seeded by (seed, DP rank, step,
microbatch); every chunk of every stage of a replica draws the same microbatches (the first
stage uses the tokens, the last the labels, all of them the attention mask). The loss falls
from ln(vocab) ~ 6.2 to ~5.4 in 8 steps (lr 3e-3).

What did not work on CPU as shipped, and the way around it:

- megatron-core allocates a few tensors with ``device="cuda"`` by name (the schedules' token
  counter, FP32Optimizer's loss scale, the local l2-norm fallback and clip_grads): those modules
  get a ``torch`` whose ``tensor/zeros/ones/empty`` drop a "cuda" device; everything else is the
  real torch. ``torch.cuda.current_device`` returns the CPU device.
- ``clip_grad_by_total_norm_fp32`` asserts that grads are ``torch.cuda.FloatTensor``: the
  optimizer module gets a CPU version (the same scaling by max_norm / total_norm when < 1); the
  grad norm itself (with its all-reduce) is still mcore's.
- ``model_parallel_cuda_manual_seed`` needs CUDA RNG states: every rank seeds the default
  generator and the RNG tracker is the inference (no-op) one; dropout is 0.
- tied embeddings are synced between the first and last stage through a ``.cuda()`` copy:
  ``share_embeddings_and_output_weights=False`` (untied output layer).
- ``batch_p2p_comm=True`` ends with ``torch.cuda.synchronize()``: it is off (plain isend/irecv).
- the fused softmax/bias/rope kernels are off (``*_fusion=False``).

Profiling: ``torch.profiler.profile(activities=[CPU], schedule(wait=1, warmup=1,
active=steps-2))``, profiler defaults otherwise, ``prof.step()`` after each step, one chrome
trace per rank ``vpp-rank<R>.json`` in --out. The last pipeline stage of replica 0 prints the
loss and the step time every step and the mean over the traced steps; every rank prints one
line at the end with its mean step and its process CPU time per traced step.

Faults, only on ``--slow-rank R`` (a global rank):

- ``--factor F``: a slower device. At start the slow rank times one of its decoder layers'
  forward and forward+backward in CPU time (``time.thread_time``) on a dummy microbatch, which
  gives ``r = (fwd + bwd) / fwd`` (about 2.6-3.2 here). Then in every forward of each of its
  decoder layers, after the layer's MLP, it runs MLP-shaped matmuls (``x @ W1^T`` and
  ``h @ W2^T`` with the layer's own fc1/fc2 weights, under ``no_grad``, results thrown away)
  for ``(F - 1) * r * t`` CPU seconds, ``t`` the CPU time that layer's forward has taken so
  far. So each layer's forward + backward costs about F times as much CPU as on a peer; the
  embedding, output layer, loss, optimizer and communication are not scaled (at the default
  size the decoder layers are ~75-85% of a stage's compute).
- ``--hog``: a daemon thread on the slow rank multiplies 64x64 matrices in a loop for the
  whole run (it competes for the CPU and the GIL).
- ``--sleep-ms MS``: the slow rank sleeps on its host before each step.
- ``--data-sleep-ms MS``: the slow rank's data iterators sleep before each microbatch, in the
  chunks that read data (the first virtual stage of pipeline rank 0, which reads tokens, and
  the last virtual stage of the last pipeline rank, which reads labels).

Imbalance without a fault: ``--last-heavier K`` gives the last virtual stage (the last chunk of
the last pipeline rank, the one with the output layer and loss) K more decoder layers, through
mcore's ``pipeline_model_parallel_layout``; ``--vocab`` makes the output layer heavier.

    OMP_NUM_THREADS=1 python -m torch.distributed.run --standalone --nproc_per_node=4 \\
        tests/corpus/user_mcore_vpp.py --out DIR                       # PP2 x VPP2 x DP2
    ... --nproc_per_node=4 tests/corpus/user_mcore_vpp.py --out DIR --pp 4 --vpp 2   # DP1
    ... --vpp 1                                                         # plain 1F1B

MEASURED (this 2-core machine, shared with other work, 4 processes, defaults: 8 layers,
hidden 128, 4 heads, seq 64, micro-batch 4, 4 microbatches, vocab 512, 8 steps; one run of each,
mean step of rank 0 over the 6 traced steps): PP2 x VPP2 x DP2 459 ms, with rank 1's decoder
layers 2x 627 ms; PP4 x VPP2 293 ms, with 2 more layers on the last virtual stage 267 ms (one
run each: the noise of shared cores is as large as the difference).
"""

import argparse
import logging
import os
import threading
import time
import types
import warnings
from functools import partial

import torch
import torch.distributed as dist

warnings.filterwarnings("ignore")  # TE / Apex missing, deprecations
logging.disable(logging.WARNING)

import megatron.core.optimizer.clip_grads as mc_clip_grads  # noqa: E402
import megatron.core.optimizer.optimizer as mc_optimizer  # noqa: E402
import megatron.core.utils as mc_utils  # noqa: E402
from megatron.core import parallel_state, tensor_parallel  # noqa: E402
from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig  # noqa: E402
from megatron.core.distributed import finalize_model_grads  # noqa: E402
from megatron.core.models.gpt import GPTModel  # noqa: E402
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec  # noqa: E402
from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer  # noqa: E402
from megatron.core.pipeline_parallel import get_forward_backward_func  # noqa: E402
from megatron.core.pipeline_parallel import schedules  # noqa: E402
from megatron.core.transformer.transformer_config import TransformerConfig  # noqa: E402


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="directory for vpp-rank<R>.json")
    ap.add_argument("--pp", type=int, default=2, help="pipeline-parallel size (DP = world / pp)")
    ap.add_argument("--vpp", type=int, default=2, help="model chunks per pipeline rank (1: plain 1F1B)")
    ap.add_argument("--steps", type=int, default=8, help="steps (profiled: wait 1, warmup 1, rest active)")
    ap.add_argument("--layers", type=int, default=8, help="decoder layers in all, split over pp*vpp chunks")
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--micro-batch-size", type=int, default=4)
    ap.add_argument("--num-microbatches", type=int, default=4, help="a multiple of --pp when --vpp > 1")
    ap.add_argument("--vocab", type=int, default=512)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--slow-rank", type=int, default=-1, help="global rank with the fault (-1: none)")
    ap.add_argument("--factor", type=float, default=1.0, help="slow rank: decoder compute x F")
    ap.add_argument("--hog", action="store_true", help="slow rank: a busy 64x64-matmul thread")
    ap.add_argument("--sleep-ms", type=float, default=0.0, help="slow rank: host sleep before each step")
    ap.add_argument("--data-sleep-ms", type=float, default=0.0, help="slow rank: sleep before each microbatch")
    ap.add_argument("--last-heavier", type=int, default=0, help="K more layers on the last virtual stage")
    args = ap.parse_args()
    chunks = args.pp * args.vpp
    if args.layers % chunks:
        ap.error(f"--layers {args.layers} must split evenly over pp*vpp = {chunks} chunks")
    if args.vpp > 1 and (args.pp < 2 or args.num_microbatches % args.pp):
        ap.error("interleaving needs --pp >= 2 and --num-microbatches a multiple of --pp")
    if args.last_heavier and args.pp < 2:
        ap.error("--last-heavier needs --pp > 1")
    return args


# ----------------------------------------------------------------------------- CPU shims

def _cpu_torch():
    """A stand-in for the ``torch`` module that drops device="cuda" in a few factories."""
    def strip(fn):
        def call(*a, device=None, **kw):
            if device is not None and "cuda" not in str(device):
                kw["device"] = device
            return fn(*a, **kw)
        return call

    mod = types.ModuleType("torch_on_cpu")
    mod.__getattr__ = lambda name: getattr(torch, name)
    for name in ("tensor", "zeros", "ones", "empty"):
        setattr(mod, name, strip(getattr(torch, name)))
    return mod


@torch.no_grad()
def clip_grads_cpu(parameters, max_norm, total_norm, use_decoupled_grad=False):
    """mcore's clip_grad_by_total_norm_fp32 asserts torch.cuda.FloatTensor grads: the same on CPU."""
    coeff = max_norm / (total_norm + 1.0e-6)
    if coeff < 1.0:
        for p in parameters:
            if p.grad is not None:
                p.grad.mul_(coeff)


def cpu_shims():
    torch.cuda.current_device = lambda: torch.device("cpu")
    shim = _cpu_torch()
    for module in (schedules, mc_optimizer, mc_clip_grads, mc_utils):
        module.torch = shim
    mc_optimizer.clip_grad_by_total_norm_fp32 = clip_grads_cpu


# ----------------------------------------------------------------------------- model

def init_parallel(args):
    dist.init_process_group(backend="gloo")
    parallel_state.initialize_model_parallel(
        tensor_model_parallel_size=1, pipeline_model_parallel_size=args.pp,
        virtual_pipeline_model_parallel_size=args.vpp if args.vpp > 1 else None)
    torch.manual_seed(args.seed)
    tensor_parallel.random.initialize_rng_tracker(inference_rng_tracker=True, force_reset=True)


def layer_layout(args):
    """Decoder layers per virtual stage (stage index = vp * pp + pp_rank), as mcore's layout."""
    per = args.layers // (args.pp * args.vpp)
    stages = [["decoder"] * per for _ in range(args.pp * args.vpp)]
    stages[-1] += ["decoder"] * args.last_heavier
    stages[0].insert(0, "embedding")
    stages[-1].append("loss")
    return stages


def build_chunks(args):
    pp, vpp = args.pp, args.vpp
    layout = layer_layout(args) if args.last_heavier else None
    config = TransformerConfig(
        num_layers=args.layers + args.last_heavier, hidden_size=args.hidden,
        num_attention_heads=args.heads, pipeline_model_parallel_size=pp,
        virtual_pipeline_model_parallel_size=vpp if vpp > 1 else None,
        pipeline_model_parallel_layout=layout,
        use_cpu_initialization=True, pipeline_dtype=torch.float32, params_dtype=torch.float32,
        hidden_dropout=0.0, attention_dropout=0.0,
        masked_softmax_fusion=False, bias_activation_fusion=False, bias_dropout_fusion=False,
        apply_rope_fusion=False, persist_layer_norm=False, gradient_accumulation_fusion=False,
        batch_p2p_comm=False)
    ddp_config = DistributedDataParallelConfig(overlap_grad_reduce=False, use_distributed_optimizer=False)
    raw = []
    for vp in range(vpp):
        stage = vp if vpp > 1 else None
        if vpp > 1:
            parallel_state.set_virtual_pipeline_model_parallel_rank(vp)
        gpt = GPTModel(
            config=config, transformer_layer_spec=get_gpt_layer_local_spec(),
            vocab_size=args.vocab, max_sequence_length=args.seq,
            pre_process=parallel_state.is_pipeline_first_stage(ignore_virtual=False, vp_stage=stage),
            post_process=parallel_state.is_pipeline_last_stage(ignore_virtual=False, vp_stage=stage),
            share_embeddings_and_output_weights=False, vp_stage=stage)
        raw.append(gpt)
    if vpp > 1:
        parallel_state.set_virtual_pipeline_model_parallel_rank(0)
    return config, ddp_config, raw


def wrap_chunks(config, ddp_config, raw):
    chunks = [DistributedDataParallel(config=config, ddp_config=ddp_config, module=m,
                                      disable_bucketing=(i > 0))
              for i, m in enumerate(raw)]
    config.no_sync_func = [c.no_sync for c in chunks]
    if len(chunks) == 1:
        config.no_sync_func = config.no_sync_func[0]
    config.finalize_model_grads_func = finalize_model_grads
    return chunks


# ----------------------------------------------------------------------------- faults

class SlowDevice:
    """Extra MLP-shaped matmuls after the MLP of each decoder layer of this rank, under no_grad.

    ``per_forward`` CPU seconds are burnt in every layer forward. It is 0 until ``calibrate``:
    the CPU time (``time.thread_time``, so waits and other processes don't count) of a healthy
    step of this rank, times (F - 1), spread over the step's layer forwards."""

    def __init__(self, layers, factor, num_microbatches):
        self.layers, self.factor = layers, factor
        self.forwards_per_step = len(layers) * num_microbatches
        self.per_forward = 0.0
        for layer in layers:
            layer.mlp.register_forward_hook(self.burn)

    def calibrate(self, step_cpu_s):
        self.per_forward = (self.factor - 1.0) * step_cpu_s / self.forwards_per_step
        return self.per_forward

    def burn(self, mlp, inputs, output):
        if self.per_forward <= 0:
            return
        w1 = mlp.linear_fc1.weight.detach()       # [ffn, hidden]
        w2 = mlp.linear_fc2.weight.detach()       # [hidden, ffn]
        x = inputs[0].detach().reshape(-1, w1.shape[1])
        until = time.thread_time() + self.per_forward
        with torch.no_grad():
            while time.thread_time() < until:
                h = x @ w1.t()
                if time.thread_time() < until:
                    _ = h @ w2.t()


class Hog(threading.Thread):
    """A busy daemon thread: 64x64 matmuls in a loop until stopped."""

    def __init__(self):
        super().__init__(daemon=True)
        self.stop = threading.Event()

    def run(self):
        a, b = torch.randn(64, 64), torch.randn(64, 64)
        while not self.stop.is_set():
            a = torch.tanh(a @ b)


# ----------------------------------------------------------------------------- data

def microbatches(args, step, sleep_s):
    """This replica's microbatches of one step: next = (5 * prev + 17) mod vocab, 10% noise."""
    dp = parallel_state.get_data_parallel_rank()
    b, n, v = args.micro_batch_size, args.seq + 1, args.vocab
    # x_t = A_t * x_0 + B_t (mod v): A_t = 5^t, B_t = 17 (1 + 5 + ... + 5^(t-1))
    a, c, coeffs = 1, 0, []
    for _ in range(n):
        coeffs.append((a, c))
        a, c = (5 * a) % v, (5 * c + 17) % v
    A = torch.tensor([x for x, _ in coeffs]).unsqueeze(0)
    B = torch.tensor([y for _, y in coeffs]).unsqueeze(0)
    mask = torch.triu(torch.ones(1, 1, args.seq, args.seq, dtype=torch.bool), diagonal=1)
    positions = torch.arange(args.seq).unsqueeze(0).expand(b, -1)
    for mb in range(args.num_microbatches):
        if sleep_s:
            time.sleep(sleep_s)
        g = torch.Generator().manual_seed(((args.seed * 1009 + dp) * 10007 + step) * 101 + mb)
        seq = (A * torch.randint(0, v, (b, 1), generator=g) + B) % v
        noise = torch.rand(b, n, generator=g) < 0.1
        seq = torch.where(noise, torch.randint(0, v, (b, n), generator=g), seq)
        yield {"tokens": seq[:, :-1], "labels": seq[:, 1:], "position_ids": positions,
               "attention_mask": mask, "loss_mask": torch.ones(b, args.seq)}


def loss_func(loss_mask, output_tensor):
    loss = torch.sum(output_tensor.float().view(-1) * loss_mask.view(-1)) / loss_mask.sum()
    # the schedule divides the returned loss by num_microbatches in place: report a copy
    return loss, {"lm loss": loss.detach().clone()}


def forward_step(data_iterator, model):
    batch = next(data_iterator)
    output = model(batch["tokens"], batch["position_ids"], batch["attention_mask"], labels=batch["labels"])
    return output, partial(loss_func, batch["loss_mask"])


# ----------------------------------------------------------------------------- main

def main():
    args = parse_args()
    cpu_shims()
    init_parallel(args)
    rank = dist.get_rank()
    slow = rank == args.slow_rank
    pp_rank = parallel_state.get_pipeline_model_parallel_rank()
    dp_rank = parallel_state.get_data_parallel_rank()
    reporter = pp_rank == args.pp - 1 and dp_rank == 0

    config, ddp_config, raw = build_chunks(args)
    device = None
    if slow and args.factor > 1.0:
        device = SlowDevice([layer for m in raw for layer in m.decoder.layers], args.factor,
                            args.num_microbatches)
    chunks = wrap_chunks(config, ddp_config, raw)
    optimizer = get_megatron_optimizer(
        OptimizerConfig(optimizer="adam", lr=args.lr, weight_decay=0.01, clip_grad=1.0,
                        use_distributed_optimizer=False), chunks)
    forward_backward = get_forward_backward_func()
    hog = None
    if slow and args.hog:
        hog = Hog()
        hog.start()
    data_sleep = args.data_sleep_ms / 1000.0 if slow else 0.0
    reads_data = [m.pre_process or m.post_process for m in raw]

    os.makedirs(args.out, exist_ok=True)
    trace = os.path.join(args.out, f"vpp-rank{rank}.json")
    times, cpu, main_cpu = [], [], []
    with torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU],
            schedule=torch.profiler.schedule(wait=1, warmup=1, active=max(1, args.steps - 2)),
            on_trace_ready=lambda p: p.export_chrome_trace(trace)) as prof:
        for step in range(args.steps):
            t0, c0, th0 = time.perf_counter(), time.process_time(), time.thread_time()
            if slow and args.sleep_ms > 0:
                time.sleep(args.sleep_ms / 1000.0)
            for c in chunks:
                c.zero_grad_buffer()
            optimizer.zero_grad()
            iters = [microbatches(args, step, data_sleep if reads else 0.0) for reads in reads_data]
            losses = forward_backward(
                forward_step_func=forward_step, data_iterator=iters if len(iters) > 1 else iters[0],
                model=chunks, num_microbatches=args.num_microbatches, seq_length=args.seq,
                micro_batch_size=args.micro_batch_size, forward_only=False)
            ok, grad_norm, _ = optimizer.step()
            dt = time.perf_counter() - t0
            if device is not None and step == 1:   # step 1: healthy, profiler warming up
                healthy = time.thread_time() - th0
                burn = device.calibrate(healthy)
                print(f"[rank {rank}] slow x{args.factor}: healthy step {1000 * healthy:.1f} ms CPU, "
                      f"from step 2 {1000 * burn:.2f} ms extra in each of {device.forwards_per_step} "
                      f"layer forwards a step", flush=True)
            times.append(dt)
            cpu.append(time.process_time() - c0)
            main_cpu.append(time.thread_time() - th0)
            if reporter:
                loss = sum(d["lm loss"].item() for d in losses) / len(losses)
                print(f"step {step}  loss {loss:.4f}  grad-norm {float(grad_norm):.3f}  "
                      f"step {dt * 1000:.1f} ms", flush=True)
            prof.step()
    traced = times[2:] or times
    cpu_traced = cpu[2:] or cpu
    main_traced = main_cpu[2:] or main_cpu
    if reporter:
        print(f"mean step over traced steps: {1000 * sum(traced) / len(traced):.1f} ms", flush=True)
    print(f"[rank {rank} pp{pp_rank} dp{dp_rank}] mean step {1000 * sum(traced) / len(traced):.1f} ms, "
          f"cpu {1000 * sum(cpu_traced) / len(cpu_traced):.1f} ms/step "
          f"(main thread {1000 * sum(main_traced) / len(main_traced):.1f})", flush=True)
    dist.barrier()
    time.sleep(0.2)
    if hog is not None:
        hog.stop.set()
        hog.join()
    parallel_state.destroy_model_parallel()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
