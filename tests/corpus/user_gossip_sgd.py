"""Decentralized (gossip) SGD in the D-PSGD style, written with plain ``torch.distributed`` as one
writes it after reading Lian et al., "Can Decentralized Algorithms Outperform Centralized
Algorithms?" (NeurIPS 2017) and Assran et al.'s Stochastic Gradient Push: every rank trains its
own replica, and after each local step averages its parameters ONLY with its neighbours in a
communication graph, by ``dist.isend``/``dist.irecv`` of one flat parameter buffer. No DDP, no
``all_reduce`` in the training step. CPUs, gloo (``init_process_group`` with a 120 s timeout).

The model is a small causal transformer language model: token and position embeddings
(``--vocab`` 1024), ``--layers`` (2) pre-norm blocks of width ``--width`` (256): causal
self-attention (``scaled_dot_product_attention(is_causal=True)``, heads of 64), a GELU MLP
``W -> 4W -> W``, residuals around both; a final LayerNorm and an untied linear head over the
vocabulary. 2.15M parameters at the defaults: 8.2 MB of fp32, the size of every gossip message.
Next-token cross-entropy.

Data: a random sparse first-order Markov chain over the vocabulary (each token has 4 possible
successors, with probabilities 0.6, 0.25, 0.1, 0.05; the chain drawn once from ``--seed``, the
same on every rank); each rank walks its own ``--batch`` (4) sequences of ``--seq`` (48) tokens
a step from a generator seeded by (``--seed``, rank, step). The best loss is the chain's entropy,
1.08 nats; a uniform guess is ln 1024 = 6.93.

Every rank starts from the same weights (``--seed``; ``--init-per-rank``: each its own, and rank 0
prints their consensus distance before the loop, to watch gossip pull them together) and steps its
own optimizer, whose state is never shared: ``--optim adamw`` (default; fused AdamW, lr ``--lr``
3e-3, weight decay 0.01) or ``--optim sgd`` (SGD with Nesterov momentum 0.9 as in SGP, lr 0.1
unless ``--lr`` says; on this model it hardly moves the loss in 60 steps: 6.94 -> 5.1, where
AdamW reaches 2.1). One step (one ``ProfilerStep#N``):

- ``data``: the batch (a few torch ops, 1-4 ms);
- ``forward`` (model and loss), ``backward``, ``optimizer`` (``step`` and ``zero_grad``);
- ``gossip``: the parameters packed into one flat buffer (``torch.cat``), an ``irecv`` posted
  for each in-neighbour and an ``isend`` to each out-neighbour (tag: the step), all waited for,
  then ``x <- (x + sum of the neighbours' x) / (1 + in-degree)`` copied back into the
  parameters: uniform mixing weights over self and neighbours, ``x_{t+1} = W (x_t - lr g_t)``.

``--topology``:

- ``ring`` (default): neighbours ``r - 1`` and ``r + 1`` (mod world; one neighbour on 2 ranks),
  a message to each and from each every step, weights 1/3.
- ``exp``: the one-peer exponential graph: at step ``t``, with ``k = t mod ceil(log2 world)``,
  rank ``r`` sends to ``(r + 2^k) mod world`` and receives from ``(r - 2^k) mod world``; weights
  1/2. On 4 ranks the shift is 1 on even steps and 2 on odd ones (then both directions are the
  same pair): one message out and one in a step, half the ring's bytes.
- ``pair``: alternating pairings: on even steps (0,1), (2,3), ...; on odd steps (1,2), (3,4), ...
  and (world-1, 0) when the world is even; each pair averages (weights 1/2), a rank without a
  partner that step keeps its weights.

``--overlap``: as SGP's overlap. At the start of step ``t`` (``gossip_wait``) the exchange posted
at the start of step ``t - 1`` is waited for and mixed in as ``x <- x + (sum of received -
d x_sent) / (1 + d)`` (``x_sent``: the snapshot this rank sent, ``d`` its in-degree that step:
exactly ``x_t = W x_{t-1} + (local update of step t - 1)``); then (``gossip_start``) the current
parameters are packed and the next exchange posted, which runs on gloo's threads while the step
computes. The messages therefore cross the ``ProfilerStep`` boundaries (a ``gloo:send`` or
``gloo:recv`` span lasts from its posting in one step to the ``gossip_wait`` of the next). The
last step waits for its own exchange at its end, inside the trace: a send or receive still in
flight when the profiler stops crashed the job at exit (SIGSEGV in 2 of 2 runs before).

``--eval-every N`` (0: never): after every N-th step the ranks' losses are summed with one
``dist.all_reduce`` (``log_loss``) and rank 0 prints their mean: the only collective in the loop,
off by default. Rank 0 prints its own loss every step. At the end, outside the profiler, it
prints the consensus distance ``mean_r ||x_r - x_mean||^2`` over the parameters, and that over
``||x_mean||^2``: small while gossip mixes (the replicas' data differ, so it is not 0).

Profiling: ``torch.profiler.profile(activities=[CPU], schedule=schedule(wait=1, warmup=1,
active=steps-2))`` (``--no-profile``: none), ``record_shapes`` only with ``--shapes``,
``prof.step()`` after each step, one chrome trace per rank, ``gossip-rank<R>.json`` in ``--out``.
Each ``isend`` is a ``c10d::send`` op and a ``gloo:send`` span to the end of its transfer, each
``irecv`` a ``c10d::recv_`` and a ``gloo:recv``; ``wait()`` leaves no event of its own. Only with
``--shapes`` do ``c10d::send``/``c10d::recv_`` carry the peer and the tag (``Concrete Inputs``)
and the message's length (``Input Dims``); without it a trace does not say who talks to whom.

Flags:

- ``--out DIR`` (required), ``--steps N`` (10, 8 traced), ``--seed S`` (0), ``--shapes``,
  ``--no-profile``.
- ``--width W`` (256, a multiple of 64), ``--layers L`` (2), ``--seq T`` (48), ``--batch B`` (4),
  ``--vocab V`` (1024), ``--optim``, ``--lr``, ``--topology``, ``--overlap``, ``--eval-every``,
  ``--init-per-rank``.
- ``--slow-link A B --extra F``: every gossip message rank A sends to rank B carries F x the
  bytes: the parameters followed by ``(F - 1)`` x their size of zeros, in the same ``isend``; B
  receives the whole message and mixes in the real part only. On A the packed snapshot is the
  head of that long buffer, so A runs the same ops as its peers (no extra copy: a copy only on A
  made a detector call A slow compute). B must be one of A's out-neighbours in the topology (at
  any step of its period), else every rank stops at once with an argparse error naming A's
  out-neighbours. In ``exp`` and ``pair`` on 4 ranks A sends to B every other step only, so only
  those steps carry it.
- ``--slow-rank R`` (-1: none), and on that rank only: ``--factor F``, a forward hook on every
  linear layer computes its output again without grad ``(F - 1) x 4.3`` times a call
  (fractions carried over calls), so forward + backward take about F x as long (see
  ``EXTRA_PER_UNIT``; all of the extra time lands in ``forward``); ``--hog``, a daemon thread
  multiplying 512x512 matrices for the whole run; ``--sleep-ms MS``, a host sleep before each step;
  ``--data-sleep-ms MS``, a sleep in ``data``.
- Imbalance, no fault: ``--seq-sigma S``, each rank draws each step's sequence length as T x a
  lognormal of sigma S (seeded by rank and step), clipped to [8, 4T]; ``--uneven``, rank r gets
  ``round(B (1 + 0.25 r))`` sequences (4, 5, 6, 7 at the defaults); ``--big-rank K --big X``, rank K
  gets ``round(B X)`` sequences.

    OMP_NUM_THREADS=1 python -m torch.distributed.run --standalone --nproc_per_node=4 \\
        tests/corpus/user_gossip_sgd.py --out DIR --topology ring --slow-link 1 2 --extra 4

Measured on the development machine's 2 cores, 4 ranks, load average 2-6 from other work (so a
step swings 2x from run to run): a job takes 15-20 s wall, traces 4.6 MB a rank (6.8 MB with
``--shapes``), the losses identical whatever the fault (the injectors change no arithmetic).

- Convergence, 60 steps, ``--no-profile``, rank 0's loss every 10 steps (start 6.94): ring 6.16
  5.23 3.82 3.30 2.86 2.07 (mean over ranks at the end 2.37); exp 2.12; pair 2.12; ``--overlap``
  ring 2.27, exp 2.62 (a bump to 7.7 at step 9, then down); ``--optim sgd`` 5.13. Consensus
  distance at the end 1e-1 to 2e-1 (3e-5 to 6e-5 of ``||x_mean||^2``), about 4x to 10x more
  with ``--overlap`` (the neighbours' last update arrives a step late).
- Mixing is right: with ``--lr 0 --init-per-rank`` the distance (644 at the start) is 0 after 4
  steps for exp and pair on 4 ranks (and for every topology on 2 ranks), 3e-15 with
  ``--overlap`` exp (one step later), and 0.098 for the ring = 644 x (1/9)^4 (its mixing
  matrix's second eigenvalues are +-1/3). Trained with ``--init-per-rank``, 644 -> 0.15 (ring)
  in 10 steps.
- Healthy ring, mean ``ProfilerStep`` 125-230 ms (median about 165): forward + backward 70-90,
  optimizer 6-15, ``gossip`` 0.42-0.48 of the step on every rank (it holds the waits for the
  neighbours' compute as well as the transfers and the 8 MB pack/average). exp and pair: 120-180
  ms, ``gossip`` 0.36-0.42 (one message each way instead of two). ``--overlap`` ring: 95-190 ms,
  ``gossip_wait`` + ``gossip_start`` 0.27-0.34.
- ``--slow-link``, ring, x4: ``gossip``'s share of the step 0.48-0.50 (1 -> 2) and 0.48-0.56
  (3 -> 0) against 0.42-0.48 healthy, 3 runs each; x8 (1 -> 2): 0.55-0.58 against 0.41-0.45 in
  runs beside them. One link's transfer (with ``--shapes``: the end of B's ``gloo:recv`` less the
  later of the two postings), median over 8 steps: healthy links 7-33 ms (one at 56 in a loaded
  run), the x4 link 23-47, the x8 link 87 (and B's other in-link, queued behind it, 103).
  exp x6 (1 -> 2, every other step): no visible change of the share. ``--overlap`` x4: share
  0.32-0.37 against 0.27-0.34.
- ``--slow-rank 2 --factor 2``: its forward + backward 181 ms against 81-97 for its peers (its
  forward 133 against 30-38), the peers' ``gossip`` 149-167 ms against its 69; ``--hog`` on rank 3:
  its forward + backward 172 against 105-121; ``--sleep-ms 30`` on rank 1: its ``gossip`` 67 ms
  against 82-87; ``--data-sleep-ms 30`` on rank 0: its ``data`` 32 ms, its ``gossip`` 33 against
  58-71. ``--uneven``: forward + backward 102 / 119 / 127 / 145 ms on ranks 0-3.
"""

from __future__ import annotations

import argparse
import math
import os
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, record_function

HEAD_DIM = 64
SUCCESSOR_P = (0.6, 0.25, 0.1, 0.05)
# --factor F on the slow rank: each linear layer's forward is recomputed (no grad) (F - 1) x
# EXTRA_PER_UNIT times per call. Forward + backward is about 3 forwards of the linear layers over
# their share of the compute (attention, norms, GELU, the loss are the rest). Measured in one
# process at the defaults (median thread CPU time of forward + backward over 37 batches, 2 rounds
# on a loaded machine): F = 1.5 / 2 / 3 -> 1.48-1.65x / 1.90-2.25x / 2.79-2.97x.
EXTRA_PER_UNIT = 4.3


# ---------------------------------------------------------------------------------------------
# model and data


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.heads = d // HEAD_DIM
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, HEAD_DIM).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class CausalLM(nn.Module):
    def __init__(self, vocab, d, layers, max_len):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(max_len, d)
        self.blocks = nn.ModuleList(Block(d) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, 0.02)
            if isinstance(m, nn.Linear):
                nn.init.zeros_(m.bias)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x))


class MarkovData:
    """Sequences walked along a sparse random Markov chain (the same chain on every rank)."""

    def __init__(self, vocab, seed):
        g = torch.Generator().manual_seed(seed * 7 + 1)
        self.succ = torch.randint(vocab, (vocab, len(SUCCESSOR_P)), generator=g)
        self.p = torch.tensor(SUCCESSOR_P)
        self.vocab = vocab

    def batch(self, b, t, g):
        pick = torch.multinomial(self.p, b * t, replacement=True, generator=g).view(b, t)
        tok = torch.empty(b, t + 1, dtype=torch.long)
        tok[:, 0] = torch.randint(self.vocab, (b,), generator=g)
        for i in range(t):
            tok[:, i + 1] = self.succ[tok[:, i], pick[:, i]]
        return tok[:, :-1], tok[:, 1:]


# ---------------------------------------------------------------------------------------------
# the communication graph


def exp_phases(world):
    return max(1, (world - 1).bit_length())           # ceil(log2 world)


def peers(topology, rank, world, step):
    """(send_to, recv_from) of ``rank`` at ``step``."""
    if world == 1:
        return [], []
    if topology == "ring":
        nbrs = sorted({(rank - 1) % world, (rank + 1) % world} - {rank})
        return nbrs, nbrs
    if topology == "exp":
        shift = 2 ** (step % exp_phases(world))
        return [(rank + shift) % world], [(rank - shift) % world]
    # pair: (0,1), (2,3), ... on even steps; (1,2), (3,4), ..., (world-1, 0) on odd ones
    if step % 2 == 0:
        mate = rank ^ 1
        ok = mate < world
    else:
        mate = rank + 1 if rank % 2 == 1 else rank - 1
        if world % 2 == 0:
            mate %= world
        ok = 0 <= mate < world and mate != rank
    return ([mate], [mate]) if ok else ([], [])


def period(topology, world):
    return {"ring": 1, "exp": exp_phases(world), "pair": 2}[topology]


def out_neighbours(topology, rank, world):
    return sorted({d for s in range(period(topology, world)) for d in peers(topology, rank, world, s)[0]})


class Gossip:
    """Neighbour averaging of a flat parameter vector over isend/irecv."""

    def __init__(self, params, topology, rank, world, slow_link=None, extra=1.0):
        self.params = params
        self.topology, self.rank, self.world = topology, rank, world
        self.n = sum(p.numel() for p in params)
        self.recv = {}                                   # peer -> receive buffer
        # --slow-link A B --extra F: A's messages to B are F x as long (zeros after the parameters).
        # On A the snapshot is the head of the long buffer, so A packs once, as every rank does,
        # and sends the whole buffer to B, the head alone to its other neighbours: no extra op.
        self.long = int(round(extra * self.n))
        self.pad_to = slow_link[1] if slow_link and rank == slow_link[0] else None
        self.pad_from = slow_link[0] if slow_link and rank == slow_link[1] else None
        self.padded = torch.zeros(self.long) if self.pad_to is not None else None
        # the snapshot this rank sends
        self.sent = self.padded[:self.n] if self.padded is not None else torch.empty(self.n)
        self.pending = None                              # (works, recv_from) of the exchange in flight

    def _rbuf(self, src):
        if src not in self.recv:
            self.recv[src] = torch.empty(self.long if src == self.pad_from else self.n)
        return self.recv[src]

    def pack(self):
        torch.cat([p.detach().reshape(-1) for p in self.params], out=self.sent)

    def unpack(self, flat):
        off = 0
        for p in self.params:
            p.copy_(flat[off:off + p.numel()].view_as(p))
            off += p.numel()

    def post(self, step):
        send_to, recv_from = peers(self.topology, self.rank, self.world, step)
        works = [dist.irecv(self._rbuf(src), src, tag=step) for src in recv_from]
        for dst in send_to:
            works.append(dist.isend(self.padded if dst == self.pad_to else self.sent, dst, tag=step))
        self.pending = (works, recv_from)

    def finish(self):
        works, recv_from = self.pending
        self.pending = None
        for w in works:
            w.wait()
        return [self.recv[src][:self.n] for src in recv_from]

    @torch.no_grad()
    def average(self, step):
        """Blocking: x <- (x + sum of neighbours' x) / (1 + d)."""
        self.pack()
        self.post(step)
        got = self.finish()
        if got:
            mixed = self.sent.clone()
            for x in got:
                mixed.add_(x)
            self.unpack(mixed.div_(1 + len(got)))

    @torch.no_grad()
    def wait_and_mix(self):
        """--overlap: x <- x + (sum of received - d x_sent) / (1 + d)."""
        if self.pending is None:
            return
        got = self.finish()
        if not got:
            return
        delta = torch.zeros(self.n)
        for x in got:
            delta.add_(x)
        delta.sub_(self.sent, alpha=len(got)).div_(1 + len(got))
        off = 0
        for p in self.params:
            p.add_(delta[off:off + p.numel()].view_as(p))
            off += p.numel()

    @torch.no_grad()
    def start(self, step):
        self.pack()
        self.post(step)


# ---------------------------------------------------------------------------------------------
# fault injectors


def slow_linears(model, extra):
    """On the slow rank: every linear layer recomputes its output ``extra`` times per call."""
    credit = [0.0]

    def hook(mod, inputs, output):
        credit[0] += extra
        n = int(credit[0])
        credit[0] -= n
        with torch.no_grad():
            for _ in range(n):
                F.linear(inputs[0], mod.weight, mod.bias)

    for m in model.modules():
        if isinstance(m, nn.Linear):
            m.register_forward_hook(hook)


def start_hog(stop):
    def spin():
        a, b = torch.randn(512, 512), torch.randn(512, 512)
        while not stop.is_set():
            torch.mm(a, b)

    t = threading.Thread(target=spin, name="hog", daemon=True)
    t.start()
    return t


# ---------------------------------------------------------------------------------------------


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="directory for the chrome traces (one per rank)")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shapes", action="store_true", help="profiler record_shapes")
    p.add_argument("--no-profile", action="store_true", help="no profiler (long convergence runs)")
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--seq", type=int, default=48)
    p.add_argument("--batch", type=int, default=4, help="sequences per rank per step")
    p.add_argument("--vocab", type=int, default=1024)
    p.add_argument("--optim", choices=["adamw", "sgd"], default="adamw")
    p.add_argument("--lr", type=float, default=None, help="default: 3e-3 (adamw), 0.1 (sgd)")
    p.add_argument("--topology", choices=["ring", "exp", "pair"], default="ring")
    p.add_argument("--overlap", action="store_true",
                   help="post step t's exchange at its start, wait for it at the start of step t+1")
    p.add_argument("--eval-every", type=int, default=0, help="all_reduce the loss every N steps (0: never)")
    p.add_argument("--init-per-rank", action="store_true", help="each rank its own initial weights")
    p.add_argument("--slow-link", type=int, nargs=2, metavar=("A", "B"), default=None,
                   help="gossip messages from A to B carry --extra x the bytes")
    p.add_argument("--extra", type=float, default=1.0, help="byte multiplier on --slow-link")
    p.add_argument("--slow-rank", type=int, default=-1, help="rank the faults below apply to")
    p.add_argument("--factor", type=float, default=1.0, help="forward+backward compute, x peers'")
    p.add_argument("--hog", action="store_true", help="a busy matmul thread on the slow rank")
    p.add_argument("--sleep-ms", type=float, default=0.0, help="host sleep before each step")
    p.add_argument("--data-sleep-ms", type=float, default=0.0, help="sleep building each batch")
    p.add_argument("--seq-sigma", type=float, default=0.0, help="lognormal sequence length sigma")
    p.add_argument("--uneven", action="store_true", help="rank r gets batch * (1 + 0.25 r)")
    p.add_argument("--big-rank", type=int, default=-1, help="this rank's batch is --big times the others'")
    p.add_argument("--big", type=float, default=1.0)
    args = p.parse_args()

    world = int(os.environ.get("WORLD_SIZE", "1"))
    if args.steps < 3:
        p.error("--steps must be at least 3 (the profiler waits 1 and warms up 1)")
    if args.width <= 0 or args.width % HEAD_DIM:
        p.error(f"--width must be a positive multiple of {HEAD_DIM}")
    if min(args.layers, args.batch) < 1 or args.seq < 8 or args.vocab < len(SUCCESSOR_P):
        p.error("--layers and --batch must be at least 1, --seq at least 8, --vocab at least 4")
    if args.eval_every < 0:
        p.error("--eval-every must not be negative")
    if args.extra < 1.0:
        p.error("--extra must be at least 1")
    if args.extra > 1 and args.slow_link is None:
        p.error("--extra needs --slow-link")
    if args.slow_link is not None:
        a, b = args.slow_link
        if not (0 <= a < world and 0 <= b < world) or a == b:
            p.error(f"--slow-link {a} {b}: two different ranks below the world size ({world})")
        nbrs = out_neighbours(args.topology, a, world)
        if b not in nbrs:
            p.error(f"--slow-link {a} {b}: rank {a} never sends to rank {b} in the {args.topology} "
                    f"topology on {world} ranks (it sends to {nbrs})")
    if args.slow_rank >= world:
        p.error(f"--slow-rank must be below the world size ({world})")
    if args.slow_rank < 0 and (args.factor != 1 or args.hog or args.sleep_ms or args.data_sleep_ms):
        p.error("--factor, --hog, --sleep-ms and --data-sleep-ms need --slow-rank")
    if args.factor < 1 or args.sleep_ms < 0 or args.data_sleep_ms < 0 or args.seq_sigma < 0:
        p.error("--factor must be at least 1; --sleep-ms, --data-sleep-ms, --seq-sigma not negative")
    lr = args.lr if args.lr is not None else (0.1 if args.optim == "sgd" else 3e-3)

    dist.init_process_group("gloo", timeout=timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    slow = rank == args.slow_rank
    os.makedirs(args.out, exist_ok=True)

    torch.manual_seed(args.seed + (1000 * rank if args.init_per_rank else 0))
    max_len = 4 * args.seq
    model = CausalLM(args.vocab, args.width, args.layers, max_len)
    params = list(model.parameters())
    if args.optim == "sgd":
        opt = torch.optim.SGD(params, lr=lr, momentum=0.9, nesterov=True)
    else:
        opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.01, fused=True)
    if slow and args.factor > 1:
        slow_linears(model, (args.factor - 1) * EXTRA_PER_UNIT)
    gossip = Gossip(params, args.topology, rank, world, args.slow_link, args.extra)
    data = MarkovData(args.vocab, args.seed)
    my_batch = round(args.batch * (1 + 0.25 * rank)) if args.uneven else args.batch
    if rank == args.big_rank:
        my_batch = max(1, round(my_batch * args.big))
    if rank == 0:
        print(f"CausalLM {gossip.n / 1e6:.2f}M params ({gossip.n * 4 / 2**20:.1f} MB a message), "
              f"{world} ranks, topology {args.topology}, rank 0 sends to "
              f"{out_neighbours(args.topology, 0, world)}, overlap {args.overlap}, {args.optim} lr {lr}",
              flush=True)

    def seq_len(step):
        if args.seq_sigma <= 0:
            return args.seq
        g = torch.Generator().manual_seed(args.seed * 1_000_003 + 7919 * rank + step)
        t = args.seq * math.exp(args.seq_sigma * torch.randn((), generator=g).item())
        return min(max(8, int(round(t))), max_len)

    def get_batch(step):
        if slow and args.data_sleep_ms > 0:
            time.sleep(args.data_sleep_ms / 1000)      # a slow loader
        g = torch.Generator().manual_seed((args.seed * 4099 + rank) * 100_003 + step)
        return data.batch(my_batch, seq_len(step), g)

    @torch.no_grad()
    def consensus():
        """(mean_r ||x_r - x_mean||^2, ||x_mean||^2), by two all_reduces: outside the loop only."""
        gossip.pack()
        mean = gossip.sent.clone()
        dist.all_reduce(mean)
        mean.div_(world)
        d2 = (gossip.sent - mean).pow(2).sum().to(torch.float64)
        dist.all_reduce(d2)
        return d2.item() / world, mean.pow(2).sum().item()

    if args.init_per_rank:
        d2, m2 = consensus()
        if rank == 0:
            print(f"start: consensus distance {d2:.3e} ({d2 / m2:.2e} of ||x_mean||^2)", flush=True)

    def trace_handler(prof):
        prof.export_chrome_trace(os.path.join(args.out, f"gossip-rank{rank}.json"))

    stop = threading.Event()
    hog = start_hog(stop) if slow and args.hog else None
    prof = None
    if not args.no_profile:
        prof = torch.profiler.profile(
            activities=[ProfilerActivity.CPU], record_shapes=args.shapes, on_trace_ready=trace_handler,
            schedule=torch.profiler.schedule(wait=1, warmup=1, active=args.steps - 2, repeat=1))
        prof.start()
    t0 = time.perf_counter()
    first_loss = None
    for step in range(args.steps):
        ts = time.perf_counter()
        if slow and args.sleep_ms > 0:
            time.sleep(args.sleep_ms / 1000)
        if args.overlap:
            with record_function("gossip_wait"):
                gossip.wait_and_mix()                  # the exchange posted at step - 1
            with record_function("gossip_start"):
                gossip.start(step)                     # this step's weights, mixed in at step + 1
        with record_function("data"):
            x, y = get_batch(step)
        with record_function("forward"):
            loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        with record_function("backward"):
            loss.backward()
        with record_function("optimizer"):
            opt.step()
            opt.zero_grad(set_to_none=True)
        if not args.overlap:
            with record_function("gossip"):
                gossip.average(step)
        line = f"step {step} loss {loss.item():.4f}"
        if args.eval_every and (step + 1) % args.eval_every == 0:
            with record_function("log_loss"):
                total = loss.detach().clone()
                dist.all_reduce(total)
            line += f" mean over ranks {total.item() / world:.4f}"
        if args.overlap and step == args.steps - 1:
            with record_function("gossip_wait"):
                gossip.wait_and_mix()                  # the last exchange, before the trace ends
        if prof is not None:
            prof.step()
        first_loss = first_loss if first_loss is not None else loss.item()
        if rank == 0:
            print(f"{line} {(time.perf_counter() - ts) * 1000:.0f} ms", flush=True)
    if prof is not None:
        prof.stop()
    elapsed = time.perf_counter() - t0
    if hog is not None:
        stop.set()
        hog.join()

    # sanity checks, outside the profiler: how far the replicas are from their average
    d2, m2 = consensus()
    losses = torch.tensor([loss.item()], dtype=torch.float64)
    dist.all_reduce(losses)
    if rank == 0:
        print(f"done in {elapsed:.1f}s: rank 0 loss {first_loss:.3f} -> {loss.item():.3f}, mean over "
              f"ranks {losses.item() / world:.3f}; consensus distance mean_r ||x_r - x_mean||^2 = "
              f"{d2:.3e} ({d2 / m2:.2e} of ||x_mean||^2)"
              + ("" if args.no_profile else f", traces in {args.out}"), flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
