"""A small GPT trained with hand-written GPipe pipeline parallelism times data parallelism (PP2 x DP2).

(calibration table at the end of this docstring)

What it is
----------
A decoder-only transformer LM (pre-norm blocks: LayerNorm -> causal multi-head attention ->
residual, LayerNorm -> GELU MLP (4x) -> residual) trained on 4 CPU processes (gloo,
``init_process_group("gloo")``, ``OMP_NUM_THREADS=1``), split in two ways at once:

* pipeline (PP2): the model is cut into two stages. Stage 0 = token + position embedding and
  the first ``--layers`` blocks; stage 1 = the next ``--layers`` blocks, the final LayerNorm,
  the LM head and the loss;
* data (DP2): two pipeline replicas see different batches. Layout (chosen like Megatron's
  default rank order, pipeline outermost would be the other one; here PP neighbours are
  adjacent ranks):

      replica 0:  rank 0 (stage 0)  ->  rank 1 (stage 1)
      replica 1:  rank 2 (stage 0)  ->  rank 3 (stage 1)

  pipeline groups {0, 1} and {2, 3}; data-parallel groups (twin stages) {0, 2} and {1, 3},
  both made with ``dist.new_group``.

Schedule: plain GPipe, all forwards then all backwards. Each step a replica's batch is
``--microbatches`` (4) microbatches of ``--mb-size`` (2) sequences of ``--seq-len`` (128)
tokens. Stage 0 runs the forward of microbatch 0, 1, ... and sends each output activation
(mb x seq x dim floats) to stage 1, which receives it, runs its forward and the loss. Then
stage 1 runs the backwards in reverse microbatch order and sends the gradient w.r.t. each
received activation back to stage 0, which receives it and back-propagates through its own
blocks. ``--p2p send`` uses blocking ``dist.send``/``dist.recv``; ``--p2p isend`` (default)
posts ``dist.irecv`` for the phase's messages up front and ``dist.isend`` per microbatch,
waiting the receives when needed and the sends at the end of the phase.

After the pipeline each stage averages its gradients with its twin stage of the other replica:
one ``dist.all_reduce`` of a flat buffer (or buckets of ``--bucket-kb``) on the 2-rank DP
group. ``--clip``: the global gradient norm is all-reduced over the pipeline group (the two
stages' squared norms) and the gradients clipped to 1.0. Then AdamW. Every ``--log-every``
(2) steps a world ``all_reduce`` of (loss sum, token count) for the log line; every step each
rank appends a line to its own jsonl log and, every ``--ckpt-every`` (5) steps, saves its
stage's state dict (``torch.save``) into a temporary directory.

Data: a pre-tokenized corpus (uint16, repeated random "phrases") written once by rank 0 to a
temporary ``.bin`` and read through ``np.memmap``; each step a replica draws its sequence
starts from (seed, replica, step), so both stages of a replica read the same rows: stage 0
the inputs, stage 1 the targets.

Communication per step (defaults: dim 128, 2+2 layers, 4 microbatches of 2 x 128): per
microbatch one activation message 0 -> 1 (and 2 -> 3) of 2 x 128 x 128 floats (128 KB) in the
forward phase and one gradient message 1 -> 0 (3 -> 2) of the same size in the backward phase;
one DP all_reduce of the stage's gradients (stage 0 ~0.46 M floats, stage 1 ~0.46 M) on
{0, 2} and {1, 3}; with ``--clip`` one 1-float all_reduce on {0, 1} and {2, 3}; every 2nd
step one 2-float world all_reduce.

User ranges per step: ``sleep`` (fault only), ``load_batch``, ``gpipe_forward``
[``forward_mb`` (with ``recv_act`` on stage 1, the loss inside), ``send_act`` on stage 0],
``gpipe_backward`` [``recv_grad`` on stage 0, ``backward_mb``, ``send_grad`` on stage 1],
``wait_sends``, ``dp_allreduce``, ``grad_norm`` (``--clip``), ``optimizer``,
``loss_allreduce`` (every ``--log-every`` steps), ``log_step``.

Profiling: ``torch.profiler`` CPU, ``schedule(wait=1, warmup=1, active=steps-2, repeat=1)``,
``prof.step()`` once per step, ``record_shapes`` only with ``--shapes``; each rank writes
``trace_rank{R}.json`` into ``--out``. At the end rank 0 prints every rank's median step time
over the traced steps and its median "busy" time (the step minus the time spent in the p2p
sends / receives / waits and in the all_reduces).

Flags
-----
Common: ``--out DIR`` (required), ``--steps`` (10; 8 traced), ``--seed``, ``--shapes``.

Model / job size: ``--layers`` (2 blocks a stage), ``--dim`` (128), ``--heads`` (4),
``--vocab`` (512), ``--seq-len`` (128), ``--mb-size`` (2), ``--microbatches`` (4), ``--lr``
(1e-3), ``--bucket-kb`` (0 = one flat all_reduce), ``--p2p {isend,send}``, ``--clip``,
``--log-every`` (2), ``--ckpt-every`` (5).

Faults (only on ``--slow-rank R``, default -1 = none):

* ``--factor F``: a slower device: every microbatch's forward through the rank's own stage
  is done F times (the F - 1 extra passes without grad, discarded, run as one pass over
  F - 1 stacked copies of the microbatch, so the trace gains one forward's ops, not F - 1;
  a fractional F adds that fraction of the rows);
* ``--sleep-ms MS``: a slow host: ``time.sleep`` once per step at the step's start, in
  ``record_function("sleep")``;
* ``--data-sleep-ms MS``: a slow batch read: ``load_batch`` sleeps MS each step;
* ``--log-sleep-ms MS`` (family fault): a slow per-step logger: the rank's ``log_step``
  sleeps MS before appending its line (a slow shared filesystem);
* ``--hog``: a busy neighbour thread doing 192x192 matmuls for the whole run (stopped and
  joined before exit);
* ``--link-src A --link-dst B --link-factor X`` (A, B the two stages of one pipeline:
  (0,1), (1,0), (2,3) or (3,2)): every p2p message A sends to B carries X times the bytes
  (the activation for A = stage 0, the activation gradient for A = stage 1; zero-padded in
  the same message, B receives all of it and keeps the head). No ``--slow-rank``.

Imbalance without a fault:

* ``--seq-sigma S``: each replica's sequence length of the step is ``seq_len`` times
  lognormal(0, S) (drawn from (seed, replica, step), rounded to a multiple of 8, clamped to
  [seq_len / 4, 4 seq_len]); both stages of a replica see the same draw, the two replicas
  differ;
* ``--big-rank K --big X``: the stage rank K holds gets round(X * layers) blocks, the other
  stage ``--layers``: a heavier stage. The twin of rank K in the other replica holds the same
  stage (the DP all_reduce needs the same parameters), so both replicas have the heavy stage.

Calibration
-----------
2-core box shared with other helpers' jobs (load average 4-19 during these runs); 4 ranks,
10 steps (8 timed). The pipelines and the DP all_reduce tie the ranks, so the four step
medians agree within ~10%: one range. "busy" = median time outside the p2p and the
all_reduces; a fault's slow rank is compared with its twin (the same stage in the other
replica). "base" = the healthy default run just before (its step median).

  setting (slow rank)                            base ms   step ms     busy slow / twin ms
  healthy default (9 runs)                          -      241-621     112-419 (by load)
  healthy --shapes --p2p send --steps 8             -      450-463     182-300
  healthy --microbatches 6 --layers 1 --dim 160
          --bucket-kb 256                           -      607-619     233-438
  healthy --clip --seq-len 192 --mb-size 1 --dim 96 -      358-362     136-221
  healthy --microbatches 8 --layers 1 --heads 8
          --log-every 1 --ckpt-every 3              -      643-654     342-498
  --factor 3 (r1) (*)                            533-615     456        384 / 212
  --factor 3 (r0) (*)                            272-295     424        253 / 238  (load rose)
  --factor 3 (r2) (*)                               -        314        227 / 161
  --factor 4 (r0) (*)                            330-335     293        218 / 125
  --p2p send --factor 4 (r3) (*)                    -        487        345 / 201
  --factor 5 (r0)                                430-478     392        293 / 164
  --factor 4 (r1)                                430-478     559        434 / 249
  --clip --microbatches 6 --layers 1
          --factor 4.5 (r3)                      387-409     566        437 / 195
  --sleep-ms 80 (r1)                                -        459        387 / 297
  --sleep-ms 140 (r1)                               -        501        450 / 274
  --data-sleep-ms 140 (r2)                       433-467     376        246 / 111
  --log-sleep-ms 140 (r0)                        433-467     370        270 / 96
  --hog (r3)                                        -        413        325 / 206
  link 0->1 x64 (8 MB messages)                  232-268   388-430     r0 199, r1 201
  link 0->1 x256 (32 MB)                            -      507-521     r0 216, r1 308
  link 3->2 x256 (gradients)                        -      436-475     r3 290, r2 200
  link 1->0 x512 (64 MB, gradients)              597-621   851-898     r1 437, r0 416
  link 2->3 x512 --p2p send                         -     1072-1120    r2 351, r3 439
  link 2->3 x512                                 387-409   632-654     r2 278, r3 295
  link 2->3 x512 (quieter box, load ~6)          200-246   295-316     r2 131, r3 115
  --sleep-ms 140 (r1) (quieter box)              200-246     254        219 / 96
  --big-rank 3 --big 3 (stages 2 / 6 blocks)        -      890-902     stage 1 805-819, stage 0 211-308
  --layers 1 --big-rank 3 --big 3
          --microbatches 3 (1 / 3 blocks)           -      440-470     stage 1 330-365, stage 0 45-53
  --seq-sigma 0.8                                   -      521-558     254-355

  (*) before the extra passes were batched into one (F - 1 separate passes then; the same
  arithmetic, more ops in the trace: a --factor 5 rank's trace was 17.7 MB).

Reading: the box's load moved a healthy step between 240 and 620 ms from one run to the
next, so one run's step median says little; the slow rank's busy time against its twin's
shows every fault. ``--factor`` repeats only the forward (a third of a stage's compute), so
it takes 4-5 to add 30-40% to the rank's step (stage 0's blocks are the lighter, so it needs
the larger factor). A 140 ms sleep is 25-40% of a step. Any slowed rank stalls its own
pipeline partner (in ``recv_act`` / ``recv_grad``) and, through the DP all_reduce, the other
replica (in ``dp_allreduce``). A padded link costs little until the messages are tens of MB
(loopback TCP); at x512 (64 MB a message, 4 a step) it adds ~250 ms to everyone's step,
the pipeline's pair waiting in the p2p, the other replica in the DP all_reduce. A heavier
stage (``--big``) makes the other stage wait in its receives, in both replicas. Wall per run:
13-40 s; traces ~10-11 MB a rank (12 with --shapes and 8 steps, 12-13 on a factor rank,
--layers 1 --big 3 --microbatches 3: 12 MB on stage 1, 4.4 on stage 0).
"""

import argparse
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, record_function, schedule


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shapes", action="store_true")
    p.add_argument("--layers", type=int, default=2, help="transformer blocks per stage")
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--mb-size", type=int, default=2, help="sequences per microbatch")
    p.add_argument("--microbatches", type=int, default=4)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--bucket-kb", type=int, default=0, help="DP gradient buckets (0 = one flat buffer)")
    p.add_argument("--p2p", choices=["isend", "send"], default="isend")
    p.add_argument("--clip", action="store_true", help="clip by the pipeline's global grad norm")
    p.add_argument("--log-every", type=int, default=2)
    p.add_argument("--ckpt-every", type=int, default=5)
    # faults
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--factor", type=float, default=1.0)
    p.add_argument("--sleep-ms", type=float, default=0.0)
    p.add_argument("--data-sleep-ms", type=float, default=0.0)
    p.add_argument("--log-sleep-ms", type=float, default=0.0)
    p.add_argument("--hog", action="store_true")
    p.add_argument("--link-src", type=int, default=-1)
    p.add_argument("--link-dst", type=int, default=-1)
    p.add_argument("--link-factor", type=float, default=1.0)
    # imbalance
    p.add_argument("--seq-sigma", type=float, default=0.0)
    p.add_argument("--big-rank", type=int, default=-1)
    p.add_argument("--big", type=float, default=1.0)
    a = p.parse_args()
    if (a.link_src >= 0) != (a.link_dst >= 0):
        p.error("--link-src and --link-dst go together")
    if a.link_src >= 0 and {a.link_src, a.link_dst} not in ({0, 1}, {2, 3}):
        p.error("a link joins the two stages of one pipeline: (0,1), (1,0), (2,3) or (3,2)")
    if a.dim % a.heads:
        p.error("--dim must be a multiple of --heads")
    return a


# --------------------------------------------------------------------------
# process layout
# --------------------------------------------------------------------------

PP, DP = 2, 2


def layout(rank):
    """(replica, stage) of a rank: replica 0 = ranks 0 -> 1, replica 1 = ranks 2 -> 3."""
    return rank // PP, rank % PP


def make_groups():
    """Every rank creates every group, in the same order (new_group is collective)."""
    pipe = [dist.new_group([r * PP + s for s in range(PP)]) for r in range(DP)]   # {0,1}, {2,3}
    dpg = [dist.new_group([r * PP + s for r in range(DP)]) for s in range(PP)]    # {0,2}, {1,3}
    return pipe, dpg


class P2P:
    """Sends / receives between the two stages of a pipeline; pads one link with --link-*."""

    def __init__(self, rank, mode, link=None, link_factor=1.0):
        self.rank, self.mode = rank, mode
        self.link, self.link_factor = link, link_factor
        self.pending = []        # isends, waited at the end of the phase
        self.secs = 0.0          # time in communication this step
        self.bufs = {}

    def _padded(self, n, src, dst):
        if self.link is not None and (src, dst) == self.link and self.link_factor > 1:
            return max(n, int(round(n * self.link_factor)))
        return n

    def _buffer(self, key, n):
        buf = self.bufs.get(key)
        if buf is None or buf.numel() != n:
            buf = self.bufs[key] = torch.zeros(n)
        return buf

    def send(self, t, dst, key):
        flat = t.detach().reshape(-1)
        buf = self._buffer(("send", dst, key), self._padded(flat.numel(), self.rank, dst))
        buf[: flat.numel()].copy_(flat)
        t0 = time.perf_counter()
        if self.mode == "send":
            dist.send(buf, dst)
        else:
            self.pending.append(dist.isend(buf, dst))
        self.secs += time.perf_counter() - t0

    def post_recv(self, shape, src, key):
        """isend mode: post the receive now; returns a handle for take()."""
        numel = math.prod(shape)
        buf = self._buffer(("recv", src, key), self._padded(numel, src, self.rank))
        t0 = time.perf_counter()
        work = dist.irecv(buf, src) if self.mode == "isend" else None
        self.secs += time.perf_counter() - t0
        return (work, buf, shape, src)

    def take(self, handle):
        work, buf, shape, src = handle
        t0 = time.perf_counter()
        if work is None:
            dist.recv(buf, src)
        else:
            work.wait()
        self.secs += time.perf_counter() - t0
        return buf[: math.prod(shape)].view(shape).clone()

    def wait_sends(self):
        t0 = time.perf_counter()
        for w in self.pending:
            w.wait()
        self.pending.clear()
        self.secs += time.perf_counter() - t0

    def all_reduce(self, t, group=None):
        t0 = time.perf_counter()
        dist.all_reduce(t, group=group)
        self.secs += time.perf_counter() - t0
        return t


# --------------------------------------------------------------------------
# model
# --------------------------------------------------------------------------

class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, 4 * dim)
        self.out = nn.Linear(4 * dim, dim)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=-1)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class Stage0(nn.Module):
    def __init__(self, vocab, dim, heads, layers, max_len):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(max_len, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))

    def forward(self, tokens):
        T = tokens.shape[1]
        x = self.tok(tokens) + self.pos(torch.arange(T))
        for b in self.blocks:
            x = b(x)
        return x

    def extra_pass(self, tokens):       # the same forward again (a slower chip), result discarded
        return self.forward(tokens)


class Stage1(nn.Module):
    def __init__(self, vocab, dim, heads, layers):
        super().__init__()
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, x, targets):
        for b in self.blocks:
            x = b(x)
        logits = self.head(self.ln(x))
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

    def extra_pass(self, x):
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln(x))


# --------------------------------------------------------------------------
# data
# --------------------------------------------------------------------------

def make_corpus(path, vocab, seed, n_tokens=1 << 20, phrase_len=8, n_phrases=3000):
    g = torch.Generator().manual_seed(seed)
    phrases = torch.randint(0, vocab, (n_phrases, phrase_len), generator=g)
    idx = torch.randint(0, n_phrases, (n_tokens // phrase_len,), generator=g)
    phrases[idx].reshape(-1).numpy().astype(np.uint16).tofile(path)


def seq_len_of(args, replica, step):
    """This step's sequence length for a replica (the same on both its stages)."""
    n = float(args.seq_len)
    if args.seq_sigma > 0:
        g = torch.Generator().manual_seed(args.seed * 1_000_003 + replica * 10_007 + step)
        n *= math.exp(args.seq_sigma * torch.randn((), generator=g, dtype=torch.float64).item())
    n = min(max(n, args.seq_len / 4), 4 * args.seq_len)
    return max(8, int(round(n / 8)) * 8)


def start_hog(stop):
    def spin():
        a = torch.randn(192, 192)
        b = torch.randn(192, 192) / 14.0
        while not stop.is_set():
            a = torch.tanh(a @ b)

    th = threading.Thread(target=spin, name="busy-neighbour", daemon=True)
    th.start()
    return th


def run_extra(model, inp, extra):
    """--factor: F - 1 more forwards of this microbatch through the stage, discarded.

    Done as one pass over F - 1 stacked copies of the microbatch (plus the fractional part's
    rows): the same arithmetic as F - 1 passes, one set of ops in the trace."""
    rows = int(round(inp.shape[0] * extra))
    if rows <= 0:
        return
    reps = -(-rows // inp.shape[0])
    big = inp.repeat(reps, *([1] * (inp.dim() - 1)))[:rows]
    with torch.no_grad():
        model.extra_pass(big)


# --------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------

def main():
    args = parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    dist.init_process_group("gloo", timeout=timedelta(seconds=180))
    rank, world = dist.get_rank(), dist.get_world_size()
    if world != PP * DP:
        raise SystemExit("this job is laid out for 4 ranks (PP2 x DP2)")
    replica, stage = layout(rank)
    peer = replica * PP + (1 - stage)          # the other stage of my pipeline
    pipe_groups, dp_groups = make_groups()
    pipe_group, dp_group = pipe_groups[replica], dp_groups[stage]
    slow = rank == args.slow_rank

    link = (args.link_src, args.link_dst) if args.link_src >= 0 else None
    comm = P2P(rank, args.p2p, link, args.link_factor)

    # the corpus: written once by rank 0, memory-mapped by all
    tmp = [None]
    if rank == 0:
        tmp[0] = tempfile.mkdtemp(prefix="gpipe_dp_")
        make_corpus(os.path.join(tmp[0], "train.bin"), args.vocab, args.seed)
    dist.broadcast_object_list(tmp, src=0)
    work_dir = tmp[0]
    dist.barrier()
    corpus = np.memmap(os.path.join(work_dir, "train.bin"), dtype=np.uint16, mode="r")
    log_path = os.path.join(work_dir, f"log_rank{rank}.jsonl")

    # layers per stage: --big-rank's stage is the heavy one (in both replicas)
    n_layers = [args.layers, args.layers]
    if args.big_rank >= 0:
        n_layers[layout(args.big_rank)[1]] = max(1, int(round(args.big * args.layers)))

    torch.manual_seed(args.seed * 31 + stage)    # twin stages start from the same weights
    max_len = 4 * args.seq_len + 8
    if stage == 0:
        model = Stage0(args.vocab, args.dim, args.heads, n_layers[0], max_len)
    else:
        model = Stage1(args.vocab, args.dim, args.heads, n_layers[1])
    params = list(model.parameters())
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.01)
    n_params = sum(q.numel() for q in params)

    buckets, cur, cur_n = [], [], 0
    limit = args.bucket_kb * 256 if args.bucket_kb > 0 else float("inf")
    for q in reversed(params):
        cur.append(q)
        cur_n += q.numel()
        if cur_n >= limit:
            buckets.append(cur)
            cur, cur_n = [], 0
    if cur:
        buckets.append(cur)

    extra = max(0.0, args.factor - 1.0) if slow else 0.0
    stop = threading.Event()
    hog = start_hog(stop) if slow and args.hog else None

    counts = [None] * world
    dist.all_gather_object(counts, n_params)
    if rank == 0:
        print(f"[gpipe-dp] PP2xDP2 pipelines 0->1, 2->3; layers/stage={n_layers} dim={args.dim} "
              f"heads={args.heads} vocab={args.vocab} seq={args.seq_len} mb={args.mb_size}x{args.microbatches} "
              f"params/rank={counts} buckets={len(buckets)} p2p={args.p2p}", flush=True)

    os.makedirs(args.out, exist_ok=True)
    prof = profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=1, warmup=1, active=max(1, args.steps - 2), repeat=1),
        record_shapes=args.shapes,
    )
    M, mbs = args.microbatches, args.mb_size
    step_times, busy_times = [], []
    last_loss = float("nan")
    dist.barrier()
    try:
        with prof:
            for step in range(args.steps):
                t0 = time.perf_counter()
                comm.secs = 0.0
                if slow and args.sleep_ms > 0:
                    with record_function("sleep"):
                        time.sleep(args.sleep_ms / 1000.0)

                with record_function("load_batch"):
                    if slow and args.data_sleep_ms > 0:
                        time.sleep(args.data_sleep_ms / 1000.0)
                    T = seq_len_of(args, replica, step)
                    g = torch.Generator().manual_seed(args.seed * 7919 + replica * 104_729 + step)
                    starts = torch.randint(0, len(corpus) - T - 2, (M * mbs,), generator=g).tolist()
                    rows = np.stack([np.asarray(corpus[s: s + T + 1], dtype=np.int64) for s in starts])
                    batch = torch.from_numpy(rows).view(M, mbs, T + 1)
                    if stage == 0:
                        mb_in = [batch[m, :, :-1] for m in range(M)]
                    else:
                        mb_tgt = [batch[m, :, 1:] for m in range(M)]
                act_shape = (mbs, T, args.dim)

                opt.zero_grad(set_to_none=False)
                outs, ins, losses = [], [], []
                # ---------------- all forwards ----------------
                with record_function("gpipe_forward"):
                    if stage == 1:
                        handles = [comm.post_recv(act_shape, peer, ("act", m)) for m in range(M)]
                    for m in range(M):
                        if stage == 0:
                            with record_function("forward_mb"):
                                y = model(mb_in[m])
                                if extra > 0:
                                    run_extra(model, mb_in[m], extra)
                            outs.append(y)
                            with record_function("send_act"):
                                comm.send(y, peer, ("act", m))
                        else:
                            with record_function("forward_mb"):
                                with record_function("recv_act"):
                                    x = comm.take(handles[m])
                                x.requires_grad_(True)
                                loss = model(x, mb_tgt[m]) / M
                                if extra > 0:
                                    run_extra(model, x.detach(), extra)
                            ins.append(x)
                            losses.append(loss)
                # ---------------- all backwards (reverse order) ----------------
                with record_function("gpipe_backward"):
                    if stage == 0:
                        handles = {m: comm.post_recv(act_shape, peer, ("grad", m)) for m in reversed(range(M))}
                    for m in reversed(range(M)):
                        if stage == 0:
                            with record_function("recv_grad"):
                                dy = comm.take(handles[m])
                            with record_function("backward_mb"):
                                outs[m].backward(dy)
                        else:
                            with record_function("backward_mb"):
                                losses[m].backward()
                            with record_function("send_grad"):
                                comm.send(ins[m].grad, peer, ("grad", m))
                with record_function("wait_sends"):
                    comm.wait_sends()

                with record_function("dp_allreduce"):
                    for bk in buckets:
                        flat = torch.cat([q.grad.reshape(-1) for q in bk])
                        comm.all_reduce(flat, group=dp_group)
                        flat /= DP
                        o = 0
                        for q in bk:
                            q.grad.copy_(flat[o: o + q.numel()].view_as(q))
                            o += q.numel()
                gnorm = float("nan")
                if args.clip:
                    with record_function("grad_norm"):
                        sq = torch.stack([q.grad.pow(2).sum() for q in params]).sum().reshape(1)
                        comm.all_reduce(sq, group=pipe_group)
                        gnorm = math.sqrt(sq.item())
                        if gnorm > 1.0:
                            for q in params:
                                q.grad.mul_(1.0 / (gnorm + 1e-6))
                with record_function("optimizer"):
                    opt.step()

                loss_sum = sum(l.item() for l in losses) if stage == 1 else 0.0
                if step % args.log_every == 0:
                    with record_function("loss_allreduce"):
                        m_t = torch.tensor([loss_sum, 1.0 if stage == 1 else 0.0])
                        comm.all_reduce(m_t)
                        last_loss = m_t[0].item() / max(1.0, m_t[1].item())

                with record_function("log_step"):
                    if slow and args.log_sleep_ms > 0:
                        time.sleep(args.log_sleep_ms / 1000.0)
                    with open(log_path, "a") as fh:
                        fh.write(json.dumps({"step": step, "rank": rank, "stage": stage, "replica": replica,
                                             "seq": T, "loss": loss_sum if stage == 1 else None,
                                             "grad_norm": gnorm}) + "\n")
                    if args.ckpt_every > 0 and (step + 1) % args.ckpt_every == 0:
                        torch.save({"step": step, "model": model.state_dict()},
                                   os.path.join(work_dir, f"stage{stage}_replica{replica}.pt"))

                step_times.append(time.perf_counter() - t0)
                busy_times.append(step_times[-1] - comm.secs)
                if rank == 0:
                    print(f"step {step:3d} loss {last_loss:.4f} seq {T} t {1000 * step_times[-1]:.1f} ms",
                          flush=True)
                prof.step()
    finally:
        stop.set()
        if hog is not None:
            hog.join()

    prof.export_chrome_trace(os.path.join(args.out, f"trace_rank{rank}.json"))

    traced = step_times[2:] if len(step_times) > 2 else step_times
    busy = busy_times[2:] if len(busy_times) > 2 else busy_times
    med = (statistics.median(traced), statistics.median(busy))
    allmed = [None] * world
    dist.all_gather_object(allmed, med)
    if rank == 0:
        print("median step ms per rank: " +
              " ".join(f"r{r}={1000 * s:.1f}" for r, (s, _) in enumerate(allmed)), flush=True)
        print("median busy ms (outside p2p and all_reduces) per rank: " +
              " ".join(f"r{r}={1000 * b:.1f}" for r, (_, b) in enumerate(allmed)), flush=True)
    dist.barrier()
    if rank == 0:
        shutil.rmtree(work_dir, ignore_errors=True)
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
