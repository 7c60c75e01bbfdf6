"""Small Mixture-of-Experts GPT trained with megatron-core: a hand-written "simple mcore train
loop" with expert parallelism, run on CPU with gloo.

Model: megatron-core `GPTModel` from the local (non-Transformer-Engine) layer spec
`get_gpt_layer_local_spec(num_experts=8, moe_grouped_gemm=False)`: 2 transformer layers, hidden
128, 4 heads, every layer's MLP is an MoE layer with 8 experts (SequentialMLP of plain megatron
MLPs, expert FFN 512, GELU), top-2 softmax router, Switch-style load-balancing aux loss
(`moe_router_load_balancing_type="aux_loss"`, `moe_aux_loss_coeff=1e-2`, attached to the router
probs by megatron's MoEAuxLossAutoScaler), learned absolute positions, tied embedding / output
layer, vocab 1024, no dropout, fp32.

Data: synthetic "counting" sequences, token[i] = (start + i*stride) mod V with random start and
stride in 1..7 and 5% random noise tokens, drawn per (seed, rank, step); next-token LM loss
(megatron's vocab-parallel cross entropy, mean over tokens). Micro-batch 4 x seq 128 per rank,
one micro-batch per step. The LM loss goes ~7.0 -> ~2.6 in 80 steps; rank 0 prints the LM loss,
the mean per-layer load-balancing loss (1.0 = balanced) and the step time each step.

Parallelism (4 ranks): TP=1, PP=1, `initialize_model_parallel(expert_model_parallel_size=EP)`.
Default EP=4: each rank holds 2 of the 8 experts; attention, embeddings, norms and routers are
data-parallel over all 4 ranks (DP=4), expert weights have expert-DP=1. `--ep 2`: EP groups
{0,1} and {2,3}, 4 experts per rank, expert weights replicated in pairs (expert-DP=2).
The model is wrapped in megatron's `DistributedDataParallel` (`DistributedDataParallelConfig`,
contiguous fp32 grad buffer, grads land in `param.main_grad`); the optimizer is plain
`torch.optim.AdamW` over the same params with `p.grad = p.main_grad` (megatron's own optimizer
and `get_forward_backward_func` schedule hard-code `device="cuda"` tensors, so the step is
written by hand: forward -> loss -> backward -> `finalize_model_grads([model])` -> AdamW).

Communication per step, per MoE layer, `moe_token_dispatcher_type="alltoall"` (dropless):
all-gather of the per-expert token counts over the EP group (to build the split sizes), then
`all_to_all_single` with uneven splits to send tokens to the ranks owning their experts, local
expert MLPs, and an `all_to_all_single` back (the backward does the two all-to-alls in
reverse). After backward, `finalize_model_grads` -> DDP `finish_grad_sync`: all-reduce of the
dense grad buffer over DP (4 ranks) and of the expert grad buffer over expert-DP (a no-op at
EP=4, pairs at EP=2). With `--overlap-grad-reduce` the DDP grad buffer is split into buckets whose
all-reduces are launched asynchronously from backward hooks. (Megatron's vocab-parallel cross
entropy also issues 3 all-reduces per step over the 1-rank TP group.) In the traces the
collectives appear as `c10d::alltoall_base_` (in `_AllToAll`), `c10d::_allgather_base_` (in
`_GatherFromSequenceParallelRegion`), `c10d::allreduce_coalesced_` (DDP, in `finalize_grads`) on
the main thread, which blocks in them, and as `gloo:all_to_all` / `gloo:all_gather` /
`gloo:all_reduce` on gloo's `pt_gloo_runloop` threads.

Why alltoall and not allgather: both run on CPU; allgather needs no dispatcher patch, but it
all-gathers equal-sized token blocks from every EP rank, so it cannot run with per-rank different
token counts (`--big-rank`, `--seq-sigma` crash it in gloo); alltoall is also what MoE training
normally uses. `--dispatcher allgather` is kept as a healthy variant.

What it took to run megatron-core 0.16.1 MoE on CPU/gloo (all in this file, top of module):
  1. torch.cuda stand-ins (torch is patched, megatron is not): megatron calls
     `torch.cuda.current_device()` for the DDP grad buffer, the router weight
     (TopKRouter.gating moves a CPU weight to it) and the all-to-all output; the alltoall dispatcher
     creates a side `torch.cuda.Stream()` for its device->host copy of the split sizes. So
     `torch.cuda.current_device` returns "cpu" and `Stream`/`current_stream`/`stream` are no-op
     host objects.
  2. `tensor_parallel.model_parallel_cuda_manual_seed(seed, inference_rng_tracker=True)`: a
     public option that gives megatron's pass-through RNG tracker; the CUDA one needs CUDA RNG
     states and attention dropout forks it on every forward (dropout is 0 here anyway).
  3. megatron bug: without Transformer Engine, `moe_utils.te_general_gemm` is never defined, but
     the router's RouterGatingLinearFunction checks `te_general_gemm is not None` -> NameError.
     Fix: `megatron.core.transformer.moe.moe_utils.te_general_gemm = None` (a missing name set to
     the value the non-TE branch means; router then uses torch.mm).
  4. alltoall on CPU: MoEAlltoAllTokenDispatcher converts its split sizes to host numpy via
     `maybe_move_tensor_to_cpu(t, as_numpy=True)`, which only acts on CUDA tensors, so on CPU
     the splits stay tensors and gloo's `all_to_all_single` raises "incompatible function
     arguments". Fix: the name `maybe_move_tensor_to_cpu` in
     `megatron.core.transformer.moe.token_dispatcher` is wrapped so a host tensor also becomes
     numpy when as_numpy=True (exactly what the GPU path hands to all_to_all_single).
  Nothing else in megatron is touched; `gradient_accumulation_fusion=False`,
  `use_cpu_initialization=True`, `bias_dropout_fusion=False` are ordinary config options.

Profiling: torch.profiler, CPU activity, schedule(wait=1, warmup=1, active=steps-2),
record_shapes only with --shapes, `prof.step()` once per step, record_function ranges
`get_batch`, `forward` (model forward + loss mean), `backward`, `finalize_grads` (DDP grad
all-reduce), `optimizer_step`. Each rank writes `trace_rank{R}.json` to --out (nothing else).
Step time = wall time of one loop iteration before prof.step(), median over steps 2.. per rank,
printed by rank 0 at the end with the tokens/step each rank's local experts processed.

Run: OMP_NUM_THREADS=1 python -m torch.distributed.run --standalone --nproc_per_node=4 \
         user_mcore_moe.py --out DIR [flags]

Flags (defaults):
  --out DIR            required; per-rank chrome traces go here
  --steps 10           training steps (8 traced)
  --seed 1234          data / init seed
  --shapes             record input shapes in the profiler
  --ep 4               expert-model-parallel size (4 or 2; 8 experts split over it)
  healthy variants:
  --hidden 128         hidden size (attention, router, expert input)
  --layers 2           transformer (MoE) layers
  --mbs 4              micro-batch per rank (seq stays 128)
  --dispatcher alltoall  or allgather (equal token counts only)
  --overlap-grad-reduce  bucketed async DDP grad all-reduce during backward
  (also --heads 4 --experts 8 --topk 2 --expert-ffn 512 --vocab 1024 --seq 128
   --aux-loss-coeff 0.01 --lr 3e-3)
  faults, on --slow-rank R only (default -1 = none):
  --factor F           slower device: every megatron Linear (qkv, attn proj, expert fc1/fc2,
                       output layer) redoes its forward matmul F-1 more times (fractional part
                       on that fraction of the rows), results discarded, no grad
  --expert-factor F    same, but only the expert MLPs' fc1/fc2 (slow expert path only)
  --sleep-ms MS        time.sleep(MS) at the start of every step (before get_batch)
  --hog                daemon thread "noisy-neighbour" doing 512x512 matmuls all run long
  imbalance, no fault:
  --hot-expert E --hot P  a forward pre-hook on every router adds, for a random fraction P of
                       tokens, a vector d with d @ W_router^T = e_E times 20 to the router input,
                       i.e. +20 on expert E's router logit: those tokens always pick E, so the
                       rank owning E (E // (8/EP)) gets more tokens. The aux loss rises (~1.8 at
                       P=0.5) but the bias is re-solved each step, so it stays hot.
  --big-rank K --big X rank K's sequences are X times longer (seq 128*X, max 512)
  --seq-sigma S        every rank's seq = 128 * lognormal(0, S), seeded by (seed, rank, step),
                       clipped to [8, 512]

Measurements: median step time per rank (ms, rank 0..3, own timing, steps 2.. of
--steps 16), each fault run next to the healthy runs just before/after it. CAVEAT: another agent
was running its jobs on this 2-core box the whole time (load average 9-22), so the healthy
baseline itself wandered between 185 and 433 ms from run to run; only changes well beyond ~30%
are trustworthy. Wall time per run (startup + 16 steps + trace export) 18-39 s; default 10 steps
17-30 s. Faults on rank 2 (with EP=4 rank 2 owns experts 4,5).

  run                          rank0  rank1  rank2  rank3   healthy neighbours   change
  healthy                      268    266    271    271
  --factor 2         (A)       357    365    367    327     268 / 296            +25..35%
  --factor 2         (B)       312    321    318    306     434(!) / 300         ~+5%
  --factor 4                   308    314    322    320     296 / 280            ~+10%
  --expert-factor 4  (A)       328    325    340    326     280 / 258            ~+20%
  --expert-factor 4  (B)       299    307    316    307     434(!) / 300         ~+3%
  --sleep-ms 50      (A)       544    541    532    609     258 / 284            +100% (load spike?)
  --sleep-ms 50      (B)       293    300    296    281     434(!) / 300         ~0%
  --hog                        758    742    770    770     284 / 284            +170%
  --hot-expert 4 --hot 0.6     324    320    332    336     284 / 261            ~+20%
  --big-rank 2 --big 2         334    333    323    343     261 / 189            +30%..
  --seq-sigma 0.6              252    262    264    255     189 / 196            ~+35%
  single runs of --steps 10 in a first sweep (baseline 250-327 there, load 8-17):
  --factor 1.5 ~0%, --expert-factor 2 ~0%, --sleep-ms 20 ~0%, --hot 0.3 ~0%, --big 1.5 ~0%,
  --seq-sigma 0.3 ~0%, --ep 2 256-285, --ep 2 --factor 2 on rank 2 239-256 (~0%),
  healthy variants: --layers 3 371-378, --mbs 2 219-278, --dispatcher allgather 264-320,
  --overlap-grad-reduce 357-368 (load 15-16 at the time).
  Reading: a >= 10% job slowdown is clear for --hog, --big 2, --seq-sigma 0.6, --hot 0.6 and
  probably --factor >= 2-4 / --expert-factor 4; --sleep-ms <= 50, --factor 1.5, --hot 0.3 are
  within the noise here. Every rank's step time moves together (the per-layer all-to-alls
  synchronise the ranks every layer), so the slowed rank is not the slowest by its own step time:
  it shows in the traces as less time blocked in `_AllToAll`/`_GatherFromSequenceParallelRegion`
  than its peers (e.g. --hot 0.6: the hot rank's local experts process 3622 tokens/step vs ~1520
  on the others, and its aten::mm time is ~2x theirs, while the others wait in `_AllToAll`).
  Note that 4 processes share 2 cores: a rank sleeping or blocked in gloo frees the CPU for its
  peers, so a sleep costs less than its length, and extra compute on one rank costs less than its
  CPU time.
"""

import argparse
import contextlib
import math
import os
import statistics
import threading
import time
import warnings
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile, record_function, schedule


# --------------------------------------------------------------------------------------
# CPU stand-in for the few torch.cuda calls megatron-core makes unconditionally.
# --------------------------------------------------------------------------------------
class _HostStream:
    """Stand-in for a CUDA stream on a CPU-only build: host ops are synchronous, so waits and
    events are no-ops and every 'stream' is the same one."""

    def wait_stream(self, other):
        pass

    def record_event(self, event=None):
        return self

    def synchronize(self):
        pass

    def __eq__(self, other):
        return isinstance(other, _HostStream)

    def __hash__(self):
        return 0


def install_cpu_cuda_shim():
    """megatron-core calls a few torch.cuda APIs unconditionally: `torch.cuda.current_device()`
    as the device of the DDP grad buffer / router weight / all-to-all output, and the alltoall
    token dispatcher keeps a side `torch.cuda.Stream` for its device->host copy of the split
    sizes.  On a CPU-only torch these raise, so point them at the host."""
    if torch.cuda.is_available():
        return
    host = _HostStream()
    torch.cuda.current_device = lambda: "cpu"
    torch.cuda.Stream = lambda *a, **k: host
    torch.cuda.current_stream = lambda *a, **k: host
    torch.cuda.stream = lambda s=None: contextlib.nullcontext()


warnings.filterwarnings("ignore", message=".*Transformer Engine and Apex are not installed.*")
warnings.filterwarnings("ignore", category=FutureWarning)
install_cpu_cuda_shim()

from megatron.core import parallel_state, tensor_parallel  # noqa: E402
from megatron.core.distributed import (  # noqa: E402
    DistributedDataParallel,
    DistributedDataParallelConfig,
    finalize_model_grads,
)
from megatron.core.models.gpt import GPTModel  # noqa: E402
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec  # noqa: E402
from megatron.core.tensor_parallel.layers import ColumnParallelLinear, RowParallelLinear  # noqa: E402
from megatron.core.transformer.moe.moe_utils import (  # noqa: E402
    clear_aux_losses_tracker,
    get_moe_layer_wise_logging_tracker,
)
from megatron.core.transformer.moe.router import TopKRouter  # noqa: E402
from megatron.core.transformer.transformer_config import TransformerConfig  # noqa: E402
import megatron.core.transformer.moe.moe_utils as _moe_utils  # noqa: E402
import megatron.core.transformer.moe.token_dispatcher as _token_dispatcher  # noqa: E402

# megatron-core 0.16.1 bug: without Transformer Engine, moe_utils never defines `te_general_gemm`
# (only the `try: from ...transformer_engine import te_general_gemm` branch does), yet the router's
# RouterGatingLinearFunction tests `te_general_gemm is not None` -> NameError.  Define the missing
# name as None so the router takes its own torch.mm path.  (Megatron-side patch 1 of 2.)
if not hasattr(_moe_utils, "te_general_gemm"):
    _moe_utils.te_general_gemm = None

# alltoall dispatcher on CPU: MoEAlltoAllTokenDispatcher turns its per-rank split sizes into host
# numpy arrays with `maybe_move_tensor_to_cpu(t, as_numpy=True)`, but that helper only acts on CUDA
# tensors, so on CPU the splits stay torch tensors and gloo's all_to_all_single rejects them
# ("incompatible function arguments").  Wrap the helper (in the dispatcher's namespace) so a host
# tensor also becomes numpy when as_numpy=True -- exactly what the GPU path produces.
# (Megatron-side patch 2 of 2.)
_orig_move_to_cpu = _token_dispatcher.maybe_move_tensor_to_cpu


def _move_to_cpu_also_on_host(tensor, as_numpy=False, record_stream=False):
    out = _orig_move_to_cpu(tensor, as_numpy=as_numpy, record_stream=record_stream)
    if as_numpy and torch.is_tensor(out):
        out = out.numpy()
    return out


_token_dispatcher.maybe_move_tensor_to_cpu = _move_to_cpu_also_on_host


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="directory for the per-rank chrome traces")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--shapes", action="store_true", help="record input shapes in the profiler")
    # model / job shape
    p.add_argument("--ep", type=int, default=4, help="expert-model-parallel size")
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--experts", type=int, default=8)
    p.add_argument("--topk", type=int, default=2)
    p.add_argument("--expert-ffn", type=int, default=512)
    p.add_argument("--vocab", type=int, default=1024)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--mbs", type=int, default=4, help="micro-batch size per rank")
    p.add_argument("--dispatcher", choices=["alltoall", "allgather"], default="alltoall")
    p.add_argument("--aux-loss-coeff", type=float, default=1e-2)
    p.add_argument("--overlap-grad-reduce", action="store_true")
    p.add_argument("--lr", type=float, default=3e-3)
    # faults (one rank)
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--factor", type=float, default=1.0)
    p.add_argument("--expert-factor", type=float, default=1.0)
    p.add_argument("--sleep-ms", type=float, default=0.0)
    p.add_argument("--hog", action="store_true")
    # imbalance without a fault
    p.add_argument("--hot-expert", type=int, default=-1)
    p.add_argument("--hot", type=float, default=0.0)
    p.add_argument("--big-rank", type=int, default=-1)
    p.add_argument("--big", type=float, default=1.0)
    p.add_argument("--seq-sigma", type=float, default=0.0)
    return p.parse_args()


# --------------------------------------------------------------------------------------
# data: random "counting" sequences (start + k*stride mod V), learnable next-token task
# --------------------------------------------------------------------------------------
def make_batch(args, rank, step, seq_len, mbs):
    g = torch.Generator().manual_seed(args.seed * 100003 + rank * 1009 + step)
    start = torch.randint(0, args.vocab, (mbs, 1), generator=g)
    stride = torch.randint(1, 8, (mbs, 1), generator=g)
    pos = torch.arange(seq_len + 1).unsqueeze(0)
    seq = (start + stride * pos) % args.vocab
    noise = torch.rand(seq.shape, generator=g) < 0.05
    seq = torch.where(noise, torch.randint(0, args.vocab, seq.shape, generator=g), seq)
    tokens, labels = seq[:, :-1].contiguous(), seq[:, 1:].contiguous()
    position_ids = torch.arange(seq_len).unsqueeze(0).expand(mbs, -1)
    attention_mask = torch.tril(torch.ones(1, 1, seq_len, seq_len)) < 0.5
    return tokens, labels, position_ids, attention_mask


def seq_len_for(args, rank, step):
    s = args.seq
    if rank == args.big_rank:
        s = int(round(s * args.big))
    if args.seq_sigma > 0:
        g = torch.Generator().manual_seed(args.seed * 7919 + rank * 104729 + step * 31)
        z = torch.randn((), generator=g).item()
        s = int(round(s * math.exp(args.seq_sigma * z)))
    return max(8, min(s, args.seq * 4))


# --------------------------------------------------------------------------------------
# faults
# --------------------------------------------------------------------------------------
def extra_matmul_hook(factor):
    """Forward hook for a megatron Linear: redo its matmul (factor-1) more times, discard.
    (The tied output layer gets its weight as a forward kwarg, hence with_kwargs.)"""
    extra = factor - 1.0
    whole, frac = int(extra), extra - int(extra)

    def hook(module, args, kwargs, output):
        x = args[0] if args else kwargs["input_"]
        w = kwargs.get("weight")
        if w is None:
            w = module.weight
        if x.numel() == 0 or w is None:
            return
        with torch.no_grad():
            for _ in range(whole):
                torch.matmul(x, w.t())
            if frac > 1e-3:
                n = max(1, int(round(x.shape[0] * frac)))
                torch.matmul(x[:n], w.t())

    return hook


def hot_expert_pre_hook(args):
    """Router input pre-hook: for a fraction P of tokens add a direction d with d @ W_r^T = e_E,
    i.e. +BIAS on expert E's router logit, so those tokens prefer expert E."""
    bias = 20.0
    state = {"calls": 0}

    def hook(module, inputs):
        x = inputs[0]  # [s, b, h]
        W = module.weight.detach()  # [E, h]
        e = torch.zeros(W.shape[0], dtype=W.dtype)
        e[args.hot_expert] = 1.0
        d = W.t() @ torch.linalg.solve(W @ W.t(), e)  # [h]
        g = torch.Generator().manual_seed(args.seed * 31 + dist.get_rank() * 7 + state["calls"])
        state["calls"] += 1
        mask = (torch.rand(x.shape[:-1], generator=g) < args.hot).to(x.dtype).unsqueeze(-1)
        return (x + bias * mask * d.to(x.dtype),) + tuple(inputs[1:])

    return hook


def hog_thread(stop):
    a = torch.randn(512, 512)
    b = torch.randn(512, 512)
    while not stop.is_set():
        torch.matmul(a, b)


# --------------------------------------------------------------------------------------
def main():
    args = parse_args()
    dist.init_process_group("gloo", timeout=timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed)
    assert world % args.ep == 0 and args.experts % args.ep == 0
    if args.dispatcher == "allgather" and (args.big_rank >= 0 or args.seq_sigma > 0):
        raise SystemExit("--big-rank/--seq-sigma need --dispatcher alltoall: the allgather "
                         "dispatcher gathers equal-sized token blocks from every EP rank")

    parallel_state.initialize_model_parallel(
        tensor_model_parallel_size=1,
        pipeline_model_parallel_size=1,
        expert_model_parallel_size=args.ep,
    )
    # There are no CUDA RNG states to fork on a CPU build (and dropout is 0 here), so ask megatron
    # for its pass-through RNG tracker instead of the CUDA one.
    tensor_parallel.model_parallel_cuda_manual_seed(args.seed, inference_rng_tracker=True)

    config = TransformerConfig(
        num_layers=args.layers,
        hidden_size=args.hidden,
        num_attention_heads=args.heads,
        ffn_hidden_size=4 * args.hidden,
        num_moe_experts=args.experts,
        moe_ffn_hidden_size=args.expert_ffn,
        moe_router_topk=args.topk,
        moe_router_load_balancing_type="aux_loss",
        moe_aux_loss_coeff=args.aux_loss_coeff,
        moe_token_dispatcher_type=args.dispatcher,
        moe_grouped_gemm=False,
        expert_model_parallel_size=args.ep,
        tensor_model_parallel_size=1,
        pipeline_model_parallel_size=1,
        use_cpu_initialization=True,
        params_dtype=torch.float32,
        pipeline_dtype=torch.float32,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        add_bias_linear=False,
        bias_dropout_fusion=False,
        gradient_accumulation_fusion=False,
    )
    layer_spec = get_gpt_layer_local_spec(num_experts=args.experts, moe_grouped_gemm=False)
    gpt = GPTModel(
        config=config,
        transformer_layer_spec=layer_spec,
        vocab_size=args.vocab,
        max_sequence_length=args.seq * 4,
        pre_process=True,
        post_process=True,
        share_embeddings_and_output_weights=True,
    )

    ddp_config = DistributedDataParallelConfig(
        grad_reduce_in_fp32=False,
        overlap_grad_reduce=args.overlap_grad_reduce,
        use_distributed_optimizer=False,
        bucket_size=None if not args.overlap_grad_reduce else 40000,
    )
    model = DistributedDataParallel(config=config, ddp_config=ddp_config, module=gpt)
    config.no_sync_func = model.no_sync
    config.finalize_model_grads_func = finalize_model_grads

    # plain torch AdamW on the megatron params; DDP puts reduced grads into param.main_grad
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.01, betas=(0.9, 0.95))

    slow = rank == args.slow_rank
    if slow and args.factor != 1.0:
        for m in gpt.modules():
            if isinstance(m, (ColumnParallelLinear, RowParallelLinear)):
                m.register_forward_hook(extra_matmul_hook(args.factor), with_kwargs=True)
    if slow and args.expert_factor != 1.0:
        for name, m in gpt.named_modules():
            if ".experts." in name and isinstance(m, (ColumnParallelLinear, RowParallelLinear)):
                m.register_forward_hook(extra_matmul_hook(args.expert_factor), with_kwargs=True)
    if args.hot_expert >= 0 and args.hot > 0:
        for m in gpt.modules():
            if isinstance(m, TopKRouter):
                m.register_forward_pre_hook(hot_expert_pre_hook(args))
    expert_tokens = [0]  # tokens this rank's local experts processed (for the end-of-run summary)
    for name, m in gpt.named_modules():
        if name.endswith("mlp.experts"):
            m.register_forward_pre_hook(
                lambda mod, inp: expert_tokens.__setitem__(0, expert_tokens[0] + inp[0].shape[0]))
    hog_stop, hog = threading.Event(), None
    if slow and args.hog:
        hog = threading.Thread(target=hog_thread, args=(hog_stop,), daemon=True, name="noisy-neighbour")
        hog.start()

    if rank == 0:
        n_dense = sum(p.numel() for n, p in gpt.named_parameters() if "experts" not in n)
        n_exp = sum(p.numel() for n, p in gpt.named_parameters() if "experts" in n)
        print(f"world={world} EP={args.ep} DP={parallel_state.get_data_parallel_world_size()} "
              f"dispatcher={args.dispatcher} dense params={n_dense} local expert params={n_exp}",
              flush=True)

    os.makedirs(args.out, exist_ok=True)
    step_times = []
    prof = profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=1, warmup=1, active=max(1, args.steps - 2)),
        record_shapes=args.shapes,
    )
    model.train()
    with prof:
        for step in range(args.steps):
            t0 = time.perf_counter()
            if slow and args.sleep_ms > 0:
                time.sleep(args.sleep_ms / 1000.0)
            with record_function("get_batch"):
                s = seq_len_for(args, rank, step)
                tokens, labels, position_ids, attn_mask = make_batch(args, rank, step, s, args.mbs)
            model.zero_grad_buffer()
            optimizer.zero_grad(set_to_none=True)
            with record_function("forward"):
                per_token_loss = model(tokens, position_ids, attn_mask, labels=labels)
                loss = per_token_loss.float().mean()
            with record_function("backward"):
                loss.backward()
            with record_function("finalize_grads"):
                finalize_model_grads([model])
            with record_function("optimizer_step"):
                for p in params:
                    p.grad = p.main_grad
                optimizer.step()
            step_times.append(time.perf_counter() - t0)
            prof.step()

            tracker = get_moe_layer_wise_logging_tracker()
            aux = tracker.get("load_balancing_loss", {}).get("values")
            aux_val = float(aux.sum()) / args.layers if aux is not None else float("nan")
            clear_aux_losses_tracker()
            if rank == 0:
                print(f"step {step:4d}  lm_loss {loss.item():.4f}  lb_aux {aux_val:.4f}  "
                      f"seq {s}  {step_times[-1] * 1000:.1f} ms", flush=True)

    prof.export_chrome_trace(os.path.join(args.out, f"trace_rank{rank}.json"))

    med = statistics.median(step_times[2:] if len(step_times) > 3 else step_times)
    summary = [None] * world
    dist.all_gather_object(summary, (med, expert_tokens[0] / args.steps))
    if rank == 0:
        print("median step ms per rank: " + " ".join(f"{m * 1000:.1f}" for m, _ in summary),
              flush=True)
        print("expert tokens/step per rank: " + " ".join(f"{t:.0f}" for _, t in summary),
              flush=True)
    hog_stop.set()
    if hog is not None:
        hog.join()  # a torch op still running at interpreter exit aborts the process
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
