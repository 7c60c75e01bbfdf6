"""BERT-style masked-language-model pretraining of a small encoder, data-parallel with
DistributedDataParallel, dynamic padding, token-budget microbatches, gradient accumulation under
``no_sync()`` and ``torch.distributed.algorithms.Join`` for ranks whose shards run out early, as
one writes it after the HF / fairseq MLM recipes and the DDP uneven-inputs tutorial. CPUs, gloo.

The model, at ``--width D`` (128) and ``--layers N`` (2): token embeddings (a vocabulary of
4096, ids 0-3 being [PAD], [CLS], [SEP] and [MASK]) plus learned position embeddings (256
positions), LayerNorm; N encoder blocks, pre-LN (``--post-ln``: post-LN, as the original
BERT), each self-attention with 4 heads (one fused ``qkv`` Linear,
``F.scaled_dot_product_attention`` with a boolean key-padding mask) and a GELU feed-forward of
4D; then the MLM head: Linear(D, D), GELU, LayerNorm and a decoder tied to the token embedding
(its own bias), applied to the masked positions only (as fairseq's ``masked_tokens``). 0.97M
parameters at the defaults, the same on every rank (``--seed``). No dropout, as recent
pretraining recipes: on CPU its bernoulli cost a third of the forward, and attention dropout
sends SDPA to its math path, which cost more than all the rest of it.

The data: synthetic "documents", drawn per rank from a generator seeded with (``--seed``,
rank), never from files: a length from a lognormal of median 64 tokens and sigma ``--doc-sigma``
(0.5; clipped to [8, 254]), a topic, and Zipf-distributed tokens shifted by the topic. A rank
reads its documents in order and packs them greedily into microbatches by a token budget: a
microbatch takes documents until one more would make (rows x the longest row, [CLS] and [SEP]
included) exceed ``--tokens`` (2048); a document that does not fit starts the next microbatch.
The rows are padded to the microbatch's longest (dynamic padding), so a microbatch is about
``--tokens`` padded tokens whatever its lengths, and holds few long rows or many short ones
(unsorted, about half of them are padding at the defaults).
Masking as BERT: 15% of the real tokens are chosen, 80% of them become [MASK], 10% a random
token, 10% stay; the loss is the cross-entropy on the chosen ones.

A step (one ``ProfilerStep#N``, one optimizer step) is ``--accum K`` (2) microbatches, each
``data`` (read, pack, pad and mask one microbatch), ``forward`` (the loss, divided by K) and
``backward``; all but the last run inside ``ddp.no_sync()``, so the gradients accumulate locally
and DDP all-reduces them once, in the last microbatch's ``backward`` (2 buckets,
``gloo:all_reduce``); then ``optimizer``: clip the gradient norm at 1, AdamW (``fused=True``,
lr 5e-4, weight decay 0.01 but not on biases and LayerNorms, a linear warm-up over the first
quarter of the steps), zero the gradients.

The loop runs inside ``with Join([ddp]):``. Inside it DDP adds, to every forward, an all-reduce
that tells the others this rank is still in (``Join.notify_join_context``) and one of whether
this forward will sync its gradients, both small. A rank that runs out of data leaves its loop
and waits in ``Join.__exit__``, which shadows the collectives of the ranks still training: for
each of their forwards, the two small all-reduces and, on their sync microbatch, one zero
all-reduce per gradient bucket; DDP divides by the initial world size, so the ranks left average
in zeros for the ones gone, and when the last rank joins DDP broadcasts its parameters to all.
A step's boundaries must be the same on every rank still training, or one rank's gradient
all-reduce would meet another's join all-reduce: a shard's last, incomplete accumulation is
dropped (as ``drop_last``), and ranks differ only in whole steps.

``--uneven``: the second half of the ranks (rank r with 2r >= world size: ranks 2 and 3 of 4)
have shards one step shorter, ``--steps`` - 1 steps. The profiler stays on around the Join (the
``with Join`` is inside the ``with profile``): such a rank calls ``prof.step()`` one time fewer,
and its last ``ProfilerStep#N`` is still open while it waits in ``Join.__exit__``, shadowing the
other ranks' last step; the profiler closes it when it stops. So every rank's trace has the same
``ProfilerStep#2`` .. ``#(steps-1)``, and on the short ranks the last one is the Join wait (its
all-reduces inside the Join's ``__exit__``, no ``data``, ``forward``, ``backward``).

Profiling: ``torch.profiler.profile(activities=[CPU], schedule=schedule(wait=1, warmup=1,
active=steps-2))``, ``record_shapes`` only with ``--shapes``, ``prof.step()`` after each optimizer
step, at the end ``prof.export_chrome_trace`` into ``--out``/``trace-rank<R>.json``, one per rank.
``record_function`` marks ``data``, ``forward``, ``backward`` (K of each a step) and
``optimizer``. In the trace: ``aten::linear``/``aten::addmm``/``aten::mm``,
``aten::_scaled_dot_product_flash_attention_for_cpu`` and their backward ops, DDP's
``DistributedDataParallel.forward``, the join and sync-flag all-reduces (``c10d::allreduce_`` in
every ``forward``), and the gradient all-reduces issued inside the last ``backward`` with their
``gloo:all_reduce`` spans on gloo's threads.

Flags:

- ``--out DIR`` (required), ``--steps N`` (9, 7 traced), ``--seed S`` (0), ``--shapes``.
- ``--width D`` (128, a multiple of the 4 heads), ``--layers N`` (2), ``--post-ln``,
  ``--tokens T`` (2048 padded tokens a microbatch, at least 256), ``--accum K`` (2),
  ``--doc-sigma S`` (0.5), ``--uneven``, ``--lr``.
- ``--slow-rank R`` (-1: none), and on that rank only: ``--factor F``, each block's feed-forward
  runs its two matmuls again under ``no_grad`` in forward, results discarded (a slow kernel),
  ``(F - 1) x 3`` times a call on average (fractions carried over calls): the feed-forward's
  matmul work for the step, whose backward costs about two forwards, becomes about F x, all of it
  spent in ``forward``; ``--sleep-ms MS``, a host sleep before each optimizer step (after the
  last ``backward``, outside ``optimizer``); ``--data-sleep-ms MS``, a sleep inside ``data`` each
  time it packs a microbatch (K times a step); ``--hog``, a daemon thread multiplying 128x128
  matrices for the whole run.
- Imbalance, no fault: ``--big-rank K --big X``, rank K's token budget is ``X T``, so its
  microbatches are X times larger every step; ``--doc-sigma`` large (1.0), the lengths spread, so
  the microbatches' shapes (few long rows or many short ones), attention cost and padding vary
  from rank to rank and step to step. DDP averages the ranks' gradients with equal weights
  whatever their token counts, as plain DDP code does.

    OMP_NUM_THREADS=1 python -m torch.distributed.run --standalone --nproc_per_node=4 \\
        tests/corpus/user_join_mlm.py --out DIR --slow-rank 1 --factor 1.8

Measured on this 2-core machine with other jobs beside (load average 3.3-9.6, so a step swings
almost 2x from run to run): a job takes 16-48 s wall, all ranks' parameters equal at the end
(rank 0's last line), no warnings. Traces a rank: 6.4 MB at the defaults (5.6 on the short ranks
of ``--uneven``), 8.9 with ``--accum 3``, 7.9 with ``--accum 4 --steps 7``, 8.5 with ``--layers
3``; ``--shapes`` adds half (9.9 MB at 9 steps, 8.5 with ``--steps 8``). Mean step over the
traced steps, healthy defaults: 598, 736, 822, 1068 ms; ``--width 192 --tokens 1024 --shapes``
469-735; ``--tokens 1024 --accum 4`` 890; ``--doc-sigma 1.2`` 504-900; ``--uneven`` 588-1215,
where the short ranks' last step (the Join wait, ending with the final broadcast) is 480-1300 ms
against 345-865 for the others' last step.

What a fault added: the slow rank's own time (its step less the idle stretches inside
``backward`` where DDP waits for the gradient all-reduce) minus its peers' mean, as a share of
the step, and the own times' ratio, one run each:

    --factor 1.5 / 1.7 (--width 192) / 1.8 (--uneven) / 2   12 / 18 / 17 19 / 26 27 %   x1.14-1.38
    --sleep-ms 120 / 150                                    11 14 / 12 %                x1.13-1.17
    --data-sleep-ms 60 (K=2) / 50, 80 (K=3)                 10 / 7, 16 %                x1.07-1.20
    --hog (also with --layers 3)                            29 35 / 35 38 %             x1.44-1.68
    --big-rank --big 1.5 / 2 (imbalance)                    14 21 / 33 %                x1.17-1.52
    healthy, --doc-sigma 1.0-1.2, --uneven: the largest rank's excess 1-9 %

A sleep costs less than its length: while the slow rank sleeps its peers share the two cores
and go faster; the busier the machine, the smaller a sleep's share of the step.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import threading
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.algorithms import Join
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import ProfilerActivity, record_function

VOCAB = 4096
PAD, CLS, SEP, MASK = 0, 1, 2, 3
N_SPECIAL = 4
MAX_LEN = 256           # positions, [CLS] and [SEP] included
MEDIAN_DOC = 64         # median document length in tokens
HEADS = 4
MASK_PROB = 0.15
# Extra no-grad forwards of each feed-forward per call, per unit of (factor - 1), on the slow
# rank: its backward is about two forwards, so 3 forwards redo the feed-forward's whole step once.
EXTRA_PER_UNIT = 3.0


class Block(nn.Module):
    def __init__(self, d, post_ln):
        super().__init__()
        self.post_ln = post_ln
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)
        self.slow_extra = 0.0           # set on the slow rank by --factor
        self.credit = 0.0

    def attn(self, x, keep):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, HEADS, d // HEADS).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
        return self.proj(a.transpose(1, 2).reshape(b, n, d))

    def ffn(self, x):
        out = self.fc2(F.gelu(self.fc1(x)))
        if self.slow_extra > 0:
            self.credit += self.slow_extra
            n = int(self.credit)
            self.credit -= n
            with torch.no_grad():
                for _ in range(n):
                    F.linear(F.gelu(F.linear(x, self.fc1.weight, self.fc1.bias)),
                             self.fc2.weight, self.fc2.bias)
        return out

    def forward(self, x, keep):
        if self.post_ln:
            x = self.ln1(x + self.attn(x, keep))
            return self.ln2(x + self.ffn(x))
        x = x + self.attn(self.ln1(x), keep)
        return x + self.ffn(self.ln2(x))


class MLMEncoder(nn.Module):
    def __init__(self, d, layers, post_ln):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, d, padding_idx=PAD)
        self.pos = nn.Embedding(MAX_LEN, d)
        self.emb_ln = nn.LayerNorm(d)
        self.blocks = nn.ModuleList(Block(d, post_ln) for _ in range(layers))
        self.final_ln = nn.Identity() if post_ln else nn.LayerNorm(d)
        self.head_dense = nn.Linear(d, d)
        self.head_ln = nn.LayerNorm(d)
        self.head_bias = nn.Parameter(torch.zeros(VOCAB))      # decoder weight = self.tok.weight
        self.apply(self._init)

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, 0.0, 0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)
        if isinstance(m, nn.Embedding) and m.padding_idx is not None:
            with torch.no_grad():
                m.weight[m.padding_idx].zero_()

    def forward(self, ids, labels):
        b, n = ids.shape
        keep = (ids != PAD).view(b, 1, 1, n)           # attend to real keys only
        x = self.tok(ids) + self.pos(torch.arange(n, device=ids.device))
        x = self.emb_ln(x)
        for blk in self.blocks:
            x = blk(x, keep)
        x = self.final_ln(x)
        picked = labels != -100
        h = self.head_ln(F.gelu(self.head_dense(x[picked])))
        logits = F.linear(h, self.tok.weight, self.head_bias)
        return F.cross_entropy(logits, labels[picked])


class Documents:
    """A rank's shard of synthetic documents, stored flat with offsets (as a pre-tokenized shard
    is), drawn 256 documents at a time from a generator seeded with (seed, rank)."""

    CHUNK = 256

    def __init__(self, seed, rank, sigma):
        self.g = torch.Generator().manual_seed(seed * 1_000_003 + 7919 * rank + 17)
        self.sigma = sigma
        ranks = torch.arange(1, VOCAB - N_SPECIAL + 1, dtype=torch.float64)
        self.zipf = (1.0 / (ranks + 10.0)).float()
        self.tokens = torch.empty(0, dtype=torch.long)
        self.lengths = torch.empty(0, dtype=torch.long)
        self.starts = torch.empty(0, dtype=torch.long)
        self.lens = []                  # the lengths as Python ints, for packing
        self.next_doc = 0

    def _draw(self):
        n = self.CHUNK
        z = torch.randn(n, generator=self.g)
        lengths = (MEDIAN_DOC * torch.exp(self.sigma * z)).round().long().clamp(8, MAX_LEN - 2)
        topic = torch.randint(0, 64, (n,), generator=self.g).repeat_interleave(lengths)
        t = torch.multinomial(self.zipf, int(lengths.sum()), replacement=True, generator=self.g)
        tokens = N_SPECIAL + (t + 61 * topic) % (VOCAB - N_SPECIAL)
        a = self.next_doc               # drop what was read, append the new documents
        start = int(self.starts[a]) if a < len(self.lens) else len(self.tokens)
        self.tokens = torch.cat([self.tokens[start:], tokens])
        self.lengths = torch.cat([self.lengths[a:], lengths])
        self.starts = torch.cumsum(self.lengths, 0) - self.lengths
        self.lens = self.lens[a:] + lengths.tolist()
        self.next_doc = 0

    def length(self, i):
        """Length of the i-th unread document."""
        while self.next_doc + i >= len(self.lens):
            self._draw()
        return self.lens[self.next_doc + i]

    def take(self, k):
        """The next k documents: their tokens, flat, and their lengths."""
        a, b = self.next_doc, self.next_doc + k
        lo = int(self.starts[a])
        hi = int(self.starts[b - 1] + self.lengths[b - 1])
        self.next_doc = b
        return self.tokens[lo:hi], self.lengths[a:b]


class TokenBudgetLoader:
    """Packs a rank's documents, in order, into padded and masked microbatches of <= budget."""

    def __init__(self, docs, budget, seed, rank, sleep_s=0.0):
        self.docs, self.budget, self.sleep_s = docs, budget, sleep_s
        self.g = torch.Generator().manual_seed(seed * 7 + 1000 + rank)

    def next_batch(self):
        if self.sleep_s > 0:
            time.sleep(self.sleep_s)                  # a slow loader on --slow-rank
        k, longest = 0, 0
        while True:                                   # greedy: add documents while they fit
            n = self.docs.length(k) + 2               # [CLS] doc [SEP]
            if k and (k + 1) * max(longest, n) > self.budget:
                break                                 # this one starts the next microbatch
            k, longest = k + 1, max(longest, n)
        flat, lengths = self.docs.take(k)
        ids = torch.full((k, longest), PAD, dtype=torch.long)
        ids[:, 0] = CLS
        ids[torch.arange(k), lengths + 1] = SEP
        row = torch.arange(k).repeat_interleave(lengths)
        starts = torch.cumsum(lengths, 0) - lengths
        col = torch.arange(len(flat)) - starts.repeat_interleave(lengths) + 1
        ids[row, col] = flat
        return self.mask(ids)

    def mask(self, ids):
        maskable = ids >= N_SPECIAL
        chosen = (torch.rand(ids.shape, generator=self.g) < MASK_PROB) & maskable
        if not chosen.any():
            chosen[0, 1] = True
        labels = torch.where(chosen, ids, torch.full_like(ids, -100))
        u = torch.rand(ids.shape, generator=self.g)
        inputs = ids.clone()
        inputs[chosen & (u < 0.8)] = MASK
        rand = chosen & (u >= 0.8) & (u < 0.9)
        inputs[rand] = torch.randint(N_SPECIAL, VOCAB, (int(rand.sum()),), generator=self.g)
        return inputs, labels


def start_hog(stop):
    """A noisy neighbour inside the process: matmuls on a daemon thread until ``stop``."""
    def spin():
        a, b = torch.randn(128, 128), torch.randn(128, 128)
        while not stop.is_set():
            torch.mm(a, b)

    t = threading.Thread(target=spin, name="hog", daemon=True)
    t.start()
    return t


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="directory for the chrome traces (one per rank)")
    p.add_argument("--steps", type=int, default=9, help="optimizer steps")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shapes", action="store_true", help="profiler record_shapes")
    p.add_argument("--width", type=int, default=128, help="model width (4 heads)")
    p.add_argument("--layers", type=int, default=2, help="encoder blocks")
    p.add_argument("--post-ln", action="store_true", help="post-LN blocks (original BERT)")
    p.add_argument("--tokens", type=int, default=2048, help="padded tokens per microbatch, max")
    p.add_argument("--accum", type=int, default=2, help="microbatches per optimizer step")
    p.add_argument("--doc-sigma", type=float, default=0.5,
                   help="lognormal sigma of document lengths")
    p.add_argument("--uneven", action="store_true",
                   help="the second half of the ranks run one step fewer (Join)")
    p.add_argument("--lr", type=float, default=5e-4)
    p.add_argument("--slow-rank", type=int, default=-1, help="rank the faults below apply to")
    p.add_argument("--factor", type=float, default=1.0,
                   help="feed-forward matmul work on the slow rank, x")
    p.add_argument("--sleep-ms", type=float, default=0.0,
                   help="host sleep before each optimizer step")
    p.add_argument("--data-sleep-ms", type=float, default=0.0,
                   help="sleep packing each microbatch")
    p.add_argument("--hog", action="store_true", help="a busy matmul thread on the slow rank")
    p.add_argument("--big-rank", type=int, default=-1, help="rank with a larger token budget")
    p.add_argument("--big", type=float, default=1.5, help="--big-rank's budget, x --tokens")
    args = p.parse_args()
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if args.steps < 3:
        p.error("--steps must be at least 3 (the profiler waits 1 and warms up 1)")
    if args.uneven and args.steps < 4:
        p.error("--uneven needs --steps of at least 4 (the short ranks run one fewer)")
    if args.width < HEADS or args.width % HEADS:
        p.error(f"--width must be a positive multiple of the {HEADS} heads")
    if args.layers < 1:
        p.error("--layers must be at least 1")
    if args.tokens < MAX_LEN:
        p.error(f"--tokens must be at least {MAX_LEN} (one row of the longest document)")
    if args.accum < 1:
        p.error("--accum must be at least 1")
    if args.doc_sigma < 0:
        p.error("--doc-sigma must not be negative")
    if args.slow_rank >= world or args.big_rank >= world:
        p.error(f"--slow-rank and --big-rank must be below the world size {world}")
    if args.slow_rank < 0 and (args.factor != 1 or args.hog or args.sleep_ms or args.data_sleep_ms):
        p.error("--factor, --hog, --sleep-ms and --data-sleep-ms need --slow-rank")
    if args.factor < 1:
        p.error("--factor must be at least 1")
    if args.sleep_ms < 0 or args.data_sleep_ms < 0:
        p.error("--sleep-ms and --data-sleep-ms must not be negative")
    if args.big <= 0:
        p.error("--big must be positive")

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    slow = rank == args.slow_rank
    os.makedirs(args.out, exist_ok=True)

    torch.manual_seed(args.seed)            # the same initial weights everywhere
    model = MLMEncoder(args.width, args.layers, args.post_ln)
    if slow and args.factor > 1:
        for blk in model.blocks:
            blk.slow_extra = (args.factor - 1) * EXTRA_PER_UNIT
    ddp = DDP(model)
    decay = [q for n, q in model.named_parameters() if q.dim() >= 2]
    no_decay = [q for n, q in model.named_parameters() if q.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                             {"params": no_decay, "weight_decay": 0.0}], lr=args.lr, fused=True)
    warmup = max(1, args.steps // 4)
    sched_lr = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warmup))

    budget = args.tokens
    if rank == args.big_rank:
        budget = int(round(args.big * args.tokens))
    loader = TokenBudgetLoader(Documents(args.seed, rank, args.doc_sigma), budget, args.seed, rank,
                               args.data_sleep_ms / 1000 if slow else 0.0)
    # --uneven: ranks in the second half have a shard one optimizer step shorter
    my_steps = args.steps - (1 if args.uneven and 2 * rank >= world else 0)
    if rank == 0:
        nparams = sum(q.numel() for q in model.parameters())
        print(f"MLM encoder: {nparams / 1e6:.2f}M params, width {args.width}, layers "
              f"{args.layers}, {'post' if args.post_ln else 'pre'}-LN, tokens {args.tokens} x "
              f"accum {args.accum}, doc-sigma {args.doc_sigma}, world {world}", flush=True)
    print(f"rank {rank}: {my_steps} steps, budget {budget} tokens"
          + (" (slow rank)" if slow else ""), flush=True)

    stop = threading.Event()
    hog = start_hog(stop) if slow and args.hog else None
    sched = torch.profiler.schedule(wait=1, warmup=1, active=args.steps - 2)
    ddp.train()
    t0 = time.perf_counter()
    with torch.profiler.profile(activities=[ProfilerActivity.CPU], schedule=sched,
                                record_shapes=args.shapes) as prof:
        with Join([ddp]):
            for step in range(my_steps):
                ts = time.perf_counter()
                loss_sum, real, padded = 0.0, 0, 0
                for micro in range(args.accum):
                    with record_function("data"):
                        inputs, labels = loader.next_batch()
                    real += int((inputs != PAD).sum())
                    padded += inputs.numel()
                    last = micro == args.accum - 1
                    with ddp.no_sync() if not last else contextlib.nullcontext():
                        with record_function("forward"):
                            loss = ddp(inputs, labels) / args.accum
                        with record_function("backward"):
                            loss.backward()
                    loss_sum += loss.detach()
                if slow and args.sleep_ms > 0:
                    time.sleep(args.sleep_ms / 1000)
                with record_function("optimizer"):
                    gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
                    opt.step()
                    sched_lr.step()
                    opt.zero_grad(set_to_none=True)
                prof.step()
                if rank == 0:
                    print(f"step {step} loss {float(loss_sum):.4f} gnorm {float(gnorm):.3f} "
                          f"tokens {real}/{padded} {(time.perf_counter() - ts) * 1000:.0f} ms",
                          flush=True)

    prof.export_chrome_trace(os.path.join(args.out, f"trace-rank{rank}.json"))
    if hog is not None:
        stop.set()
        hog.join()
    # Join's post hook broadcast the last joiner's parameters: the replicas must agree
    with torch.no_grad():
        flat = torch.cat([q.detach().reshape(-1) for q in model.parameters()])
        lo, hi = flat.clone(), flat.clone()
        dist.all_reduce(lo, op=dist.ReduceOp.MIN)
        dist.all_reduce(hi, op=dist.ReduceOp.MAX)
        spread = (hi - lo).abs().max().item()
    if rank == 0:
        print(f"done in {time.perf_counter() - t0:.1f}s, max parameter spread across ranks "
              f"{spread:.2e}, traces in {args.out}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
