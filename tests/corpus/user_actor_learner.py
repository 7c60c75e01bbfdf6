"""An IMPALA / SEED-style actor-learner RL job: one learner (rank 0), three actors (ranks 1-3).

(calibration table at the end of this docstring)

What it is
----------
Distributed reinforcement learning the IMPALA way, on 4 CPU processes (gloo,
``init_process_group("gloo")``, ``OMP_NUM_THREADS=1``). Rank 0 is the learner; ranks 1-3 are
actors. Every rank builds the same policy network (seeded), the learner broadcasts its
parameters once before the loop.

Environment (``GridWorld``, written by hand in torch, vectorised over ``--envs`` environments
per actor): procedurally generated mazes of ``--grid`` x ``--grid`` cells (border walls plus
random interior walls), an agent and a goal; 5 actions (stay, up, down, left, right); reward
+1 at the goal, -0.01 a move, -0.05 for bumping into a wall; an episode ends at the goal or
after ``--max-episode`` moves and the env resets itself (new agent and goal cells, same maze).
At the start of every unroll the envs whose episode ended during the last one get a new maze
("level") and the first observation is rendered. Observations are 3 x G x G planes (walls,
agent, goal).

Policy (``PolicyNet``, IMPALA-ish): conv 3->C (3x3) -> ReLU -> conv C->2C (3x3, stride 2) ->
ReLU -> linear to ``--hidden`` -> ReLU -> policy logits (5) and a value head.

Actor step: run the behaviour policy (the last parameters received) for ``--unroll`` steps on
its envs (``act``: policy forward without grad, sample an action; ``env_step``), then send the
trajectory to the learner as four flat tensors: a header (unroll, envs, policy version, step;
int64), the observations ((unroll + 1) x envs x 3 x G x G floats), the behaviour logits
(unroll x envs x 5) and actions / rewards / dones stacked (3 x unroll x envs floats).

Learner step: for every actor's trajectory (a microbatch each; gradients accumulate) the
policy forward over all its frames, V-trace targets (rho-bar = c-bar = 1, the backward
recursion over the unroll), the actor-critic loss (policy gradient with the V-trace
advantages + ``--baseline-cost`` x value loss - ``--entropy-cost`` x entropy), backward; then
gradient clipping (40) and an RMSProp (or Adam) step. The new parameters (a flat buffer, the
policy version appended) are broadcast from rank 0 to everyone.

``--mode async`` (default, IMPALA): the learner learns on the trajectories of the previous
step while the actors roll out the next one with parameters one version old (policy lag 1,
which V-trace corrects); per step the learner does learn -> broadcast -> receive the new
trajectories, an actor rolls out -> ``isend`` its trajectory -> takes part in the broadcast
-> waits its sends. The first step has nothing to learn yet. ``--mode sync`` (A2C-like, no
lag): the learner receives, learns, broadcasts; the actors roll out, ``dist.send`` (blocking)
and wait for the broadcast; the rollouts and the learning do not overlap.

Communication per step (defaults: 32 envs, unroll 20, grid 11): each actor -> learner 4
messages (32 B header, 976 KB observations, 12.8 KB logits, 7.7 KB actions/rewards/dones;
the learner receives them with ``dist.recv`` from actor 1, then 2, then 3), one broadcast of
the parameters from rank 0 (~0.31 M floats, 1.2 MB), one all_reduce of 5 floats of episode /
loss statistics (sum of the returns and lengths of the episodes finished, their number, the
learner's loss and frames).

User ranges per step: ``sleep`` (fault only); actors: ``env_reset``, ``rollout`` [``act``,
``env_step`` per unroll step], ``send_traj``, ``sync_params``, ``send_wait`` (async);
learner: ``learn`` [``make_batch``, per trajectory ``forward``, ``vtrace``, ``loss``,
``backward``; ``optimizer``], ``sync_params``, ``recv_traj``; everyone: ``episode_stats``
(the all_reduce), ``log_episodes`` (each rank appends its jsonl lines: the actors their
finished episodes, the learner its loss).

Profiling: ``torch.profiler`` CPU, ``schedule(wait=1, warmup=1, active=steps-2, repeat=1)``,
``prof.step()`` once per step, ``record_shapes`` only with ``--shapes``; each rank writes
``trace_rank{R}.json`` into ``--out``. At the end rank 0 prints every rank's median step time
over the traced steps and its median "busy" time (the step minus the time in sends, receives,
send waits, the broadcast and the all_reduce).

Flags
-----
Common: ``--out DIR`` (required), ``--steps`` (10; 8 traced), ``--seed``, ``--shapes``.

Job size: ``--envs`` (32 per actor), ``--unroll`` (20), ``--grid`` (11), ``--channels`` (16),
``--hidden`` (256), ``--max-episode`` (60), ``--lr`` (6e-4), ``--gamma`` (0.99),
``--entropy-cost`` (0.01), ``--baseline-cost`` (0.5), ``--optim {rmsprop,adam}``,
``--mode {async,sync}``.

Faults (only on ``--slow-rank R``, default -1 = none):

* ``--factor F``: a slower device: on an actor every ``act`` runs the policy forward F times
  and every ``env_step`` draws and preprocesses the frame F times (the actor's compute: the
  rendering is most of it; F - 1 extra passes discarded, the fractional part over that
  fraction of the envs); on the
  learner every trajectory's forward and backward are done F times (the extra passes' losses
  built with the same V-trace targets, their gradients taken with ``autograd.grad`` and
  dropped; forward passes in ``forward``, their backward in ``backward``);
* ``--sleep-ms MS``: a slow host: ``time.sleep`` once per step at the step's start, in
  ``record_function("sleep")``;
* ``--data-sleep-ms MS``: slow data: on an actor ``env_reset`` (loading the new levels)
  sleeps MS each step, on the learner ``make_batch`` (assembling the batch) does;
* ``--log-sleep-ms MS`` (family fault): a slow replay / episode logger: the rank's
  ``log_episodes`` sleeps MS before appending its lines;
* ``--hog``: a busy neighbour thread doing 192x192 matmuls for the whole run (stopped and
  joined before exit);
* ``--link-src A --link-dst 0 --link-factor X`` (A an actor): every trajectory message A
  sends to the learner (header, observations, logits, actions/rewards/dones) carries X times
  its elements, zero-padded in the same message; the learner receives it all and keeps the
  head. No ``--slow-rank``.

Imbalance without a fault:

* ``--seq-sigma S``: each actor's unroll length of the step is ``--unroll`` times
  lognormal(0, S) (drawn from (seed, rank, step), clamped to [1/4x, 4x], at least 2): the
  actors' trajectories and the learner's microbatches differ by actor and step;
* ``--big-rank K --big X`` (K an actor): actor K runs X times as many envs as the others,
  every step (its rollouts, its messages and its share of the learner's work X times
  larger).

Calibration
-----------
2-core box shared with other people's jobs (load average 5-8 during these runs); 4 ranks,
10 steps (8 timed); the fault runs interleaved with healthy default runs ("base", their step
medians). Step medians agree within a few % over the ranks (the broadcast and the all_reduce
tie them), so one number; "busy" = median time outside communication; "others" = the mean
of the other actors (for an actor) or the learner's busy in the base runs (for rank 0).

  setting (slow rank)                              base ms   step ms   busy slow / others ms
  healthy default (async)                             -      295-830   learner 267-754, actors 183-511
  healthy --mode sync --shapes                        -        1990    learner 349, actors 1243-1517
  healthy --mode sync --shapes --unroll 12            -         320    learner 87, actors 203-218
  healthy --envs 48 --unroll 12 --grid 9              -         520    learner 446, actors 295-327
  healthy --optim adam --hidden 512 --render-scale 4  -         645    learner 519, actors 231-277
  healthy --mode sync --envs 24 --unroll 20
          --max-episode 40                            -         770    learner 378, actors 310-353
  healthy --mode sync                                 -         806    learner 410, actors 307-342
  --factor 3 (r1, actor)                           430-480      798    753 / 351
  --envs 48 --unroll 12 --factor 2.5 (r3, actor)     520        911    860 / 412-650
  --factor 2 (r0, learner)                         430-480     1114    1043 / 444
  --mode sync --factor 3 (r2, actor)                 806        915    581 / 248
  --factor 4 (r2, actor), before the render was
          repeated too                               535        640    528 / 397
  --sleep-ms 250 (r3, actor)                       480-530      485    459 / 282
  --data-sleep-ms 250 (r1, actor)                  330-530      379    364 / 186
  --log-sleep-ms 200 (r0, learner)                 330-530      389    357 / 300
  --hog (r2, actor)                                  330        419    395 / 247
  --hog (r3, actor, quiet box)                       400        260    225 / 174
  link 2->0 x64 (62 MB observations a step)        580-830      774    learner's receives ~180 ms
  link 2->0 x128 (125 MB)                            330        482    learner's receives 137 ms
                                                                       (~120-140 of them from actor 2)
  --seq-sigma 0.6                                     -         446    learner 331, actors 184-218
  --big-rank 3 --big 2.5                              -      341-682   r3 313-623 / 170-390

Reading: the box's load moved a healthy step between 270 and 830 ms from one run to the next,
so one run's step time says little; the slowed rank's busy time shows each fault. In async
mode the learner's learn (3 trajectories forward + backward) and each actor's rollout
(rendering is most of it, the policy forward ~10-15%) overlap and are of the same order, so the
learner is usually a little longer and the actors wait in ``sync_params``. ``--factor`` on an
actor repeats the policy forward and the frame rendering: F = 2.5-3 doubles its busy time and
makes it the one everybody waits for; on the learner F = 2 doubles the learn. The sleeps are
200-250 ms, 40-60% of a step; an actor's sleep partly hides in its slack (the step grows less
than the sleep). The hog thread costs its rank 20-35% (it shares both cores with everyone, the
rank's Python also contends for the GIL). A padded link costs the learner's ``recv_traj`` from
that actor ~1 ms a MB (loopback TCP, under load). ``--big`` X on an actor multiplies its
rollout and its messages by X and the learner's work on its trajectory. Wall per run: 13-42 s
(the first traced step waits a few seconds for the profiler to start on every rank); traces
5 MB (learner) and 6.5 MB (actor) a rank, up to 12 MB with ``--factor 3`` or ``--shapes``.
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
from torch.nn.utils import parameters_to_vector
from torch.profiler import ProfilerActivity, profile, record_function, schedule

N_ACTIONS = 5
TAG_HEADER, TAG_OBS, TAG_LOGITS, TAG_META = 11, 12, 13, 14


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shapes", action="store_true")
    p.add_argument("--envs", type=int, default=32, help="environments per actor")
    p.add_argument("--unroll", type=int, default=16)
    p.add_argument("--grid", type=int, default=11)
    p.add_argument("--channels", type=int, default=16)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--max-episode", type=int, default=60)
    p.add_argument("--render-scale", type=int, default=6, help="pixels a cell side in the rendered frame")
    p.add_argument("--lr", type=float, default=6e-4)
    p.add_argument("--gamma", type=float, default=0.99)
    p.add_argument("--entropy-cost", type=float, default=0.01)
    p.add_argument("--baseline-cost", type=float, default=0.5)
    p.add_argument("--optim", choices=["rmsprop", "adam"], default="rmsprop")
    p.add_argument("--mode", choices=["async", "sync"], default="async")
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
    if a.link_src >= 0 and (a.link_dst != 0 or a.link_src == 0):
        p.error("trajectories only go from an actor to the learner: --link-dst 0, --link-src an actor")
    if a.big_rank == 0:
        p.error("--big-rank names an actor (1..world-1)")
    return a


# --------------------------------------------------------------------------
# environment
# --------------------------------------------------------------------------

class GridWorld:
    """``n`` mazes of ``grid`` x ``grid`` cells, stepped together, rendered to pixels.

    Cells are kept as flat indices (row * grid + column); the border is wall, so a move
    never leaves the grid."""

    def __init__(self, n, grid, max_steps, scale, gen, wall_p=0.15):
        self.n, self.grid, self.max_steps, self.scale, self.gen = n, grid, max_steps, scale, gen
        self.wall_p = wall_p
        self.moves = torch.tensor([0, -grid, grid, -1, 1])       # stay, up, down, left, right
        self.walls = torch.zeros(n, grid * grid, dtype=torch.bool)
        self.pos = torch.zeros(n, dtype=torch.long)
        self.goal = torch.zeros(n, dtype=torch.long)
        self.t = torch.zeros(n, dtype=torch.long)
        self.ret = torch.zeros(n)
        self.needs_level = torch.ones(n, dtype=torch.bool)
        self.finished = []          # (return, length) of the episodes ended since the last log
        # sprite texture of one cell, tiled over the frame (3 colour planes)
        self.texture = (0.5 + 0.5 * torch.rand(3, scale, scale, generator=gen)).repeat(1, grid, grid)
        self.planes = torch.zeros(n, 3, grid * grid)

    def _free_cells(self, idx):
        return torch.multinomial((~self.walls[idx]).float(), 1, generator=self.gen).squeeze(1)

    def _reset(self, idx):
        self.pos[idx] = self._free_cells(idx)
        self.goal[idx] = self._free_cells(idx)
        self.t[idx] = 0
        self.ret[idx] = 0.0

    def new_levels(self):
        """A new maze for every env whose episode ended; returns the first observation."""
        idx = self.needs_level.nonzero().squeeze(1)
        if idx.numel():
            g = self.grid
            w = torch.rand(idx.numel(), g, g, generator=self.gen) < self.wall_p
            w[:, 0, :] = w[:, -1, :] = True
            w[:, :, 0] = w[:, :, -1] = True
            self.walls[idx] = w.flatten(1)
            self._reset(idx)
            self.needs_level[idx] = False
        self.planes[:, 0] = self.walls.float()
        return self.render()

    def render(self, rows=None):
        """Draw the frame (pixels: ``scale`` x ``scale`` a cell, textured, sensor noise) and
        preprocess it as Atari frames are: average-pool back to one value a cell. ``rows``:
        only the first envs (the --factor extra passes)."""
        g, p = self.grid, self.planes
        if rows is None:
            p[:, 1:].zero_()
            p[:, 1].scatter_(1, self.pos.unsqueeze(1), 1.0)
            p[:, 2].scatter_(1, self.goal.unsqueeze(1), 1.0)
            rows = self.n
        p = p[:rows].view(rows, 3, g, g)
        if self.scale == 1:
            return p.clone()
        frame = F.interpolate(p, scale_factor=self.scale, mode="nearest")
        frame = frame * self.texture + 0.05 * torch.rand(frame.shape, generator=self.gen)
        return F.avg_pool2d(frame, self.scale)

    def step(self, actions):
        new = self.pos + self.moves[actions]
        blocked = self.walls.gather(1, new.unsqueeze(1)).squeeze(1)
        self.pos = torch.where(blocked, self.pos, new)
        reached = self.pos == self.goal
        reward = torch.where(reached, 1.0, -0.01) - 0.05 * blocked
        self.t += 1
        self.ret += reward
        done = reached | (self.t >= self.max_steps)
        if done.any():
            idx = done.nonzero().squeeze(1)
            self.finished.extend(zip(self.ret[idx].tolist(), self.t[idx].tolist()))
            self.needs_level[idx] = True
            self._reset(idx)              # same maze until the next unroll starts
        return self.render(), reward, done


# --------------------------------------------------------------------------
# model and loss
# --------------------------------------------------------------------------

class PolicyNet(nn.Module):
    def __init__(self, grid, channels, hidden):
        super().__init__()
        self.conv1 = nn.Conv2d(3, channels, 3, padding=1)
        self.conv2 = nn.Conv2d(channels, 2 * channels, 3, stride=2, padding=1)
        side = (grid + 1) // 2
        self.fc = nn.Linear(2 * channels * side * side, hidden)
        self.policy = nn.Linear(hidden, N_ACTIONS)
        self.baseline = nn.Linear(hidden, 1)

    def forward(self, x):
        h = F.relu(self.conv1(x))
        h = F.relu(self.conv2(h))
        h = F.relu(self.fc(h.flatten(1)))
        return self.policy(h), self.baseline(h).squeeze(-1)


@torch.no_grad()
def vtrace(behaviour_logits, target_logits, actions, rewards, discounts, values, bootstrap):
    """V-trace targets (Espeholt et al. 2018) with rho-bar = c-bar = 1; (T, B) tensors."""
    tgt = F.log_softmax(target_logits, -1).gather(-1, actions.unsqueeze(-1)).squeeze(-1)
    beh = F.log_softmax(behaviour_logits, -1).gather(-1, actions.unsqueeze(-1)).squeeze(-1)
    rhos = torch.exp(tgt - beh)
    clipped_rhos = rhos.clamp(max=1.0)
    cs = rhos.clamp(max=1.0)
    values_tp1 = torch.cat([values[1:], bootstrap.unsqueeze(0)], 0)
    deltas = clipped_rhos * (rewards + discounts * values_tp1 - values)
    acc = torch.zeros_like(bootstrap)
    out = []
    for t in range(values.shape[0] - 1, -1, -1):
        acc = deltas[t] + discounts[t] * cs[t] * acc
        out.append(acc)
    vs = torch.stack(out[::-1]) + values
    vs_tp1 = torch.cat([vs[1:], bootstrap.unsqueeze(0)], 0)
    pg_adv = clipped_rhos * (rewards + discounts * vs_tp1 - values)
    return vs, pg_adv, rhos.mean()


def ac_loss(logits, values, actions, vs, pg_adv, args):
    logp = F.log_softmax(logits, -1)
    logp_a = logp.gather(-1, actions.unsqueeze(-1)).squeeze(-1)
    pg = -(logp_a * pg_adv).sum()
    baseline = 0.5 * ((vs - values) ** 2).sum()
    entropy = -(logp.exp() * logp).sum()
    return pg + args.baseline_cost * baseline - args.entropy_cost * entropy


# --------------------------------------------------------------------------
# communication
# --------------------------------------------------------------------------

class Comm:
    """Sends / receives the trajectories, times every communication call of the step."""

    def __init__(self, rank, link, link_factor):
        self.rank, self.link, self.link_factor = rank, link, link_factor
        self.secs = 0.0
        self.pending = []
        self.send_bufs = {}

    def padded(self, n, src, dst):
        if self.link is not None and (src, dst) == self.link and self.link_factor > 1:
            return max(n, int(round(n * self.link_factor)))
        return n

    def send(self, t, dst, tag, blocking):
        flat = t.reshape(-1)
        n = self.padded(flat.numel(), self.rank, dst)
        if n != flat.numel():            # a padded message: persistent zero buffer, the head copied in
            buf = self.send_bufs.get(tag)
            if buf is None or buf.numel() != n or buf.dtype != flat.dtype:
                buf = self.send_bufs[tag] = torch.zeros(n, dtype=flat.dtype)
            buf[: flat.numel()].copy_(flat)
        else:
            buf = flat.contiguous()
        t0 = time.perf_counter()
        if blocking:
            dist.send(buf, dst, tag=tag)
        else:
            self.pending.append((dist.isend(buf, dst, tag=tag), buf))
        self.secs += time.perf_counter() - t0

    def wait_sends(self):
        t0 = time.perf_counter()
        for work, _ in self.pending:
            work.wait()
        self.pending.clear()
        self.secs += time.perf_counter() - t0

    def recv(self, numel, dtype, src, tag):
        buf = torch.empty(self.padded(numel, src, self.rank), dtype=dtype)
        t0 = time.perf_counter()
        dist.recv(buf, src, tag=tag)
        self.secs += time.perf_counter() - t0
        return buf[:numel]

    def broadcast(self, t, src):
        t0 = time.perf_counter()
        dist.broadcast(t, src)
        self.secs += time.perf_counter() - t0

    def all_reduce(self, t):
        t0 = time.perf_counter()
        dist.all_reduce(t)
        self.secs += time.perf_counter() - t0


# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------

def unroll_length(args, rank, step):
    n = float(args.unroll)
    if args.seq_sigma > 0:
        g = torch.Generator().manual_seed(args.seed * 1_000_003 + rank * 10_007 + step)
        z = torch.randn((), generator=g, dtype=torch.float64).item()
        n = min(4.0 * args.unroll, max(args.unroll / 4.0, n * math.exp(args.seq_sigma * z)))
    return max(2, int(round(n)))


def env_count(args, rank):
    return max(1, int(round(args.envs * (args.big if rank == args.big_rank else 1.0))))


@torch.no_grad()
def load_params(net, flat):
    o = 0
    for q in net.parameters():
        q.copy_(flat[o: o + q.numel()].view_as(q))
        o += q.numel()


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
# actor
# --------------------------------------------------------------------------

class Actor:
    def __init__(self, args, rank, net, comm, slow):
        self.args, self.rank, self.net, self.comm = args, rank, net, comm
        self.gen = torch.Generator().manual_seed(args.seed * 7919 + rank)
        self.env = GridWorld(env_count(args, rank), args.grid, args.max_episode, args.render_scale, self.gen)
        self.extra = max(0.0, args.factor - 1.0) if slow else 0.0
        self.data_sleep = args.data_sleep_ms / 1000.0 if slow else 0.0
        self.version = 0

    def rollout(self, step):
        a, env = self.args, self.env
        T, E = unroll_length(a, self.rank, step), env.n
        with record_function("env_reset"):
            if self.data_sleep > 0:
                time.sleep(self.data_sleep)
            obs = env.new_levels()
        frames, logit_list, actions, rewards, dones = [obs], [], [], [], []
        rows = int(round(E * (self.extra - int(self.extra))))     # --factor's fractional part
        with record_function("rollout"):
            for i in range(T):
                with record_function("act"):
                    with torch.no_grad():
                        logits, _ = self.net(obs)
                        for _ in range(int(self.extra)):      # --factor: a slower device
                            self.net(obs)
                        if rows > 0:
                            self.net(obs[:rows])
                        u = torch.rand(logits.shape, generator=self.gen)    # Gumbel-max sampling
                        action = (logits - torch.log(-torch.log(u))).argmax(-1)
                with record_function("env_step"):
                    obs, reward, done = env.step(action)
                    for _ in range(int(self.extra)):          # --factor: the frame drawn again, discarded
                        env.render(E)
                    if rows > 0:
                        env.render(rows)
                frames.append(obs)
                logit_list.append(logits)
                actions.append(action)
                rewards.append(reward)
                dones.append(done)
        with record_function("pack_traj"):
            obs_buf = torch.stack(frames)                               # (T + 1, E, 3, G, G)
            logit_buf = torch.stack(logit_list)                         # (T, E, 5)
            meta = torch.stack([torch.stack(actions).float(), torch.stack(rewards),
                                torch.stack(dones).float()])            # (3, T, E)
        header = torch.tensor([T, E, self.version, step], dtype=torch.int64)
        return header, obs_buf, logit_buf, meta

    def send(self, traj, blocking):
        with record_function("send_traj"):
            for t, tag in zip(traj, (TAG_HEADER, TAG_OBS, TAG_LOGITS, TAG_META)):
                self.comm.send(t, 0, tag, blocking)


# --------------------------------------------------------------------------
# learner
# --------------------------------------------------------------------------

class Learner:
    def __init__(self, args, net, comm, world, slow):
        self.args, self.net, self.comm, self.world = args, net, comm, world
        self.params = list(net.parameters())
        if args.optim == "rmsprop":
            self.opt = torch.optim.RMSprop(self.params, lr=args.lr, alpha=0.99, eps=0.01)
        else:
            self.opt = torch.optim.Adam(self.params, lr=args.lr)
        self.extra = max(0.0, args.factor - 1.0) if slow else 0.0
        self.data_sleep = args.data_sleep_ms / 1000.0 if slow else 0.0
        self.version = 0
        self.last = {"loss": 0.0, "frames": 0, "rho": 0.0, "lag": 0.0, "grad_norm": 0.0}

    def receive(self):
        """The trajectory of every actor, in rank order."""
        a, trajs = self.args, []
        with record_function("recv_traj"):
            for src in range(1, self.world):
                header = self.comm.recv(4, torch.int64, src, TAG_HEADER)
                T, E, version, _ = header.tolist()
                obs = self.comm.recv((T + 1) * E * 3 * a.grid * a.grid, torch.float32, src, TAG_OBS)
                logits = self.comm.recv(T * E * N_ACTIONS, torch.float32, src, TAG_LOGITS)
                meta = self.comm.recv(3 * T * E, torch.float32, src, TAG_META)
                trajs.append((T, E, version, obs, logits, meta))
        return trajs

    def learn(self, trajs):
        a = self.args
        with record_function("learn"):
            with record_function("make_batch"):
                if self.data_sleep > 0:
                    time.sleep(self.data_sleep)
                batch = []
                for T, E, version, obs, logits, meta in trajs:
                    meta = meta.view(3, T, E)
                    batch.append(dict(
                        obs=obs.view(T + 1, E, 3, a.grid, a.grid), behaviour=logits.view(T, E, N_ACTIONS),
                        actions=meta[0].long(), rewards=meta[1],
                        discounts=a.gamma * (1.0 - meta[2]), T=T, E=E, lag=self.version - version))
                frames = sum(b["T"] * b["E"] for b in batch)
            self.opt.zero_grad(set_to_none=False)
            total, rho_sum = 0.0, 0.0
            for b in batch:
                T, E = b["T"], b["E"]
                with record_function("forward"):
                    x = b["obs"].reshape((T + 1) * E, 3, a.grid, a.grid)
                    logits, values = self.net(x)
                    logits, values = logits.view(T + 1, E, N_ACTIONS), values.view(T + 1, E)
                    extras = []                                   # --factor: a slower device
                    cols = int(round(E * (self.extra - int(self.extra))))
                    for k in range(int(self.extra) + (cols > 0)):
                        c = E if k < int(self.extra) else cols
                        xl, xv = self.net(b["obs"][:, :c].reshape((T + 1) * c, 3, a.grid, a.grid))
                        extras.append((c, xl.view(T + 1, c, N_ACTIONS), xv.view(T + 1, c)))
                with record_function("vtrace"):
                    vs, pg_adv, rho = vtrace(b["behaviour"], logits[:-1].detach(), b["actions"], b["rewards"],
                                             b["discounts"], values[:-1].detach(), values[-1].detach())
                with record_function("loss"):
                    loss = ac_loss(logits[:-1], values[:-1], b["actions"], vs, pg_adv, a) / frames
                with record_function("backward"):
                    loss.backward()
                    for c, xl, xv in extras:
                        xloss = ac_loss(xl[:-1], xv[:-1], b["actions"][:, :c], vs[:, :c], pg_adv[:, :c], a) / frames
                        torch.autograd.grad(xloss, self.params)   # dropped
                total += loss.item()
                rho_sum += rho.item() * T * E
            with record_function("optimizer"):
                gnorm = torch.nn.utils.clip_grad_norm_(self.params, 40.0)
                self.opt.step()
                self.version += 1
            self.last = {"loss": total, "frames": frames, "rho": rho_sum / frames,
                         "lag": statistics.mean(b["lag"] for b in batch), "grad_norm": float(gnorm)}


# --------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------

def main():
    args = parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    dist.init_process_group("gloo", timeout=timedelta(seconds=180))
    rank, world = dist.get_rank(), dist.get_world_size()
    if world < 2:
        raise SystemExit("needs a learner and at least one actor")
    slow = rank == args.slow_rank
    link = (args.link_src, args.link_dst) if args.link_src >= 0 else None
    comm = Comm(rank, link, args.link_factor)

    tmp = [None]
    if rank == 0:
        tmp[0] = tempfile.mkdtemp(prefix="actor_learner_")
    dist.broadcast_object_list(tmp, src=0)
    log_dir = tmp[0]
    log_path = os.path.join(log_dir, f"episodes_rank{rank}.jsonl")

    torch.manual_seed(args.seed)
    net = PolicyNet(args.grid, args.channels, args.hidden)
    n_params = sum(q.numel() for q in net.parameters())
    flat = torch.empty(n_params + 1)                 # parameters + the policy version
    if rank == 0:
        flat[:n_params] = parameters_to_vector(net.parameters()).detach()
        flat[n_params] = 0.0
    dist.broadcast(flat, 0)                          # everyone starts from the learner's weights
    if rank > 0:
        load_params(net, flat)

    learner = Learner(args, net, comm, world, slow) if rank == 0 else None
    actor = Actor(args, rank, net, comm, slow) if rank > 0 else None
    if actor is not None:
        net.requires_grad_(False)

    stop = threading.Event()
    hog = start_hog(stop) if slow and args.hog else None
    log_sleep = args.log_sleep_ms / 1000.0 if slow else 0.0

    if rank == 0:
        print(f"[actor-learner] world={world} (learner + {world - 1} actors) mode={args.mode} "
              f"envs={[env_count(args, r) for r in range(1, world)]} unroll={args.unroll} grid={args.grid} "
              f"params={n_params} optim={args.optim}", flush=True)

    os.makedirs(args.out, exist_ok=True)
    prof = profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=1, warmup=1, active=max(1, args.steps - 2), repeat=1),
        record_shapes=args.shapes,
    )
    step_times, busy_times = [], []
    pending = None
    dist.barrier()
    try:
        with prof:
            for step in range(args.steps):
                t0 = time.perf_counter()
                comm.secs = 0.0
                if slow and args.sleep_ms > 0:
                    with record_function("sleep"):
                        time.sleep(args.sleep_ms / 1000.0)

                if rank == 0:
                    if args.mode == "sync":
                        learner.learn(learner.receive())
                    elif pending is not None:
                        learner.learn(pending)
                    with record_function("sync_params"):
                        flat[:n_params] = parameters_to_vector(net.parameters()).detach()
                        flat[n_params] = float(learner.version)
                        comm.broadcast(flat, 0)
                    if args.mode == "async":
                        pending = learner.receive()
                    stats = [0.0, 0.0, 0.0, learner.last["loss"], float(learner.last["frames"])]
                    lines = [{"step": step, "rank": rank, "version": learner.version, **learner.last}]
                else:
                    traj = actor.rollout(step)
                    actor.send(traj, blocking=args.mode == "sync")
                    with record_function("sync_params"):
                        comm.broadcast(flat, 0)
                        load_params(net, flat)
                        actor.version = int(flat[n_params].item())
                    if args.mode == "async":
                        with record_function("send_wait"):
                            comm.wait_sends()
                    eps = actor.env.finished
                    actor.env.finished = []
                    stats = [sum(r for r, _ in eps), float(len(eps)), float(sum(n for _, n in eps)), 0.0, 0.0]
                    lines = [{"step": step, "rank": rank, "return": r, "length": n, "version": actor.version}
                             for r, n in eps]

                with record_function("episode_stats"):
                    st = torch.tensor(stats, dtype=torch.float64)
                    comm.all_reduce(st)
                with record_function("log_episodes"):
                    if log_sleep > 0:
                        time.sleep(log_sleep)
                    with open(log_path, "a") as fh:
                        for line in lines:
                            fh.write(json.dumps(line) + "\n")

                step_times.append(time.perf_counter() - t0)
                busy_times.append(step_times[-1] - comm.secs)
                if rank == 0:
                    ret = st[0].item() / max(1.0, st[1].item())
                    print(f"step {step:3d} v{learner.version} loss {st[3].item():.4f} frames {int(st[4].item())} "
                          f"episodes {int(st[1].item())} mean return {ret:.3f} rho {learner.last['rho']:.3f} "
                          f"t {1000 * step_times[-1]:.1f} ms", flush=True)
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
        print("median busy ms (outside sends, receives, broadcast, all_reduce) per rank: " +
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
