"""Gradient-boosted decision trees, data-parallel, histogram method, in plain PyTorch.

(measurement table at the end of this docstring)

What it is
----------
XGBoost's ``tree_method="hist"`` with rabit all-reduce (or LightGBM's data-parallel learner),
written with torch tensors and ``torch.distributed`` by a user who wants boosting on their torch
cluster. CPU, gloo, 4 processes (``init_process_group("gloo")`` with a 120 s timeout).

Data: a learnable synthetic tabular problem. ``--features`` (32) standard-normal columns, the
first 8 mixed by a fixed random linear map (correlated features); a nonlinear target
``2 sin(x0) + x1 x2 + 1.5 [x3 > 0.5] - |x4| + 0.5 x5^2 + tanh(3 x6) + <w, x[:, 8:]>`` (w sparse,
drawn from ``--seed``) plus noise (``--objective reg``: squared error, y = f + N(0, 0.3^2);
``--objective binary``: logistic loss, y ~ Bernoulli(sigmoid(f - median))). Every rank generates
its own shard of ``--rows`` (30000) rows from a generator seeded by (seed, rank); the function is
the same everywhere.

Once, at start (outside the profiler):

* the base score: one ``all_reduce`` of (sum y, n) -> global mean (reg) or log-odds (binary);
* the quantile sketch: every rank draws ``--sketch`` (2048) rows at random, one ``all_gather``
  of the (sketch, features) samples, ``torch.quantile`` per feature -> ``--bins - 1`` cut points
  (identical on every rank), and every feature is binned with ``torch.searchsorted`` into uint8
  codes (``--bins`` <= 256, default 64).

Each boosting round is one training step (one ``ProfilerStep#N``):

* ``sleep`` (fault only);
* ``round``:

  - ``sample``: bagging (``--subsample``, default 0.8: a uniform row mask drawn from (seed,
    rank, round)) and column sampling (``--colsample``, default 1.0: features drawn from
    (seed, round), so the same on every rank); the sampled rows' codes are offset by
    ``feature * bins`` once;
  - ``grad``: gradient and hessian of the loss at the current predictions (float64);
  - for each level 0 .. ``--depth - 1`` (default 6):

    + ``hist``: the (node, feature, bin) histograms of (g, h) of the sampled rows, one
      ``index_add_`` of (rows*features, 2) values at flattened indices
      ``node*F*B + feature*B + code``.  With ``--subtract`` (default, as XGBoost and LightGBM
      do) only the smaller child of each split is built (by the global hessian sum, known on
      every rank), the sibling is parent - child after the all-reduce;
    + ``allreduce_hist``: ONE ``dist.all_reduce`` (SUM) of the level's histograms (float64;
      level d: 2^(d-1) nodes x F x B x 2 doubles, 32 KB at level 0 .. 512 KB at level 5 with the
      defaults; without ``--subtract`` twice that);
    + ``split``: per node the best (feature, bin) by the XGBoost gain with L2 ``--lam`` (1.0),
      ``--min-child-weight`` (1.0), ``--gamma`` (0); computed from the summed histograms, so
      the same on every rank; a node without a positive gain sends all its rows left;
    + ``partition``: every row of the shard (sampled or not) moves to its child;

  - ``update``: leaf weights ``-eta G/(H+lam)`` (``--eta`` 0.3) from the last split's child sums,
    the predictions of all the shard's rows updated by their leaf;
  - ``eval``: the shard's training loss, one small ``all_reduce`` of (sum loss, n); rank 0
    prints the mean.

So per round and rank: ``--depth`` all-reduces of histograms + 1 all-reduce of 2 doubles, all
blocking: a late rank makes every peer wait in the next ``allreduce_hist`` (or ``eval``).

Profiling: ``torch.profiler`` CPU, ``schedule(wait=1, warmup=1, active=steps-2)``,
``prof.step()`` per round, ``record_shapes=--shapes``; each rank writes ``gbdt_rank{R}.json``
into ``--out``. Each round is timed with ``time.perf_counter``; at the end rank 0 prints every
rank's median over the traced rounds.

Flags
-----
Common: ``--out DIR`` (required), ``--steps N`` boosting rounds (10; 8 traced), ``--seed S``,
``--shapes``.

Healthy knobs: ``--rows`` (rows per rank, 30000), ``--features`` (32), ``--bins`` (64),
``--depth`` (6), ``--objective {reg,binary}``, ``--subsample`` (0.8), ``--colsample`` (1.0),
``--subtract/--no-subtract``, ``--eta``, ``--lam``, ``--gamma``, ``--min-child-weight``,
``--sketch``.

Faults (only on ``--slow-rank R``, default -1 = none):

* ``--factor F``: a slower device: the rank builds each level's histograms F times (F-1 extra
  full ``index_add_`` passes over its sampled rows into a scratch buffer, discarded; the
  fractional part as a pass over that fraction of the rows), inside ``hist``;
* ``--sleep-ms MS``: a slow host: ``time.sleep`` before each round, in ``record_function("sleep")``;
* ``--hog``: a busy neighbour: a thread multiplying 256x256 matrices for the whole run (stopped
  and joined before the process exits);
* ``--predict-sleep-ms MS`` (family fault): a slow prediction-cache update: the rank sleeps MS in
  ``update`` (after the last histogram all-reduce, before the loss all-reduce), e.g. a host
  writing its predictions / margin cache out each round. Its peers wait in ``eval``.

Imbalance without a fault:

* ``--big-rank K --big X``: rank K holds round(X * rows) rows;
* ``--seq-sigma S``: each rank's bagging fraction per round is
  ``min(1, subsample * lognormal(0, S))`` (drawn from (seed, rank, round)), so the ranks' sampled
  row counts (histogram work) differ per round.

At the end rank 0 also prints every rank's median time *outside* the two collectives
("busy": the step minus the time spent inside ``dist.all_reduce``), which shows the slowed rank
directly: the step times of all ranks are equal, since every rank meets every other
``--depth + 1`` times a round.

Measurements
------------
2-core box, 4 ranks, 10 rounds (8 timed), defaults unless said. The box was shared during all of
this with another helper's 4-process jobs and two analysis processes (load 10-15), so a healthy
default run alone ranged 224-489 ms a step from one run to the next. Every fault / imbalance run
was run right after a healthy default run ("base"); "change" is the step time against that base;
"busy" is the per-rank time outside collectives (slow/big rank vs the median of the others).

  setting (rank)                     base ms  step ms  change   busy slow / others ms
  --factor 2 (r1)                      485      385     -21%     (before busy was printed)
  --factor 2.5 (r3)                    318      430     +35%     261 / 183
  --factor 3 (r2)                      365      260     -29%     (before busy was printed)
  --factor 4 (r1)                      409      477     +16%     299 / 188
  --factor 4 (r0)                      286      313      +9%     193 / 113
  --factor 6 (r2)                      340      383     +12%     262 / 131
  --factor 8 (r1)                      256      609    +137%     434 / 195
  --factor 8 (r3)                      278      416     +50%     339 / 152
  --sleep-ms 50 (r3)                   229      252     +10%     (before busy was printed)
  --sleep-ms 100 (r3)                  376      493     +31%     253 / 198
  --sleep-ms 150 (r1)                  284      390     +37%     265 / 125
  --predict-sleep-ms 50 (r2)           311      400     +29%     (before busy was printed)
  --predict-sleep-ms 100 (r2)          479      375     -22%     226 / 101
  --predict-sleep-ms 150 (r3)          277      475     +71%     282 / 162
  --hog (r0)                           371      570     +54%     (before busy was printed)
  --hog (r0)                           349      600     +72%     331 / 236
  --big-rank 2 --big 3                 278      455     +64%     345 / 183
  --big-rank 1 --big 2                 375      393      +5%     249 / 163
  --seq-sigma 0.8                      348      380      +9%     busy 132-193, varies per round
  healthy --no-subtract                  -      433        -     (same losses as --subtract)
  healthy --depth 5 --bins 256           -      358        -     163-203
  healthy --objective binary --colsample 0.5   307       -     98-144
  healthy --features 48 --rows 20000 --shapes  358       -     167-182 (traces 5.0 MB/rank)
  healthy --no-subtract --depth 4 --subsample 1.0  367   -     221-235

Reading: the run-to-run noise of this box (+-40% between two healthy runs) swamps anything
below ~+30%: --factor <= 6, --sleep-ms 50 and --predict-sleep-ms 100 each had a pair where the
fault run was *faster* than its base, or within 10%. Sizes that cost >= 10% in every pair
measured: --factor 8 (the histograms are ~half of a rank's compute, so 8x histograms is ~2-3x
the rank's busy time), --sleep-ms >= 100, --predict-sleep-ms 150, --hog, --big 3. The busy
column separates the slowed rank in every fault run, including the ones whose step change was
lost in the noise. A sleep costs the step less than its length: while the slow rank sleeps its
peers (and the neighbour's jobs) get the CPU. Wall per run: 17-30 s; traces 3.3 MB per rank at
the defaults (about 12k events), 5 MB with --shapes and 48 features. The losses go down: train
MSE 12.1 -> 2.7 in 10 rounds (default), logloss 0.647 -> 0.445 (binary, depth 5, 256 bins,
colsample 0.5); --subtract and --no-subtract give bit-identical losses.
"""

import argparse
import math
import os
import statistics
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile, record_function, schedule


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=10, help="boosting rounds")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shapes", action="store_true")
    # data / model
    p.add_argument("--rows", type=int, default=30000, help="rows per rank")
    p.add_argument("--features", type=int, default=32)
    p.add_argument("--bins", type=int, default=64)
    p.add_argument("--depth", type=int, default=6)
    p.add_argument("--objective", choices=["reg", "binary"], default="reg")
    p.add_argument("--subsample", type=float, default=0.8)
    p.add_argument("--colsample", type=float, default=1.0)
    p.add_argument("--subtract", dest="subtract", action="store_true", default=True)
    p.add_argument("--no-subtract", dest="subtract", action="store_false")
    p.add_argument("--eta", type=float, default=0.3)
    p.add_argument("--lam", type=float, default=1.0)
    p.add_argument("--gamma", type=float, default=0.0)
    p.add_argument("--min-child-weight", type=float, default=1.0)
    p.add_argument("--sketch", type=int, default=2048, help="rows per rank for the quantile sketch")
    # faults
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--factor", type=float, default=1.0)
    p.add_argument("--sleep-ms", type=float, default=0.0)
    p.add_argument("--hog", action="store_true")
    p.add_argument("--predict-sleep-ms", type=float, default=0.0)
    # imbalance
    p.add_argument("--big-rank", type=int, default=-1)
    p.add_argument("--big", type=float, default=1.0)
    p.add_argument("--seq-sigma", type=float, default=0.0)
    a = p.parse_args()
    if not 2 <= a.bins <= 256:
        p.error("--bins must be in [2, 256] (uint8 codes)")
    return a


# --------------------------------------------------------------------------
# data
# --------------------------------------------------------------------------

def make_shard(n, n_feat, seed, rank, objective):
    """This rank's rows of a fixed synthetic problem (same function on every rank)."""
    g_fn = torch.Generator().manual_seed(seed)               # the problem
    mix = torch.eye(8) + 0.4 * torch.randn(8, 8, generator=g_fn)
    n_lin = max(0, n_feat - 8)
    w = torch.randn(n_lin, generator=g_fn) * (torch.rand(n_lin, generator=g_fn) < 0.3)

    g = torch.Generator().manual_seed(seed * 7919 + 1000 + rank)  # this rank's rows
    x = torch.randn(n, n_feat, generator=g)
    k = min(8, n_feat)
    x[:, :k] = x[:, :k] @ mix[:k, :k]
    c = [x[:, i] if i < n_feat else torch.zeros(n) for i in range(7)]
    f = (2.0 * torch.sin(c[0]) + c[1] * c[2] + 1.5 * (c[3] > 0.5).float()
         - c[4].abs() + 0.5 * c[5] ** 2 + torch.tanh(3.0 * c[6]))
    if n_lin:
        f = f + 0.5 * (x[:, 8:] @ w)
    if objective == "reg":
        y = f + 0.3 * torch.randn(n, generator=g)
    else:
        y = (torch.rand(n, generator=g) < torch.sigmoid(f - 0.5)).float()
    return x, y.double()


def quantile_bins(x, n_bins, sketch, seed, rank, world):
    """Global per-feature quantile cut points from an all_gather'ed sample; uint8 codes."""
    g = torch.Generator().manual_seed(seed * 31 + 17 + rank)
    idx = torch.randint(0, x.shape[0], (sketch,), generator=g)
    sample = x[idx].contiguous()
    gathered = [torch.empty_like(sample) for _ in range(world)]
    dist.all_gather(gathered, sample)
    allv = torch.cat(gathered)                                  # (world*sketch, F)
    q = torch.linspace(0, 1, n_bins + 1)[1:-1]
    cuts = torch.quantile(allv, q, dim=0).T.contiguous()        # (F, bins-1)
    codes = torch.searchsorted(cuts, x.T.contiguous())          # (F, n) in [0, bins-1]
    return codes.T.to(torch.uint8).contiguous(), cuts


# --------------------------------------------------------------------------
# loss
# --------------------------------------------------------------------------

def grad_hess(pred, y, objective):
    if objective == "reg":
        return pred - y, torch.ones_like(pred)
    p = torch.sigmoid(pred)
    return p - y, (p * (1 - p)).clamp_min(1e-16)


def loss_sum(pred, y, objective):
    if objective == "reg":
        return ((pred - y) ** 2).sum()
    return torch.nn.functional.binary_cross_entropy_with_logits(pred, y, reduction="sum")


# --------------------------------------------------------------------------
# the tree builder
# --------------------------------------------------------------------------

class HistBuilder:
    def __init__(self, n_feat, n_bins, extra_factor):
        self.F, self.B = n_feat, n_bins
        extra = max(0.0, extra_factor - 1.0)
        self.extra_full = int(extra)
        self.extra_frac = extra - self.extra_full

    def build(self, slot, base_idx, gh, n_slots):
        """(n_slots, F, B, 2) histograms of gh over rows with slot >= 0."""
        F, B = self.F, self.B
        keep = slot >= 0
        if not bool(keep.all()):
            slot, base_idx, gh = slot[keep], base_idx[keep], gh[keep]
        flat = (slot.unsqueeze(1) * (F * B) + base_idx).reshape(-1)          # (rows*F,)
        vals = gh.unsqueeze(1).expand(-1, F, 2).reshape(-1, 2)              # (rows*F, 2)
        hist = torch.zeros(n_slots * F * B, 2, dtype=torch.float64)
        hist.index_add_(0, flat, vals)
        if self.extra_full or self.extra_frac:                              # --factor
            scratch = torch.zeros_like(hist)
            for _ in range(self.extra_full):
                scratch.index_add_(0, flat, vals)
            m = int(round(flat.shape[0] * self.extra_frac))
            if m > 0:
                scratch.index_add_(0, flat[:m], vals[:m])
        return hist.view(n_slots, F, B, 2)


def best_splits(hist, lam, gamma, min_child_weight):
    """Per node best (feature, bin) from (nodes, F, B, 2) histograms.

    Returns feature, threshold bin (go left if code <= bin), gain, and the left/right (G, H).
    """
    n_nodes, F, B, _ = hist.shape
    cum = hist.cumsum(dim=2)                                    # left sums for cut after bin b
    tot = cum[:, :1, -1, :]                                     # (nodes, 1, 2): same for every f
    GL, HL = cum[..., 0], cum[..., 1]
    G, H = tot[..., 0].unsqueeze(-1), tot[..., 1].unsqueeze(-1)
    GR, HR = G - GL, H - HL

    def score(g, h):
        return g * g / (h + lam)

    gain = 0.5 * (score(GL, HL) + score(GR, HR) - score(G, H)) - gamma
    ok = (HL >= min_child_weight) & (HR >= min_child_weight)
    ok[:, :, -1] = False                                        # the last bin is no split
    gain = torch.where(ok, gain, torch.full_like(gain, -math.inf))
    flat_gain = gain.reshape(n_nodes, -1)
    best = flat_gain.argmax(dim=1)
    bgain = flat_gain.gather(1, best.unsqueeze(1)).squeeze(1)
    feat, thr = best // B, best % B
    split = bgain > 0
    thr = torch.where(split, thr, torch.full_like(thr, B - 1))  # no split: all rows go left
    feat = torch.where(split, feat, torch.zeros_like(feat))
    left = cum[torch.arange(n_nodes), feat, thr]                # (nodes, 2)
    right = tot.squeeze(1) - left
    return feat, thr, bgain, left, right


def start_hog(stop):
    def spin():
        a = torch.randn(256, 256)
        b = torch.randn(256, 256) / 16.0
        while not stop.is_set():
            a = torch.tanh(a @ b)

    th = threading.Thread(target=spin, name="hog", daemon=True)
    th.start()
    return th


# --------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------

def main():
    args = parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    dist.init_process_group("gloo", timeout=timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    slow = rank == args.slow_rank

    n_rows = args.rows
    if rank == args.big_rank:
        n_rows = max(1, round(args.rows * args.big))
    F_all, B = args.features, args.bins

    x, y = make_shard(n_rows, F_all, args.seed, rank, args.objective)
    codes, _cuts = quantile_bins(x, B, args.sketch, args.seed, rank, world)
    del x
    rows_all = torch.arange(n_rows)

    # base score from the global label mean
    s = torch.tensor([y.sum().item(), float(n_rows)], dtype=torch.float64)
    dist.all_reduce(s)
    ybar = (s[0] / s[1]).item()
    if args.objective == "reg":
        base = ybar
    else:
        ybar = min(max(ybar, 1e-6), 1 - 1e-6)
        base = math.log(ybar / (1 - ybar))
    pred = torch.full((n_rows,), base, dtype=torch.float64)
    n_global = int(s[1].item())

    builder = HistBuilder(0, B, args.factor if slow else 1.0)
    n_cols = max(1, round(F_all * args.colsample))

    stop = threading.Event()
    hog = start_hog(stop) if slow and args.hog else None

    if rank == 0:
        print(f"[gbdt-hist] world={world} rows/rank={args.rows} (global {n_global}) "
              f"features={F_all} (colsample {n_cols}) bins={B} depth={args.depth} "
              f"objective={args.objective} subsample={args.subsample} "
              f"subtract={args.subtract} eta={args.eta}", flush=True)

    os.makedirs(args.out, exist_ok=True)
    active = max(1, args.steps - 2)
    prof = profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=1, warmup=1, active=active, repeat=1),
        record_shapes=args.shapes,
    )
    step_times, busy_times = [], []
    dist.barrier()
    try:
        with prof:
            for rnd in range(args.steps):
                t0 = time.perf_counter()
                t_comm = 0.0
                if slow and args.sleep_ms > 0:
                    with record_function("sleep"):
                        time.sleep(args.sleep_ms / 1000.0)
                with record_function("round"):
                    with record_function("sample"):
                        g_row = torch.Generator().manual_seed(
                            args.seed * 1_000_003 + rank * 10_007 + rnd)
                        frac = args.subsample
                        if args.seq_sigma > 0:
                            frac *= math.exp(args.seq_sigma *
                                             torch.randn((), generator=g_row).item())
                        frac = min(1.0, frac)
                        if frac < 1.0:
                            sel = torch.nonzero(torch.rand(n_rows, generator=g_row) < frac
                                                ).squeeze(1)
                        else:
                            sel = rows_all
                        g_col = torch.Generator().manual_seed(args.seed * 7_919 + rnd)
                        feats = torch.randperm(F_all, generator=g_col)[:n_cols].sort().values
                        builder.F = n_cols
                        base_idx = (codes[sel][:, feats].long()
                                    + torch.arange(n_cols) * B)          # (n_sel, F)
                    with record_function("grad"):
                        g, h = grad_hess(pred[sel], y[sel], args.objective)
                        gh = torch.stack((g, h), dim=1)                   # (n_sel, 2) f64

                    node = torch.zeros(n_rows, dtype=torch.long)       # all rows of the shard
                    parent_hist = None
                    child_sums = None
                    for level in range(args.depth):
                        n_nodes = 1 << level
                        with record_function("hist"):
                            node_sel = node[sel]
                            if level == 0 or not args.subtract:
                                hist = builder.build(node_sel, base_idx, gh, n_nodes)
                            else:
                                # build the smaller child (global hessian) of each parent
                                n_par = n_nodes // 2
                                h_child = child_sums[..., 1].view(n_par, 2)
                                small = (h_child[:, 1] < h_child[:, 0]).long()   # 0 L, 1 R
                                build_node = torch.arange(n_par) * 2 + small
                                is_built = node_sel == build_node[node_sel // 2]
                                slot = torch.where(is_built, node_sel // 2,
                                                   torch.full_like(node_sel, -1))
                                hist = builder.build(slot, base_idx, gh, n_par)
                        with record_function("allreduce_hist"):
                            tc = time.perf_counter()
                            dist.all_reduce(hist)
                            t_comm += time.perf_counter() - tc
                        with record_function("split"):
                            if level > 0 and args.subtract:
                                other = parent_hist - hist
                                full = torch.empty(n_par, 2, *hist.shape[1:],
                                                   dtype=hist.dtype)
                                ar = torch.arange(n_par)
                                full[ar, small] = hist
                                full[ar, 1 - small] = other
                                hist = full.view(n_nodes, *hist.shape[1:])
                            feat, thr, gain, left, right = best_splits(
                                hist, args.lam, args.gamma, args.min_child_weight)
                            child_sums = torch.stack((left, right), dim=1).view(-1, 2)
                            parent_hist = hist
                        with record_function("partition"):
                            col = feats[feat[node]]
                            code = codes[rows_all, col].long()
                            node = node * 2 + (code > thr[node]).long()
                    with record_function("update"):
                        if slow and args.predict_sleep_ms > 0:
                            time.sleep(args.predict_sleep_ms / 1000.0)
                        leaf = -args.eta * child_sums[:, 0] / (child_sums[:, 1] + args.lam)
                        pred += leaf[node]
                    with record_function("eval"):
                        ls = torch.stack((loss_sum(pred, y, args.objective),
                                          torch.tensor(float(n_rows), dtype=torch.float64)))
                        tc = time.perf_counter()
                        dist.all_reduce(ls)
                        t_comm += time.perf_counter() - tc
                step_times.append(time.perf_counter() - t0)
                busy_times.append(step_times[-1] - t_comm)
                if rank == 0:
                    n_split = int((gain > 0).sum())
                    print(f"round {rnd:3d} train-{'mse' if args.objective == 'reg' else 'logloss'} "
                          f"{(ls[0] / ls[1]).item():.4f} rows {sel.numel()} "
                          f"last-level splits {n_split}/{1 << (args.depth - 1)} "
                          f"t {1000 * step_times[-1]:.1f} ms", flush=True)
                prof.step()
    finally:
        stop.set()
        if hog is not None:
            hog.join()

    prof.export_chrome_trace(os.path.join(args.out, f"gbdt_rank{rank}.json"))

    traced = step_times[2:] if len(step_times) > 2 else step_times
    busy = busy_times[2:] if len(busy_times) > 2 else busy_times
    med = (statistics.median(traced), statistics.median(busy))
    allmed = [None] * world
    dist.all_gather_object(allmed, med)
    if rank == 0:
        print("median step ms per rank: " +
              " ".join(f"r{r}={1000 * m[0]:.1f}" for r, m in enumerate(allmed)), flush=True)
        print("median ms outside collectives per rank: " +
              " ".join(f"r{r}={1000 * m[1]:.1f}" for r, m in enumerate(allmed)), flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
