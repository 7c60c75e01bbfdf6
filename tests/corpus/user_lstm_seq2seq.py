"""A small LSTM sequence-to-sequence model with attention (neural machine translation on a toy
task), trained data parallel with ``DistributedDataParallel`` on CPUs with gloo.

The task: a source sentence of random words is translated into the same words read backwards,
each through a fixed permutation; a bidirectional 2-layer LSTM encoder over packed sequences, a
2-layer LSTM decoder, dot-product attention, teacher forcing, AdamW with gradient clipping. Each
rank draws its own batch (--batch sentences) every step, lengths uniform in [L/2, 3L/2]; the
profiler (CPU) records steps 3 on, one chrome trace a rank (``lstm-rank<R>.json``), without
input shapes, as the profiler's defaults leave them.

    OMP_NUM_THREADS=1 python -m torch.distributed.run --standalone --nproc_per_node=4 \\
        tests/corpus/user_lstm_seq2seq.py --out DIR --slow-rank 2 --factor 2

Faults, on ``--slow-rank`` only:

- ``--factor F``: every LSTM's gate matmuls and the two output linears run again, without grad,
  ``(F - 1) * CALIB`` times a call (carried over calls where fractional): the author's
  calibration for a rank whose step computes about F times its peers', not measured again here.
- ``--hog``: a daemon thread multiplies 64x64 matrices for the whole run (CPU and GIL).
- ``--sleep-ms MS``: a host sleep before each step; ``--data-sleep-ms MS``: a sleep inside
  ``data`` while the rank builds its batch (a slow loader).

Imbalance without a fault: ``--len-sigma S`` draws lengths lognormal (median L, sigma S) on every
rank, so the rank with the longest sentences changes from step to step; ``--long-rank R --long
X`` gives rank R sentences X times as long every step (a shard of longer documents).

Measured: one run of each on this 2-core machine (4 processes, other work beside them), mean
step of rank 0 over the 6 traced steps: no fault 285 ms; lengths lognormal 0.7: 518 ms; rank 2's
sentences 1.6x as long: 391 ms; a 60 ms data sleep on one rank: 294 ms (its peers' steps absorb
part of the sleep on shared cores: they run while it sleeps).
"""

from __future__ import annotations

import argparse
import math
import os
import threading
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
from torch.profiler import ProfilerActivity, record_function

PAD, BOS, EOS = 0, 1, 2
WORDS = 64                 # real tokens: 3 .. 3 + WORDS - 1
VOCAB = WORDS + 3
CALIB = 6.7                # extra passes per unit of (F - 1); see --factor in the docstring


class Burn:
    """The slow rank's extra work: the same matmuls again, no grad, results thrown away."""

    extra = 0.0            # extra passes per call, set on the slow rank only
    _carry = 0.0           # fraction carried from one call to the next

    @classmethod
    def reps(cls):
        if cls.extra <= 0:
            return 0
        cls._carry += cls.extra
        n = int(cls._carry)
        cls._carry -= n
        return n

    @classmethod
    def linear(cls, lin, x):
        n = cls.reps()
        if n:
            with torch.no_grad():
                for _ in range(n):
                    F.linear(x, lin.weight, lin.bias)

    @classmethod
    def lstm(cls, lstm, x, out):
        """Every gate matmul of ``lstm`` once more: input projections on the layer's input and
        recurrent projections on the hidden states (all time steps at once)."""
        n = cls.reps()
        if not n:
            return
        dirs = 2 if lstm.bidirectional else 1
        h = lstm.hidden_size
        with torch.no_grad():
            for _ in range(n):
                for layer in range(lstm.num_layers):
                    inp = x if layer == 0 else out
                    for d in range(dirs):
                        sfx = f"l{layer}" + ("_reverse" if d else "")
                        F.linear(inp, getattr(lstm, "weight_ih_" + sfx), getattr(lstm, "bias_ih_" + sfx))
                        F.linear(out[..., d * h:(d + 1) * h], getattr(lstm, "weight_hh_" + sfx),
                                 getattr(lstm, "bias_hh_" + sfx))


class Seq2Seq(nn.Module):
    """Bidirectional 2-layer LSTM encoder (packed), 2-layer LSTM decoder started from the
    encoder's final states, dot-product attention over the encoder outputs (Luong, "general"
    without the matrix), a tanh combination layer and the output projection."""

    def __init__(self, hidden, layers=2):
        super().__init__()
        assert hidden % 2 == 0
        self.layers = layers
        self.src_emb = nn.Embedding(VOCAB, hidden, padding_idx=PAD)
        self.tgt_emb = nn.Embedding(VOCAB, hidden, padding_idx=PAD)
        self.encoder = nn.LSTM(hidden, hidden // 2, num_layers=layers, batch_first=True,
                               bidirectional=True)
        self.decoder = nn.LSTM(hidden, hidden, num_layers=layers, batch_first=True)
        self.combine = nn.Linear(2 * hidden, hidden)
        self.proj = nn.Linear(hidden, VOCAB)

    def forward(self, src, src_len, tgt_in):
        B, S = src.shape
        x = self.src_emb(src)
        packed = pack_padded_sequence(x, src_len, batch_first=True, enforce_sorted=False)
        enc_packed, (h, c) = self.encoder(packed)
        Burn.lstm(self.encoder, packed.data, enc_packed.data)
        enc, _ = pad_packed_sequence(enc_packed, batch_first=True, total_length=S)   # B S H

        # decoder's initial state: the two directions' final states side by side, per layer
        def join(s):
            s = s.view(self.layers, 2, B, -1)
            return torch.cat([s[:, 0], s[:, 1]], dim=-1).contiguous()

        y = self.tgt_emb(tgt_in)
        dec, _ = self.decoder(y, (join(h), join(c)))                                   # B T H
        Burn.lstm(self.decoder, y, dec)

        scores = torch.bmm(dec, enc.transpose(1, 2))                                   # B T S
        scores = scores.masked_fill((src == PAD).unsqueeze(1), float("-inf"))
        attn = torch.softmax(scores, dim=-1)
        ctx = torch.bmm(attn, enc)                                                     # B T H
        both = torch.cat([dec, ctx], dim=-1)
        comb = torch.tanh(self.combine(both))
        Burn.linear(self.combine, both)
        logits = self.proj(comb)
        Burn.linear(self.proj, comb)
        return logits


def start_hog(stop):
    """A noisy neighbour: small matmuls in a loop on a daemon thread, for the whole run."""
    def spin():
        a, b = torch.randn(64, 64), torch.randn(64, 64)
        while not stop.is_set():
            torch.mm(a, b)

    t = threading.Thread(target=spin, name="hog", daemon=True)
    t.start()
    return t


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="directory for the chrome traces (one per rank)")
    p.add_argument("--steps", type=int, default=8, help="training steps (the first two are not traced)")
    p.add_argument("--len", type=float, default=24, help="typical source length L")
    p.add_argument("--batch", type=int, default=24, help="sentences per rank per step")
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--clip", type=float, default=1.0, help="max gradient norm")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--slow-rank", type=int, default=-1, help="rank the faults below apply to (-1: none)")
    p.add_argument("--factor", type=float, default=1.0, help="slow rank's forward+backward compute, x its peers'")
    p.add_argument("--hog", action="store_true", help="a busy matmul thread on the slow rank")
    p.add_argument("--sleep-ms", type=float, default=0.0, help="host sleep on the slow rank before each step")
    p.add_argument("--data-sleep-ms", type=float, default=0.0,
                   help="sleep on the slow rank inside 'data' while it builds each batch")
    p.add_argument("--len-sigma", type=float, default=0.0,
                   help="lognormal sigma of the lengths, median L (0: uniform in [L/2, 3L/2])")
    p.add_argument("--long-rank", type=int, default=-1, help="rank whose shard holds longer sentences")
    p.add_argument("--long", type=float, default=1.0, help="mean length on --long-rank, x the others'")
    args = p.parse_args()
    if args.steps < 3:
        p.error("--steps must be at least 3 (the profiler waits 1 and warms up 1)")

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    slow = rank == args.slow_rank
    os.makedirs(args.out, exist_ok=True)

    torch.manual_seed(args.seed)                       # the same initial weights on every rank
    net = Seq2Seq(args.hidden)
    model = DDP(net)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=1e-4)
    if slow and args.factor > 1:
        Burn.extra = (args.factor - 1.0) * CALIB

    # the "translation": the source read backwards, every word through a fixed permutation
    perm = torch.randperm(WORDS, generator=torch.Generator().manual_seed(4242)) + 3
    mapping = torch.arange(VOCAB)
    mapping[3:] = perm

    L = args.len * (args.long if rank == args.long_rank else 1.0)

    def lengths(g):
        B = args.batch
        if args.len_sigma > 0:
            z = torch.randn(B, generator=g)
            n = torch.exp(math.log(L) + args.len_sigma * z).clamp(2, 8 * L)
        else:
            n = L * (0.5 + torch.rand(B, generator=g))
        return n.round().long().clamp(min=2)

    def batch_for(step):
        g = torch.Generator().manual_seed(args.seed * 1_000_003 + 10_007 * rank + step)
        n = lengths(g)
        B, S = args.batch, int(n.max())
        pos = torch.arange(S).unsqueeze(0)
        valid = pos < n.unsqueeze(1)                                   # B S
        src = torch.randint(3, VOCAB, (B, S), generator=g).masked_fill(~valid, PAD)
        # reverse each sentence within its own length
        idx = (n.unsqueeze(1) - 1 - pos).clamp(min=0)
        tgt = mapping[src.gather(1, idx)].masked_fill(~valid, PAD)
        tgt_out = torch.cat([tgt, torch.full((B, 1), PAD)], dim=1)
        tgt_out[torch.arange(B), n] = EOS                               # words, EOS, pads
        tgt_in = torch.cat([torch.full((B, 1), BOS), tgt], dim=1)      # BOS, words, pads
        if slow and args.data_sleep_ms > 0:
            time.sleep(args.data_sleep_ms / 1000)                      # a slow loader
        return src, n, tgt_in, tgt_out

    stop = threading.Event()
    hog = start_hog(stop) if slow and args.hog else None

    if rank == 0:
        n_params = sum(q.numel() for q in net.parameters())
        law = f"lognormal sigma {args.len_sigma}" if args.len_sigma > 0 else "uniform [L/2, 3L/2]"
        print(f"seq2seq: LSTM hidden {args.hidden}, {n_params / 1e6:.2f}M params, world {world}, "
              f"{args.batch} sentences a rank, L {args.len:g} ({law})", flush=True)

    def trace_handler(prof):
        prof.export_chrome_trace(os.path.join(args.out, f"lstm-rank{rank}.json"))

    sched = torch.profiler.schedule(wait=1, warmup=1, active=args.steps - 2, repeat=1)
    step_ms, tokens = [], 0
    t0 = time.perf_counter()
    with torch.profiler.profile(activities=[ProfilerActivity.CPU], schedule=sched,
                                on_trace_ready=trace_handler) as prof:
        for step in range(args.steps):
            ts = time.perf_counter()
            if slow and args.sleep_ms > 0:
                time.sleep(args.sleep_ms / 1000)
            with record_function("data"):
                src, n, tgt_in, tgt_out = batch_for(step)
            tokens = int(n.sum())
            opt.zero_grad(set_to_none=True)
            with record_function("forward"):
                logits = model(src, n, tgt_in)
                loss = F.cross_entropy(logits.reshape(-1, VOCAB), tgt_out.reshape(-1), ignore_index=PAD)
            with record_function("backward"):
                loss.backward()
            with record_function("optimizer"):
                torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
                opt.step()
            step_ms.append((time.perf_counter() - ts) * 1000)
            prof.step()
            if rank == 0:
                print(f"step {step} loss {loss.item():.4f} tokens {tokens} max len {src.shape[1]} "
                      f"({step_ms[-1]:.0f} ms)", flush=True)

    # source tokens each rank had in the last step (to see --long-rank / --len-sigma at work)
    load = [torch.zeros((), dtype=torch.long) for _ in range(world)]
    dist.all_gather(load, torch.tensor(tokens))
    if rank == 0:
        traced = step_ms[2:]
        print(f"done in {time.perf_counter() - t0:.1f}s, mean step over the {len(traced)} traced steps "
              f"{sum(traced) / len(traced):.0f} ms, tokens per rank in the last step "
              f"{[int(v) for v in load]}, traces in {args.out}", flush=True)
    if hog is not None:
        stop.set()
        hog.join()
    dist.barrier()
    time.sleep(0.2)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
