"""Horovod-style data parallelism, hand-rolled on torch.distributed (gloo, CPU).

I wanted to see how Horovod's design ("Horovod: fast and easy distributed deep
learning in TensorFlow", Sergeev & Del Balso) behaves without DDP and without
Horovod itself, so this is a small re-implementation of its core loop:

Model / data
    A pre-LN transformer encoder classifier written by hand (token + learned
    position embeddings, --layers blocks of fused-QKV attention
    (scaled_dot_product_attention) and a 4x GELU MLP, mean pooling, linear head).
    Defaults: d_model 128, 4 layers, 4 heads, batch 6, seq 64, vocab 512, 8
    classes: 54 parameter tensors, 0.89 M parameters, 3.4 MB of fp32 gradients.
    Data is synthetic: a sequence of class k has ~25% of its tokens drawn from
    the k-th slice of the vocabulary, the rest is uniform noise; every rank draws
    its own shard from a generator seeded by (seed, rank, step).  The task is
    learnable: the loss printed by rank 0 goes from ~2.0 to ~0.6-0.9 in 80
    steps (AdamW lr 1e-3).

Parallelism / communication
    Pure data parallelism over 4 gloo processes (torchrun).  Rank 0's initial
    weights are broadcast (hvd.broadcast_parameters).  Every parameter gets a
    register_post_accumulate_grad_hook that pushes its index into a
    queue.Queue.  One background thread ("hvd-background", started once,
    before the training loop, like hvd.init()) runs Horovod's cycle:
      1. every --cycle-ms it drains the queue into a local "ready" set;
      2. negotiation ("hvd_negotiate"): a SUM all_reduce of an int32 ready
         bit-vector (one slot per tensor + one "shutdown" slot) - the
         coordinator step of the paper, done collectively.  Only tensors ready
         on ALL ranks are reduced, so every rank issues the same collectives in
         the same order; this all_reduce runs every cycle, even when idle, so
         the background threads of all ranks advance in lock-step;
      3. tensor fusion ("hvd_fuse"): the agreed tensors, in reverse
         registration order, are packed with torch.cat of flattened grads into
         buffers of at most --fusion-mb MB (0 = no fusion, one all_reduce per
         tensor);
      4. "hvd_allreduce": a blocking dist.all_reduce per fused buffer;
      5. "hvd_unpack": divide by world size and copy back into each .grad.
    The main thread runs forward / backward, then synchronize() waits on a
    threading.Condition until all 54 gradients of this step were reduced, then
    runs the optimizer (AdamW, or SGD momentum with --optim sgd).  The main
    thread issues no collective during training, so the two threads never use
    the process group concurrently.  At the end every rank sets a stop flag;
    the thread exits once the shutdown slot is set on all ranks (no rank leaves
    while others still negotiate), then the main thread joins it.

Profiling
    torch.profiler, CPU activity, schedule(wait=1, warmup=1, active=steps-2),
    prof.step() once per step, ranges "data", "forward", "backward",
    "hvd_synchronize", "optimizer" on the main thread.  Each rank writes one
    chrome trace, <out>/trace_rank<R>.json.  NOTE: in torch 2.13 the profiler is
    thread-local: a Python thread's ops are NOT recorded, whether the thread is
    started before the profiler or inside the `with prof:` block (I checked
    both).  With experimental_config=_ExperimentalConfig(profile_all_threads=True)
    every thread is recorded, so the trace has the background thread (its own
    tid: hvd_negotiate / hvd_fuse / hvd_allreduce / hvd_unpack with
    c10d::allreduce_ under them), two gloo worker threads with
    "gloo:all_reduce" events, and, with --hog, the hog thread's aten::mm.

Flags
    --out DIR            (required) where the 4 chrome traces go
    --steps N            12 (10 traced)
    --seed S             0
    --shapes             record input shapes
    --d-model 128  --layers 4  --heads 4  --batch 6  --seq 64
    --vocab 512  --classes 8  --optim adamw|sgd (adamw)  --lr (1e-3 / 0.05)
    --fusion-mb MB       64 (Horovod's default fusion threshold); 0 = no fusion
    --cycle-ms MS        3 (background cycle time; same on all ranks)
  faults, applied to --slow-rank R only (default -1 = none):
    --factor F           1.0: F times the forward compute of every nn.Linear
                         (extra discarded F.linear calls on the same inputs,
                         fractional part on a slice of the batch)
    --sleep-ms MS        0: time.sleep before each step
    --hog                daemon thread doing 512x512 matmuls the whole run
    --comm-sleep-ms MS   0: the background thread sleeps MS before each fused
                         all_reduce (a stalled comm thread: busy GIL, slow NIC)
  imbalance without a fault:
    --big-rank K --big X rank K's batch is X times larger (default -1 / 1.0)
    --seq-sigma S        0: every rank draws each step's sequence length as
                         seq * lognormal(0, S) seeded by (seed, rank, step),
                         clipped to [seq/4, 4*seq]
  healthy variants: --fusion-mb 0 / 1 / 64, --cycle-ms, --d-model/--layers,
    --batch/--seq, --optim sgd.

Measurements
    Median step time per rank (own perf_counter timing, steps 2..N-1),
    --steps 30, slow/big rank = 1, 4 processes on 2 cores, while other jobs ran
    on the same machine (load 1-9).  The healthy baseline itself moved between
    112 and 320 ms from run to run, so each run is compared with the healthy
    runs just before and after it; the table gives the median change over 4
    such pairs and the range.  Because the background threads negotiate every
    cycle, all ranks run in lock-step and see the SAME step time: a slow rank
    slows every rank equally; it only shows up in how time is split (the slow
    rank spends less time in hvd_synchronize, or, with --comm-sleep-ms, less
    time inside hvd_allreduce, while the others wait there).

    setting                   rank 1 (slow/big)   ranks 0,2,3       >=10%?
    healthy: 112-320 ms per step, median 195 ms (66 rank-runs)
    --factor 1.5                   +0% (-19..+21)      -1% (-17..+20)  no
    --factor 2                     +2% (-18..+10)      -2% (-14..+10)  no
    --factor 3                    +15% (-1..+46)      +14% (-3..+46)   unreliable
    --sleep-ms 50                 +10% (+6..+47)      +15% (+8..+39)   borderline
    --sleep-ms 150                +61% (+14..+123)    +60% (+13..+124) yes
    --hog                         +48% (+16..+100)    +43% (+11..+95)  yes
    --comm-sleep-ms 10            +32% (+11..+44)     +30% (+7..+44)   yes
    --comm-sleep-ms 40            +52% (+19..+66)     +54% (+18..+70)  yes
    --big 1.5                     +10% (-13..+31)      +9% (-17..+29)  borderline
    --big 2                       +15% (+10..+46)     +13% (+8..+46)   yes
    --seq-sigma 0.3 (all ranks)   +17% (-3..+71)      +12% (-6..+63)   mostly
    --seq-sigma 0.6 (all ranks)   +40% (+25..+78)     +30% (+20..+71)  yes
    --fusion-mb 0 (healthy)      +120% (+65..+268)   +120% (+64..+267) (shape)
    --fusion-mb 1 (healthy)       +15% (-16..+32)     +15% (-15..+34)  (shape)
    --cycle-ms 10 (healthy)       +10% (-31..+22)     +12% (-35..+20)  (shape)
    --d-model 192 --layers 3      +28% (+4..+55)      +25% (+6..+57)   (shape)

    Notes: a sleep costs much less than its length (50 ms -> ~+20 ms/step):
    with 4 processes on 2 cores the other ranks use the freed core meanwhile.
    --factor only multiplies the forward nn.Linear matmuls (~25-40 ms of a
    ~200 ms step) and the extra work shares the 2 cores with the idle waiting
    ranks, so even F=3 is within the noise of the step time, although the trace
    shows it clearly (rank 1 forward ~105 ms vs ~55 ms, hvd_synchronize ~60 ms
    vs ~110 ms on the others).  --comm-sleep-ms is multiplied by the number of
    fused all_reduces per step (~5 with the default 64 MB buffer, because
    gradients trickle in over several cycles), minus what overlaps backward.
    Wall time of one run: 15-30 s with the default 12 steps, 16-46 s with 30.
"""

import argparse
import math
import os
import queue
import statistics
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, record_function, schedule
from torch.profiler import _ExperimentalConfig


# --------------------------------------------------------------------------- args

def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="directory for the chrome traces")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shapes", action="store_true", help="record input shapes")
    # model / data shape (healthy variants)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--batch", type=int, default=6)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--classes", type=int, default=8)
    p.add_argument("--optim", choices=["adamw", "sgd"], default="adamw")
    p.add_argument("--lr", type=float, default=None)
    # horovod knobs
    p.add_argument("--fusion-mb", type=float, default=64.0,
                   help="fusion buffer size in MB, 0 = one all_reduce per tensor")
    p.add_argument("--cycle-ms", type=float, default=3.0,
                   help="background thread cycle time (same on all ranks)")
    # faults (one rank)
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--factor", type=float, default=1.0)
    p.add_argument("--sleep-ms", type=float, default=0.0)
    p.add_argument("--hog", action="store_true")
    p.add_argument("--comm-sleep-ms", type=float, default=0.0)
    # imbalance without a fault
    p.add_argument("--big-rank", type=int, default=-1)
    p.add_argument("--big", type=float, default=1.0)
    p.add_argument("--seq-sigma", type=float, default=0.0)
    return p.parse_args()


# --------------------------------------------------------------------------- model

class EncoderLayer(nn.Module):
    """Pre-LN transformer encoder block written out by hand."""

    def __init__(self, d, heads, ff, extra=0.0):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, ff)
        self.fc2 = nn.Linear(ff, d)
        # "slow device": extra (discarded) copies of the main matmuls
        self.extra = extra

    def _burn(self, lin, x):
        if self.extra <= 0:
            return
        with torch.no_grad():
            whole = int(self.extra)
            frac = self.extra - whole
            for _ in range(whole):
                F.linear(x, lin.weight, lin.bias)
            if frac > 0:
                n = max(1, int(round(frac * x.shape[0])))
                F.linear(x[:n], lin.weight, lin.bias)

    def forward(self, x):
        B, T, D = x.shape
        h = self.ln1(x)
        self._burn(self.qkv, h)
        q, k, v = self.qkv(h).view(B, T, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v)
        a = a.transpose(1, 2).reshape(B, T, D)
        self._burn(self.proj, a)
        x = x + self.proj(a)
        h = self.ln2(x)
        self._burn(self.fc1, h)
        h = F.gelu(self.fc1(h))
        self._burn(self.fc2, h)
        return x + self.fc2(h)


class Classifier(nn.Module):
    def __init__(self, vocab, d, layers, heads, classes, max_len, extra=0.0):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(max_len, d)
        self.blocks = nn.ModuleList(EncoderLayer(d, heads, 4 * d, extra) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, classes)

    def forward(self, tokens):
        T = tokens.shape[1]
        x = self.tok(tokens) + self.pos(torch.arange(T))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x).mean(dim=1))


def make_batch(args, rank, step, batch, seq):
    """Synthetic task: class k sprinkles tokens from its own vocab slice into noise."""
    g = torch.Generator().manual_seed(args.seed * 1_000_003 + rank * 10_007 + step)
    y = torch.randint(0, args.classes, (batch,), generator=g)
    noise = torch.randint(0, args.vocab, (batch, seq), generator=g)
    span = args.vocab // args.classes
    signal = y[:, None] * span + torch.randint(0, span, (batch, seq), generator=g)
    use = torch.rand(batch, seq, generator=g) < 0.25
    return torch.where(use, signal, noise), y


def step_seq_len(args, rank, step):
    if args.seq_sigma <= 0:
        return args.seq
    g = torch.Generator().manual_seed(args.seed * 7919 + rank * 104_729 + step * 31 + 1)
    z = torch.randn(1, generator=g).item()
    s = int(round(args.seq * math.exp(args.seq_sigma * z)))
    return max(args.seq // 4, min(4 * args.seq, s))


# --------------------------------------------------------------------------- horovod-ish core

class HorovodLite:
    """Background communication thread with negotiation + tensor fusion.

    Gradients become "ready" through post-accumulate-grad hooks that push the
    parameter index into a queue.  Every cycle the background thread drains the
    queue, agrees with the other ranks on which tensors are ready everywhere
    (the coordinator step of the paper, done as a SUM all_reduce of a ready
    bit-vector instead of messages to rank 0), fuses the agreed tensors into
    buffers of at most fusion_mb and all-reduces each buffer.
    """

    def __init__(self, params, world, cycle_ms, fusion_mb, comm_sleep_ms=0.0):
        self.params = list(params)
        self.n = len(self.params)
        self.world = world
        self.cycle_s = cycle_ms / 1000.0
        self.fusion_bytes = int(fusion_mb * 1024 * 1024)
        self.comm_sleep_s = comm_sleep_ms / 1000.0
        self.q = queue.Queue()
        self.pending = set()           # ready locally, not yet reduced
        self.cv = threading.Condition()
        self.reduced = 0               # tensors reduced in the current step
        self.stop_requested = False
        self.error = None
        self.cycles = 0
        self.thread = None
        for i, p in enumerate(self.params):
            p.register_post_accumulate_grad_hook(self._make_hook(i))

    def _make_hook(self, idx):
        def hook(param):
            self.q.put(idx)
        return hook

    # ---- background thread
    def start(self):
        self.thread = threading.Thread(target=self._loop, name="hvd-background", daemon=True)
        self.thread.start()

    def _loop(self):
        try:
            while True:
                t0 = time.perf_counter()
                if self._cycle():
                    return
                self.cycles += 1
                left = self.cycle_s - (time.perf_counter() - t0)
                if left > 0:
                    time.sleep(left)
        except BaseException as e:  # surface to the main thread
            with self.cv:
                self.error = e
                self.cv.notify_all()

    def _cycle(self):
        while True:
            try:
                self.pending.add(self.q.get_nowait())
            except queue.Empty:
                break
        with record_function("hvd_negotiate"):
            ready = torch.zeros(self.n + 1, dtype=torch.int32)
            if self.pending:
                ready[list(self.pending)] = 1
            ready[self.n] = 1 if (self.stop_requested and not self.pending) else 0
            dist.all_reduce(ready)
        if int(ready[self.n]) == self.world:
            return True
        agreed = (ready[: self.n] == self.world).nonzero().flatten().tolist()
        if not agreed:
            return False
        # deterministic order on every rank: reverse registration (~backward order)
        agreed.sort(reverse=True)
        buckets, cur, cur_bytes = [], [], 0
        for i in agreed:
            nb = self.params[i].grad.numel() * self.params[i].grad.element_size()
            if cur and (self.fusion_bytes <= 0 or cur_bytes + nb > self.fusion_bytes):
                buckets.append(cur)
                cur, cur_bytes = [], 0
            cur.append(i)
            cur_bytes += nb
        if cur:
            buckets.append(cur)
        for b in buckets:
            self._reduce_bucket(b)
        self.pending.difference_update(agreed)
        with self.cv:
            self.reduced += len(agreed)
            self.cv.notify_all()
        return False

    def _reduce_bucket(self, idxs):
        grads = [self.params[i].grad for i in idxs]
        with record_function("hvd_fuse"):
            if len(grads) == 1:
                buf = grads[0].reshape(-1).clone()
            else:
                buf = torch.cat([g.reshape(-1) for g in grads])
        if self.comm_sleep_s > 0:
            time.sleep(self.comm_sleep_s)   # stalled communication thread
        with record_function("hvd_allreduce"):
            dist.all_reduce(buf)
        with record_function("hvd_unpack"):
            buf.div_(self.world)
            off = 0
            for g in grads:
                k = g.numel()
                g.copy_(buf[off:off + k].view_as(g))
                off += k

    # ---- main thread API
    def synchronize(self, timeout=90.0):
        deadline = time.monotonic() + timeout
        with self.cv:
            while self.reduced < self.n and self.error is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("synchronize: gradients not reduced in time")
                self.cv.wait(timeout=min(left, 1.0))
            if self.error is not None:
                raise RuntimeError("background thread failed") from self.error
            self.reduced = 0

    def shutdown(self, timeout=60.0):
        self.stop_requested = True
        if self.thread is not None:
            self.thread.join(timeout)
            if self.thread.is_alive():
                raise RuntimeError("background thread did not stop")
        if self.error is not None:
            raise RuntimeError("background thread failed") from self.error


# --------------------------------------------------------------------------- faults

def start_hog():
    """Noisy neighbour: busy 512x512 matmuls until told to stop."""
    stop = threading.Event()

    def hog():
        a = torch.randn(512, 512)
        b = torch.randn(512, 512)
        while not stop.is_set():
            torch.mm(a, b)

    t = threading.Thread(target=hog, name="hog", daemon=True)
    t.start()
    return stop, t


# --------------------------------------------------------------------------- main

def main():
    args = parse_args()
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    slow = rank == args.slow_rank
    torch.manual_seed(args.seed)

    extra = (args.factor - 1.0) if slow else 0.0
    model = Classifier(args.vocab, args.d_model, args.layers, args.heads, args.classes,
                       max_len=4 * args.seq, extra=extra)
    # hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    with torch.no_grad():
        for t in model.state_dict().values():
            dist.broadcast(t, src=0)

    params = [p for p in model.parameters() if p.requires_grad]
    if args.optim == "adamw":
        opt = torch.optim.AdamW(params, lr=args.lr or 1e-3, weight_decay=0.01)
    else:
        opt = torch.optim.SGD(params, lr=args.lr or 0.05, momentum=0.9)

    hvd = HorovodLite(params, world, args.cycle_ms, args.fusion_mb,
                      comm_sleep_ms=args.comm_sleep_ms if slow else 0.0)
    hog = start_hog() if (slow and args.hog) else None

    batch = args.batch
    if rank == args.big_rank:
        batch = max(1, int(round(args.batch * args.big)))

    os.makedirs(args.out, exist_ok=True)
    step_times = []
    active = max(1, args.steps - 2)
    # The torch profiler is thread-local by default: ops of the background
    # thread (or of any Python thread) are NOT recorded, whether the thread is
    # started before or inside the profiler context.  profile_all_threads=True
    # makes it record every thread of the process.
    prof = profile(activities=[ProfilerActivity.CPU],
                   schedule=schedule(wait=1, warmup=1, active=active),
                   record_shapes=args.shapes,
                   experimental_config=_ExperimentalConfig(profile_all_threads=True))
    hvd.start()   # hvd.init(): the background loop runs for the whole job
    t_start = time.perf_counter()
    with prof:
        for step in range(args.steps):
            t0 = time.perf_counter()
            if slow and args.sleep_ms > 0:
                time.sleep(args.sleep_ms / 1000.0)
            with record_function("data"):
                seq = step_seq_len(args, rank, step)
                x, y = make_batch(args, rank, step, batch, seq)
            with record_function("forward"):
                logits = model(x)
                loss = F.cross_entropy(logits, y)
            with record_function("backward"):
                opt.zero_grad(set_to_none=True)
                loss.backward()
            with record_function("hvd_synchronize"):
                hvd.synchronize()
            with record_function("optimizer"):
                opt.step()
            step_times.append(time.perf_counter() - t0)
            if rank == 0:
                print(f"step {step:4d} loss {loss.item():.4f} "
                      f"time {1000 * step_times[-1]:.1f} ms", flush=True)
            prof.step()
    hvd.shutdown()
    wall = time.perf_counter() - t_start
    if hog is not None:   # a daemon thread inside an aten op at exit aborts the process
        hog[0].set()
        hog[1].join(10)

    prof.export_chrome_trace(os.path.join(args.out, f"trace_rank{rank}.json"))

    body = step_times[2:] if len(step_times) > 4 else step_times
    med = statistics.median(body) * 1000
    print(f"[rank {rank}] median step {med:.1f} ms  loop {wall:.1f} s  "
          f"cycles {hvd.cycles}{'  (slow rank)' if slow else ''}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
