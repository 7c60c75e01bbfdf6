"""Horovod-style data parallelism, hand-rolled on torch.distributed (gloo, CPU).

TABLE_PLACEHOLDER
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
