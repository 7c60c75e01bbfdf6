"""Disaggregated LLM serving (DistServe / Splitwise style): prefill on ranks 0-1, decode on ranks 2-3.

(calibration table at the end of this docstring)

What it is
----------
A serving job for a small decoder-only LM written in plain torch, no training; everything
runs under ``torch.inference_mode``. 4 CPU processes (gloo, ``init_process_group("gloo")``,
``OMP_NUM_THREADS=1``); every rank holds the full model (same seed, same weights):

* ranks 0 and 1 are PREFILL workers: they tokenize a batch of prompts, run the prompt
  forward once and hand the KV cache to a decode worker;
* ranks 2 and 3 are DECODE workers: they take the KV caches and generate token by token.

The pairs are fixed: 0 -> 2 and 1 -> 3 (prefill worker p feeds decode worker p + 2).

Model: token embedding (``--vocab`` x ``--dim``, tied with the LM head) plus a learned
position embedding, ``--layers`` pre-norm blocks (causal multi-head attention with
``--heads`` heads via ``scaled_dot_product_attention``, GELU MLP 4x), final LayerNorm.

A serving round (one "step" of the job)
---------------------------------------
1. ``load_requests``: each prefill worker takes its batch of ``--requests`` requests from its
   queue; the prompt lengths are drawn from (seed, round, worker) between half and all of
   ``--prompt-len`` and the batch is right-padded to ``--prompt-len`` (one length bucket), so
   the two prefill workers do the same work in a healthy run. The decode workers get their
   sampling parameters ready.
2. ``tokenize``: the prefill workers turn the prompt "text" (a string per request) into ids
   (a toy byte tokenizer). (The decode workers ``detokenize`` their output after decoding,
   step 4, to stream it to the clients.)
3. Prefill worker: ``prefill`` = the prompt forward, layer by layer; right after layer l has
   produced its K and V (batch, heads, T, head_dim) both go to the paired decode worker with
   ``dist.isend`` (``kv_send``), so the transfer overlaps the next layers' prefill. A small
   int64 header (batch, T, prompt lengths) goes first. Then ``sample`` draws the first token
   of every request (temperature ``--temperature``) and isends it too; the sends are waited
   at the end of the prefill.
4. Decode worker: ``kv_recv`` receives the header, posts one ``dist.irecv`` per layer and
   tensor, waits for them and builds its caches (room for ``--decode-tokens`` more
   positions); then ``--decode-tokens`` x ``decode_step`` (a one-token forward over the
   cache with a padding mask, then ``sample``), then ``detokenize`` (the text streamed out).
5. ``return_tokens``: each decode worker sends the generated ids (batch, decode_tokens) back
   to its prefill worker (2 -> 0, 3 -> 1) by isend/irecv; the prefill worker waits for them
   (it is idle while its requests decode) and detokenizes them.
6. ``router_stats``: an ``all_reduce`` over all 4 ranks of the serving stats (requests,
   prompt tokens, generated tokens, summed time to first token, summed round latency) and an
   ``all_gather`` of every worker's queue length (int64); the "router" assigns the next
   round's arrivals to the two prefill workers by those queues (shorter queue, more new
   requests; with the default arrival rate the queues stay at 0).

Communication per round (defaults: 4 layers, 4 requests, T = 192, dim 128, 4 heads):
per pair one header (66 int64), 4 x 2 KV messages of 4 x 4 x 192 x 32 floats (384 KB each,
3 MB per pair and round), one first-token message (4 int64) prefill -> decode; one
generated-ids message (4 x 16 int64) decode -> prefill; then a 5-float all_reduce and a
4-element all_gather over all ranks.

User ranges per round: ``sleep`` (fault only), ``load_requests``, ``tokenize``, prefill
workers: ``prefill`` [``layer_k`` with ``kv_send`` inside, ``sample``, ``kv_send_wait``],
decode workers: ``kv_recv``, ``decode_step`` (x decode_tokens, ``sample`` inside),
``detokenize``;
``return_tokens``, ``detokenize`` (prefill workers), ``router_stats``.

Profiling: ``torch.profiler`` CPU, ``schedule(wait=1, warmup=1, active=steps-2, repeat=1)``,
``prof.step()`` once per round, ``record_shapes`` only with ``--shapes``; each rank writes
``trace_rank{R}.json`` into ``--out``. At the end rank 0 prints every rank's median round
time over the traced rounds and its median "busy" time (the round minus the time spent
waiting in p2p sends/receives and in the two collectives).

Flags
-----
Common: ``--out DIR`` (required), ``--steps`` (10 rounds; 8 traced), ``--seed``, ``--shapes``.

Model / load: ``--layers`` (4), ``--dim`` (128), ``--heads`` (4), ``--vocab`` (2048),
``--requests`` (4 per prefill worker and round), ``--prompt-len`` (192), ``--decode-tokens``
(16), ``--temperature`` (0.8; 0 = greedy).

Faults (only on ``--slow-rank R``, default -1 = none):

* ``--factor F``: a slower device: the rank runs its model forward F times (F - 1 extra passes
  discarded; the fractional part over that fraction of the batch rows): on a prefill worker
  every layer of the prefill forward, on a decode worker every decode forward;
* ``--sleep-ms MS``: a slow host: ``time.sleep`` once per round at its start, in
  ``record_function("sleep")``;
* ``--data-sleep-ms MS``: slow request loading: the rank's ``load_requests`` sleeps MS (on a
  decode worker it comes at the round's start, while its prefill partner works, so most of
  it hides in the wait for the KV cache; on a prefill worker it delays the whole round);
* ``--tokenizer-sleep-ms MS`` (family fault): a slow tokenizer/detokenizer: once a round the
  rank sleeps MS, on a prefill worker in ``tokenize`` (before its prefill), on a decode
  worker in ``detokenize`` (after its decode steps, before ``return_tokens``);
* ``--hog``: a busy neighbour thread doing 192x192 matmuls for the whole run (stopped and
  joined before exit);
* ``--link-src A --link-dst B --link-factor X``: every message A sends to B carries X times
  the bytes (zero-padded in the same message; B receives it all and keeps the head). The p2p
  links are 0->2, 1->3 (header, KV cache, first tokens) and 2->0, 3->1 (generated ids). No
  ``--slow-rank``.

Imbalance without a fault:

* ``--seq-sigma S``: per round, each prefill worker's prompt bucket is ``--prompt-len`` times
  lognormal(0, S), drawn separately for worker 0 and 1 from (seed, worker, round), clamped
  to [1/4, 4]x and rounded to 8: its requests are longer or shorter that round, and so is
  its decode partner's cache;
* ``--big-rank K --big X``: worker K gets X times the requests of its counterpart every
  round. K a prefill worker (0 or 1): X times the prompts, so K and its decode partner K + 2
  (X times the decode batch too) are slower; the other pair waits for them in the
  ``router_stats`` collectives. K a decode worker (2 or 3): X samples per request (parallel
  sampling, the cache repeated), X times the decode batch; its prefill partner K - 2 waits in
  ``return_tokens``, the other pair in ``router_stats``.

Calibration
-----------
2-core box shared with other helpers' 4-process jobs (load average 1 to 10 during these
runs); 4 ranks, 10 rounds (8 timed; 8 and 6 with ``--steps 8``). The p2p waits and the
collectives tie the ranks, so their round medians agree within a few %: one number. "busy" =
median time outside p2p waits and collectives, slow rank vs the others (prefill / decode).
A healthy default round moved between 104 and 270 ms from one run to the next (load).

  setting (slow rank)                         round ms   busy slow / others ms
  healthy default                             104-270    prefill 43-115, decode 23-105
  healthy --shapes --decode-tokens 4            180      prefill 89-95, decode 25-43
  --factor 3 (r0, prefill)                      440      309 / r1 130, r2 76, r3 109
  --factor 3 --decode-tokens 4 (r2, decode)     320      123 / r3 55 (prefill 90-136)
  --sleep-ms 100 (r1, prefill)                  360      225 / r0 70, r2 136, r3 69
  --data-sleep-ms 100 (r0, prefill)             340      216 / r1 118, r2 66, r3 108
  --tokenizer-sleep-ms 100 (r3), decode
        (sleep at the round's start; moved)     228      186 / 61-87: the sleep hid in the KV wait
  --tokenizer-sleep-ms 100 (r3, decode,
        in ``detokenize`` as now)               310      187 / 83-96     (base run 190)
  --hog (r2, decode)                            216      104 / r3 39, prefill 55-81
  link 0->2 x32 (12 MB KV messages, buffers
        allocated per message then)             276      r0 159 / 63-97  (base ~240)
  link 0->2 x128 (same, 48 MB messages)        1630      r0 1072: far too much
  link 0->2 x64 (24 MB messages, 200 MB a
        round, persistent buffers as now)       369      r0 189 / 65-103 (base run 265)
  --big-rank 3 --big 3 (decode, 3 samples)      142      r3 67 / r2 28, prefill 55
  --seq-sigma 0.8                               127      30-56 (buckets differ by worker and round)

Reading: ``--factor`` on a prefill worker multiplies its prefill; its decode partner waits
in ``kv_recv``, the other pair in ``router_stats``. On a decode worker it multiplies every
decode forward; its prefill partner waits in ``return_tokens``. A host sleep on a prefill
worker delays the whole round; on a decode worker only where it is on the critical path
(hence the detokenizer after the decode steps, and ``--data-sleep-ms`` on a decode worker,
at the round's start, mostly hides in the KV wait). A padded KV link costs the sender
busy time too (the gloo send threads compete for the 2 cores with its prefill). Traces:
prefill ranks 1.6 MB, decode ranks ~11 MB a rank at 8 decode tokens (21 MB at 16, hence the
default of 8; the decode ``--factor`` runs use 3-4 tokens and 8 rounds). Wall ~15-20 s a run.
"""

import argparse
import math
import os
import statistics
import sys
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, record_function, schedule

HEADER = 66          # int64: batch, T, then up to 64 prompt lengths
MAX_POS = 4096


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shapes", action="store_true")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--vocab", type=int, default=2048)
    p.add_argument("--requests", type=int, default=4, help="per prefill worker and round")
    p.add_argument("--prompt-len", type=int, default=192)
    p.add_argument("--decode-tokens", type=int, default=8)
    p.add_argument("--temperature", type=float, default=0.8)
    # faults
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--factor", type=float, default=1.0)
    p.add_argument("--sleep-ms", type=float, default=0.0)
    p.add_argument("--data-sleep-ms", type=float, default=0.0)
    p.add_argument("--tokenizer-sleep-ms", type=float, default=0.0)
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
    if a.link_src >= 0 and (a.link_src % 2 != a.link_dst % 2 or a.link_src == a.link_dst):
        p.error("the p2p links are 0<->2 and 1<->3")
    if a.dim % a.heads:
        p.error("--dim must be a multiple of --heads")
    return a


# --------------------------------------------------------------------------
# communication
# --------------------------------------------------------------------------

class Comm:
    """isend/irecv between the pairs; pads the messages of one link with --link-*."""

    def __init__(self, rank, link=None, link_factor=1.0):
        self.rank = rank
        self.link, self.link_factor = link, link_factor
        self.pending = []
        self.secs = 0.0
        self.bufs = {}         # persistent message buffers (the padded ones stay zero past the head)

    def _buffer(self, key, n, dtype):
        buf = self.bufs.get(key)
        if buf is None or buf.numel() != n or buf.dtype != dtype:
            buf = self.bufs[key] = torch.zeros(n, dtype=dtype)
        return buf

    def _padded(self, n, src, dst):
        if self.link is not None and (src, dst) == self.link and self.link_factor > 1:
            return max(n, int(round(n * self.link_factor)))
        return n

    def isend(self, t, dst, tag):
        flat = t.reshape(-1)
        n = self._padded(flat.numel(), self.rank, dst)
        buf = self._buffer(("send", dst, tag), n, flat.dtype)   # reused: the sends are waited each round
        buf[: flat.numel()].copy_(flat)
        t0 = time.perf_counter()
        self.pending.append((dist.isend(buf, dst, tag=tag), buf))
        self.secs += time.perf_counter() - t0

    def irecv(self, numel, dtype, src, tag):
        buf = self._buffer(("recv", src, tag), self._padded(numel, src, self.rank), dtype)
        t0 = time.perf_counter()
        work = dist.irecv(buf, src, tag=tag)
        self.secs += time.perf_counter() - t0
        return work, buf, numel

    def wait(self, handle):
        work, buf, numel = handle
        t0 = time.perf_counter()
        work.wait()
        self.secs += time.perf_counter() - t0
        return buf[:numel]

    def wait_sends(self):
        t0 = time.perf_counter()
        for work, _ in self.pending:
            work.wait()
        self.pending.clear()
        self.secs += time.perf_counter() - t0

    def timed(self, fn, *a, **kw):
        t0 = time.perf_counter()
        out = fn(*a, **kw)
        self.secs += time.perf_counter() - t0
        return out


# --------------------------------------------------------------------------
# model
# --------------------------------------------------------------------------

class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads, self.hd = heads, dim // heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    def _split(self, x):
        B, T, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(x.shape[-1], dim=-1)
        sh = lambda t: t.view(B, T, self.heads, self.hd).transpose(1, 2)
        return sh(q), sh(k), sh(v)

    def _out(self, x, att):
        B, _, T, _ = att.shape
        x = x + self.proj(att.transpose(1, 2).reshape(B, T, -1))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

    def prefill(self, x):
        """x (B, T, dim) -> (x', k, v); causal (right padding does not reach real tokens)."""
        q, k, v = self._split(x)
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self._out(x, att), k, v

    def decode(self, x, ck, cv, slot, mask):
        """One new token x (B, 1, dim) written at ``slot`` of the caches (B, H, S, hd)."""
        q, k, v = self._split(x)
        ck[:, :, slot] = k[:, :, 0]
        cv[:, :, slot] = v[:, :, 0]
        att = F.scaled_dot_product_attention(q, ck[:, :, : slot + 1], cv[:, :, : slot + 1],
                                             attn_mask=mask[:, None, None, : slot + 1])
        return self._out(x, att)


class TinyLM(nn.Module):
    def __init__(self, vocab, dim, heads, layers):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(MAX_POS, dim)
        nn.init.normal_(self.embed.weight, std=0.02)
        nn.init.normal_(self.pos.weight, std=0.01)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)

    def logits(self, h):
        return self.norm(h) @ self.embed.weight.t()


def sample(logits, temperature, gen):
    if temperature <= 0:
        return logits.argmax(-1)
    probs = torch.softmax(logits / temperature, -1)
    return torch.multinomial(probs, 1, generator=gen).squeeze(-1)


def repeat_rows(fn, x, extra):
    """--factor: the same forward on x again ``extra`` times, results discarded."""
    for _ in range(int(extra)):
        fn(x)
    rows = int(round(x.shape[0] * (extra - int(extra))))
    if rows > 0:
        fn(x[:rows])


# --------------------------------------------------------------------------
# requests
# --------------------------------------------------------------------------

WORDS = ["the", "a", "model", "serve", "token", "cache", "prompt", "decode", "fast", "slow",
         "request", "user", "answer", "write", "story", "about", "cats", "and", "dogs", "why"]


def make_prompt(gen, n_words):
    idx = torch.randint(0, len(WORDS), (n_words,), generator=gen).tolist()
    return " ".join(WORDS[i] for i in idx)


def byte_tokenize(text, vocab, length):
    """A toy byte-pair-free tokenizer: bytes hashed into the vocabulary, cut or cycled to length."""
    ids = [(b * 131 + i * 7) % vocab for i, b in enumerate(text.encode())]
    if not ids:
        ids = [1]
    while len(ids) < length:
        ids = ids + ids
    return ids[:length]


def detokenize(ids):
    return " ".join(WORDS[i % len(WORDS)] for i in ids)


def bucket_len(args, worker, step):
    """This round's prompt bucket of prefill worker ``worker`` (0 or 1)."""
    T = float(args.prompt_len)
    if args.seq_sigma > 0:
        g = torch.Generator().manual_seed(args.seed * 1_000_003 + worker * 10_007 + step)
        m = math.exp(args.seq_sigma * torch.randn((), generator=g, dtype=torch.float64).item())
        T *= min(4.0, max(0.25, m))
    return max(8, int(round(T / 8)) * 8)


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
# the two roles
# --------------------------------------------------------------------------

def prefill_round(args, model, comm, rank, step, batch, slow_extra, gen, stats):
    peer = rank + 2
    T = bucket_len(args, rank, step)
    with record_function("load_requests"):
        if args.slow_rank == rank and args.data_sleep_ms > 0:
            time.sleep(args.data_sleep_ms / 1000.0)
        rg = torch.Generator().manual_seed(args.seed * 7919 + 31 * step + rank)
        lens = torch.randint(max(1, T // 2), T + 1, (batch,), generator=rg).tolist()
        prompts = [make_prompt(rg, max(2, n // 4)) for n in lens]
    with record_function("tokenize"):
        if args.slow_rank == rank and args.tokenizer_sleep_ms > 0:
            time.sleep(args.tokenizer_sleep_ms / 1000.0)
        ids = torch.zeros(batch, T, dtype=torch.long)
        for i, (text, n) in enumerate(zip(prompts, lens)):
            ids[i, :n] = torch.tensor(byte_tokenize(text, args.vocab, n))
    t_start = time.perf_counter()
    with record_function("prefill"):
        header = torch.zeros(HEADER, dtype=torch.long)
        header[0], header[1] = batch, T
        header[2: 2 + batch] = torch.tensor(lens)
        with record_function("kv_send"):
            comm.isend(header, peer, tag=0)
        x = model.embed(ids) + model.pos(torch.arange(T))[None]
        for li, blk in enumerate(model.blocks):
            with record_function(f"layer_{li}"):
                if slow_extra > 0:
                    repeat_rows(blk.prefill, x, slow_extra)
                x, k, v = blk.prefill(x)
                with record_function("kv_send"):
                    comm.isend(k, peer, tag=1 + 2 * li)
                    comm.isend(v, peer, tag=2 + 2 * li)
        with record_function("sample"):
            last = x[torch.arange(batch), torch.tensor(lens) - 1]
            first = sample(model.logits(last), args.temperature, gen)
            with record_function("kv_send"):
                comm.isend(first, peer, tag=1 + 2 * args.layers)
        with record_function("kv_send_wait"):
            comm.wait_sends()
    ttft = time.perf_counter() - t_start
    with record_function("return_tokens"):
        n_out = batch * args.decode_tokens * (int(round(args.big)) if args.big_rank == peer else 1)
        h = comm.irecv(n_out, torch.long, peer, tag=100)
        out = comm.wait(h)
    with record_function("detokenize"):
        texts = [detokenize(r) for r in out.view(-1, args.decode_tokens).tolist()]
    stats += torch.tensor([batch, sum(lens), 0.0, ttft * batch, 0.0], dtype=torch.float64)
    return texts


def decode_round(args, model, comm, rank, step, slow_extra, gen, stats, prev_out):
    peer = rank - 2
    L = args.layers
    with record_function("load_requests"):
        if args.slow_rank == rank and args.data_sleep_ms > 0:
            time.sleep(args.data_sleep_ms / 1000.0)
        n_samples = int(round(args.big)) if args.big_rank == rank else 1
        gen.manual_seed(args.seed * 101 + rank * 13 + step)     # reproducible sampling per round
    t_start = time.perf_counter()
    with record_function("kv_recv"):
        header = comm.wait(comm.irecv(HEADER, torch.long, peer, tag=0))
        B, T = int(header[0]), int(header[1])
        lens = header[2: 2 + B].clone()
        H, hd = args.heads, args.dim // args.heads
        handles = []
        for li in range(L):
            handles.append((comm.irecv(B * H * T * hd, torch.float32, peer, tag=1 + 2 * li),
                            comm.irecv(B * H * T * hd, torch.float32, peer, tag=2 + 2 * li)))
        h_first = comm.irecv(B, torch.long, peer, tag=1 + 2 * L)
        S = T + args.decode_tokens
        caches = []
        for hk, hv in handles:
            k = comm.wait(hk).view(B, H, T, hd)
            v = comm.wait(hv).view(B, H, T, hd)
            ck = torch.zeros(B, H, S, hd)
            cv = torch.zeros(B, H, S, hd)
            ck[:, :, :T] = k
            cv[:, :, :T] = v
            if n_samples > 1:                    # parallel sampling: the cache per sample
                ck = ck.repeat_interleave(n_samples, 0)
                cv = cv.repeat_interleave(n_samples, 0)
            caches.append((ck, cv))
        tok = comm.wait(h_first).clone()
    ttft_wait = time.perf_counter() - t_start
    if n_samples > 1:
        tok = tok.repeat_interleave(n_samples, 0)
        lens = lens.repeat_interleave(n_samples, 0)
    Bd = tok.shape[0]
    mask = torch.zeros(Bd, S, dtype=torch.bool)
    mask[:, :T] = torch.arange(T)[None] < lens[:, None]
    out = torch.zeros(Bd, args.decode_tokens, dtype=torch.long)
    for t in range(args.decode_tokens):
        with record_function("decode_step"):
            slot = T + t
            mask[:, slot] = True

            def forward(tk, rows=None):
                r = slice(None) if rows is None else slice(0, rows)
                x = (model.embed(tk) + model.pos(lens[r] + t))[:, None]
                for blk, (ck, cv) in zip(model.blocks, caches):
                    x = blk.decode(x, ck[r], cv[r], slot, mask[r])
                return x[:, 0]

            if slow_extra > 0:
                for _ in range(int(slow_extra)):
                    forward(tok)
                rows = int(round(Bd * (slow_extra - int(slow_extra))))
                if rows > 0:
                    forward(tok[:rows], rows)
            x = forward(tok)
            with record_function("sample"):
                tok = sample(model.logits(x), args.temperature, gen)
            out[:, t] = tok
    with record_function("detokenize"):          # streaming the text out to the clients
        if args.slow_rank == rank and args.tokenizer_sleep_ms > 0:
            time.sleep(args.tokenizer_sleep_ms / 1000.0)
        streamed = [detokenize(r) for r in out.tolist()]
    with record_function("return_tokens"):
        comm.isend(out, peer, tag=100)
        comm.wait_sends()
    stats += torch.tensor([0.0, 0.0, float(out.numel()), 0.0, ttft_wait], dtype=torch.float64)
    return out.tolist()[:4], len(streamed)


# --------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------

def main():
    args = parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    dist.init_process_group("gloo", timeout=timedelta(seconds=180))
    rank, world = dist.get_rank(), dist.get_world_size()
    if world != 4:
        raise SystemExit("this job is laid out for 4 ranks (2 prefill, 2 decode)")
    is_prefill = rank < 2
    slow = rank == args.slow_rank

    link = (args.link_src, args.link_dst) if args.link_src >= 0 else None
    comm = Comm(rank, link, args.link_factor)

    torch.manual_seed(args.seed)               # the same weights on every rank
    model = TinyLM(args.vocab, args.dim, args.heads, args.layers).eval()
    n_params = sum(q.numel() for q in model.parameters())
    gen = torch.Generator().manual_seed(args.seed * 101 + rank)

    extra = max(0.0, args.factor - 1.0) if slow else 0.0
    stop = threading.Event()
    hog = start_hog(stop) if slow and args.hog else None

    if rank == 0:
        print(f"[disagg] prefill ranks 0,1 -> decode ranks 2,3; layers={args.layers} dim={args.dim} "
              f"heads={args.heads} vocab={args.vocab} params={n_params} requests={args.requests} "
              f"prompt_len={args.prompt_len} decode_tokens={args.decode_tokens}", flush=True)

    os.makedirs(args.out, exist_ok=True)
    prof = profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=1, warmup=1, active=max(1, args.steps - 2), repeat=1),
        record_shapes=args.shapes,
    )
    # router state: every prefill worker's queue of waiting requests
    capacity = [args.requests * (args.big if args.big_rank == w else 1) for w in range(2)]
    capacity = [int(round(c)) for c in capacity]
    queues = [0, 0]
    arrivals = list(capacity)
    step_times, busy_times = [], []
    prev_out = None
    dist.barrier()
    try:
        with prof, torch.inference_mode():
            for step in range(args.steps):
                t0 = time.perf_counter()
                comm.secs = 0.0
                if slow and args.sleep_ms > 0:
                    with record_function("sleep"):
                        time.sleep(args.sleep_ms / 1000.0)
                stats = torch.zeros(5, dtype=torch.float64)
                if is_prefill:
                    waiting = queues[rank] + arrivals[rank]
                    batch = min(waiting, capacity[rank])
                    my_queue = waiting - batch
                    texts = prefill_round(args, model, comm, rank, step, batch, extra, gen, stats)
                    n_done = len(texts)
                else:
                    prev_out, n_done = decode_round(args, model, comm, rank, step, extra, gen, stats,
                                                    prev_out)
                    my_queue = 0
                with record_function("router_stats"):
                    stats[4] += time.perf_counter() - t0
                    comm.timed(dist.all_reduce, stats)
                    q = torch.tensor([my_queue], dtype=torch.long)
                    allq = [torch.zeros(1, dtype=torch.long) for _ in range(world)]
                    comm.timed(dist.all_gather, allq, q)
                    queues = [int(allq[0]), int(allq[1])]
                    # next round: as many arrivals as the workers can take, the shorter queue first
                    total = sum(capacity)
                    want = [max(0, capacity[w] - queues[w]) for w in range(2)]
                    arrivals = [min(want[w], total) for w in range(2)]

                step_times.append(time.perf_counter() - t0)
                busy_times.append(step_times[-1] - comm.secs)
                if rank == 0:
                    print(f"round {step:3d} req {int(stats[0])} prompt_tok {int(stats[1])} "
                          f"gen_tok {int(stats[2])} ttft {1000 * stats[3].item() / max(1.0, stats[0].item()):.1f} ms "
                          f"queues {queues} t {1000 * step_times[-1]:.1f} ms", flush=True)
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
        print("median busy ms (outside p2p waits and collectives) per rank: " +
              " ".join(f"r{r}={1000 * b:.1f}" for r, (_, b) in enumerate(allmed)), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
