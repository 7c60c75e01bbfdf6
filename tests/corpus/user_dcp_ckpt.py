"""Small GPT-style LM trained with DDP that checkpoints with torch.distributed.checkpoint.

What it is
----------
A decoder-only transformer language model, GPT-2 style:

* token embedding + learned position embedding,
* ``--layers`` pre-norm blocks: LayerNorm -> causal multi-head self-attention
  (one fused qkv projection, ``F.scaled_dot_product_attention(is_causal=True)``,
  output projection) -> LayerNorm -> GELU MLP (4x width),
* final LayerNorm and an LM head tied to the token embedding.

Data is synthetic but learnable: a fixed random "successor table" (every token
has 4 possible successors, chosen with probabilities 0.7/0.15/0.1/0.05) is
built from ``--seed``; every rank samples its own sequences each step from a
generator seeded by (seed, rank, step).  The loss starts at ~ln(vocab) (6.2
nats) and falls quickly towards the table's entropy (~1.3 nats).

Training: ``DistributedDataParallel`` over 4 processes (gloo, CPU), AdamW,
linear warmup + cosine LR (``LambdaLR``), grad clipping.

Checkpointing (``torch.distributed.checkpoint``)
------------------------------------------------
Every ``--ckpt-every K`` steps (default 3: global steps 3, 6, 9 of a 10-step
run, all inside the traced window) the job builds the state with
``torch.distributed.checkpoint.state_dict.get_state_dict(model, optim)`` and
calls

    dcp.save({"model": ..., "optim": ..., "train": {...}},
             checkpoint_id=OUT/ckpt/step_N, storage_writer=FileSystemWriter(...),
             process_group=ckpt_pg)

inside ``record_function("checkpoint")``.  ``ckpt_pg`` is a separate gloo group
made with ``dist.new_group`` (what the DCP docs suggest for async saves; used
for sync saves too so that both paths look alike).  With ``--async-ckpt`` it
is ``dcp.async_save(...)`` instead: the call stages a CPU copy of the state
and returns a future; the write and DCP's coordination collectives then run on
a background thread.  Before the next save (and before exit) the job waits on
the previous future (``record_function("checkpoint_wait")``).  Checkpoints are
kept (a user keeps them): ~8 MB each with the defaults (0.66 M params, fp32
weights + two AdamW moments), so a 10-step run leaves ~25 MB under OUT/ckpt.

``--resume`` looks for the newest ``OUT/ckpt/step_N`` (or ``--ckpt-dir``),
loads it with ``dcp.load`` + ``set_state_dict`` before training (outside the
profiled steps) and continues from step N (LR schedule included) for
``--steps`` more steps.  With no checkpoint there it says so and starts from
scratch (so in a fresh --out it is a no-op).

Communication per step (every rank)
-----------------------------------
* backward: DDP's bucketed gradient all_reduce (``c10d::allreduce_`` issued
  from the autograd hooks, ``gloo:all_reduce`` on the default group's
  ``pt_gloo_runloop`` thread), 2 buckets with the defaults (25 MB bucket cap,
  first bucket 1 MB);
* forward: DDP's buffer broadcast is off (no buffers), no other comms;
* checkpoint steps, on ``ckpt_pg``: DCP's planning ``gather_object`` to the
  coordinator (rank 0) + ``scatter_object`` of the final plans, then each rank
  writes its own ``__R_0.distcp`` (replicated tensors are de-duplicated across
  ranks, so every rank writes ~1/4 of the state), then ``gather_object`` of
  the write results and rank 0 writes ``.metadata``; the save ends with a
  broadcast/all_reduce so every rank waits for the slowest writer.  With
  ``--async-ckpt`` these run on the background thread.

Profiling
---------
``torch.profiler`` CPU activity, ``schedule(wait=1, warmup=1, active=steps-2)``,
``prof.step()`` once per step, ``record_shapes`` only with ``--shapes``.  User
ranges: ``data``, ``forward``, ``backward``, ``optimizer``, ``checkpoint``
(+ ``checkpoint_wait`` with --async-ckpt), and ``sleep`` for --sleep-ms.  One
trace per rank: ``OUT/trace_rank{R}.json``.  Rank 0 prints the loss per step
and, at the end, every rank's median step time (perf_counter around the whole
step, checkpoint included) over the traced steps, plus the median of the
checkpoint steps and the total traced time.

Flags
-----
Common:
  --out DIR            (required) traces, and checkpoints under DIR/ckpt
  --steps N            training steps (default 10; 8 traced)
  --seed S             base seed (default 0)
  --shapes             record input shapes
Model / job (healthy variants):
  --layers L           transformer blocks (default 3)
  --width D            model width (default 128), --heads (default 4)
  --vocab V            (default 512)
  --batch B            sequences per rank per step (default 6)
  --seq T              tokens per sequence (default 128)
  --lr, --warmup       peak AdamW lr (3e-3), warmup steps (2)
  --ckpt-every K       save every K steps (default 3; 0 = never)
  --async-ckpt         dcp.async_save instead of dcp.save
  --resume             load the newest checkpoint first (dcp.load)
  --ckpt-dir DIR       where checkpoints go (default OUT/ckpt)
Faults (only on --slow-rank R, default -1 = none):
  --factor F           slower device: inside forward, every block repeats its
                       qkv / proj / fc / fc-out matmuls F-1 more times
                       (no_grad, results discarded; the fractional part is a
                       matmul on that fraction of the rows)
  --sleep-ms MS        slow host: time.sleep(MS) at the start of every step
                       (inside record_function("sleep"))
  --hog                busy neighbour: a thread doing small (64x64) matmuls for
                       the whole run (GIL + core contention); stopped and joined before exit
  --slow-disk-ms MS    slow storage: this rank's FileSystemWriter is a
                       subclass whose write_data sleeps MS before writing
                       (the other ranks use the plain FileSystemWriter);
                       only checkpoint steps are affected
  --data-sleep-ms MS   slow data loader: the rank's batch takes MS longer
                       (sleep inside the "data" range, every step)
Imbalance (no fault):
  --seq-sigma S        each rank's sequence length per step is
                       seq * lognormal(0, S) (seeded by seed, rank, step),
                       clipped to [16, 4*seq], multiple of 8
  --big-rank K --big X rank K's batch is round(B*X) sequences

Measurements
------------
Median step time (ms) over the 8 traced steps, 4 ranks on the 2-core box,
defaults otherwise, every fault run right after a healthy ``--seed 1`` run.
The box was shared with another helper's 4-process jobs the whole time (load
9-15), so healthy runs alone ranged 200-500 ms.  DDP's all_reduce every step
(and DCP's collectives on checkpoint steps) keep the ranks in lock-step, so
every rank shows ~the same step time; "slow" = the slowed/big rank.
"ckpt" = median of the 3 checkpoint steps, "total" = sum of traced steps.

  setting                         base ms  slow ms  others  change (median / total)
  healthy default (12 runs)       205-498     -        -     (ckpt steps +100-250 ms)
  --factor 2  (r1)                  357      341      338     none
  --factor 3  (r2)                  415      412      404     none
  --factor 4  (r2)                  ~330     341      328     none (fwd 131 vs 67 ms; others
                                                             wait it out in backward)
  --factor 6  (r3)                  480      497      488     +3% / +6%
  --factor 8  (r0)                  473      536      549     +15% / +24%
  --factor 10 (r2)                  250      486      484     +90% / +70%
  --factor 12 (r1)                  317      695      669     +115% / +93%
  --sleep-ms 50  (r3)               425      449      473     +10% / +8%
  --sleep-ms 100 (r0)               285      303      311     +7% / +22%
  --sleep-ms 150 (r1)               349      464      472     +35% / +31%
  --data-sleep-ms 50  (r3)          412      451      413     +5% / +13%
  --data-sleep-ms 150 (r2)          361      492      485     +35% / +19%
  --slow-disk-ms 150 (r1)           375      360      361     median none; ckpt +15%,
                                                             total +12%
  --slow-disk-ms 300 (r3)           372      404      408     median +9%; ckpt 662->880
                                                             (+33%), total +16%
  --hog 384x384 (r2, r0)            206/403  695/403  622/443 +70% / +3% (unreliable)
  --hog 64x64 = current (r0, r2)    258/292  483/287  460/291 +80% / 0% (total +68%/+22%)
  --big-rank 2 --big 2              400      337      342     none
  --big-rank 1 --big 3              352      455      446     +29% / +50%
  --big-rank 0 --big 4              412      818      845     +100% / +74%
  --seq-sigma 0.5                   383      (all) 500          +31% / +41%
  --seq-sigma 0.8                   423      (all) 650          +55% / +44%
  healthy --async-ckpt              -        290-325           ckpt steps ~+60 ms only
  healthy --ckpt-every 2            -        335-370           (4 saves in the window)
  healthy --layers 4 --width 160    -        430-450           (ckpt ~13 MB)
  healthy --shapes                  -        300-340           traces 11.7-12.1 MB/rank

Reading: with 8+ runnable processes on 2 cores, extra compute on one rank
is largely absorbed (its peers block in gloo and give it their CPU share):
--factor <= 6 is within the noise, --factor >= 8 shows, 10-12 reliably.
Sleeps cost less than their length when the box is busy; >= 150 ms
(step or data) is reliably >= 10%.  --slow-disk-ms only touches the 3
checkpoint steps, so it barely moves the median; it shows in the checkpoint
steps' time (every rank waits in DCP's final collective) and in the total:
300 ms is the size to use.  --hog is the least reliable fault here (the
thread only takes a share of an already oversubscribed box); its cost ranged
0% to +80%.  --big 2 and --factor <= 6 are not measurable.

Wall time per run: 16-30 s (10 steps, 3 saves, export).  Disk per run: ~25 MB
of checkpoints (3 x 8.3 MB) + 4 traces of 7.5 MB (12 MB with --shapes).
--resume was checked by hand: loading step_9 written by a 10-step run and
continuing reproduces that run's step-9 loss exactly (5.0822).
"""

import argparse
import math
import os
import re
import statistics
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.checkpoint import FileSystemWriter
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import ProfilerActivity, profile, record_function, schedule


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shapes", action="store_true")
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--batch", type=int, default=6)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--ckpt-every", type=int, default=3)
    p.add_argument("--async-ckpt", action="store_true")
    p.add_argument("--resume", action="store_true")
    p.add_argument("--ckpt-dir", default=None)
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--factor", type=float, default=1.0)
    p.add_argument("--sleep-ms", type=float, default=0.0)
    p.add_argument("--hog", action="store_true")
    p.add_argument("--slow-disk-ms", type=float, default=0.0)
    p.add_argument("--data-sleep-ms", type=float, default=0.0)
    p.add_argument("--seq-sigma", type=float, default=0.0)
    p.add_argument("--big-rank", type=int, default=-1)
    p.add_argument("--big", type=float, default=1.0)
    return p.parse_args()


# ---------------------------------------------------------------- model ----

class SlowDevice:
    """Makes forward matmuls cost `factor` times as much (discarded copies)."""

    def __init__(self, factor=1.0):
        extra = max(0.0, factor - 1.0)
        self.reps = int(extra)
        self.part = extra - self.reps

    @property
    def on(self):
        return self.reps > 0 or self.part > 0

    @torch.no_grad()
    def burn(self, x, lin):
        x2 = x.reshape(-1, x.shape[-1])
        for _ in range(self.reps):
            F.linear(x2, lin.weight, lin.bias)
        if self.part > 0:
            n = int(x2.shape[0] * self.part)
            if n:
                F.linear(x2[:n], lin.weight, lin.bias)


class CausalSelfAttention(nn.Module):
    def __init__(self, d, heads, slow):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.slow = slow

    def forward(self, x):
        B, T, D = x.shape
        q, k, v = self.qkv(x).split(D, dim=-1)
        if self.slow.on:
            self.slow.burn(x, self.qkv)
        q = q.view(B, T, self.heads, -1).transpose(1, 2)
        k = k.view(B, T, self.heads, -1).transpose(1, 2)
        v = v.view(B, T, self.heads, -1).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).reshape(B, T, D)
        if self.slow.on:
            self.slow.burn(y, self.proj)
        return self.proj(y)


class MLP(nn.Module):
    def __init__(self, d, slow):
        super().__init__()
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)
        self.slow = slow

    def forward(self, x):
        h = F.gelu(self.fc(x))
        if self.slow.on:
            self.slow.burn(x, self.fc)
            self.slow.burn(h, self.out)
        return self.out(h)


class Block(nn.Module):
    def __init__(self, d, heads, slow):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = CausalSelfAttention(d, heads, slow)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = MLP(d, slow)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab, d, layers, heads, max_len, slow):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(max_len, d)
        self.blocks = nn.ModuleList(Block(d, heads, slow) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.tok.weight  # tied
        self.apply(self._init)

    @staticmethod
    def _init(m):
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=0.02)

    def forward(self, idx):
        T = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(T))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x))


# ----------------------------------------------------------------- data ----

class SuccessorData:
    """Each token has 4 fixed successors drawn with probs 0.7/0.15/0.1/0.05."""

    def __init__(self, vocab, seed):
        g = torch.Generator().manual_seed(10_000 + seed)
        self.succ = torch.randint(0, vocab, (vocab, 4), generator=g)
        self.table = self.succ.tolist()
        self.probs = torch.tensor([0.7, 0.15, 0.1, 0.05])
        self.vocab = vocab

    def sample(self, batch, seq, gen, delay_s=0.0):
        if delay_s > 0:
            time.sleep(delay_s)  # slow loader (network FS, decoding, ...)
        first = torch.randint(0, self.vocab, (batch,), generator=gen).tolist()
        choice = torch.multinomial(self.probs, batch * seq, replacement=True,
                                   generator=gen).view(batch, seq).tolist()
        rows = []
        for b in range(batch):
            row = [first[b]]
            for c in choice[b]:
                row.append(self.table[row[-1]][c])
            rows.append(row)
        toks = torch.tensor(rows)
        return toks[:, :-1], toks[:, 1:]


# ------------------------------------------------------------ checkpoint ----

class SlowDiskWriter(FileSystemWriter):
    """A FileSystemWriter on a slow disk: every write_data waits first."""

    def __init__(self, path, delay_s, **kw):
        super().__init__(path, **kw)
        self.delay_s = delay_s

    def write_data(self, plan, planner):
        time.sleep(self.delay_s)
        return super().write_data(plan, planner)


def latest_checkpoint(ckpt_dir):
    best = None
    if os.path.isdir(ckpt_dir):
        for name in os.listdir(ckpt_dir):
            m = re.fullmatch(r"step_(\d+)", name)
            if m and os.path.exists(os.path.join(ckpt_dir, name, ".metadata")):
                n = int(m.group(1))
                if best is None or n > best[0]:
                    best = (n, os.path.join(ckpt_dir, name))
    return best


# ------------------------------------------------------------------ hog ----

def start_hog(stop):
    def work():
        # many small matmuls: it keeps a core and holds the GIL often
        a = torch.randn(64, 64)
        b = torch.randn(64, 64) / 8
        while not stop.is_set():
            a = torch.tanh(a @ b)

    th = threading.Thread(target=work, name="neighbour-hog")
    th.start()
    return th


# ----------------------------------------------------------------- main ----

def main():
    args = parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    dist.init_process_group("gloo", timeout=timedelta(seconds=180))
    rank, world = dist.get_rank(), dist.get_world_size()
    # separate group for checkpoint coordination (async saves run their
    # collectives on a background thread; keep them off DDP's group)
    ckpt_pg = dist.new_group(backend="gloo", timeout=timedelta(seconds=180))

    slow = rank == args.slow_rank
    ckpt_dir = args.ckpt_dir or os.path.join(args.out, "ckpt")
    os.makedirs(args.out, exist_ok=True)
    os.makedirs(ckpt_dir, exist_ok=True)

    torch.manual_seed(args.seed)
    max_len = 4 * args.seq
    model = GPT(args.vocab, args.width, args.layers, args.heads, max_len,
                SlowDevice(args.factor if slow else 1.0))
    n_params = sum(p.numel() for p in model.parameters())
    model = DDP(model)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95),
                            weight_decay=0.1, foreach=True)

    start = 0
    if args.resume:
        found = latest_checkpoint(ckpt_dir)
        if found is None:
            if rank == 0:
                print(f"--resume: no checkpoint in {ckpt_dir}, starting from scratch",
                      flush=True)
        else:
            msd, osd = get_state_dict(model, opt)
            state = {"model": msd, "optim": osd, "train": {"step": 0}}
            dcp.load(state, checkpoint_id=found[1], process_group=ckpt_pg)
            set_state_dict(model, opt, model_state_dict=state["model"],
                           optim_state_dict=state["optim"])
            start = int(state["train"]["step"])
            if rank == 0:
                print(f"resumed from {found[1]} (step {start})", flush=True)
    end = start + args.steps

    def lr_lambda(s):
        if s < args.warmup:
            return (s + 1) / args.warmup
        prog = (s - args.warmup) / max(1, 30 - args.warmup)  # 30-step cosine
        return 0.1 + 0.45 * (1 + math.cos(math.pi * min(prog, 1.0)))

    for g in opt.param_groups:
        g.setdefault("initial_lr", args.lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda, last_epoch=start - 1)

    data = SuccessorData(args.vocab, args.seed)
    batch = max(1, round(args.batch * args.big)) if rank == args.big_rank else args.batch
    data_delay = args.data_sleep_ms / 1000.0 if slow else 0.0

    def make_writer(path):
        if slow and args.slow_disk_ms > 0:
            return SlowDiskWriter(path, args.slow_disk_ms / 1000.0)
        return FileSystemWriter(path)

    stop = threading.Event()
    hog = start_hog(stop) if (slow and args.hog) else None

    if rank == 0:
        print(f"[dcp-ckpt] world={world} params={n_params/1e6:.2f}M layers={args.layers} "
              f"width={args.width} batch={args.batch} seq={args.seq} "
              f"ckpt_every={args.ckpt_every} async={args.async_ckpt} "
              f"steps {start}..{end - 1}", flush=True)

    pending = None
    step_times, ckpt_flags = [], []
    prof = profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=1, warmup=1, active=max(1, args.steps - 2), repeat=1),
        record_shapes=args.shapes,
    )
    dist.barrier()
    try:
        with prof:
            for step in range(start, end):
                t0 = time.perf_counter()
                if slow and args.sleep_ms > 0:
                    with record_function("sleep"):
                        time.sleep(args.sleep_ms / 1000.0)
                with record_function("data"):
                    gen = torch.Generator().manual_seed(
                        args.seed * 7_919 + rank * 104_729 + step)
                    seq = args.seq
                    if args.seq_sigma > 0:
                        f = math.exp(args.seq_sigma * torch.randn((), generator=gen).item())
                        seq = min(max(16, int(args.seq * f)), max_len)
                        seq = max(8, 8 * round(seq / 8))
                    x, y = data.sample(batch, seq, gen, data_delay)
                model.train()
                with record_function("forward"):
                    logits = model(x)
                    loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.reshape(-1))
                with record_function("backward"):
                    loss.backward()
                with record_function("optimizer"):
                    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                    opt.step()
                    opt.zero_grad(set_to_none=True)
                    sched.step()
                done = step + 1
                is_ckpt = args.ckpt_every > 0 and done % args.ckpt_every == 0
                if is_ckpt:
                    path = os.path.join(ckpt_dir, f"step_{done}")
                    if pending is not None:
                        with record_function("checkpoint_wait"):
                            pending.result()
                            pending = None
                    with record_function("checkpoint"):
                        msd, osd = get_state_dict(model, opt)
                        state = {"model": msd, "optim": osd, "train": {"step": done}}
                        if args.async_ckpt:
                            pending = dcp.async_save(state, storage_writer=make_writer(path),
                                                     checkpoint_id=path,
                                                     process_group=ckpt_pg)
                        else:
                            dcp.save(state, storage_writer=make_writer(path),
                                     checkpoint_id=path, process_group=ckpt_pg)
                step_times.append(time.perf_counter() - t0)
                ckpt_flags.append(is_ckpt)
                if rank == 0:
                    print(f"step {step:3d} loss {loss.item():.4f} seq {seq} "
                          f"lr {sched.get_last_lr()[0]:.2e} "
                          f"{1000 * step_times[-1]:.0f} ms{' ckpt' if is_ckpt else ''}",
                          flush=True)
                prof.step()
        if pending is not None:
            pending.result()
            pending = None
    finally:
        stop.set()
        if hog is not None:
            hog.join()

    prof.export_chrome_trace(os.path.join(args.out, f"trace_rank{rank}.json"))

    traced = list(zip(step_times, ckpt_flags))[2:] or list(zip(step_times, ckpt_flags))
    med = statistics.median(t for t, _ in traced)
    ck = [t for t, c in traced if c]
    stats = (med, statistics.median(ck) if ck else float("nan"), sum(t for t, _ in traced))
    every = [None] * world
    dist.all_gather_object(every, stats)
    if rank == 0:
        print("median step ms per rank: " +
              " ".join(f"r{r}={1000 * s[0]:.1f}" for r, s in enumerate(every)), flush=True)
        print("median ckpt-step ms per rank: " +
              " ".join(f"r{r}={1000 * s[1]:.1f}" for r, s in enumerate(every)), flush=True)
        print("total traced ms per rank: " +
              " ".join(f"r{r}={1000 * s[2]:.0f}" for r, s in enumerate(every)), flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
