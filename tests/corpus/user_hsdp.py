"""Tiny llama-style LM trained with HSDP (FSDP2 ``fully_shard`` on a 2-D mesh).

What it is
----------
A small decoder-only language model in the llama style:

* token embedding (+ a learned position table when ``--pos learned``; the
  default is rotary embeddings applied to q/k),
* ``--layers`` pre-norm blocks, each RMSNorm -> causal self-attention
  (q/k/v/o projections, ``F.scaled_dot_product_attention(is_causal=True)``)
  -> RMSNorm -> SwiGLU MLP (w1/w3 gate+up, w2 down, hidden = 8/3 * dim
  rounded to 32),
* final RMSNorm and an untied LM head.

Data is synthetic but learnable: a fixed, globally seeded "bigram" rule
(``next = perm[cur]`` with probability 0.75, otherwise a uniform random
token).  Every rank draws its own batch each step from a generator seeded by
(seed, rank, step), so the loss starts at ~ln(vocab) and goes down towards the
entropy of the rule (~2.1 nats for vocab 512) over a longer run.

Parallelism
-----------
4 processes, CPU, gloo.  ``init_device_mesh("cpu", (2, 2),
mesh_dim_names=("replicate", "shard"))`` and then ``fully_shard(block,
mesh=mesh)`` on each transformer block and ``fully_shard(model, mesh=mesh)`` on
the whole model (embedding, final norm and head stay in the root group).  A 2-D
mesh makes FSDP2 do HSDP: every parameter is a DTensor with placements
(Replicate(), Shard(0)), i.e. sharded over the 2 ranks of a "shard" group
(ranks {0,1} and {2,3}) and replicated across the 2 replica groups
(ranks {0,2} and {1,3}).  ``--mesh 1x4`` gives plain FSDP over all 4 ranks,
``--mesh 4x1`` is pure replication (DDP-like: no gathers, only all-reduce).

Communication per step (rank r, default 2x2 mesh):

* forward: one all_gather (``all_gather_into_tensor``) of the flat
  parameter shard per FSDP group (root first, then each block) on the shard
  group;
* backward: with ``--reshard`` (default) every block is all-gathered again
  before its backward; then per group a reduce_scatter of the gradients on
  the shard group followed by an all_reduce of the reduced shard on the
  replicate group (HSDP);
* ``clip_grad_norm_``: the norm of the DTensor gradients is a partial sum
  that needs all_reduce(s) over the mesh to get the global norm;
* AdamW works on the local shards only (no communication).

In the trace the main thread shows ``FSDP::all_gather (layers.N)``,
``FSDP::post_backward_reduce (...)`` and the short c10d issue ops
(``c10d::_allgather_base_``, ``c10d::_reduce_scatter_base_``,
``c10d::allreduce_``, ``_c10d_functional::all_reduce`` for the clip norm);
the transfers themselves run on gloo's ``pt_gloo_runloop`` threads, two per
process group (shard group and replicate group).  gloo has no native
reduce-scatter: FSDP's reduce_scatter shows up as ``gloo:all_reduce`` on the
shard group's threads.  Per step and rank: 9 ``gloo:all_gather`` (root + 4
blocks forward + 4 blocks backward) and 6 ``gloo:all_reduce`` on the shard
group (5 reduce-scatters + 1 clip norm), 5 ``gloo:all_reduce`` on the
replicate group.

With gloo on CPU everything is effectively synchronous from the main
thread's point of view (FSDP2's "streams" are no-ops on CPU), so a rank that
is late to any of these collectives makes its peers wait inside it.

Profiling
---------
``torch.profiler`` with CPU activity, ``schedule(wait=1, warmup=1,
active=steps-2)``, ``prof.step()`` once per training step, shapes recorded only
with ``--shapes``.  User ranges: ``data``, ``forward``, ``loss``, ``backward``,
``clip``, ``optimizer``, plus ``sleep`` / ``slow_block_issue`` when a fault is
injected.  Each rank writes exactly one file ``trace_rank{R}.json`` into
``--out``.  Rank 0 prints the loss each step; at the end rank 0 prints the
median step time of every rank (measured with ``time.perf_counter`` around
each step, over the traced steps).

Flags
-----
Common:
  --out DIR              (required) where the chrome traces go
  --steps N              training steps (default 10; 8 are traced)
  --seed S               base seed (default 0)
  --shapes               record input shapes in the profiler
Model / job shape (healthy variants):
  --layers L             transformer blocks (default 4)
  --dim D                model width (default 128)
  --heads H              attention heads (default 4)
  --vocab V              vocabulary size (default 512)
  --batch B              sequences per rank per step (default 4)
  --seq T                tokens per sequence (default 128)
  --pos {rope,learned}   position encoding (default rope)
  --reshard/--no-reshard reshard_after_forward for the blocks (default
                         --reshard); no-reshard skips the backward all-gather
  --mesh RxS             replicate x shard mesh (default 2x2; 1x4 = FSDP,
                         4x1 = pure replication)
  --lr LR                peak AdamW lr (default 3e-3), linear warmup
                         (--warmup, default 2 steps) then cosine to 10%
  --clip C               max grad norm (default 1.0)
Faults (only on --slow-rank R, default -1 = none):
  --factor F             slower device: extra forward-only copies of every
                         block's q/k/v/o and MLP matmuls, F-1 extra copies
                         in total (fractional part = a matmul on that
                         fraction of the rows); default 1.0
  --sleep-ms MS          time.sleep(MS) before each step
  --hog                  daemon thread doing 512x512 matmuls all run long
  --prefetch-sleep-ms MS a forward pre-hook on every block (registered in
                         front of FSDP's own pre-hook) sleeps MS ms, i.e. the
                         host is late to issue each block's all-gather
Imbalance (no fault):
  --big-rank K --big X   rank K's batch is X times larger (round(B*X))
  --big-replica K        (with --big X) every rank whose "replicate"
                         coordinate is K gets the X-times larger batch
  --seq-sigma S          each rank's sequence length per step is
                         seq * lognormal(0, S), seeded by (seed, rank, step),
                         clipped to [16, 4*seq] and rounded to 8

Measurements
------------
Median step time (ms) over the traced steps, per rank, on the 2-core box
with 4 ranks, defaults otherwise (rank 1 is the slowed / big rank).  The box
was shared with another 4-process job and a niced background job during all
of this (load 5-12), so a healthy run alone ranged 230-680 ms depending on
what the neighbours did; every fault run was paired with a healthy run just
before it (and after), "change" is against those neighbours.  Because all 4
ranks meet in collectives several times per step, every rank shows the same
step time: the slowed rank and the others move together (r1 = slow rank,
"others" = median of r0/r2/r3).

  setting                      base ms   r1 ms   others ms  change
  healthy (3 clean-ish runs)   270-330     -         -          -
  --factor 1.5                 375/400     423      403      ~+5%  (noise)
  --factor 2   (3 pairs)       390/310/295 298/311/260 290/303/266  none measurable
  --factor 3   (2 pairs)       400/295     469/270  477/268   +20% / none
  --sleep-ms 30 (3 pairs)      382/350/310 406/325/257 410/320/250  none measurable
  --sleep-ms 100               385/395     539      563      +40%
  --hog        (2 pairs)       395/294     614/367  647/351   +25% .. +65%
  --prefetch-sleep-ms 5        370/392     372      371       0%
  --prefetch-sleep-ms 20 (3)   392/290/330 398/266/308 392/261/309  none measurable
  --prefetch-sleep-ms 50       295/230     401      400      +35% .. +75%
  --big-rank 1 --big 2 (3)     290/480/294 297/356/285 293/358/279  none measurable
  --big-rank 1 --big 3         490/385     633      640      +30% .. +65%
  --big-replica 1 --big 2 (2)  385/470/294 658/413  664/405   +40% .. +70%
  --seq-sigma 0.3              470/530     559      557      ~+10% (noise)
  --seq-sigma 0.6              530/500     459      494      none measurable
  --no-reshard (healthy)       500/527     521      536       0%
  --mesh 1x4 (healthy)         527/672     434      424      (lost in noise)
  --layers 6 --dim 192         672         1197     1195     ~1.8x (healthy)

Reading: on this oversubscribed box a step is dominated by collective
latency (5 FSDP groups x {all_gather, all_gather, reduce_scatter,
all_reduce}), and extra compute on one rank is partly absorbed because its
peers block in gloo and give the CPU back.  Settings that reliably cost
>= 10%: --sleep-ms >= 100, --hog, --prefetch-sleep-ms >= 50, --big-rank
--big >= 3, --big-replica --big 2.  --factor <= 3, --sleep-ms 30,
--prefetch-sleep-ms <= 20, --big 2 on one rank and --seq-sigma stay within
the run-to-run noise here.  A sleep costs less than its length when the
machine is busy (the others use the freed core).

Where the time goes (trace, --prefetch-sleep-ms 20 on rank 1): rank 0 (rank
1's shard partner) waits in ``FSDP::all_gather (layers.N)`` in forward
(~190 ms/step of all_gather spans vs ~80-120 on the others); ranks 2 and 3
(the other replica group) do not wait in the gathers but in backward, in
``FSDP::post_backward_reduce`` (the cross-replica all_reduce), ~180-230
ms/step vs ~120-140.

Wall time per run (torchrun start, 10 steps, export): 14-20 s when the box
is less busy, 25-40 s under heavy contention; --layers 6 --dim 192 is ~2x
the step time.
"""

import argparse
import math
import os
import statistics
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.profiler import ProfilerActivity, profile, record_function, schedule


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shapes", action="store_true")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--pos", choices=["rope", "learned"], default="rope")
    p.add_argument("--reshard", dest="reshard", action="store_true", default=True)
    p.add_argument("--no-reshard", dest="reshard", action="store_false")
    p.add_argument("--mesh", default="2x2")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--clip", type=float, default=1.0)
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--factor", type=float, default=1.0)
    p.add_argument("--sleep-ms", type=float, default=0.0)
    p.add_argument("--hog", action="store_true")
    p.add_argument("--prefetch-sleep-ms", type=float, default=0.0)
    p.add_argument("--big-rank", type=int, default=-1)
    p.add_argument("--big-replica", type=int, default=-1)
    p.add_argument("--big", type=float, default=1.0)
    p.add_argument("--seq-sigma", type=float, default=0.0)
    return p.parse_args()


# --------------------------------------------------------------------------
# model
# --------------------------------------------------------------------------

class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return x * self.weight


def rope_tables(seq, head_dim, base=10000.0):
    inv = 1.0 / (base ** (torch.arange(0, head_dim, 2).float() / head_dim))
    t = torch.arange(seq).float()
    freqs = torch.outer(t, inv)  # (T, hd/2)
    return freqs.cos(), freqs.sin()


def apply_rope(x, cos, sin):
    # x: (B, H, T, hd)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    out = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
    return out.flatten(-2)


class ExtraWork:
    """Extra, discarded copies of a block's main matmuls (the --factor fault)."""

    def __init__(self, factor):
        extra = max(0.0, factor - 1.0)
        self.full = int(extra)
        self.frac = extra - self.full

    def __bool__(self):
        return self.full > 0 or self.frac > 0

    @torch.no_grad()
    def __call__(self, x, weight):
        for _ in range(self.full):
            F.linear(x, weight)
        if self.frac > 0:
            rows = x.reshape(-1, x.shape[-1])
            n = int(round(rows.shape[0] * self.frac))
            if n > 0:
                F.linear(rows[:n], weight)


class Attention(nn.Module):
    def __init__(self, dim, heads, use_rope, extra):
        super().__init__()
        self.heads = heads
        self.hd = dim // heads
        self.use_rope = use_rope
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wk = nn.Linear(dim, dim, bias=False)
        self.wv = nn.Linear(dim, dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)
        self.extra = extra

    def forward(self, x, cos, sin):
        B, T, D = x.shape
        q, k, v = self.wq(x), self.wk(x), self.wv(x)
        if self.extra:
            for lin in (self.wq, self.wk, self.wv):
                self.extra(x, lin.weight)
        q = q.view(B, T, self.heads, self.hd).transpose(1, 2)
        k = k.view(B, T, self.heads, self.hd).transpose(1, 2)
        v = v.view(B, T, self.heads, self.hd).transpose(1, 2)
        if self.use_rope:
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).reshape(B, T, D)
        out = self.wo(y)
        if self.extra:
            self.extra(y, self.wo.weight)
        return out


class SwiGLU(nn.Module):
    def __init__(self, dim, extra):
        super().__init__()
        hidden = int(8 * dim / 3)
        hidden = 32 * ((hidden + 31) // 32)
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.extra = extra

    def forward(self, x):
        h = F.silu(self.w1(x)) * self.w3(x)
        out = self.w2(h)
        if self.extra:
            self.extra(x, self.w1.weight)
            self.extra(x, self.w3.weight)
            self.extra(h, self.w2.weight)
        return out


class Block(nn.Module):
    def __init__(self, dim, heads, use_rope, extra):
        super().__init__()
        self.attn_norm = RMSNorm(dim)
        self.attn = Attention(dim, heads, use_rope, extra)
        self.mlp_norm = RMSNorm(dim)
        self.mlp = SwiGLU(dim, extra)

    def forward(self, x, cos, sin):
        x = x + self.attn(self.attn_norm(x), cos, sin)
        x = x + self.mlp(self.mlp_norm(x))
        return x


class TinyLlama(nn.Module):
    def __init__(self, vocab, dim, layers, heads, max_seq, pos, extra):
        super().__init__()
        self.use_rope = pos == "rope"
        self.tok_emb = nn.Embedding(vocab, dim)
        self.pos_emb = None if self.use_rope else nn.Embedding(max_seq, dim)
        self.layers = nn.ModuleList(
            [Block(dim, heads, self.use_rope, extra) for _ in range(layers)]
        )
        self.norm = RMSNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        cos, sin = rope_tables(max_seq, dim // heads)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.apply(self._init)

    @staticmethod
    def _init(m):
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=0.02)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=0.02)

    def forward(self, idx):
        B, T = idx.shape
        h = self.tok_emb(idx)
        if self.pos_emb is not None:
            h = h + self.pos_emb(torch.arange(T, device=idx.device))
        cos, sin = self.rope_cos[:T], self.rope_sin[:T]
        for blk in self.layers:
            h = blk(h, cos, sin)
        return self.head(self.norm(h))


# --------------------------------------------------------------------------
# data
# --------------------------------------------------------------------------

class BigramData:
    """Synthetic token streams from a fixed noisy bigram rule.

    Each token follows the previous one through a fixed permutation
    (``next = perm[cur]``) with probability ``keep``; otherwise it is a fresh
    uniform token.  Vectorised with a table of permutation powers.
    """

    def __init__(self, vocab, max_len, seed, keep=0.75):
        g = torch.Generator().manual_seed(seed + 12345)
        self.vocab = vocab
        self.keep = keep
        perm = torch.randperm(vocab, generator=g)
        powers = [torch.arange(vocab)]
        for _ in range(max_len):
            powers.append(perm[powers[-1]])
        self.powers = torch.stack(powers)  # (max_len+1, vocab): perm^k(v)

    def batch(self, b, t, gen):
        n = t + 1
        fresh = torch.randint(0, self.vocab, (b, n), generator=gen)
        reset = torch.rand(b, n, generator=gen) >= self.keep
        reset[:, 0] = True
        pos = torch.arange(n).expand(b, n)
        last = torch.where(reset, pos, torch.zeros_like(pos)).cummax(dim=1).values
        start_tok = fresh.gather(1, last)
        x = self.powers[pos - last, start_tok]
        return x[:, :-1], x[:, 1:]


# --------------------------------------------------------------------------
# faults
# --------------------------------------------------------------------------

def start_hog(stop):
    def run():
        a = torch.randn(512, 512)
        b = torch.randn(512, 512)
        while not stop.is_set():
            a = torch.tanh(a @ b)

    th = threading.Thread(target=run, name="hog", daemon=True)
    th.start()
    return th


def main():
    args = parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    dist.init_process_group("gloo", timeout=timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()

    n_rep, n_shard = (int(s) for s in args.mesh.lower().split("x"))
    assert n_rep * n_shard == world, f"mesh {args.mesh} does not match world {world}"
    # the sub-groups of the mesh would otherwise get gloo's 30 min default
    gloo_opts = dist.ProcessGroupGloo._Options()
    gloo_opts._timeout = timedelta(seconds=120)
    mesh = init_device_mesh(
        "cpu", (n_rep, n_shard), mesh_dim_names=("replicate", "shard"),
        backend_override={"replicate": ("gloo", gloo_opts),
                          "shard": ("gloo", gloo_opts)},
    )
    rep_coord = mesh.get_coordinate()[0]

    slow = rank == args.slow_rank
    extra = ExtraWork(args.factor if slow else 1.0)

    # same init on every rank, then fully_shard slices out the local shard
    torch.manual_seed(args.seed)
    max_seq = 4 * args.seq
    model = TinyLlama(args.vocab, args.dim, args.layers, args.heads, max_seq,
                      args.pos, extra)
    n_params = sum(p.numel() for p in model.parameters())
    for blk in model.layers:
        fully_shard(blk, mesh=mesh, reshard_after_forward=args.reshard)
    fully_shard(model, mesh=mesh)

    if slow and args.prefetch_sleep_ms > 0:
        delay = args.prefetch_sleep_ms / 1000.0

        def late_issue(mod, inputs):
            with record_function("slow_block_issue"):
                time.sleep(delay)

        # prepend=True: runs before FSDP's own pre-forward hook (which issues
        # this block's all-gather), so the gather is issued late.
        for blk in model.layers:
            blk.register_forward_pre_hook(late_issue, prepend=True)

    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95),
                            weight_decay=0.1, foreach=True)

    total = max(args.steps, 1)

    def lr_lambda(step):
        if step < args.warmup:
            return (step + 1) / args.warmup
        prog = (step - args.warmup) / max(1, total - args.warmup)
        return 0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * min(prog, 1.0)))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda)

    data = BigramData(args.vocab, max_seq + 1, args.seed)
    big = (rank == args.big_rank) or (args.big_replica >= 0 and rep_coord == args.big_replica)
    batch = max(1, round(args.batch * args.big)) if big else args.batch

    stop = threading.Event()
    if slow and args.hog:
        start_hog(stop)

    if rank == 0:
        print(f"[hsdp] world={world} mesh={args.mesh} (replicate x shard) "
              f"params={n_params/1e6:.2f}M layers={args.layers} dim={args.dim} "
              f"batch={args.batch} seq={args.seq} reshard={args.reshard}", flush=True)

    os.makedirs(args.out, exist_ok=True)
    active = max(1, args.steps - 2)
    step_times = []
    prof = profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=1, warmup=1, active=active, repeat=1),
        record_shapes=args.shapes,
    )
    dist.barrier()
    with prof:
        for step in range(args.steps):
            t0 = time.perf_counter()
            if slow and args.sleep_ms > 0:
                with record_function("sleep"):
                    time.sleep(args.sleep_ms / 1000.0)
            with record_function("data"):
                gen = torch.Generator().manual_seed(
                    args.seed * 1_000_003 + rank * 10_007 + step)
                seq = args.seq
                if args.seq_sigma > 0:
                    f = math.exp(torch.randn((), generator=gen).item() * args.seq_sigma)
                    seq = int(min(max(16, args.seq * f), max_seq))
                    seq = max(8, 8 * round(seq / 8))
                inp, tgt = data.batch(batch, seq, gen)
            with record_function("forward"):
                logits = model(inp)
            with record_function("loss"):
                loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                       tgt.reshape(-1))
            with record_function("backward"):
                loss.backward()
            with record_function("clip"):
                gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
            with record_function("optimizer"):
                opt.step()
                opt.zero_grad(set_to_none=True)
                sched.step()
            step_times.append(time.perf_counter() - t0)
            if rank == 0:
                gn = gnorm.full_tensor() if hasattr(gnorm, "full_tensor") else gnorm
                print(f"step {step:4d} loss {loss.item():.4f} gnorm {gn.item():.3f} "
                      f"lr {sched.get_last_lr()[0]:.2e} "
                      f"t {1000*step_times[-1]:.1f} ms", flush=True)
            prof.step()
    stop.set()

    prof.export_chrome_trace(os.path.join(args.out, f"trace_rank{rank}.json"))

    traced = step_times[2:] if len(step_times) > 2 else step_times
    med = statistics.median(traced)
    allmed = [None] * world
    dist.all_gather_object(allmed, med)
    if rank == 0:
        print("median step ms per rank: " +
              " ".join(f"r{r}={1000*m:.1f}" for r, m in enumerate(allmed)), flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
