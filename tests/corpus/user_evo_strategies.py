"""Distributed evolution strategies (OpenAI ES, Salimans et al. 2017) training an MLP policy.

(calibration table at the end of this docstring)

What it is
----------
Black-box policy search on 4 CPU processes (gloo, ``init_process_group("gloo")``,
``OMP_NUM_THREADS=1``): no backpropagation at all. Every rank holds the same flat parameter
vector theta of a small deterministic MLP policy (obs -> ``--hidden`` -> ``--hidden`` ->
action, tanh everywhere) and the same *shared noise table* (``--noise-size`` floats of
N(0, 1) drawn once from a fixed seed on every rank, as in the paper: a perturbation is named
by its offset into the table, so the ranks only exchange offsets and returns, never
parameter-sized vectors).

Environments, written by hand in torch and vectorised over (members x episodes):

* ``--env cartpole`` (default): the classic cart-pole (Barto et al.; gym's constants) with a
  continuous force 10 x a, a in [-1, 1]; reward 1 per step while the pole is up
  (|x| < 2.4, |theta| < 12 deg), the episode's mask drops to 0 when it falls (all
  ``--episode-len`` steps are still computed, masked, the usual vectorised way);
* ``--env reacher``: a 2D point mass pushed towards a random target
  (obs: position, velocity, target; reward -distance - 0.01 |a|^2).

A step (one ES generation) of rank r:

1. ``reset_envs``: the rank's start states (``--episodes`` of them, drawn from
   (seed, rank, step); all members of the rank use the same starts, common random numbers);
2. ``sample_noise``: ``--pop-per-rank`` P offsets into the noise table (from
   (seed, rank, step)); pair i's direction eps_i = table[off_i : off_i + n_params]. Pair 0
   is "elite-guided": eps_0 = (table[off_0] + beta * elite) / sqrt(1 + beta^2), elite being
   the direction the predecessor rank r-1 found best in the previous generation
   (``--elite-mix`` beta, 0.5). The 2P perturbed parameter vectors theta +- sigma eps_i
   (antithetic pairs, ``--sigma``) are stacked;
3. ``rollout``: the 2P policies x ``--episodes`` episodes run ``--episode-len`` steps at
   once (batched ``baddbmm`` per layer, observations normalised by the running statistics);
   a member's return is the mean over its episodes;
4. ``elite_share``: the rank's best pair (max of R+ and R-) with its sign gives its elite
   direction, the full parameter-sized noise vector; it goes one hop around the ring:
   ``dist.isend`` to r+1, ``dist.irecv`` from r-1 (``elite_send`` / ``elite_recv``, both
   waited inside the range); the received vector guides pair 0 of the next generation;
5. ``obs_norm``: the rank's (sum, sumsq, count) of the observations it saw (alive steps
   only) are ``all_reduce``d and added to the running statistics (the same on every rank);
6. ``gather_returns``: ``dist.all_gather`` of the rank's P rows (offset, elite flag,
   R+, R-) (float64) -> the whole population's 4P rows on every rank;
7. ``update``: every rank rebuilds the same gradient estimate from the offsets (the noise
   rows fetched from the table at once, pair 0 of rank s mixed with rank s-1's elite of the
   previous generation, known from the previous gather): centred-rank transformed returns,
   g = sum_i (u+_i - u-_i) eps_i / (N sigma), then ``torch.optim.Adam`` (ascent, L2
   ``--l2``) on theta locally;
8. every ``--sync-every`` steps, ``sync_params``: rank 0 ``dist.broadcast``s theta (the
   updates are identical, this only removes floating-point drift);
9. ``log_episode``: the rank renders its best member's first episode into small frames
   (the cart or the point mass drawn into a uint8 array) and writes them with the step's
   numbers into an ``.npz`` in a temporary directory (an episode/video logger).

Communication per step (defaults: hidden 128, n_params = 17,281 for cart-pole): one elite
message of n_params floats (69 KB) on every ring link r -> r+1 (isend/irecv, tag 7), one
all_reduce of 2 x obs_dim + 1 floats, one all_gather of P x 4 float64 per rank; every
``--sync-every`` (3) steps one broadcast of n_params floats from rank 0.

User ranges per step: ``sleep`` (fault only), ``reset_envs``, ``sample_noise``,
``rollout``, ``elite_share`` [``elite_send``, ``elite_recv``], ``obs_norm``,
``gather_returns``, ``update``, ``sync_params`` (some steps), ``log_episode``.

Profiling: ``torch.profiler`` CPU, ``schedule(wait=1, warmup=1, active=steps-2, repeat=1)``,
``prof.step()`` once per step, ``record_shapes`` only with ``--shapes``; each rank writes
``trace_rank{R}.json`` into ``--out``. At the end rank 0 prints every rank's median step time
over the traced steps and its median "busy" time (the step minus the time spent in the ring
send/recv waits, the all_reduce, the all_gather and the broadcast).

Flags
-----
Common: ``--out DIR`` (required), ``--steps`` (10; 8 traced), ``--seed``, ``--shapes``.

ES / job size: ``--env {cartpole,reacher}``, ``--hidden`` (128), ``--pop-per-rank`` (16
antithetic pairs, 32 policies a rank), ``--episodes`` (4 per policy), ``--episode-len`` (60),
``--sigma`` (0.05), ``--lr`` (0.02), ``--l2`` (0.005), ``--elite-mix`` (0.5),
``--sync-every`` (3), ``--noise-size`` (4,000,000 floats).

Faults (only on ``--slow-rank R``, default -1 = none):

* ``--factor F``: a slower device: the rank's rollouts are done F times (F - 1 extra
  passes over the same policies and starts, discarded; the fractional part over that
  fraction of the members), inside ``rollout``;
* ``--sleep-ms MS``: a slow host: ``time.sleep`` once per step at the step's start, in
  ``record_function("sleep")``;
* ``--data-sleep-ms MS``: slow start-state loading: ``reset_envs`` sleeps MS each step;
* ``--render-sleep-ms MS`` (family fault): a slow video/episode logger: the rank's
  ``log_episode`` sleeps MS after rendering, before writing;
* ``--hog``: a busy neighbour thread doing 192x192 matmuls for the whole run (stopped and
  joined before exit);
* ``--link-src A --link-dst B --link-factor X`` (B = A + 1 mod 4, a ring link): every elite
  message A sends to B carries X times the floats (the elite, then zeros, one message;
  B receives it all and keeps the head). No ``--slow-rank``.

Imbalance without a fault:

* ``--seq-sigma S``: each rank's episode length this step is ``--episode-len`` x
  lognormal(0, S) (drawn from (seed, rank, step), clamped to [1/4, 4] x, at least 8 steps):
  the rollouts differ by rank and step;
* ``--big-rank K --big X``: rank K runs X times the episodes per policy of the others,
  every step (its returns are averaged over more episodes).

Calibration
-----------
2-core box shared with other helpers' 4-process jobs (load average 13-16 during these
runs); 4 ranks, 10 steps (8 timed); defaults unless told (cart-pole, hidden 128, 16 pairs,
8 episodes, 40 steps, n_params 17,281). "base": the healthy default run just before (its
step median). The ring and the collectives tie the ranks, so the step medians of all ranks
agree within a few %: one number (the range over ranks). "busy" = median time outside the
ring waits and the collectives, slow rank vs the mean of the others.

  setting (slow rank)                              base ms  step ms  change   busy slow / others ms
  healthy default (6 runs)                             -    123-287     -      68-222 (by load)
  healthy --env reacher                                -    226-230     -     164-182
  healthy --env reacher --shapes                       -    210-223     -     131-161
  healthy --pop-per-rank 24 --sync-every 1             -    413-432     -     314-330
  healthy --pop-per-rank 24 --episodes 4 --hidden 96
          --sync-every 1                               -    219-226     -     118-149
  healthy --episode-len 56 --episodes 6 --elite-mix 0  -    207-211     -     164-175
  healthy --env reacher --hidden 160 --sigma 0.1
          --sync-every 5 --pop-per-rank 12             -    302-330     -     196-231
  --factor 2 (r0)                                    148      174     +17%     128 / 73
  --factor 3 (r1)                                    222      402     +81%     355 / 158
  --factor 2.5 (r3)                                148-287    437       -      384 / 185
  --env reacher --factor 2.5 (r2)                    228      464    +103%     417 / 221
  --pop-per-rank 24 --sync-every 1 --factor 2.5 (r3) 425      825-854 +98%     741 / 346
  --sleep-ms 100 (r3)                                235      307-320 +34%     262 / 185
  --data-sleep-ms 100 (r1)                           235      299-309 +29%     257 / 169
  --render-sleep-ms 100 (r0)                         235      299-303 +28%     245 / 175
  --hog (r2)                                         235      396-409 +70%     326 / 210
  link 1->2 x512 (35 MB elite messages)              201      273-305 +45%     r1 167, r2 174 / 164
  link 1->2 x1024 (71 MB)                            201      331-337 +65%     r1 186, r2 186 / 176
  link 3->0 x2048 (142 MB)                           148-279  437-453  -       r3 198, r0 208 / 177
  --big-rank 3 --big 3                               235      469-484 +100%    433 / 207
  --seq-sigma 0.8                                      -      449-470   -      139-261 (rank 0's T by step:
                                                                               137 68 55 76 11 27 10 36 50 41)

Reading: the box's load moved a healthy default step between 123 and 287 ms from one run to
the next, so the step change of one run says little; the slowed rank's busy time shows every
fault. The rollout is most of a step (the update, rebuilding ~64 noise rows of n_params, is
small), so ``--factor`` 2 already doubles the rank's rollout time and 2.5-3 costs it 50-100%
of its step; the others wait in ``elite_recv`` and ``obs_norm``'s all_reduce. A 100 ms
sleep was 28-45% of a step here; the battery uses 150 ms. The hog's share of the two cores
lands on its rank (+50-70% busy). A padded ring link costs little until its messages are tens
of MB; then rank B waits in ``elite_recv`` (and A in the isend's wait), and the all_reduce
right after makes everyone wait. More episodes on one rank (``--big``) lengthen its rollout
by about the factor (the batched matmuls grow with the episodes) and everyone's step with it.
A trace is ~5.6 MB a rank at the defaults (T = 40 steps of ~60 ops), ~14 MB for a rank with
``--factor`` 2.5-3 (the extra rollouts are traced too; keep F <= 3), ~9 MB with ``--shapes``.
Wall per run: 21-34 s.
"""

import argparse
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
from torch.profiler import ProfilerActivity, profile, record_function, schedule


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shapes", action="store_true")
    p.add_argument("--env", choices=["cartpole", "reacher"], default="cartpole")
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--pop-per-rank", type=int, default=16, help="antithetic pairs per rank")
    p.add_argument("--episodes", type=int, default=8, help="episodes per perturbed policy")
    p.add_argument("--episode-len", type=int, default=40)
    p.add_argument("--sigma", type=float, default=0.05)
    p.add_argument("--lr", type=float, default=0.02)
    p.add_argument("--l2", type=float, default=0.005)
    p.add_argument("--elite-mix", type=float, default=0.5)
    p.add_argument("--sync-every", type=int, default=3)
    p.add_argument("--noise-size", type=int, default=4_000_000)
    # faults
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--factor", type=float, default=1.0)
    p.add_argument("--sleep-ms", type=float, default=0.0)
    p.add_argument("--data-sleep-ms", type=float, default=0.0)
    p.add_argument("--render-sleep-ms", type=float, default=0.0)
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
    return a


# --------------------------------------------------------------------------
# communication
# --------------------------------------------------------------------------

class Comm:
    """Times the waits on communication; pads the ring messages of one link (--link-*)."""

    def __init__(self, rank, world, link=None, link_factor=1.0):
        self.rank, self.world = rank, world
        self.link, self.link_factor = link, link_factor
        self.secs = 0.0
        self.bufs = {}

    def _len(self, n, src, dst):
        if self.link is not None and (src, dst) == self.link and self.link_factor > 1:
            return max(n, int(round(n * self.link_factor)))
        return n

    def _buffer(self, key, n):
        buf = self.bufs.get(key)
        if buf is None or buf.numel() != n:
            buf = self.bufs[key] = torch.zeros(n)
        return buf

    def timed(self, fn, *a, **kw):
        t0 = time.perf_counter()
        out = fn(*a, **kw)
        self.secs += time.perf_counter() - t0
        return out

    def ring_shift(self, vec):
        """Send vec to rank+1, receive rank-1's vector of the same length."""
        n = vec.numel()
        nxt, prv = (self.rank + 1) % self.world, (self.rank - 1) % self.world
        sbuf = self._buffer("send", self._len(n, self.rank, nxt))
        rbuf = self._buffer("recv", self._len(n, prv, self.rank))
        sbuf[:n].copy_(vec)
        with record_function("elite_send"):
            sw = self.timed(dist.isend, sbuf, nxt, tag=7)
        with record_function("elite_recv"):
            rw = self.timed(dist.irecv, rbuf, prv, tag=7)
            self.timed(rw.wait)
        self.timed(sw.wait)
        return rbuf[:n].clone()


# --------------------------------------------------------------------------
# environments (batched over members x episodes)
# --------------------------------------------------------------------------

def _c(v):
    return torch.tensor(float(v))   # 0-dim float32 constants: no wrapped-scalar conversions per op


class CartPole:
    """State as 4 tensors (M, E, 1): x, x_dot, theta, theta_dot."""
    obs_dim, act_dim = 4, 1
    gravity, masscart, masspole, length, force_mag, tau = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
    total_mass = masscart + masspole
    polemass_length = masspole * length
    x_lim, th_lim = 2.4, 12 * 2 * math.pi / 360

    def __init__(self):
        self.k_force = _c(self.force_mag / self.total_mass)
        self.k_g = _c(self.gravity)
        self.k_den = _c(self.length * 4.0 / 3.0)
        self.zero = _c(0.0)
        self.x_lim2, self.th_lim2 = _c(self.x_lim ** 2), _c(self.th_lim ** 2)

    def reset(self, episodes, g):
        s = (torch.rand(episodes, 4, generator=g) - 0.5) * 0.3
        return list(s.unsqueeze(-1).unbind(1))       # 4 x (E, 1)

    def obs(self, parts):
        return torch.cat(parts, -1)

    def step(self, parts, a, alive):
        x, x_dot, th, th_dot = parts
        costh, sinth = torch.cos(th), torch.sin(th)
        pml_tm = self.polemass_length / self.total_mass
        temp = torch.addcmul(a * self.k_force, th_dot * th_dot, sinth, value=pml_tm)
        num = torch.addcmul(sinth * self.k_g, costh, temp, value=-1.0)
        den = torch.add(self.k_den, costh * costh, alpha=-self.length * self.masspole / self.total_mass)
        thacc = num / den
        xacc = torch.addcmul(temp, thacc, costh, value=-pml_tm)
        x = torch.add(x, x_dot, alpha=self.tau)
        x_dot = torch.add(x_dot, xacc, alpha=self.tau)
        th = torch.add(th, th_dot, alpha=self.tau)
        th_dot = torch.add(th_dot, thacc, alpha=self.tau)
        up = torch.logical_and(x * x < self.x_lim2, th * th < self.th_lim2)
        alive = torch.where(up, alive, self.zero)
        return [x, x_dot, th, th_dot], alive, alive * costh   # cos(theta) while the pole is up

    def render(self, traj):
        """traj (T, 4) -> frames (T, 24, 48) uint8: the cart and the pole's tip."""
        T = traj.shape[0]
        frames = torch.zeros(T, 24, 48, dtype=torch.uint8)
        t = torch.arange(T)
        col = ((traj[:, 0] + 2.4) / 4.8 * 47).round().long().clamp(0, 47)
        tip = (col + (10 * torch.sin(traj[:, 2])).round().long()).clamp(0, 47)
        tip_row = (20 - (10 * torch.cos(traj[:, 2])).round().long()).clamp(0, 23)
        frames[t, 20, col] = 255
        frames[t, tip_row, tip] = 160
        return frames


class Reacher:
    """State as 3 tensors (M, E, 2): position, velocity, target."""
    obs_dim, act_dim = 6, 2
    dt, damping = 0.05, 0.9

    def __init__(self):
        self.k_damp = _c(self.damping)
        self.lo, self.hi = _c(-1.5), _c(1.5)

    def reset(self, episodes, g):
        return [torch.rand(episodes, 2, generator=g) * 2 - 1, torch.zeros(episodes, 2),
                torch.rand(episodes, 2, generator=g) * 2 - 1]

    def obs(self, parts):
        return torch.cat(parts, -1)

    def step(self, parts, a, alive):
        pos, vel, tgt = parts
        vel = torch.add(vel * self.k_damp, a, alpha=self.dt)
        pos = torch.add(pos, vel, alpha=self.dt).clamp(self.lo, self.hi)
        d = pos - tgt
        dist_ = (d * d).sum(-1).sqrt()
        r = torch.add(dist_, (a * a).sum(-1), alpha=0.01).neg()
        return [pos, vel, tgt], alive, r

    def render(self, traj):
        T = traj.shape[0]
        frames = torch.zeros(T, 32, 32, dtype=torch.uint8)
        t = torch.arange(T)
        pc = ((traj[:, 0:2] + 1.5) / 3 * 31).round().long().clamp(0, 31)
        tc = ((traj[:, 4:6] + 1.5) / 3 * 31).round().long().clamp(0, 31)
        frames[t, tc[:, 1], tc[:, 0]] = 128
        frames[t, pc[:, 1], pc[:, 0]] = 255
        return frames


# --------------------------------------------------------------------------
# policy: a flat parameter vector viewed as an MLP, many of them at once
# --------------------------------------------------------------------------

class FlatMLP:
    def __init__(self, obs_dim, hidden, act_dim):
        self.shapes = [(obs_dim, hidden), (1, hidden), (hidden, hidden), (1, hidden),
                       (hidden, act_dim), (1, act_dim)]
        self.n = sum(a * b for a, b in self.shapes)

    def init(self, g):
        parts = []
        for a, b in self.shapes:
            if a == 1:
                parts.append(torch.zeros(a * b))
            else:
                parts.append(torch.randn(a * b, generator=g) / math.sqrt(a))
        return torch.cat(parts)

    def unflatten(self, thetas):
        """thetas (M, n) -> the 6 per-member weight tensors (M, a, b)."""
        out, o = [], 0
        M = thetas.shape[0]
        for a, b in self.shapes:
            out.append(thetas[:, o: o + a * b].view(M, a, b))
            o += a * b
        return out


def rollout(env, policy, thetas, starts, T, mean, inv_std):
    """Run M policies x E episodes for T steps (masked after a fall).

    Returns the (M,) mean returns, the observations (T, M, E, obs) and alive masks (T, M, E, 1)."""
    W1, b1, W2, b2, W3, b3 = policy.unflatten(thetas)
    M, E = thetas.shape[0], starts[0].shape[0]
    parts = [p.unsqueeze(0).expand(M, E, p.shape[-1]) for p in starts]
    alive = torch.ones(M, E, 1)
    ret = torch.zeros(M, E, 1)
    obs_seen, alive_seen = [], []
    for _ in range(T):
        s = env.obs(parts)
        o = ((s - mean) * inv_std).clamp(-5.0, 5.0)
        h = torch.tanh(torch.baddbmm(b1, o, W1))
        h = torch.tanh(torch.baddbmm(b2, h, W2))
        act = torch.tanh(torch.baddbmm(b3, h, W3))
        obs_seen.append(s)
        alive_seen.append(alive)
        parts, alive, r = env.step(parts, act, alive)
        ret.add_(r.view(M, E, 1))
    return ret.mean((1, 2)), torch.stack(obs_seen), torch.stack(alive_seen)


def centered_ranks(x):
    r = torch.empty_like(x)
    r[x.argsort()] = torch.arange(x.numel(), dtype=x.dtype)
    return r / (x.numel() - 1) - 0.5


def episode_len(args, rank, step):
    T = float(args.episode_len)
    if args.seq_sigma > 0:
        g = torch.Generator().manual_seed(args.seed * 1_000_003 + rank * 10_007 + step)
        z = torch.randn((), generator=g, dtype=torch.float64).item()
        T *= min(4.0, max(0.25, math.exp(args.seq_sigma * z)))
    return max(8, int(round(T)))


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
        raise SystemExit("the elite ring only links r -> r+1 (--link-dst = --link-src + 1 mod world)")
    link = (args.link_src, args.link_dst) if args.link_src >= 0 else None
    comm = Comm(rank, world, link, args.link_factor)

    env = CartPole() if args.env == "cartpole" else Reacher()
    policy = FlatMLP(env.obs_dim, args.hidden, env.act_dim)
    n = policy.n
    P = args.pop_per_rank
    if args.noise_size < 4 * n:
        raise SystemExit("--noise-size is too small for the policy")

    # the shared noise table: the same on every rank
    noise = torch.randn(args.noise_size, generator=torch.Generator().manual_seed(123))
    noise_rows = noise.unfold(0, n, 1)          # (noise_size - n + 1, n), a view

    theta = torch.nn.Parameter(policy.init(torch.Generator().manual_seed(args.seed)))
    opt = torch.optim.Adam([theta], lr=args.lr)
    obs_sum = torch.zeros(env.obs_dim, dtype=torch.float64)
    obs_sumsq = torch.zeros(env.obs_dim, dtype=torch.float64)
    obs_count = torch.tensor(1e-2, dtype=torch.float64)
    elite_in = torch.zeros(n)                   # from rank - 1, for the next generation
    elite_all_prev = torch.zeros(world, n)      # every rank's elite of the last generation
    beta = args.elite_mix
    mix_norm = 1.0 / math.sqrt(1.0 + beta * beta)

    tmp = [None]
    if rank == 0:
        tmp[0] = tempfile.mkdtemp(prefix="es_logs_")
    dist.broadcast_object_list(tmp, src=0)
    log_dir = tmp[0]

    extra = max(0.0, args.factor - 1.0) if slow else 0.0
    stop = threading.Event()
    hog = start_hog(stop) if slow and args.hog else None

    if rank == 0:
        print(f"[es] world={world} env={args.env} hidden={args.hidden} params={n} pairs/rank={P} "
              f"episodes={args.episodes} T={args.episode_len} sigma={args.sigma} sync_every={args.sync_every}",
              flush=True)

    os.makedirs(args.out, exist_ok=True)
    prof = profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=1, warmup=1, active=max(1, args.steps - 2), repeat=1),
        record_shapes=args.shapes,
    )
    step_times, busy_times = [], []
    dist.barrier()
    try:
        with prof:
            for step in range(args.steps):
                t0 = time.perf_counter()
                comm.secs = 0.0
                if slow and args.sleep_ms > 0:
                    with record_function("sleep"):
                        time.sleep(args.sleep_ms / 1000.0)

                g = torch.Generator().manual_seed(args.seed * 1_000_003 + rank * 10_007 + step + 17)
                with record_function("reset_envs"):
                    if slow and args.data_sleep_ms > 0:
                        time.sleep(args.data_sleep_ms / 1000.0)
                    E = args.episodes
                    if rank == args.big_rank:
                        E = max(1, int(round(E * args.big)))
                    starts = env.reset(E, g)
                    T = episode_len(args, rank, step)

                with record_function("sample_noise"):
                    offs = torch.randint(0, noise_rows.shape[0], (P,), generator=g)
                    eps = noise_rows[offs]                        # (P, n)
                    if step > 0 and beta > 0:
                        eps[0] = (eps[0] + beta * elite_in) * mix_norm
                    th = theta.detach()
                    thetas = torch.cat([th + args.sigma * eps, th - args.sigma * eps])   # (2P, n)
                    mean = (obs_sum / obs_count).float()
                    var = (obs_sumsq / obs_count).float() - mean * mean
                    inv_std = var.clamp(min=1e-2).rsqrt() if step > 0 else torch.ones(env.obs_dim)

                with record_function("rollout"):
                    with torch.no_grad():
                        rets, obs_seen, alive_seen = rollout(env, policy, thetas, starts, T, mean, inv_std)
                        if extra > 0:                             # --factor: the same rollouts again, discarded
                            for _ in range(int(extra)):
                                rollout(env, policy, thetas, starts, T, mean, inv_std)
                            k = int(round(thetas.shape[0] * (extra - int(extra))))
                            if k > 0:
                                rollout(env, policy, thetas[:k], starts, T, mean, inv_std)
                    r_pos, r_neg = rets[:P], rets[P:]

                with record_function("elite_share"):
                    best_val, best = torch.maximum(r_pos, r_neg).max(0)
                    sign = 1.0 if r_pos[best] >= r_neg[best] else -1.0
                    elite_out = sign * eps[best]
                    elite_in = comm.ring_shift(elite_out)

                with record_function("obs_norm"):
                    w = alive_seen
                    stats = torch.cat([(obs_seen * w).sum((0, 1, 2)).double(),
                                       (obs_seen * obs_seen * w).sum((0, 1, 2)).double(),
                                       w.sum().double().view(1)])
                    comm.timed(dist.all_reduce, stats)
                    obs_sum += stats[: env.obs_dim]
                    obs_sumsq += stats[env.obs_dim: 2 * env.obs_dim]
                    obs_count += stats[-1]

                with record_function("gather_returns"):
                    rows = torch.stack([offs.double(), torch.zeros(P, dtype=torch.float64),
                                        r_pos.double(), r_neg.double()], 1)
                    if step > 0 and beta > 0:
                        rows[0, 1] = 1.0
                    gathered = [torch.empty_like(rows) for _ in range(world)]
                    comm.timed(dist.all_gather, gathered, rows)
                    allrows = torch.cat(gathered)                # (world * P, 4)

                with record_function("update"):
                    all_offs = allrows[:, 0].long()
                    all_eps = noise_rows[all_offs]               # (world * P, n)
                    for s_ in range(world):
                        if allrows[s_ * P, 1] > 0:
                            all_eps[s_ * P] = (all_eps[s_ * P] + beta * elite_all_prev[(s_ - 1) % world]) * mix_norm
                    R = torch.cat([allrows[:, 2], allrows[:, 3]]).float()
                    u = centered_ranks(R)
                    N = allrows.shape[0]
                    grad_est = (u[:N] - u[N:]) @ all_eps / (N * args.sigma)
                    theta.grad = -grad_est + args.l2 * theta.detach()
                    opt.step()
                    # every rank's elite, to rebuild the guided pairs of the next generation
                    rp, rn = allrows[:, 2].view(world, P), allrows[:, 3].view(world, P)
                    bi = torch.maximum(rp, rn).argmax(1)
                    sg = torch.where(rp.gather(1, bi[:, None]) >= rn.gather(1, bi[:, None]), 1.0, -1.0).float()
                    elite_all_prev = sg * all_eps.view(world, P, n)[torch.arange(world), bi]

                if args.sync_every > 0 and (step + 1) % args.sync_every == 0:
                    with record_function("sync_params"):
                        comm.timed(dist.broadcast, theta.data, 0)

                with record_function("log_episode"):
                    m = int(torch.maximum(r_pos, r_neg).argmax())
                    m = m if r_pos[m] >= r_neg[m] else m + P
                    frames = env.render(obs_seen[:, m, 0])
                    if slow and args.render_sleep_ms > 0:
                        time.sleep(args.render_sleep_ms / 1000.0)
                    np.savez_compressed(os.path.join(log_dir, f"episode_r{rank}_s{step}.npz"),
                                        frames=frames.numpy(), ret=float(rets[m]),
                                        mean_ret=float(rets.mean()), T=T)

                step_times.append(time.perf_counter() - t0)
                busy_times.append(step_times[-1] - comm.secs)
                if rank == 0:
                    print(f"step {step:3d} mean R {allrows[:, 2:].mean().item():8.2f} "
                          f"best R {allrows[:, 2:].max().item():8.2f} |g| {grad_est.norm().item():.3f} "
                          f"T {T} t {1000 * step_times[-1]:.1f} ms", flush=True)
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
        print("median busy ms (outside the ring, all_reduce, all_gather, broadcast) per rank: " +
              " ".join(f"r{r}={1000 * b:.1f}" for r, (_, b) in enumerate(allmed)), flush=True)
    dist.barrier()
    if rank == 0:
        shutil.rmtree(log_dir, ignore_errors=True)
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
