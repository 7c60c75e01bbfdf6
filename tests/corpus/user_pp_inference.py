"""Pipeline-parallel (PP4) batched inference serving of a small decoder-only LM.

(calibration table at the end of this docstring)

What it is
----------
A serving job, no training: a small GPT-style decoder (learned positions, pre-norm blocks,
causal multi-head attention through ``F.scaled_dot_product_attention``, GELU MLP) split into
4 pipeline stages, one stage a rank, run on 4 CPU processes (gloo,
``init_process_group("gloo")``, ``OMP_NUM_THREADS=1``). Everything runs under
``torch.inference_mode()``. Stage 0 holds the token + position embeddings and its layers,
stages 1-2 their layers, stage 3 its layers, the final norm and the LM head (and samples).
Every stage keeps the KV cache of its own layers, per micro-batch.

Each "step" of the job is one serving round:

* ``load_batch``: the round's ``--requests`` prompts are taken from a pre-tokenized prompt
  store (a ``uint16`` file written once by rank 0, memory-mapped by all). The prompt lengths
  are drawn from (seed, round) so every stage knows the shapes without a header message;
  only rank 0 reads the token ids. Prompts are left-padded to their micro-batch's longest.
* ``prefill``: the requests are cut into ``--micro-batches`` groups; stage 0 embeds and runs
  its layers on micro-batch 0, ``isend``s the activation to stage 1 and goes on with
  micro-batch 1 while stage 1 works on 0 (the stages overlap). Stages 1-3 ``irecv`` + wait,
  run their layers (filling their KV caches) and pass on; stage 3 takes the last position's
  logits and samples the first new token of each request, then sends the token ids back to
  stage 0 with a blocking ``dist.send`` (stage 0 ``dist.recv``).
* ``--decode-tokens`` decode iterations (``decode_step``): per micro-batch, stage 0 receives
  the previous token ids from stage 3, embeds them, runs one position through its layers
  (appending to the KV cache) and sends the hidden state on, 0 -> 1 -> 2 -> 3; stage 3 samples
  and sends the ids back 3 -> 0. The micro-batches keep the pipeline busy (while micro-batch
  0's token goes round, micro-batch 1 follows it).
* ``stats``: an ``all_reduce`` (SUM) of 4 serving numbers (generated tokens, prompt tokens,
  the rank's round latency and its time in communication), then ``request_queue``: each
  rank hands its round's record back to the request queue (a jsonl line of its own: stage 3
  the detokenized outputs, the others their timing).

Communication per round (defaults: 8 requests, 2 micro-batches, prompts ~96 tokens, 16 decode
tokens, dim 192): prefill activations of (4, L, 192) floats (~300 KB) on each link
s -> s+1 once per micro-batch, then per decode token and micro-batch one (4, 1, 192)
activation (3 KB) on each link s -> s+1 (``isend``/``irecv``; the sends are waited before
their buffer is reused and at the round's end) and one (4,) int64 token message 3 -> 0
(blocking ``send``/``recv``), and the stats all_reduce.

User ranges per round: ``sleep`` (fault only), ``load_batch``, ``prefill`` [``embed``,
``stage_forward``, ``send_activation``, ``recv_activation``, ``sample``, ``send_tokens``],
``decode_step`` x decode tokens [``recv_tokens``, ``embed``, ``recv_activation``,
``stage_forward``, ``send_activation``, ``sample``, ``send_tokens``], ``recv_tokens`` (the
last ones), ``drain_sends``, ``stats``, ``request_queue``.

Profiling: ``torch.profiler`` CPU, ``schedule(wait=1, warmup=1, active=steps-2, repeat=1)``,
``prof.step()`` once per round, ``record_shapes`` only with ``--shapes``; each rank writes
``trace_rank{R}.json`` into ``--out``. At the end rank 0 prints every rank's median round time
over the traced rounds and its median "busy" time (the round minus the time spent waiting in
activation / token receives, send waits and the all_reduce).

Flags
-----
Common: ``--out DIR`` (required), ``--steps`` (10 rounds; 8 traced), ``--seed``, ``--shapes``.

Model / job size: ``--layers-per-stage`` (2), ``--dim`` (192), ``--heads`` (6), ``--ffn``
(4 x dim), ``--vocab`` (1024), ``--requests`` (8), ``--micro-batches`` (2), ``--prompt-len``
(96, the mean; each request 0.5x-1.5x), ``--decode-tokens`` (16), ``--temperature`` (0.8,
0 = greedy).

Faults (only on ``--slow-rank R``, default -1 = none):

* ``--factor F``: a slower device: the slowed stage runs each of its layers' forward F times
  (prefill and decode; the F - 1 extra passes read the KV cache but do not write it and are
  discarded; the fractional part over that fraction of the micro-batch's rows);
* ``--sleep-ms MS``: a slow host: ``time.sleep`` once per round at its start, in
  ``record_function("sleep")``;
* ``--data-sleep-ms MS``: a slow prompt store: the rank's ``load_batch`` sleeps MS each round;
* ``--queue-sleep-ms MS`` (family fault): a slow request queue / detokenizer: the rank's
  ``request_queue`` hand-back sleeps MS at the end of every round (any rank: each logs its round);
* ``--hog``: a busy neighbour thread doing 192x192 matmuls for the whole run (stopped and
  joined before exit);
* ``--link-src A --link-dst B --link-factor X`` (B = A + 1): every activation message from
  stage A to stage B (prefill and decode) carries X times the bytes, zero-padded in the same
  message; B receives it all and keeps the head. No ``--slow-rank``.

Imbalance without a fault:

* ``--seq-sigma S``: each round's prompt lengths are multiplied by lognormal(0, S) drawn from
  (seed, round), clamped to [1/4x, 4x]. The multiplier is the same for all stages: the whole
  pipeline's prefill work (and its KV caches) grows or shrinks together from round to round,
  no stage more than another;
* ``--big-rank K --big X``: stage K has round(X x layers-per-stage) layers, every round.

Calibration
-----------
2-core box shared with other helpers' jobs; 4 ranks, 10 rounds (8 traced) unless said; each
battery setting run once more after the battery (seeds as in run_users.py USERS115), beside a
healthy run of the same size ("base"). Round medians of all ranks agree within ~3% (the token
ids 3 -> 0 and the stats all_reduce tie the stages), so one number; "busy" = median time
outside activation / token waits, send waits and the all_reduce, slow rank vs the mean of the
others (a stage waits ~60% of a round: pipeline bubbles and 4 processes on 2 cores).

  setting (slow rank)                              base ms  round ms  change   busy slow / others ms
  healthy default (T = decode tokens = 8)              -     218-225     -      79-94
  healthy --shapes --decode-tokens 4                   -       172       -      62-69
  healthy --micro-batches 4 --requests 16 -p 64 T4     -     192-201     -      89-99
  healthy --dim 256 -l 1 --vocab 2048 greedy           -     192-196     -      69-80
  healthy --requests 16 --prompt-len 128 T6            -       383       -     144-157
  --factor 3 (r2), T4, 8 rounds                       192      233     +21%     139 / 64
  --factor 4 (r0), T3, 8 rounds                       170      265     +56%     183 / 56
  --layers-per-stage 1 --factor 4 (r3), T6, 8 rds   108-171    162       -      106 / 42
  --dim 256 --factor 3 (r1), T4, 8 rounds             242      322     +33%     217 / 84
  --sleep-ms 120 (r1)                                 222      321     +45%     203 / 83
  --sleep-ms 130 (r1)                                 221      340     +54%     215 / 88
  --data-sleep-ms 150 (r3)                            221      280     +27%     224 / 73
  --queue-sleep-ms 150 (r3)                           222      311     +40%     238 / 83
  --queue-sleep-ms 150 (r0)                           221      352     +59%     223 / 79
  --hog (r2), default size                            222      291     +31%     113 / 101  (weak)
  --hog (r1), default size                            222      263     +18%      94 / 92   (weak)
  --hog (r1), --requests 16 --prompt-len 128 T6       383      461     +20%     201 / 152
  link 1->2 x64 (prefill msgs ~24 MB)                 222      244     +10%     r1 86 / 84
  link 1->2 x256 (prefill msgs ~95 MB)                222      411     +85%     r1 170 / 88
  link 2->3 x256                                      221      392     +77%     r2 163 / 78
  --seq-sigma 0.8                                      -     218-225     -      80-93 (per round x0.25-4 on all)
  --layers-per-stage 1 --big-rank 3 --big 3 T6      108-171    154       -      r3 95 / 40
  --layers-per-stage 1 --big-rank 2 --big 3 T6      108-171    183       -      r2 108 / 51

Reading: a stage is busy only ~35-40% of a round; the rest is the pipeline's bubbles (with 2
micro-batches a token's round trip 0 -> 3 -> 0 leaves each stage idle most of a decode
iteration) and the other processes on the 2 cores. Any stage's added time lands on everyone's
round, since every decode token passes all 4 stages: a --factor of 3-4 doubles or triples the
slowed stage's busy time and costs the round 20-55%; sleeps of 120-150 ms cost 25-60%. The
hog thread is weak at the default size: the ranks mostly wait, so the spare core absorbs it
and it slows all four alike; with 16 requests of ~128 tokens (busier stages) it costs its
rank +30% busy. A padded link costs little until the prefill messages are ~100 MB (x256);
then the sender's zero-padded copy (counted as busy) and the transfer stall the stages
downstream. The trace grows with the decode tokens x micro-batches x layers (and x F with
--factor), so the --factor and --big runs use 3-6 decode tokens (and 8 rounds) to stay under
~13 MB a rank; default traces 11-13 MB. Wall per run: 9-15 s.
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
    p.add_argument("--steps", type=int, default=10, help="serving rounds")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shapes", action="store_true")
    p.add_argument("--layers-per-stage", type=int, default=2)
    p.add_argument("--dim", type=int, default=192)
    p.add_argument("--heads", type=int, default=6)
    p.add_argument("--ffn", type=int, default=0, help="MLP width (0 = 4 x dim)")
    p.add_argument("--vocab", type=int, default=1024)
    p.add_argument("--requests", type=int, default=8)
    p.add_argument("--micro-batches", type=int, default=2)
    p.add_argument("--prompt-len", type=int, default=96)
    p.add_argument("--decode-tokens", type=int, default=8)
    p.add_argument("--temperature", type=float, default=0.8)
    # faults
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--factor", type=float, default=1.0)
    p.add_argument("--sleep-ms", type=float, default=0.0)
    p.add_argument("--data-sleep-ms", type=float, default=0.0)
    p.add_argument("--queue-sleep-ms", type=float, default=0.0)
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
    if a.link_src >= 0 and a.link_dst != a.link_src + 1:
        p.error("activations only flow from a stage to the next (--link-dst = --link-src + 1)")
    if a.requests % a.micro_batches:
        p.error("--requests must split into whole micro-batches")
    if a.dim % a.heads:
        p.error("--dim must be a multiple of --heads")
    return a


# --------------------------------------------------------------------------
# communication
# --------------------------------------------------------------------------

class StageComm:
    """Activations to the next stage (isend/irecv), token ids 3 -> 0 (send/recv).

    Buffers are kept per (kind, micro-batch) and reused; a send buffer is waited before it is
    overwritten. Messages of the --link-* link are padded with zeros."""

    def __init__(self, rank, world, link=None, link_factor=1.0):
        self.rank, self.world = rank, world
        self.link, self.link_factor = link, link_factor
        self.send_bufs = {}     # key -> (buffer, work or None)
        self.recv_bufs = {}
        self.secs = 0.0

    def _padded(self, n, src, dst):
        if self.link is not None and (src, dst) == self.link and self.link_factor > 1:
            return max(n, int(round(n * self.link_factor)))
        return n

    def send_act(self, x, key, tag):
        dst = self.rank + 1
        flat = x.reshape(-1)
        n = self._padded(flat.numel(), self.rank, dst)
        buf, work = self.send_bufs.get(key, (None, None))
        t0 = time.perf_counter()
        if work is not None:
            work.wait()
        self.secs += time.perf_counter() - t0
        if buf is None or buf.numel() != n:
            buf = torch.zeros(n)
        buf[: flat.numel()].copy_(flat)
        t0 = time.perf_counter()
        work = dist.isend(buf, dst, tag=tag)
        self.secs += time.perf_counter() - t0
        self.send_bufs[key] = (buf, work)

    def recv_act(self, shape, key, tag):
        src = self.rank - 1
        numel = math.prod(shape)
        n = self._padded(numel, src, self.rank)
        buf = self.recv_bufs.get(key)
        if buf is None or buf.numel() != n:
            buf = self.recv_bufs[key] = torch.empty(n)
        t0 = time.perf_counter()
        dist.irecv(buf, src, tag=tag).wait()
        self.secs += time.perf_counter() - t0
        return buf[:numel].view(shape).clone()

    def drain(self):
        t0 = time.perf_counter()
        for key, (buf, work) in list(self.send_bufs.items()):
            if work is not None:
                work.wait()
                self.send_bufs[key] = (buf, None)
        self.secs += time.perf_counter() - t0

    def send_tokens(self, ids, mb):
        t0 = time.perf_counter()
        dist.send(ids, 0, tag=1000 + mb)
        self.secs += time.perf_counter() - t0

    def recv_tokens(self, n, mb):
        ids = torch.empty(n, dtype=torch.int64)
        t0 = time.perf_counter()
        dist.recv(ids, self.world - 1, tag=1000 + mb)
        self.secs += time.perf_counter() - t0
        return ids

    def all_reduce(self, t):
        t0 = time.perf_counter()
        dist.all_reduce(t)
        self.secs += time.perf_counter() - t0
        return t


# --------------------------------------------------------------------------
# model
# --------------------------------------------------------------------------

class Block(nn.Module):
    def __init__(self, dim, heads, ffn):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, ffn)
        self.fc2 = nn.Linear(ffn, dim)

    def forward(self, x, cache, mask, write=True):
        """x: (B, T, D); cache: dict with 'k'/'v' (B, H, S, hd) or empty; mask: (B, 1, T, S+T) bool."""
        B, T, D = x.shape
        H = self.heads
        q, k, v = self.qkv(self.ln1(x)).split(D, dim=-1)
        q = q.view(B, T, H, D // H).transpose(1, 2)
        k = k.view(B, T, H, D // H).transpose(1, 2)
        v = v.view(B, T, H, D // H).transpose(1, 2)
        if "k" in cache:
            k = torch.cat([cache["k"], k], dim=2)
            v = torch.cat([cache["v"], v], dim=2)
        if write:
            cache["k"], cache["v"] = k, v
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, D))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class Stage(nn.Module):
    def __init__(self, stage, n_stages, n_layers, dim, heads, ffn, vocab, max_pos):
        super().__init__()
        self.first, self.last = stage == 0, stage == n_stages - 1
        if self.first:
            self.tok = nn.Embedding(vocab, dim)
            self.pos = nn.Embedding(max_pos, dim)
        self.blocks = nn.ModuleList(Block(dim, heads, ffn) for _ in range(n_layers))
        if self.last:
            self.norm = nn.LayerNorm(dim)
            self.head = nn.Linear(dim, vocab, bias=False)

    def embed(self, ids, pos):
        return self.tok(ids) + self.pos(pos)

    def layers(self, x, caches, mask, extra=0.0):
        for blk, cache in zip(self.blocks, caches):
            if extra > 0:            # --factor: the same layer again on a slower chip, discarded
                for _ in range(int(extra)):
                    blk(x, cache, mask, write=False)
                rows = int(round(x.shape[0] * (extra - int(extra))))
                if rows > 0:
                    sub = {k: v[:rows] for k, v in cache.items()}
                    blk(x[:rows], sub, mask[:rows], write=False)
            out = blk(x, cache, mask)
            x = out
        return x

    def logits(self, x):
        return self.head(self.norm(x[:, -1]))


# --------------------------------------------------------------------------
# requests
# --------------------------------------------------------------------------

def make_prompt_store(path, vocab, seed, n_tokens=1 << 19):
    g = torch.Generator().manual_seed(seed)
    toks = torch.randint(0, vocab, (n_tokens,), generator=g).numpy().astype(np.uint16)
    toks.tofile(path)


def round_lengths(args, rnd):
    """Prompt lengths of this round's requests (every stage computes the same)."""
    g = torch.Generator().manual_seed(args.seed * 1_000_003 + rnd)
    mult = 1.0
    if args.seq_sigma > 0:
        mult = math.exp(args.seq_sigma * torch.randn((), generator=g, dtype=torch.float64).item())
        mult = min(4.0, max(0.25, mult))
    u = torch.rand(args.requests, generator=g, dtype=torch.float64)
    lens = [max(4, int(round(args.prompt_len * (0.5 + x) * mult))) for x in u.tolist()]
    return lens, mult


def micro_batch_masks(lens):
    """Left padding: (prefill mask (B,1,L,L), key-valid (B,L), positions (B,L), L)."""
    L = max(lens)
    B = len(lens)
    ar = torch.arange(L)
    pad = torch.tensor([L - n for n in lens])
    valid = ar[None, :] >= pad[:, None]                     # (B, L)
    causal = torch.ones(L, L, dtype=torch.bool).tril()
    mask = causal[None] & valid[:, None, :]
    mask = mask | torch.eye(L, dtype=torch.bool)[None]      # pad rows see themselves (no NaN)
    pos = (ar[None, :] - pad[:, None]).clamp(min=0)
    return mask[:, None], valid, pos, L


def start_hog(stop):
    def spin():
        a = torch.randn(192, 192)
        b = torch.randn(192, 192) / 14.0
        while not stop.is_set():
            a = torch.tanh(a @ b)

    th = threading.Thread(target=spin, name="busy-neighbour", daemon=True)
    th.start()
    return th


# --------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------

def main():
    args = parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    dist.init_process_group("gloo", timeout=timedelta(seconds=180))
    rank, world = dist.get_rank(), dist.get_world_size()
    last = world - 1
    slow = rank == args.slow_rank
    ffn = args.ffn or 4 * args.dim
    n_layers = args.layers_per_stage
    if rank == args.big_rank:
        n_layers = max(1, int(round(args.layers_per_stage * args.big)))
    max_pos = int(args.prompt_len * 1.5 * 4) + args.decode_tokens + 8

    link = (args.link_src, args.link_dst) if args.link_src >= 0 else None
    comm = StageComm(rank, world, link, args.link_factor)

    tmp = [None]
    if rank == 0:
        tmp[0] = tempfile.mkdtemp(prefix="pp_infer_")
        make_prompt_store(os.path.join(tmp[0], "prompts.bin"), args.vocab, args.seed)
    dist.broadcast_object_list(tmp, src=0)
    work_dir = tmp[0]
    dist.barrier()
    store = np.memmap(os.path.join(work_dir, "prompts.bin"), dtype=np.uint16, mode="r")
    log_path = os.path.join(work_dir, f"served_rank{rank}.jsonl")

    torch.manual_seed(args.seed * 100 + rank)          # each stage its own weights
    model = Stage(rank, world, n_layers, args.dim, args.heads, ffn, args.vocab, max_pos).eval()
    n_params = sum(q.numel() for q in model.parameters())

    extra = max(0.0, args.factor - 1.0) if slow else 0.0
    stop = threading.Event()
    hog = start_hog(stop) if slow and args.hog else None
    mbs = args.micro_batches
    per_mb = args.requests // mbs
    D = args.dim

    if rank == 0:
        print(f"[pp-infer] stages={world} layers/stage={args.layers_per_stage} dim={D} heads={args.heads} "
              f"ffn={ffn} vocab={args.vocab} requests={args.requests} micro_batches={mbs} "
              f"prompt~{args.prompt_len} decode={args.decode_tokens} params(stage0)={n_params}", flush=True)

    os.makedirs(args.out, exist_ok=True)
    prof = profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=1, warmup=1, active=max(1, args.steps - 2), repeat=1),
        record_shapes=args.shapes,
    )
    step_times, busy_times = [], []
    dist.barrier()
    try:
        with prof, torch.inference_mode():
            for rnd in range(args.steps):
                t0 = time.perf_counter()
                comm.secs = 0.0
                if slow and args.sleep_ms > 0:
                    with record_function("sleep"):
                        time.sleep(args.sleep_ms / 1000.0)

                with record_function("load_batch"):
                    if slow and args.data_sleep_ms > 0:
                        time.sleep(args.data_sleep_ms / 1000.0)
                    lens, mult = round_lengths(args, rnd)
                    groups = []
                    g = torch.Generator().manual_seed(args.seed * 7919 + rnd)
                    starts = torch.randint(0, len(store) - 4 * max(lens), (args.requests,), generator=g).tolist()
                    for m in range(mbs):
                        ml = lens[m * per_mb:(m + 1) * per_mb]
                        mask, valid, pos, L = micro_batch_masks(ml)
                        ids = None
                        if rank == 0:
                            ids = torch.zeros(per_mb, L, dtype=torch.int64)
                            for i, n in enumerate(ml):
                                s = starts[m * per_mb + i]
                                ids[i, L - n:] = torch.from_numpy(np.asarray(store[s:s + n], dtype=np.int64))
                        groups.append({"mask": mask, "valid": valid, "pos": pos, "L": L, "ids": ids,
                                       "caches": [{} for _ in range(n_layers)], "out": []})
                    sg = torch.Generator().manual_seed(args.seed * 31337 + rnd)

                def sample(x, grp):
                    with record_function("sample"):
                        logits = model.logits(x)
                        if args.temperature > 0:
                            probs = torch.softmax(logits / args.temperature, dim=-1)
                            nxt = torch.multinomial(probs, 1, generator=sg).squeeze(1)
                        else:
                            nxt = logits.argmax(-1)
                        grp["out"].append(nxt)
                        return nxt

                # ---- prefill: micro-batches flow 0 -> 1 -> 2 -> 3, the stages overlapping
                with record_function("prefill"):
                    for m, grp in enumerate(groups):
                        L = grp["L"]
                        if rank == 0:
                            with record_function("embed"):
                                x = model.embed(grp["ids"], grp["pos"])
                        else:
                            with record_function("recv_activation"):
                                x = comm.recv_act((per_mb, L, D), ("prefill", m), tag=m)
                        with record_function("stage_forward"):
                            x = model.layers(x, grp["caches"], grp["mask"], extra)
                        if rank < last:
                            with record_function("send_activation"):
                                comm.send_act(x, ("prefill", m), tag=m)
                        else:
                            nxt = sample(x, grp)
                            with record_function("send_tokens"):
                                comm.send_tokens(nxt, m)

                # ---- decode: one token per iteration, hidden states 0 -> 1 -> 2 -> 3, ids 3 -> 0
                for t in range(args.decode_tokens):
                    with record_function("decode_step"):
                        for m, grp in enumerate(groups):
                            L = grp["L"]
                            grp["valid"] = torch.cat([grp["valid"], torch.ones(per_mb, 1, dtype=torch.bool)], 1)
                            dmask = grp["valid"][:, None, None, :]
                            if rank == 0:
                                with record_function("recv_tokens"):
                                    ids = comm.recv_tokens(per_mb, m)
                                grp["out"].append(ids)
                                with record_function("embed"):
                                    p = grp["pos"][:, -1:] + 1 + t
                                    x = model.embed(ids[:, None], p)
                            else:
                                with record_function("recv_activation"):
                                    x = comm.recv_act((per_mb, 1, D), ("decode", m), tag=m)
                            with record_function("stage_forward"):
                                x = model.layers(x, grp["caches"], dmask, extra)
                            if rank < last:
                                with record_function("send_activation"):
                                    comm.send_act(x, ("decode", m), tag=m)
                            else:
                                nxt = sample(x, grp)
                                with record_function("send_tokens"):
                                    comm.send_tokens(nxt, m)
                if rank == 0:
                    with record_function("recv_tokens"):
                        for m, grp in enumerate(groups):
                            grp["out"].append(comm.recv_tokens(per_mb, m))
                with record_function("drain_sends"):
                    comm.drain()

                latency = time.perf_counter() - t0
                with record_function("stats"):
                    gen = float(args.requests * (args.decode_tokens + 1)) if rank == last else 0.0
                    prompt_toks = float(sum(lens)) if rank == 0 else 0.0
                    st = torch.tensor([gen, prompt_toks, latency * 1000.0, comm.secs * 1000.0])
                    comm.all_reduce(st)

                with record_function("request_queue"):
                    if slow and args.queue_sleep_ms > 0:
                        time.sleep(args.queue_sleep_ms / 1000.0)
                    rec = {"round": rnd, "stage": rank, "latency_ms": round(latency * 1000.0, 2),
                           "comm_ms": round(comm.secs * 1000.0, 2), "mult": round(mult, 3)}
                    if rank in (0, last):
                        rec["outputs"] = [torch.stack(grp["out"], 1)[:, :8].tolist() for grp in groups]
                    with open(log_path, "a") as fh:
                        fh.write(json.dumps(rec) + "\n")

                step_times.append(time.perf_counter() - t0)
                busy_times.append(step_times[-1] - comm.secs)
                if rank == 0:
                    print(f"round {rnd:3d} prompts {sum(lens)} tok (x{mult:.2f}) generated {int(st[0])} "
                          f"mean latency {st[2].item() / world:.1f} ms t {1000 * step_times[-1]:.1f} ms",
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
        print("median busy ms (outside activation/token waits and the all_reduce) per rank: " +
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
