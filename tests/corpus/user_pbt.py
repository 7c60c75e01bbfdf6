"""Population-based training (PBT, Jaderberg et al. 2017) of a small CNN classifier, one member a rank.

(calibration table at the end of this docstring)

What it is
----------
Four members of a population, one on each of 4 CPU processes (gloo,
``init_process_group("gloo")``, ``OMP_NUM_THREADS=1``). Every member trains its *own* copy of
a small CNN image classifier (no gradient is shared) with its *own* hyperparameters: learning
rate (log-uniform in [0.01, 0.2]), weight decay (log-uniform in [1e-5, 1e-3]), SGD momentum
(uniform in [0.8, 0.95]) and dropout (uniform in [0.0, 0.4]), drawn from (``--seed``, rank).
The same initial weights on every member (``torch.manual_seed(seed)``), so only the
hyperparameters and the data order make them differ.

Model: ``--width`` C: conv3x3(3 -> C) - BN - ReLU - conv3x3(C -> 2C) - BN - ReLU - maxpool -
conv3x3(2C -> 2C) - BN - ReLU - maxpool - flatten - dropout - linear(2C x (S/4)^2 -> 128) - ReLU
- dropout - linear(128 -> 10), S = ``--image``. SGD with momentum and weight decay.

Data: synthetic 10-class images (S x S, 3 channels): each class a smooth random prototype;
a sample is its class's prototype, randomly scaled, shifted by up to 2 pixels and with noise
(``load_batch`` draws it from (seed, rank, step, minibatch), so every member sees its own
stream). Each member holds its own held-out batch (``--eval-batch`` samples, drawn once from
(seed, rank)): the members' validation shards differ.

A step of a member:

1. ``train_inner``: ``--inner-steps`` minibatches of ``--batch`` samples, each
   ``load_batch`` -> ``forward`` -> ``backward`` -> ``optimizer``;
2. ``evaluate``: accuracy of its own model on its held-out batch;
3. ``cross_eval`` (``--cross-eval ring``, the default): so a member is not judged on one
   small validation shard only, its weights travel one hop around the ring: every member
   ``isend``s its flat parameter buffer (parameters and BN statistics, ~0.2 M floats at the
   defaults) to rank r+1 and ``irecv``s rank r-1's (``ring_send`` / ``ring_recv``), loads it
   into a spare copy of the model and scores it on its own held-out batch (``peer_eval``).
   A member's score is the mean of its own accuracy and its successor's accuracy of it;
4. ``log_stats``: an ``all_reduce`` of a 5-float slot per member (train loss, train
   accuracy, own eval accuracy, accuracy of the predecessor's model, samples), so every rank
   knows the whole population's numbers (rank 0 prints them);
5. ``checkpoint``: the member appends its metrics line to its own jsonl file (and every sync
   ``torch.save``-s its state dict) in a temporary directory;
6. every ``--ready`` steps (step + 1 a multiple of it), ``pbt_sync``: ``gather_scores`` (an
   ``all_gather`` of [score, lr, weight decay, momentum, dropout] of every member, the score
   averaged over the steps since the last sync), the same ranking on every rank; each member
   of the bottom ``--quantile`` (0.25: one of 4) ``exploit``s a member of the top quantile
   (drawn from (seed, sync)): it copies its weights and momentum buffers, then ``explore``s:
   every hyperparameter multiplied by 0.8 or 1.25 (dropout resampled in [0, 0.4] with
   probability 0.25). ``--exploit p2p`` (default): the top member ``dist.send``s one flat
   buffer (parameters, BN statistics and momentum, ~0.4 M floats) to the bottom member, who
   ``dist.recv``s it (the two ranks only); ``--exploit broadcast``: the top member
   ``dist.broadcast``s the same buffer to everyone, and only the bottom member loads it.

Communication per step (defaults): ring_send / ring_recv of ~0.2 M floats on every link
r -> r+1 (``--cross-eval ring``), a 20-float ``all_reduce``; every ``--ready`` (2) steps a
20-float ``all_gather`` and one ~0.4 M-float send/recv (or broadcast). Nothing else: the
members train alone, and they meet only in the ring, the all_reduce and the sync.

User ranges per step: ``sleep`` (fault only), ``train_inner`` [``load_batch``,
``forward``, ``backward``, ``optimizer``] x inner steps, ``evaluate``, ``cross_eval``
[``ring_send``, ``ring_recv``, ``peer_eval``], ``log_stats``, ``checkpoint``, and on sync
steps ``pbt_sync`` [``gather_scores``, ``exploit``, ``explore``].

Profiling: ``torch.profiler`` CPU, ``schedule(wait=1, warmup=1, active=steps-2, repeat=1)``,
``prof.step()`` once per step, ``record_shapes`` only with ``--shapes``; each rank writes
``trace_rank{R}.json`` into ``--out``. At the end rank 0 prints every rank's median step time
over the traced steps and its median "busy" time (the step minus the time spent waiting in
the ring's send/recv, the all_reduce, the all_gather and the exploit's send/recv/broadcast).

Flags
-----
Common: ``--out DIR`` (required), ``--steps`` (10; 8 traced), ``--seed``, ``--shapes``.

Population / job size: ``--width`` (24), ``--image`` (24), ``--batch`` (48),
``--inner-steps`` (3), ``--eval-batch`` (256), ``--ready`` (2), ``--quantile`` (0.25),
``--exploit {p2p,broadcast}``, ``--cross-eval {ring,off}``.

Faults (only on ``--slow-rank R``, default -1 = none):

* ``--factor F``: a slower device: every minibatch's forward and backward is done F times
  (F - 1 extra passes before the real one, their gradients taken by ``torch.autograd.grad``
  and discarded; the fractional part on that fraction of the minibatch's rows);
* ``--sleep-ms MS``: a slow host: ``time.sleep`` once per step at the step's start, in
  ``record_function("sleep")``;
* ``--data-sleep-ms MS``: a slow data loader: each of the step's ``load_batch`` sleeps
  MS / inner-steps (MS a step);
* ``--ckpt-sleep-ms MS`` (family fault): a slow checkpoint / metrics write (a slow shared
  filesystem): the member's ``checkpoint`` sleeps MS before writing, every step;
* ``--hog``: a busy neighbour thread doing 192x192 matmuls for the whole run (stopped and
  joined before exit);
* ``--link-src A --link-dst B --link-factor X`` (B = A + 1 mod 4, a link of the
  cross-evaluation ring; needs ``--cross-eval ring``): every message A sends to B carries X
  times the floats, zero-padded (B receives it all and keeps the head): the ring's weight
  message every step, and the exploit's send/recv when A is the top member and B the bottom
  one. No ``--slow-rank``.

Imbalance without a fault:

* ``--seq-sigma S``: each member's minibatch size this step is ``--batch`` times
  lognormal(0, S) (drawn from (seed, rank, step), clamped to [1/4x, 4x], at least 4
  samples): the members' work differs by rank and step;
* ``--big-rank K --big X``: member K's minibatches are X times as large as the others', every
  step.

Calibration
-----------
2-core box shared with other helpers' 4-process jobs (load average 10 rising to 18 during the
runs); 4 ranks, 10 steps (8 timed). The ring, the all_reduce and the syncs tie the members,
so every rank's step median agrees within a few %: one number. "busy" = the median time
outside communication; slow rank vs the mean of the others.

  setting (slow rank)                              load  step ms   busy slow / others ms
  healthy default (4 runs)                         10-18  352-632   273-544 (by load)
  healthy --exploit broadcast --shapes              15     870      645-790 (traces 7 MB)
  healthy --width 20 --batch 24 --inner-steps 4
          --ready 3 --cross-eval off                17    1032      595-732
  --factor 2 (r2)                                   10     764      713 / 600  (+19%)
  --factor 3 (r3)                                   10     604      555 / 393  (+41%)
  --factor 4 (r0)                                   10     762      729 / 449  (+62%)
  --inner-steps 2 --factor 5 (r0)                   17    1235     1154 / 692  (+67%)
  --cross-eval off --ready 3 --factor 4 (r3)        16     950      905 / 431 (+110%)
  --sleep-ms 150 (r1)                               10     440      390 / 286  (+36%)
  --data-sleep-ms 150 (r3)                          10     634      525 / 447  (+17%)
  --data-sleep-ms 250 (r3)                          17     984      826 / 638  (+29%)
  --ckpt-sleep-ms 150 (r0)                          10     766      632 / 534  (+18%)
  --ckpt-sleep-ms 250 (r0)                          16    1334     1287 / 963  (+34%)
  --hog (r1)                                        10    1047      928 / 531  (+75%)
  link 1->2 x256 (83 MB ring messages)              11    1053      r1 759, r2 641 / 748
  link 3->0 x128 (42 MB)                            14     832      r3 622, r0 668 / 746
  --big-rank 3 --big 3                              16    1062      865 / 522  (+66%)
  --seq-sigma 0.8                                   14     887      549-683 by rank

Reading: the neighbours' load moves a healthy step between 350 and 630 ms from one run to the
next, so compare busy times within a run. The slowed rank's busy time shows every fault;
the others' busy time rises too while they wait (the box's cores go to whoever runs), so a
--factor costs less than its nominal F: 3-5 give +40-70%. Host sleeps of 150 ms are only
17-36% of a step under load, hence 200-250 ms in the battery. The padded ring link shows in
the step time (600 -> 1050 ms at x256: every member waits in ``ring_recv`` for the member
after the link) more than in anyone's busy time. A bigger minibatch on one member (--big)
makes everyone wait at the ring and the all_reduce. Wall per run: 15-42 s; traces 3-4 MB a
rank (7 MB with --shapes, 8-10 MB on a rank with --factor 4-5).
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

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, record_function, schedule

N_CLASSES = 10


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shapes", action="store_true")
    p.add_argument("--width", type=int, default=16, help="channels of the first conv")
    p.add_argument("--image", type=int, default=16, help="image side (a multiple of 4)")
    p.add_argument("--batch", type=int, default=32, help="minibatch size")
    p.add_argument("--inner-steps", type=int, default=3, help="minibatches per step")
    p.add_argument("--eval-batch", type=int, default=256, help="held-out samples per member")
    p.add_argument("--ready", type=int, default=2, help="steps between population syncs")
    p.add_argument("--quantile", type=float, default=0.25, help="bottom / top fraction for exploit")
    p.add_argument("--exploit", choices=["p2p", "broadcast"], default="p2p")
    p.add_argument("--cross-eval", choices=["ring", "off"], default="ring")
    # faults
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--factor", type=float, default=1.0)
    p.add_argument("--sleep-ms", type=float, default=0.0)
    p.add_argument("--data-sleep-ms", type=float, default=0.0)
    p.add_argument("--ckpt-sleep-ms", type=float, default=0.0)
    p.add_argument("--hog", action="store_true")
    p.add_argument("--link-src", type=int, default=-1)
    p.add_argument("--link-dst", type=int, default=-1)
    p.add_argument("--link-factor", type=float, default=1.0)
    # imbalance
    p.add_argument("--seq-sigma", type=float, default=0.0, help="lognormal sigma of the minibatch size")
    p.add_argument("--big-rank", type=int, default=-1)
    p.add_argument("--big", type=float, default=1.0)
    a = p.parse_args()
    if a.image % 4:
        p.error("--image must be a multiple of 4")
    if (a.link_src >= 0) != (a.link_dst >= 0):
        p.error("--link-src and --link-dst go together")
    if a.link_src >= 0 and a.cross_eval != "ring":
        p.error("a padded link needs the cross-evaluation ring (--cross-eval ring)")
    return a


# --------------------------------------------------------------------------
# communication (timed, so the busy time can leave it out)
# --------------------------------------------------------------------------

class Comm:
    def __init__(self, rank, world, link=None, link_factor=1.0):
        self.rank, self.world = rank, world
        self.link, self.link_factor = link, link_factor
        self.secs = 0.0
        self.bufs = {}

    def padded(self, n, src, dst):
        if self.link is not None and (src, dst) == self.link and self.link_factor > 1:
            return max(n, int(round(n * self.link_factor)))
        return n

    def buffer(self, key, n):
        buf = self.bufs.get(key)
        if buf is None or buf.numel() != n:
            buf = self.bufs[key] = torch.zeros(n)
        return buf

    def timed(self, fn, *a, **kw):
        t0 = time.perf_counter()
        out = fn(*a, **kw)
        self.secs += time.perf_counter() - t0
        return out

    def ring_exchange(self, flat):
        """Send ``flat`` to rank+1, return rank-1's (same size)."""
        nxt, prv = (self.rank + 1) % self.world, (self.rank - 1) % self.world
        n = flat.numel()
        sbuf = self.buffer(("ring_send", nxt), self.padded(n, self.rank, nxt))
        sbuf[:n].copy_(flat)
        rbuf = self.buffer(("ring_recv", prv), self.padded(n, prv, self.rank))
        with record_function("ring_send"):
            sw = self.timed(dist.isend, sbuf, nxt, tag=11)
        with record_function("ring_recv"):
            rw = self.timed(dist.irecv, rbuf, prv, tag=11)
            self.timed(rw.wait)
            self.timed(sw.wait)
        return rbuf[:n].clone()

    def send(self, flat, dst, tag):
        n = flat.numel()
        buf = self.buffer(("send", dst), self.padded(n, self.rank, dst))
        buf[:n].copy_(flat)
        self.timed(dist.send, buf, dst, tag=tag)

    def recv(self, n, src, tag):
        buf = self.buffer(("recv", src), self.padded(n, src, self.rank))
        self.timed(dist.recv, buf, src, tag=tag)
        return buf[:n].clone()


# --------------------------------------------------------------------------
# model and data
# --------------------------------------------------------------------------

class SmallCNN(nn.Module):
    def __init__(self, width, image, dropout):
        super().__init__()
        c = width
        self.features = nn.Sequential(
            nn.Conv2d(3, c, 3, padding=1, bias=False), nn.BatchNorm2d(c), nn.ReLU(),
            nn.Conv2d(c, 2 * c, 3, padding=1, bias=False), nn.BatchNorm2d(2 * c), nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(2 * c, 2 * c, 3, padding=1, bias=False), nn.BatchNorm2d(2 * c), nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.drop1 = nn.Dropout(dropout)
        self.fc1 = nn.Linear(2 * c * (image // 4) ** 2, 128)
        self.drop2 = nn.Dropout(dropout)
        self.fc2 = nn.Linear(128, N_CLASSES)

    def set_dropout(self, p):
        self.drop1.p = self.drop2.p = p

    def forward(self, x):
        x = self.features(x).flatten(1)
        x = F.relu(self.fc1(self.drop1(x)))
        return self.fc2(self.drop2(x))


def state_tensors(model):
    """Parameters and BN running statistics, in a fixed order (what a member's weights are)."""
    return [q for q in model.parameters()] + [b for b in model.buffers() if b.dtype.is_floating_point]


def flatten(ts):
    return torch.cat([t.detach().reshape(-1) for t in ts])


def unflatten_into(flat, ts):
    o = 0
    with torch.no_grad():
        for t in ts:
            t.copy_(flat[o: o + t.numel()].view_as(t))
            o += t.numel()
    return o


def make_prototypes(seed, image):
    g = torch.Generator().manual_seed(seed * 31 + 7)
    low = torch.randn(N_CLASSES, 3, image // 4, image // 4, generator=g)
    return F.interpolate(low, size=(image, image), mode="bilinear", align_corners=False)


def draw_samples(protos, n, g):
    y = torch.randint(0, N_CLASSES, (n,), generator=g)
    x = protos[y] * (0.6 + 0.8 * torch.rand(n, 1, 1, 1, generator=g))
    sx, sy = torch.randint(-2, 3, (2,), generator=g).tolist()
    x = torch.roll(x, shifts=(sx, sy), dims=(2, 3))
    x = x + 2.0 * torch.randn(x.shape, generator=g)
    return x, y


def batch_size(args, rank, step):
    n = float(args.batch)
    if rank == args.big_rank:
        n *= args.big
    if args.seq_sigma > 0:
        g = torch.Generator().manual_seed(args.seed * 1_000_003 + rank * 10_007 + step)
        f = math.exp(args.seq_sigma * torch.randn((), generator=g, dtype=torch.float64).item())
        n *= min(4.0, max(0.25, f))
    return max(4, int(round(n)))


def draw_hparams(seed, rank):
    g = torch.Generator().manual_seed(seed * 97 + rank * 13 + 1)
    u = torch.rand(4, generator=g, dtype=torch.float64).tolist()
    return {"lr": math.exp(math.log(0.01) + u[0] * (math.log(0.2) - math.log(0.01))),
            "wd": math.exp(math.log(1e-5) + u[1] * (math.log(1e-3) - math.log(1e-5))),
            "momentum": 0.8 + 0.15 * u[2],
            "dropout": 0.4 * u[3]}


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
    slow = rank == args.slow_rank
    if args.link_src >= 0 and args.link_dst != (args.link_src + 1) % world:
        raise SystemExit("the cross-evaluation ring only links r -> r+1 (--link-dst = --link-src + 1 mod world)")
    link = (args.link_src, args.link_dst) if args.link_src >= 0 else None
    comm = Comm(rank, world, link, args.link_factor)

    tmp = [None]
    if rank == 0:
        tmp[0] = tempfile.mkdtemp(prefix="pbt_")
    dist.broadcast_object_list(tmp, src=0)
    work_dir = tmp[0]
    log_path = os.path.join(work_dir, f"member{rank}.jsonl")

    hp = draw_hparams(args.seed, rank)
    torch.manual_seed(args.seed)                 # the same initial weights on every member
    model = SmallCNN(args.width, args.image, hp["dropout"])
    peer = SmallCNN(args.width, args.image, 0.0)  # a spare copy for the predecessor's weights
    peer.eval()
    params = list(model.parameters())
    opt = torch.optim.SGD(params, lr=hp["lr"], momentum=hp["momentum"], weight_decay=hp["wd"])
    weights = state_tensors(model)
    peer_weights = state_tensors(peer)
    n_weights = sum(t.numel() for t in weights)

    protos = make_prototypes(args.seed, args.image)
    g_eval = torch.Generator().manual_seed(args.seed * 1009 + rank * 17 + 3)
    x_eval, y_eval = draw_samples(protos, args.eval_batch, g_eval)

    extra = max(0.0, args.factor - 1.0) if slow else 0.0
    stop = threading.Event()
    hog = start_hog(stop) if slow and args.hog else None
    n_bottom = max(1, int(round(args.quantile * world)))

    if rank == 0:
        print(f"[pbt] world={world} width={args.width} image={args.image} batch={args.batch} "
              f"inner={args.inner_steps} ready={args.ready} exploit={args.exploit} "
              f"cross_eval={args.cross_eval} weights={n_weights}", flush=True)
    print(f"[pbt] member {rank}: lr={hp['lr']:.4f} wd={hp['wd']:.2e} momentum={hp['momentum']:.3f} "
          f"dropout={hp['dropout']:.2f}", flush=True)

    os.makedirs(args.out, exist_ok=True)
    prof = profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=1, warmup=1, active=max(1, args.steps - 2), repeat=1),
        record_shapes=args.shapes,
    )
    step_times, busy_times = [], []
    scores_since_sync = []
    n_sync = 0
    dist.barrier()
    try:
        with prof:
            for step in range(args.steps):
                t0 = time.perf_counter()
                comm.secs = 0.0
                if slow and args.sleep_ms > 0:
                    with record_function("sleep"):
                        time.sleep(args.sleep_ms / 1000.0)

                # ---- train this member alone -------------------------------------
                bs = batch_size(args, rank, step)
                model.train()
                tr_loss = tr_correct = tr_n = 0.0
                with record_function("train_inner"):
                    for i in range(args.inner_steps):
                        with record_function("load_batch"):
                            if slow and args.data_sleep_ms > 0:
                                time.sleep(args.data_sleep_ms / 1000.0 / args.inner_steps)
                            g = torch.Generator().manual_seed(
                                args.seed * 7_919 + rank * 104_729 + step * 101 + i)
                            x, y = draw_samples(protos, bs, g)
                        if extra > 0:       # --factor: the same passes again, gradients discarded
                            reps = [x] * int(extra)
                            rows = int(round(bs * (extra - int(extra))))
                            if rows > 0:
                                reps.append(x[:rows])
                            for xr in reps:
                                with record_function("forward"):
                                    l2 = F.cross_entropy(model(xr), y[: xr.shape[0]])
                                with record_function("backward"):
                                    torch.autograd.grad(l2, params)
                        with record_function("forward"):
                            logits = model(x)
                            loss = F.cross_entropy(logits, y)
                        with record_function("backward"):
                            opt.zero_grad(set_to_none=False)
                            loss.backward()
                        with record_function("optimizer"):
                            opt.step()
                        tr_loss += loss.item() * bs
                        tr_correct += (logits.argmax(1) == y).sum().item()
                        tr_n += bs

                with record_function("evaluate"):
                    model.eval()
                    with torch.no_grad():
                        own_acc = (model(x_eval).argmax(1) == y_eval).float().mean().item()

                peer_acc = own_acc
                if args.cross_eval == "ring":
                    with record_function("cross_eval"):
                        got = comm.ring_exchange(flatten(weights))
                        with record_function("peer_eval"):
                            unflatten_into(got, peer_weights)
                            with torch.no_grad():
                                peer_acc = (peer(x_eval).argmax(1) == y_eval).float().mean().item()

                with record_function("log_stats"):
                    stats = torch.zeros(world, 5)
                    stats[rank] = torch.tensor([tr_loss / tr_n, tr_correct / tr_n, own_acc, peer_acc, tr_n])
                    comm.timed(dist.all_reduce, stats)
                # my score: my own accuracy and my successor's accuracy of my weights
                judged = stats[(rank + 1) % world, 3].item() if args.cross_eval == "ring" else own_acc
                scores_since_sync.append(0.5 * (own_acc + judged))

                sync = (step + 1) % args.ready == 0
                with record_function("checkpoint"):
                    if slow and args.ckpt_sleep_ms > 0:
                        time.sleep(args.ckpt_sleep_ms / 1000.0)
                    with open(log_path, "a") as fh:
                        fh.write(json.dumps({"step": step, "member": rank, "loss": tr_loss / tr_n,
                                             "train_acc": tr_correct / tr_n, "eval_acc": own_acc,
                                             "judged": judged, "batch": bs, **hp}) + "\n")
                    if sync:
                        torch.save({"model": model.state_dict(), "hparams": hp, "step": step},
                                   os.path.join(work_dir, f"member{rank}.pt"))

                # ---- population sync: exploit and explore ----------------------------
                exploited = None
                if sync:
                    with record_function("pbt_sync"):
                        with record_function("gather_scores"):
                            mine = torch.tensor([statistics.fmean(scores_since_sync), hp["lr"], hp["wd"],
                                                 hp["momentum"], hp["dropout"]], dtype=torch.float64)
                            table = [torch.zeros(5, dtype=torch.float64) for _ in range(world)]
                            comm.timed(dist.all_gather, table, mine)
                            scores_since_sync.clear()
                        ranked = sorted(range(world), key=lambda r: (-table[r][0].item(), r))
                        top, bottom = ranked[:n_bottom], ranked[world - n_bottom:]
                        gs = torch.Generator().manual_seed(args.seed * 613 + n_sync)
                        pairs = [(b, top[torch.randint(0, len(top), (1,), generator=gs).item()]) for b in bottom]
                        n_sync += 1
                        with record_function("exploit"):
                            for b, t in pairs:
                                mom = [opt.state[q].get("momentum_buffer") for q in params]
                                if args.exploit == "p2p":
                                    if rank == t:
                                        payload = flatten(weights + [m if m is not None else torch.zeros_like(q)
                                                                     for m, q in zip(mom, params)])
                                        comm.send(payload, b, tag=100 + b)
                                    elif rank == b:
                                        got = comm.recv(n_weights + sum(q.numel() for q in params), t, tag=100 + b)
                                else:
                                    buf = comm.buffer(("bcast",), n_weights + sum(q.numel() for q in params))
                                    if rank == t:
                                        buf.copy_(flatten(weights + [m if m is not None else torch.zeros_like(q)
                                                                     for m, q in zip(mom, params)]))
                                    comm.timed(dist.broadcast, buf, t)
                                    got = buf
                                if rank == b:
                                    o = unflatten_into(got, weights)
                                    for q in params:
                                        st = opt.state[q]
                                        st["momentum_buffer"] = got[o: o + q.numel()].view_as(q).clone()
                                        o += q.numel()
                                    exploited = t
                        if exploited is not None:
                            with record_function("explore"):
                                ge = torch.Generator().manual_seed(args.seed * 7_777 + rank * 31 + n_sync)
                                src = table[exploited].tolist()
                                hp = {"lr": src[1], "wd": src[2], "momentum": src[3], "dropout": src[4]}
                                for k in ("lr", "wd", "momentum"):
                                    f = 0.8 if torch.rand((), generator=ge).item() < 0.5 else 1.25
                                    hp[k] *= f
                                hp["momentum"] = min(0.99, hp["momentum"])
                                if torch.rand((), generator=ge).item() < 0.25:
                                    hp["dropout"] = 0.4 * torch.rand((), generator=ge).item()
                                for grp in opt.param_groups:
                                    grp["lr"], grp["weight_decay"], grp["momentum"] = hp["lr"], hp["wd"], hp["momentum"]
                                model.set_dropout(hp["dropout"])

                step_times.append(time.perf_counter() - t0)
                busy_times.append(step_times[-1] - comm.secs)
                if rank == 0:
                    s = stats
                    line = (f"step {step:3d} loss " + " ".join(f"{v:.3f}" for v in s[:, 0].tolist())
                            + " eval " + " ".join(f"{v:.2f}" for v in s[:, 2].tolist())
                            + " batch " + " ".join(str(int(v)) for v in s[:, 4].tolist())
                            + f" t {1000 * step_times[-1]:.1f} ms")
                    if sync:
                        line += " | sync " + " ".join(f"{b}<-{t}" for b, t in pairs)
                    print(line, flush=True)
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
        print("median busy ms (outside ring, all_reduce, all_gather, exploit) per rank: " +
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
