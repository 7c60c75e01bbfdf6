"""Fine-tune a small transformer text classifier with DDP, evaluating as we go.

What it is
----------
A topic classifier (4 classes) on synthetic token data: each example is 64 tokens
from a 1000-word vocabulary, and ~15% of the positions are drawn from a small set of
words that belong to the example's class. The model is a small pre-LN transformer
encoder written by hand (token + position embeddings, `--layers` blocks of
qkv/attention/proj + a 4x GELU MLP, mean pooling, linear head; 0.56 M parameters at
the defaults), trained with AdamW (warm-up then cosine lr) under plain
DistributedDataParallel on CPU with the gloo backend, 4 processes
(`torchrun --standalone --nproc_per_node=4`). Each rank reads its own training batches
(no DataLoader workers: a small reader class, seeded by (seed, rank, step)).

The loop is the usual "train, log, evaluate every K steps" loop:
  * every step: data -> forward -> backward (DDP all_reduce of the gradients) ->
    optimizer, then `log_metrics`: a dict {loss, tokens seen, lr, step time} from
    every rank is collected with `dist.all_gather_object` and rank 0 prints it.
  * every `--eval-every` steps (inside that same training step): `evaluate` runs
    `--eval-batches` batches of this rank's rank-strided shard of a held-out set
    under torch.no_grad, gathers the sizes (all_gather), then the padded
    predictions + labels (all_gather of a tensor), all_reduces the eval loss, and
    rank 0 computes accuracy and macro-F1. Rank 0 decides "improved / stop early"
    and sends the decision to everyone with `dist.broadcast_object_list`.
  * when the accuracy improved rank 0 does `save_checkpoint`: torch.save of the
    model + optimizer state to /tmp/user_eval_loop_ckpt/<run id>_best.pt (removed at
    the end) while the other ranks go on and wait for it at the next collective.
Loss goes down over a longer run (e.g. `--steps 60 --eval-every 10`: mean loss
1.39 -> ~0.55, held-out accuracy 0.26 -> ~0.87).

Profiling: torch.profiler with CPU activity, schedule(wait=1, warmup=1,
active=steps-2), `prof.step()` once per training step, input shapes only with
`--shapes`. Ranges: train_step (data, forward, backward, optimizer), log_metrics,
evaluate, save_checkpoint. Each rank writes one chrome trace,
`--out/trace_rank<R>.json`, and nothing else goes to --out. The collectives show up
as c10d::allreduce_/allgather_/broadcast_ ops on the main thread and as
gloo:all_reduce/all_gather/broadcast ranges on two gloo worker threads.

Flags
-----
  --out DIR           where the traces go (required)
  --steps N           training steps (10 -> 8 traced steps, evaluation at steps 2, 5, 8)
  --seed S            seed (0)
  --shapes            record input shapes in the profiler
  --width D           model width (128)         --layers L    encoder blocks (2)
  --heads H           attention heads (4)       --batch B     per-rank batch (8)
  --seq-len T         tokens per example (64)   --lr LR       peak learning rate (1e-3)
  --eval-every K      evaluate every K steps (3)
  --eval-batches B    held-out batches per rank per evaluation (2)
  --eval-batch E      held-out batch size (16)
  --patience P        evaluations without improvement before early stop (10)
  --no-checkpoint     never save the best checkpoint
  --ckpt-dir DIR      where rank 0 saves it (/tmp/user_eval_loop_ckpt; never --out)
Faults, on one rank only:
  --slow-rank R       the slow rank (-1 = none) for the three below
  --factor F          rank R does F times the work of every nn.Linear in forward
                      (training and evaluation): extra copies of the same matmul on
                      the same inputs, results thrown away (fractional F does a
                      slice of the rows)
  --sleep-ms MS       rank R sleeps MS ms before each step
  --hog               rank R runs a daemon thread doing 512x512 matmuls all the time
  --slow-io-rank R --io-sleep-ms MS
                      rank R's reader sleeps MS ms per training batch, inside the
                      "data" range (slow disk / network filesystem on that host)
Imbalance (nobody is slow, the work differs):
  --big-rank K --big X       rank K's training batch is X times larger
  --seq-sigma S              every rank's sequence length per step is
                             seq_len * lognormal(0, S), seeded by (seed, rank, step),
                             clipped to [8, 4*seq_len]
  --eval-skew-rank R --eval-skew X
                             rank R's evaluation shard is X times larger (uneven
                             DistributedSampler shard), so R runs X times the eval
                             batches and the others wait for it in the all_gather
Healthy variants: e.g. `--eval-every 2`, `--no-checkpoint`, `--width 96 --layers 3`,
`--batch 12`. (`--width 192 --layers 3` works but is ~3x slower per step, ~650 ms.)

Measured (2-core box, 4 ranks, OMP_NUM_THREADS=1, `--steps 20` = 18 traced steps,
faulted rank 2; median ProfilerStep time per rank from the traces). The box is shared:
during the measurements other jobs kept the load average at 3-4 (pass A, the table)
or 8-11 (pass B, two unrelated 100%-CPU processes). Identical healthy runs gave job
medians of 101-157 ms in pass A (median 121 ms; eval steps ~192 ms) and 108-288 ms
in pass B, so a change below ~15% is inside the noise. Wall time per run: 10-15 s
(pass A) to 20-40 s (pass B) for --steps 10..20, startup included. Every step ends in the DDP
all_reduce and an all_gather_object, so the slow rank and the others have the same
step time; where the time goes differs and is less noisy: "wait" = how much longer
the others' backward is than the slow rank's (they wait for its gradients in the DDP
all_reduce), "fwd" = slow rank's forward range / the others'. Healthy: wait -5..+6
ms, fwd ratio 0.9-1.3.

  setting (pass A)            step ms     vs 121 ms     in-run evidence                 pass B        >=10%?
                              slow/oth    slow/oth                                      (vs neighbours)
  --factor 1.3                134/128     +11%/+6%      fwd 35/33 ms, wait 5            +22%(noise)   no
  --factor 1.6                122/126     +1%/+4%       fwd 41/33, wait 6               -11%(noise)   no
  --factor 2                  113/121     -7%/+0%       fwd 39/33, wait 14              -4%, wait 34  no (barely seen)
  --factor 3 / 4              106/105, 108/127  ~0      fwd 37/22, 40/25, wait 12, 5    -             no
  --sleep-ms 20               108/106     -11%/-12%     wait 21                         -             no
  --sleep-ms 50               132/133     +10%/+11%     wait 44                         +39%, wait 65 yes (borderline)
  --sleep-ms 100              160/160     +33%/+33%     wait 87                         +14%, wait 95 yes
  --hog                       172/168     +42%/+39%     fwd 50/30, wait 31              +69%, +131%   yes
  --io-sleep-ms 20            118/111     -3%/-8%       data 20 ms, wait 22             -             no
  --io-sleep-ms 50            156/156     +29%/+29%     data 51 ms, wait 45             +32%, wait 66 yes
  --io-sleep-ms 100           180/170     +49%/+40%     data 101 ms, wait 92            +45%, wait 86 yes
  --big 1.5 (imbalance)       119/119     -2%/-2%       fwd 40/33, wait 6               +18%, wait 31 no / borderline
  --big 2   (imbalance)       136/128     +12%/+6%      fwd 48/26, wait 21              +58%, wait 34 borderline
  --seq-sigma 0.3 (imb.)      128/120     +6%/-1%       slowest rank changes per step   -22%(noise)   no
  --seq-sigma 0.6 (imb.)      147/138     +21%/+14%     step = max of the 4 ranks' draws +68%         yes
  --eval-skew 2 (imbalance)   136/123     +12%/+2%      evaluate 103 vs 82 ms (+26%)    eval steps +49% eval steps only
  --eval-skew 4 (imbalance)   103/96      (noise)       evaluate 128 vs 82 ms (+56%)    eval steps +93% eval steps only
Why --factor hardly shows: at the default width the nn.Linear matmuls are only a few
ms of a ~30 ms forward (this step is dominated by per-op overhead, backward, the
pickled object collectives and the profiler itself), and backward is not scaled, so
even F=4 costs the job less than the noise. With `--width 256` F=2 does show
(forward 97/66 ms, others wait ~40 ms in backward, ~+13%). A sleep on the slow rank
costs the job less than its length: while it sleeps the other three get its CPU
(their forward drops from ~33 to ~24 ms). For a clear >=10% slowdown use
--sleep-ms >= 50 (better 100), --io-sleep-ms >= 50, --hog, --seq-sigma >= 0.6,
--big >= 2 (borderline), --eval-skew >= 2 (on the evaluation steps, every
--eval-every'th step, only).
"""

import argparse
import datetime
import math
import os
import threading
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import ProfilerActivity, profile, record_function, schedule

NUM_CLASSES = 4
VOCAB = 1000
SIGNAL_TOKENS = 24     # tokens per class that carry the label
SIGNAL_PROB = 0.15     # fraction of positions drawn from the class's signal tokens

# set in main() on the slow rank only; >1 means "this box is slower"
FACTOR = 1.0


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="directory for the chrome traces")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shapes", action="store_true", help="record input shapes in the profiler")
    # model / data
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--batch", type=int, default=8, help="per-rank training batch")
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3)
    # evaluation / checkpointing
    p.add_argument("--eval-every", type=int, default=3)
    p.add_argument("--eval-batches", type=int, default=2)
    p.add_argument("--eval-batch", type=int, default=16)
    p.add_argument("--patience", type=int, default=10, help="evals without improvement before stopping")
    p.add_argument("--no-checkpoint", action="store_true")
    p.add_argument("--ckpt-dir", default="/tmp/user_eval_loop_ckpt")
    # faults (one rank)
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--factor", type=float, default=1.0)
    p.add_argument("--sleep-ms", type=float, default=0.0)
    p.add_argument("--hog", action="store_true")
    p.add_argument("--slow-io-rank", type=int, default=-1)
    p.add_argument("--io-sleep-ms", type=float, default=0.0)
    # imbalance (no fault)
    p.add_argument("--big-rank", type=int, default=-1)
    p.add_argument("--big", type=float, default=1.0)
    p.add_argument("--seq-sigma", type=float, default=0.0)
    p.add_argument("--eval-skew-rank", type=int, default=-1)
    p.add_argument("--eval-skew", type=float, default=1.0)
    return p.parse_args()


# ----------------------------------------------------------------------------- model

def linear(x, lin):
    """nn.Linear, plus the extra work a slower machine would spend on it."""
    y = lin(x)
    if FACTOR > 1.0:
        extra = FACTOR - 1.0
        with torch.no_grad():
            xd = x.detach()
            for _ in range(int(extra)):
                F.linear(xd, lin.weight, lin.bias)
            frac = extra - int(extra)
            if frac > 0:
                flat = xd.reshape(-1, xd.shape[-1])
                n = max(1, int(round(frac * flat.shape[0])))
                F.linear(flat[:n], lin.weight, lin.bias)
    return y


class Block(nn.Module):
    def __init__(self, d, heads, dropout=0.1):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, pad_mask=None):
        b, t, d = x.shape
        h = self.ln1(x)
        q, k, v = linear(h, self.qkv).view(b, t, 3, self.heads, d // self.heads).unbind(2)
        q, k, v = (z.transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, dropout_p=self.drop.p if self.training else 0.0)
        a = a.transpose(1, 2).reshape(b, t, d)
        x = x + self.drop(linear(a, self.proj))
        h = F.gelu(linear(self.ln2(x), self.fc1))
        x = x + self.drop(linear(h, self.fc2))
        return x


class TextClassifier(nn.Module):
    def __init__(self, vocab, d, layers, heads, max_len, num_classes):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(max_len, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, num_classes)

    def forward(self, ids):
        t = ids.shape[1]
        x = self.tok(ids) + self.pos(torch.arange(t, device=ids.device))[None]
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x).mean(dim=1))


# ----------------------------------------------------------------------------- data

def make_examples(n, seq_len, gen):
    """Synthetic 'topic' classification: each class has a few tell-tale tokens."""
    labels = torch.randint(0, NUM_CLASSES, (n,), generator=gen)
    ids = torch.randint(0, VOCAB, (n, seq_len), generator=gen)
    signal = labels[:, None] * SIGNAL_TOKENS + torch.randint(0, SIGNAL_TOKENS, (n, seq_len), generator=gen)
    use = torch.rand(n, seq_len, generator=gen) < SIGNAL_PROB
    ids = torch.where(use, signal, ids)
    return ids, labels


class ShardReader:
    """Reads this rank's training batches (stands in for a sharded file reader)."""

    def __init__(self, args, rank):
        self.args = args
        self.rank = rank
        self.batch = max(1, int(round(args.batch * (args.big if rank == args.big_rank else 1.0))))
        self.io_sleep = args.io_sleep_ms / 1000.0 if rank == args.slow_io_rank else 0.0

    def seq_len_for(self, step):
        a = self.args
        if a.seq_sigma <= 0:
            return a.seq_len
        g = torch.Generator().manual_seed(a.seed * 1_000_003 + self.rank * 7919 + step)
        s = a.seq_len * math.exp(a.seq_sigma * torch.randn((), generator=g).item())
        return int(min(max(s, 8), 4 * a.seq_len))

    def read(self, step):
        if self.io_sleep:
            time.sleep(self.io_sleep)   # slow network filesystem on this host
        g = torch.Generator().manual_seed(self.args.seed * 7_654_321 + self.rank * 104_729 + step)
        return make_examples(self.batch, self.seq_len_for(step), g)


def eval_shard(args, rank, world):
    """This rank's slice of the held-out set (rank-strided, like DistributedSampler)."""
    n_batches = args.eval_batches
    if rank == args.eval_skew_rank:
        n_batches = max(1, int(round(n_batches * args.eval_skew)))
    total = world * args.eval_batches * args.eval_batch
    g = torch.Generator().manual_seed(12345)  # same held-out set everywhere
    ids, labels = make_examples(max(total, n_batches * args.eval_batch * world), args.seq_len, g)
    idx = torch.arange(rank, ids.shape[0], world)[: n_batches * args.eval_batch]
    return [(ids[i], labels[i]) for i in idx.split(args.eval_batch)]


# ----------------------------------------------------------------------------- eval

def macro_f1(pred, gold, k):
    f1s = []
    for c in range(k):
        tp = ((pred == c) & (gold == c)).sum().item()
        fp = ((pred == c) & (gold != c)).sum().item()
        fn = ((pred != c) & (gold == c)).sum().item()
        denom = 2 * tp + fp + fn
        f1s.append(2 * tp / denom if denom else 0.0)
    return sum(f1s) / k


@torch.no_grad()
def evaluate(model, shard, world):
    model.eval()
    preds, golds = [], []
    loss_sum = torch.zeros(2)
    for ids, labels in shard:
        logits = model(ids)
        loss_sum[0] += F.cross_entropy(logits, labels, reduction="sum")
        loss_sum[1] += labels.numel()
        preds.append(logits.argmax(-1))
        golds.append(labels)
    model.train()
    pred = torch.cat(preds)
    gold = torch.cat(golds)

    # shards can be uneven, so pad to the largest before all_gather
    n = torch.tensor([pred.numel()])
    sizes = [torch.zeros_like(n) for _ in range(world)]
    dist.all_gather(sizes, n)
    max_n = max(int(s) for s in sizes)
    local = torch.full((2, max_n), -1, dtype=torch.long)
    local[0, : pred.numel()] = pred
    local[1, : gold.numel()] = gold
    gathered = [torch.empty_like(local) for _ in range(world)]
    dist.all_gather(gathered, local)
    dist.all_reduce(loss_sum)

    all_pred = torch.cat([g[0, : int(s)] for g, s in zip(gathered, sizes)])
    all_gold = torch.cat([g[1, : int(s)] for g, s in zip(gathered, sizes)])
    acc = (all_pred == all_gold).float().mean().item()
    return {
        "eval_loss": (loss_sum[0] / loss_sum[1]).item(),
        "acc": acc,
        "f1": macro_f1(all_pred, all_gold, NUM_CLASSES),
        "n": all_pred.numel(),
    }


# ----------------------------------------------------------------------------- misc

def start_hog():
    """Another tenant's job on the same host: busy 512x512 matmuls until told to stop."""
    stop = threading.Event()

    def burn():
        a = torch.randn(512, 512)
        b = torch.randn(512, 512)
        while not stop.is_set():
            torch.mm(a, b)

    t = threading.Thread(target=burn, name="noisy-neighbour", daemon=True)
    t.start()
    return stop, t


def lr_at(step, total, base, warmup=3):
    if step < warmup:
        return base * (step + 1) / warmup
    p = (step - warmup) / max(1, total - warmup)
    return base * 0.5 * (1 + math.cos(math.pi * p))


def main():
    global FACTOR
    args = parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed)

    slow = rank == args.slow_rank
    hog = None
    if slow:
        FACTOR = max(1.0, args.factor)
        if args.hog:
            hog = start_hog()
    sleep_s = args.sleep_ms / 1000.0 if slow else 0.0

    model = TextClassifier(VOCAB, args.width, args.layers, args.heads, 4 * args.seq_len, NUM_CLASSES)
    model = DDP(model)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    reader = ShardReader(args, rank)
    shard = eval_shard(args, rank, world)

    run_id = os.environ.get("TORCHELASTIC_RUN_ID", str(os.getpid()))
    ckpt_path = os.path.join(args.ckpt_dir, f"{run_id}_best.pt")
    if rank == 0 and not args.no_checkpoint:
        os.makedirs(args.ckpt_dir, exist_ok=True)
    best_acc, bad_evals = -1.0, 0
    tokens_seen = 0

    if rank == 0:
        nparams = sum(p.numel() for p in model.parameters())
        print(f"world={world} params={nparams/1e6:.2f}M batch={args.batch} seq={args.seq_len} "
              f"width={args.width} layers={args.layers}", flush=True)

    os.makedirs(args.out, exist_ok=True)
    sched = schedule(wait=1, warmup=1, active=max(1, args.steps - 2))
    with profile(activities=[ProfilerActivity.CPU], schedule=sched, record_shapes=args.shapes) as prof:
        for step in range(args.steps):
            if sleep_s:
                time.sleep(sleep_s)
            t0 = time.perf_counter()
            lr = lr_at(step, args.steps, args.lr)
            for g in opt.param_groups:
                g["lr"] = lr

            with record_function("train_step"):
                with record_function("data"):
                    ids, labels = reader.read(step)
                with record_function("forward"):
                    logits = model(ids)
                    loss = F.cross_entropy(logits, labels)
                with record_function("backward"):
                    loss.backward()
                with record_function("optimizer"):
                    opt.step()
                    opt.zero_grad(set_to_none=True)
            tokens_seen += ids.numel()
            step_time = time.perf_counter() - t0

            with record_function("log_metrics"):
                stats = {"rank": rank, "loss": loss.item(), "tokens": tokens_seen,
                         "lr": lr, "step_time": step_time}
                all_stats = [None] * world
                dist.all_gather_object(all_stats, stats)
                if rank == 0:
                    mean_loss = sum(s["loss"] for s in all_stats) / world
                    tok = sum(s["tokens"] for s in all_stats)
                    slowest = max(all_stats, key=lambda s: s["step_time"])
                    print(f"step {step:4d} loss {mean_loss:.4f} lr {lr:.2e} tokens {tok} "
                          f"slowest r{slowest['rank']} {slowest['step_time']*1e3:.0f}ms", flush=True)

            stop = False
            if (step + 1) % args.eval_every == 0:
                with record_function("evaluate"):
                    m = evaluate(model, shard, world)
                    decision = [None]
                    if rank == 0:
                        improved = m["acc"] > best_acc
                        if improved:
                            best_acc, bad_evals = m["acc"], 0
                        else:
                            bad_evals += 1
                        decision = [{"improved": improved, "stop": bad_evals >= args.patience,
                                     "best_acc": best_acc}]
                        print(f"  eval @ {step}: loss {m['eval_loss']:.4f} acc {m['acc']:.3f} "
                              f"f1 {m['f1']:.3f} (n={m['n']}) best {best_acc:.3f}", flush=True)
                    dist.broadcast_object_list(decision, src=0)
                    decision = decision[0]
                    stop = decision["stop"]
                if rank == 0 and decision["improved"] and not args.no_checkpoint:
                    with record_function("save_checkpoint"):
                        tmp = ckpt_path + ".tmp"
                        torch.save({"model": model.module.state_dict(),
                                    "optimizer": opt.state_dict(),
                                    "step": step, "acc": decision["best_acc"]}, tmp)
                        os.replace(tmp, ckpt_path)
            prof.step()
            if stop:
                if rank == 0:
                    print(f"early stop at step {step}", flush=True)
                break

    prof.export_chrome_trace(os.path.join(args.out, f"trace_rank{rank}.json"))
    if hog is not None:
        hog[0].set()
        hog[1].join()   # a matmul still running at interpreter exit aborts the process
    dist.barrier()
    if rank == 0 and not args.no_checkpoint and os.path.exists(ckpt_path):
        os.remove(ckpt_path)   # scratch checkpoint, keep /tmp tidy
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
