"""LayerDrop masked-LM encoder, data-parallel on CPU (gloo), with profiling.

What this is
------------
A small BERT-style encoder trained with masked-language-modelling and
LayerDrop (a.k.a. stochastic depth over whole blocks), on 4 CPU processes
with torch.distributed (gloo backend) and DistributedDataParallel.

Model
    token embedding + learned position embedding
    -> N pre-LayerNorm transformer blocks, each:
           x = x + attn(LN(x))        (fused qkv Linear, SDPA, out Linear)
           x = x + mlp(LN(x))         (Linear width->4*width, GELU, Linear back)
    -> final LayerNorm -> LM head (Linear width->vocab)

LayerDrop
    Every training step, every block is skipped with probability
    ``--drop-rate p`` (residual branch not run at all).  The keep/skip draw is
    made per rank and per step from a generator seeded by (seed, rank, step),
    so different ranks run different subsets of blocks in the same step.
    Parameters of a skipped block get no gradient on that rank, so the model
    is wrapped in ``DistributedDataParallel(..., find_unused_parameters=True)``:
    after every forward DDP walks the autograd graph to find which parameters
    were not used, marks them ready, and all-reduces zeros for them so the
    bucketed all-reduce still lines up across ranks.  With ``--drop-rate 0``
    all blocks run every step (find_unused_parameters is still on, as a user
    who leaves it on would have it).

Data
    Synthetic, seeded by (seed, rank, step): each sequence repeats a random
    8-token motif (ids 1..V-1).  15% of positions are replaced by a [MASK]
    id (0) and the model must predict the original ids there, which it can
    learn to copy from the same slot one period away, so the loss really
    goes down (ln(vocab) ~ 6.2 at the start; try ``--steps 300``).

Training
    AdamW, linear warm-up for ``--warmup`` steps then cosine decay,
    ``clip_grad_norm_(max_norm=1.0)`` every step.

Communication
    Only DDP's gradient all-reduce (bucketed, ``--bucket-cap-mb``), issued
    from autograd hooks during backward, plus DDP's initial parameter
    broadcast.  At the end one ``all_gather_object`` collects the per-rank
    step timings (after profiling has stopped).

Profiling
    torch.profiler with CPU activity, schedule(wait=1, warmup=1,
    active=min(steps-2, 12), repeat=1), ``prof.step()`` once per step;
    input shapes only with ``--shapes``.  User ranges: "data", "forward",
    "block_<i>" (one per block that actually ran this step, so you can see
    who dropped what), "loss", "backward", "clip_grad", "optimizer".  Each rank writes one chrome trace
    ``<out>/trace_rank<r>.json`` and nothing else.

Run
    OMP_NUM_THREADS=1 python -m torch.distributed.run --standalone \\
        --nproc_per_node=4 user_layerdrop.py --out /tmp/ld [flags]

Flags
    --out DIR               where the per-rank chrome traces go (required)
    --steps N               training steps (default 10 -> 8 traced)
    --seed S                base seed (default 0)
    --shapes                record input shapes in the profiler
    model / job shape (healthy variants):
    --layers N              number of encoder blocks (default 6)
    --width D               model width (default 128)
    --heads H               attention heads (default 4)
    --vocab V               vocabulary size (default 512)
    --seq L                 sequence length (default 64)
    --batch B               sequences per rank per step (default 6)
    --drop-rate P           LayerDrop probability per block (default 0.3;
                            0 = plain training, every block runs)
    --lr LR                 peak AdamW learning rate (default 1e-3)
    --warmup W              warm-up steps (default 5)
    --bucket-cap-mb MB      DDP bucket size (default 25)
    --gradient-as-bucket-view   DDP option
    faults (one rank only):
    --slow-rank R           the faulty rank (default -1 = none)
    --factor F              slower device: rank R recomputes the four
                            Linear matmuls (qkv, out-proj, fc1, fc2) of every
                            block it runs F-1 extra times in forward, results
                            discarded; F may be fractional (the fraction is
                            a row slice) (default 1.0)
    --sleep-ms MS           time.sleep(MS) on rank R before each step
    --hog                   a daemon thread on rank R doing 512x512 matmuls
                            for the whole run (noisy neighbour)
    imbalance (no rank is slow, the work differs):
    --nodrop-rank R         rank R ignores the drop rate and runs every block
                            every step, while its peers run ~(1-p) of them
                            (default -1 = none)
    --big-rank K --big X    rank K's batch is X times larger (default -1, 1.0)
    --seq-sigma S           every rank's sequence length each step is
                            seq * lognormal(0, S), seeded by (seed, rank,
                            step), rounded to a multiple of 8 and clipped to
                            [16, 4*seq] (default 0 = fixed length)

Measured (2-core box, 4 ranks, OMP_NUM_THREADS=1, default shape, --steps 16,
median wall time per step over steps 2.., per rank).  CAUTION: the box was
shared with another 4-process job and an analysis process while measuring,
so the load on the 2 cores varied 2-3x between runs (the same healthy
config gave 130 ms per step on a quiet box and 230-400 ms under that load).
Each fault run was therefore sandwiched between two healthy runs and is
compared to their mean; the "fwd" columns are the median forward time
(rank-local, no collective inside) on the affected rank vs. the mean of the
other three in the same run, which is the steadier signal.  DDP's all-reduce
in backward ties all ranks together, so all four ranks show the same step
time: the slow rank's peers wait in backward.  A sleep can cost less than its
length (even nothing) because the sleeping rank hands its core to the others.

    setting                      step ms  adjacent   change   fwd affected /
                                 (all 4)  healthy             fwd others (ms)
    healthy (quiet box)            133       -         -        25 / 26
    healthy (loaded, 10 runs)    229-403     -         -         -
    --slow-rank 1 --factor 1.5     234      294      noise      74 / 51
    --slow-rank 1 --factor 2       368      274      +34%       95 / 79
    --slow-rank 1 --factor 3       395      316      +25%      154 / 78
    --slow-rank 1 --sleep-ms 30    417      392       +6%       (n/a)
    --slow-rank 1 --sleep-ms 80    259      367      noise      (n/a)
    --slow-rank 1 --hog            458      325      +41%      133 / 79
    --nodrop-rank 2 (p=0.3)        308      270      +14%       99 / 72
    --big-rank 3 --big 2           339      272      +25%       98 / 65
    --seq-sigma 0.6                479      305      +57%     (varies per step)
    healthy variants (loaded box, not sandwiched):
    --drop-rate 0                  204       -         -        57 (all ranks)
    --drop-rate 0.5                188       -         -        31
    --layers 8 --width 96 --gradient-as-bucket-view --bucket-cap-mb 1
                                   201       -         -        45

What this suggests: --factor >= 2, --hog, --big 2 (and --big 1.5: 335 ms
vs ~240-300 healthy in an earlier series), --nodrop-rank with p >= 0.3
(the no-drop rank runs 6 blocks vs ~4.2; with --drop-rate 0.5 ~6 vs ~3,
forward 80 vs 37 ms) and --seq-sigma 0.6 give a >= 10% job slowdown;
--factor 1.5 and --sleep-ms <= 80 were not resolvable from the load noise
on this shared box (not re-measured on a quiet box).

Wall time per run (startup, 16 steps, trace export included): 13-18 s on a
quiet box, 20-38 s under the shared load above; default --steps 10 is less.
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
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import ProfilerActivity, profile, record_function, schedule


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shapes", action="store_true")
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--batch", type=int, default=6)
    p.add_argument("--drop-rate", type=float, default=0.3)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--bucket-cap-mb", type=float, default=25.0)
    p.add_argument("--gradient-as-bucket-view", action="store_true")
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--factor", type=float, default=1.0)
    p.add_argument("--sleep-ms", type=float, default=0.0)
    p.add_argument("--hog", action="store_true")
    p.add_argument("--nodrop-rank", type=int, default=-1)
    p.add_argument("--big-rank", type=int, default=-1)
    p.add_argument("--big", type=float, default=1.0)
    p.add_argument("--seq-sigma", type=float, default=0.0)
    return p.parse_args()


def step_generator(seed, rank, step, salt):
    g = torch.Generator()
    g.manual_seed(((seed * 1000003 + rank) * 10007 + step) * 31 + salt)
    return g


# --------------------------------------------------------------------------
# model
# --------------------------------------------------------------------------
class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, 4 * width)
        self.fc2 = nn.Linear(4 * width, width)
        self.extra = 0.0  # >0 only on a simulated slow device

    def _waste(self, pairs):
        # a slower device: the block's matmuls again, results thrown away
        with torch.no_grad():
            full = int(self.extra)
            frac = self.extra - full
            for inp, lin in pairs:
                x2 = inp.detach().reshape(-1, inp.shape[-1])
                for _ in range(full):
                    F.linear(x2, lin.weight, lin.bias)
                if frac > 0:
                    n = max(1, int(round(frac * x2.shape[0])))
                    F.linear(x2[:n], lin.weight, lin.bias)

    def forward(self, x):
        B, T, D = x.shape
        h = self.ln1(x)
        q, k, v = self.qkv(h).view(B, T, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(B, T, D)
        x = x + self.proj(a)
        h2 = self.ln2(x)
        m = F.gelu(self.fc1(h2))
        if self.extra > 0:
            self._waste([(h, self.qkv), (a, self.proj), (h2, self.fc1), (m, self.fc2)])
        return x + self.fc2(m)


class LayerDropEncoder(nn.Module):
    def __init__(self, vocab, width, heads, layers, max_len):
        super().__init__()
        self.tok = nn.Embedding(vocab, width)
        self.pos = nn.Embedding(max_len, width)
        self.blocks = nn.ModuleList([Block(width, heads) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab)

    def forward(self, ids, keep):
        T = ids.shape[1]
        x = self.tok(ids) + self.pos(torch.arange(T, device=ids.device))
        for i, blk in enumerate(self.blocks):
            if not keep[i]:
                continue  # dropped this step: params unused on this rank
            with record_function(f"block_{i}"):
                x = blk(x)
        return self.head(self.ln_f(x))


# --------------------------------------------------------------------------
# data
# --------------------------------------------------------------------------
MASK_ID = 0
MOTIF = 8


def make_batch(args, rank, step):
    g = step_generator(args.seed, rank, step, 1)
    batch = args.batch
    if rank == args.big_rank:
        batch = max(1, int(round(batch * args.big)))
    seq = args.seq
    if args.seq_sigma > 0:
        f = math.exp(torch.randn((), generator=g).item() * args.seq_sigma)
        seq = int(round(seq * f / 8.0)) * 8
        seq = min(max(seq, 16), 4 * args.seq)
    # each row repeats a random 8-token motif; a masked id can be copied
    # from the same slot one period earlier or later
    motif = torch.randint(1, args.vocab, (batch, MOTIF), generator=g)
    tokens = motif.repeat(1, (seq + MOTIF - 1) // MOTIF)[:, :seq]
    mask = torch.rand(batch, seq, generator=g) < 0.15
    mask[:, 0] |= ~mask.any(dim=1)  # at least one target per row
    inputs = tokens.masked_fill(mask, MASK_ID)
    labels = tokens.masked_fill(~mask, -100)
    return inputs, labels


def layer_keep(args, rank, step):
    if rank == args.nodrop_rank or args.drop_rate <= 0:
        return [True] * args.layers
    g = step_generator(args.seed, rank, step, 2)
    u = torch.rand(args.layers, generator=g)
    return (u >= args.drop_rate).tolist()


HOG_STOP = threading.Event()


def hog_loop():
    a = torch.randn(512, 512)
    b = torch.randn(512, 512)
    # stopped before the interpreter exits: a daemon thread still inside a matmul while the
    # process tears torch down aborts it (SIGABRT on a 16-core host, after the traces were written)
    while not HOG_STOP.is_set():
        torch.mm(a, b)


# --------------------------------------------------------------------------
def main():
    args = parse_args()
    dist.init_process_group("gloo", timeout=timedelta(seconds=120))
    rank = dist.get_rank()
    world = dist.get_world_size()
    torch.manual_seed(args.seed)

    hog = None
    if rank == args.slow_rank and args.hog:
        hog = threading.Thread(target=hog_loop, daemon=True)
        hog.start()

    max_len = 4 * args.seq
    model = LayerDropEncoder(args.vocab, args.width, args.heads, args.layers, max_len)
    if rank == args.slow_rank and args.factor > 1.0:
        for blk in model.blocks:
            blk.extra = args.factor - 1.0
    ddp = DDP(
        model,
        find_unused_parameters=True,
        bucket_cap_mb=args.bucket_cap_mb,
        gradient_as_bucket_view=args.gradient_as_bucket_view,
    )

    opt = torch.optim.AdamW(ddp.parameters(), lr=args.lr, weight_decay=0.01)

    def lr_lambda(s):
        if s < args.warmup:
            return (s + 1) / args.warmup
        t = (s - args.warmup) / max(1, args.steps - args.warmup)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, t)))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda)

    # trace at most 12 steps so long runs do not produce huge traces
    active = max(1, min(args.steps - 2, 12))
    step_times = []
    fwd_times = []  # forward is rank-local (no collective), unlike the step
    ran_blocks = []
    prof = profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=1, warmup=1, active=active, repeat=1),
        record_shapes=args.shapes,
    )
    prof.start()
    for step in range(args.steps):
        t0 = time.perf_counter()
        if rank == args.slow_rank and args.sleep_ms > 0:
            time.sleep(args.sleep_ms / 1000.0)
        with record_function("data"):
            inputs, labels = make_batch(args, rank, step)
            keep = layer_keep(args, rank, step)
        tf = time.perf_counter()
        with record_function("forward"):
            logits = ddp(inputs, keep)
        fwd_times.append(time.perf_counter() - tf)
        with record_function("loss"):
            loss = F.cross_entropy(logits.reshape(-1, args.vocab), labels.reshape(-1), ignore_index=-100)
        opt.zero_grad(set_to_none=True)
        with record_function("backward"):
            loss.backward()
        with record_function("clip_grad"):
            gnorm = torch.nn.utils.clip_grad_norm_(ddp.parameters(), max_norm=1.0)
        with record_function("optimizer"):
            opt.step()
            sched.step()
        dt = time.perf_counter() - t0
        step_times.append(dt)
        ran_blocks.append(sum(keep))
        if rank == 0:
            print(
                f"step {step:4d} loss {loss.item():.4f} gnorm {gnorm.item():.3f} "
                f"lr {sched.get_last_lr()[0]:.2e} blocks {sum(keep)}/{args.layers} "
                f"shape {tuple(inputs.shape)} {dt * 1000:.1f} ms",
                flush=True,
            )
        prof.step()
    prof.stop()

    os.makedirs(args.out, exist_ok=True)
    prof.export_chrome_trace(os.path.join(args.out, f"trace_rank{rank}.json"))

    skip = 2 if len(step_times) > 2 else 0
    med = statistics.median(step_times[skip:]) * 1000
    fmed = statistics.median(fwd_times[skip:]) * 1000
    mean_blocks = sum(ran_blocks) / len(ran_blocks)
    stats = [None] * world
    dist.all_gather_object(stats, (rank, med, fmed, mean_blocks))
    if rank == 0:
        print("per-rank median step / forward time (ms), mean blocks run:")
        for r, m, f, b in stats:
            print(f"  rank {r}: step {m:8.1f} ms  fwd {f:7.1f} ms  blocks {b:.2f}")
        print("MEDIANS " + " ".join(f"{m:.1f}" for _, m, _, _ in stats)
              + " | FWD " + " ".join(f"{f:.1f}" for _, _, f, _ in stats), flush=True)
    if hog is not None:
        HOG_STOP.set()
        hog.join()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
