"""Proximal policy optimisation (PPO, clipped objective) on a vectorised CartPole, trained data
parallel with ``DistributedDataParallel`` on CPUs with gloo, written after the PPO paper and
CleanRL's ``ppo.py``.

Every rank runs its own batch of ``--envs`` CartPole environments (the classic cart-pole
physics in numpy, pure host code, no gym) from its own seed. An iteration: a rollout of T env
steps (the actor-critic forward under ``no_grad`` on every step, then the numpy env step, auto
reset at episode end), GAE(lambda) advantages and returns, then the update: ``--epochs`` passes
over the rollout in ``--minibatches`` shuffled minibatches, each the clipped PPO loss (clipped
value loss, entropy bonus), backward (DDP all-reduces the gradients), global-norm clipping and
Adam, learning rate annealed linearly as CleanRL does. Once an iteration the ranks all-reduce
their finished episodes' returns (sum, count) for the log. Actor and critic are separate tanh
MLPs of ``--layers`` hidden layers of ``--hidden`` units (orthogonal init), so the update is a
good share of the step. The profiler (CPU) records iterations 3 on, one chrome trace a rank
(``ppo-rank<R>.json``), without input shapes; ``rollout``, ``gae`` and ``update`` are labelled.

    OMP_NUM_THREADS=1 python -m torch.distributed.run --standalone --nproc_per_node=4 \\
        tests/corpus/user_ppo_rl.py --out DIR --slow-rank 1 --factor 2

Rollouts of different lengths: DDP needs every rank to call backward the same number of times,
so, as CleanRL does (``minibatch_size = batch_size // num_minibatches``), the number of
minibatches is fixed and their size follows the rollout: a rank with a longer rollout runs as
many backward passes as its peers, each on more samples (more compute, no hang).

Faults, on ``--slow-rank`` only:

- ``--factor F``: every Linear of the actor-critic computes its output again, without grad,
  ``(F - 1) * EXTRA_PER_UNIT`` times a call (carried over calls where fractional), in the update
  and in the rollout alike; the constant is calibrated so that the rank's update-phase compute
  is about F x its peers' (see Measured).
- ``--hog``: a daemon thread multiplies 64x64 matrices for the whole run (CPU and GIL).
- ``--sleep-ms MS``: a host sleep at the start of each iteration.
- ``--env-sleep-ms MS``: a slow environment: each env step sleeps MS / T, about MS an iteration.

Imbalance without a fault: ``--episode-sigma S`` draws each rank's rollout length T every
iteration lognormal (median ``--rollout``, sigma S, clamped to [T/4, 4T]) from a seed of its own
per rank and iteration, so the replica with the most rollout and update work changes from
iteration to iteration; ``--long-rank R --long X`` makes rank R's rollouts X times longer every
iteration.

Measured (this 2-core machine, 4 processes, other jobs beside them; the load average swung from
about 3 to 14 between runs, so absolute times vary 3x, ratios within a run much less): mean
iteration (``ProfilerStep#N`` in the traces) over the 6 traced ones, rank 0 / the slow rank (the
same under DDP), one pass run back to back, then the range over 3-4 passes:

    case                                       one pass (ms)    rank 0 over passes (ms)
    no fault                                   1437 / -         590 - 1893  (quiet: 590)
    --slow-rank 1 --factor 2                   1884 / 1884      765 - 2687
    --slow-rank 1 --env-sleep-ms 60            1981 / 1981      985 - 2116
    --episode-sigma 0.7  (rank 3 the longest)  1752 / 1749      1544 - 1981
    --long-rank 2 --long 1.6                   1494 / 1493      1233 - 1834

The slow rank's own compute from the traces, slow / mean of peers, over 4 runs of --factor 2:
time not waiting in ``gloo:all_reduce`` 1.66-1.81x, of it in ``update`` 1.74-2.04x, ``rollout``
1.64-1.93x, but ``aten::addmm`` + ``aten::mm`` 3.5-4.2x: only the Linears are recomputed, while
autograd, Adam, sampling and the env are not, so the matmuls must grow more than 2x for the
phase to. EXTRA_PER_UNIT = 7 comes from one process timed alone (DDP, world 1, CPU time, 16
reps): update 68 -> 131 ms (min; median 79 -> 151), rollout 38 -> 80 ms at 7 extra forwards a
call. Healthy runs: the same ratios 0.87-1.10. --episode-sigma 0.7: the longest rank of the run
1.34-1.40x busier than its peers; --long 1.6: rank 2 1.17-1.33x (its rollout 1.4-1.6x). A 60 ms
env sleep adds about 60-75 ms to the slow rank's rollout. A job takes 19-22 s of wall time on a
quiet machine (startup included), 40-75 s under the heaviest load seen.
"""

from __future__ import annotations

import argparse
import math
import os
import threading
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import Categorical
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import ProfilerActivity, record_function

# Extra no-grad Linear forwards per Linear call on the slow rank, per unit of (factor - 1):
# measured so that --factor F makes the rank's update-phase compute about F x its peers'.
EXTRA_PER_UNIT = 7.0


class VecCartPole:
    """``n`` CartPole-v1 environments stepped together in numpy (gym's physics and limits);
    an environment that ends is reset at once and its observation is the new episode's first."""

    gravity, masscart, masspole, length, force_mag, tau = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
    x_limit, theta_limit, max_steps = 2.4, 12 * 2 * math.pi / 360, 500

    def __init__(self, n, seed):
        self.n = n
        self.rng = np.random.default_rng(seed)
        self.state = self.rng.uniform(-0.05, 0.05, (n, 4))
        self.t = np.zeros(n, dtype=np.int64)
        self.ret = np.zeros(n)
        self.sleep_s = 0.0          # a slow environment (set on the slow rank only)

    def obs(self):
        return self.state.astype(np.float32)

    def step(self, action):
        if self.sleep_s > 0:
            time.sleep(self.sleep_s)
        x, x_dot, th, th_dot = self.state.T
        force = np.where(action == 1, self.force_mag, -self.force_mag)
        cos, sin = np.cos(th), np.sin(th)
        total = self.masspole + self.masscart
        pml = self.masspole * self.length
        temp = (force + pml * th_dot ** 2 * sin) / total
        th_acc = (self.gravity * sin - cos * temp) / (
            self.length * (4.0 / 3.0 - self.masspole * cos ** 2 / total))
        x_acc = temp - pml * th_acc * cos / total
        self.state = np.stack([x + self.tau * x_dot, x_dot + self.tau * x_acc,
                               th + self.tau * th_dot, th_dot + self.tau * th_acc], axis=1)
        self.t += 1
        self.ret += 1.0
        done = ((np.abs(self.state[:, 0]) > self.x_limit)
                | (np.abs(self.state[:, 2]) > self.theta_limit) | (self.t >= self.max_steps))
        finished = self.ret[done].copy()            # returns of the episodes that just ended
        if done.any():
            k = int(done.sum())
            self.state[done] = self.rng.uniform(-0.05, 0.05, (k, 4))
            self.t[done] = 0
            self.ret[done] = 0.0
        return self.obs(), np.ones(self.n, dtype=np.float32), done, finished


class SlowLinear(nn.Linear):
    """A Linear that, on the slow rank, computes its output again ``extra`` times (no grad)."""

    extra = 0.0     # extra forwards per call (set on the slow rank only)
    _carry = 0.0    # fraction carried from one call to the next, shared by all layers

    def forward(self, x):
        y = super().forward(x)
        if SlowLinear.extra > 0:
            SlowLinear._carry += SlowLinear.extra
            n = int(SlowLinear._carry)
            SlowLinear._carry -= n
            with torch.no_grad():
                for _ in range(n):
                    F.linear(x, self.weight, self.bias)
        return y


def layer_init(layer, std=math.sqrt(2), bias=0.0):
    nn.init.orthogonal_(layer.weight, std)
    nn.init.constant_(layer.bias, bias)
    return layer


def mlp(n_in, hidden, layers, n_out, out_std):
    mods, d = [], n_in
    for _ in range(layers):
        mods += [layer_init(SlowLinear(d, hidden)), nn.Tanh()]
        d = hidden
    mods.append(layer_init(SlowLinear(d, n_out), std=out_std))
    return nn.Sequential(*mods)


class Agent(nn.Module):
    """CleanRL's separate actor and critic MLPs. ``forward`` samples an action (or scores the
    given one) and returns action, log-prob, entropy and value, so DDP sees a single forward."""

    def __init__(self, n_obs, n_act, hidden, layers):
        super().__init__()
        self.critic = mlp(n_obs, hidden, layers, 1, out_std=1.0)
        self.actor = mlp(n_obs, hidden, layers, n_act, out_std=0.01)

    def forward(self, obs, action=None):
        dist_ = Categorical(logits=self.actor(obs))
        if action is None:
            action = dist_.sample()
        return action, dist_.log_prob(action), dist_.entropy(), self.critic(obs).squeeze(-1)


def start_hog(stop):
    """A noisy neighbour: small matmuls in a loop, on a daemon thread, for the whole run."""
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
    p.add_argument("--steps", type=int, default=8, help="PPO iterations (the first two are not traced)")
    p.add_argument("--envs", type=int, default=16, help="environments per rank")
    p.add_argument("--rollout", type=int, default=64, help="env steps per rollout (T, the median)")
    p.add_argument("--epochs", type=int, default=4, help="update epochs per iteration")
    p.add_argument("--minibatches", type=int, default=4, help="minibatches per epoch (fixed)")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=2, help="hidden layers of actor and critic")
    p.add_argument("--lr", type=float, default=2.5e-4)
    p.add_argument("--gamma", type=float, default=0.99)
    p.add_argument("--gae-lambda", type=float, default=0.95)
    p.add_argument("--clip-coef", type=float, default=0.2)
    p.add_argument("--ent-coef", type=float, default=0.01)
    p.add_argument("--vf-coef", type=float, default=0.5)
    p.add_argument("--max-grad-norm", type=float, default=0.5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--slow-rank", type=int, default=-1, help="rank the faults below apply to (-1: none)")
    p.add_argument("--factor", type=float, default=1.0, help="slow rank's update compute, x its peers'")
    p.add_argument("--hog", action="store_true", help="a busy matmul thread on the slow rank")
    p.add_argument("--sleep-ms", type=float, default=0.0,
                   help="host sleep on the slow rank at the start of each iteration")
    p.add_argument("--env-sleep-ms", type=float, default=0.0,
                   help="slow environment on the slow rank: MS / T in every env step")
    p.add_argument("--episode-sigma", type=float, default=0.0,
                   help="lognormal sigma of each rank's rollout length per iteration (0: fixed)")
    p.add_argument("--long-rank", type=int, default=-1, help="rank whose rollouts are longer")
    p.add_argument("--long", type=float, default=1.0, help="rollout length on --long-rank, x the others'")
    args = p.parse_args()
    if args.steps < 3:
        p.error("--steps must be at least 3 (the profiler waits 1 and warms up 1)")

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    slow = rank == args.slow_rank
    os.makedirs(args.out, exist_ok=True)

    torch.manual_seed(args.seed)                      # the same initial weights on every rank
    agent = Agent(4, 2, args.hidden, args.layers)
    model = DDP(agent)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr, eps=1e-5)
    if slow and args.factor > 1:
        SlowLinear.extra = (args.factor - 1.0) * EXTRA_PER_UNIT
    torch.manual_seed(args.seed * 7919 + rank)        # action sampling and shuffles differ by rank

    envs = VecCartPole(args.envs, seed=args.seed * 1009 + rank)
    obs = torch.from_numpy(envs.obs())

    def rollout_len(it):
        T = args.rollout * (args.long if rank == args.long_rank else 1.0)
        if args.episode_sigma > 0:
            g = np.random.default_rng([args.seed, rank, it])
            T *= math.exp(args.episode_sigma * g.standard_normal())
            T = min(max(T, args.rollout / 4), args.rollout * 4)
        return max(4, int(round(T)))

    stop = threading.Event()
    hog = start_hog(stop) if slow and args.hog else None

    if rank == 0:
        n_params = sum(q.numel() for q in agent.parameters())
        print(f"PPO CartPole: actor-critic {args.layers}x{args.hidden} tanh, {n_params / 1e3:.0f}k params, "
              f"world {world}, {args.envs} envs x T {args.rollout} a rank, {args.epochs} epochs x "
              f"{args.minibatches} minibatches", flush=True)

    def trace_handler(prof):
        prof.export_chrome_trace(os.path.join(args.out, f"ppo-rank{rank}.json"))

    sched = torch.profiler.schedule(wait=1, warmup=1, active=args.steps - 2, repeat=1)
    iter_ms, sizes = [], []
    t0 = time.perf_counter()
    with torch.profiler.profile(activities=[ProfilerActivity.CPU], schedule=sched,
                                on_trace_ready=trace_handler) as prof:
        for it in range(args.steps):
            ts = time.perf_counter()
            if slow and args.sleep_ms > 0:
                time.sleep(args.sleep_ms / 1000)
            T = rollout_len(it)
            sizes.append(T)
            if slow and args.env_sleep_ms > 0:
                envs.sleep_s = args.env_sleep_ms / 1000 / T
            for group in opt.param_groups:            # CleanRL's linear annealing
                group["lr"] = args.lr * (1.0 - it / args.steps)

            # ---- rollout: T steps of every env with the current policy
            b_obs = torch.zeros(T, args.envs, 4)
            b_act = torch.zeros(T, args.envs, dtype=torch.long)
            b_logp, b_val = torch.zeros(T, args.envs), torch.zeros(T, args.envs)
            b_rew, b_done = torch.zeros(T, args.envs), torch.zeros(T, args.envs)
            finished = []
            with record_function("rollout"), torch.no_grad():
                for t in range(T):
                    b_obs[t] = obs
                    action, logp, _, value = model(obs)
                    b_act[t], b_logp[t], b_val[t] = action, logp, value
                    nxt, rew, done, ended = envs.step(action.numpy())
                    b_rew[t] = torch.from_numpy(rew)
                    b_done[t] = torch.from_numpy(done.astype(np.float32))
                    finished.extend(ended.tolist())
                    obs = torch.from_numpy(nxt)
                _, _, _, next_value = model(obs)

            # ---- GAE(lambda); b_done[t] says the episode ended at step t (obs t+1 is a new one)
            with record_function("gae"), torch.no_grad():
                adv = torch.zeros(T, args.envs)
                last = torch.zeros(args.envs)
                for t in reversed(range(T)):
                    nv = next_value if t == T - 1 else b_val[t + 1]
                    live = 1.0 - b_done[t]
                    delta = b_rew[t] + args.gamma * nv * live - b_val[t]
                    last = delta + args.gamma * args.gae_lambda * live * last
                    adv[t] = last
                ret = adv + b_val

            # ---- update: fixed number of minibatches, their size follows the rollout
            f_obs, f_act, f_logp = b_obs.reshape(-1, 4), b_act.reshape(-1), b_logp.reshape(-1)
            f_adv, f_ret, f_val = adv.reshape(-1), ret.reshape(-1), b_val.reshape(-1)
            n = f_obs.shape[0]
            with record_function("update"):
                for _ in range(args.epochs):
                    for mb in torch.randperm(n).tensor_split(args.minibatches):
                        _, newlogp, entropy, newval = model(f_obs[mb], f_act[mb])
                        ratio = (newlogp - f_logp[mb]).exp()
                        a = f_adv[mb]
                        a = (a - a.mean()) / (a.std() + 1e-8)
                        pg_loss = torch.max(-a * ratio,
                                            -a * ratio.clamp(1 - args.clip_coef, 1 + args.clip_coef)).mean()
                        v_clip = f_val[mb] + (newval - f_val[mb]).clamp(-args.clip_coef, args.clip_coef)
                        v_loss = 0.5 * torch.max((newval - f_ret[mb]) ** 2, (v_clip - f_ret[mb]) ** 2).mean()
                        loss = pg_loss - args.ent_coef * entropy.mean() + args.vf_coef * v_loss
                        opt.zero_grad(set_to_none=True)
                        loss.backward()
                        nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
                        opt.step()

            # ---- episode statistics across ranks, for the log
            stats = torch.tensor([sum(finished), float(len(finished)), float(n)], dtype=torch.float64)
            dist.all_reduce(stats)
            iter_ms.append((time.perf_counter() - ts) * 1000)
            prof.step()
            if rank == 0:
                mean_ret = stats[0] / stats[1] if stats[1] > 0 else float("nan")
                print(f"iter {it} T {T} samples {int(stats[2])} episodes {int(stats[1])} "
                      f"return {mean_ret:.1f} loss {loss.item():.3f} ({iter_ms[-1]:.0f} ms)", flush=True)

    if rank == 0:
        traced = iter_ms[2:]
        print(f"done in {time.perf_counter() - t0:.1f}s, mean iteration over the {len(traced)} traced "
              f"{sum(traced) / len(traced):.0f} ms, traces in {args.out}", flush=True)
    if slow or args.episode_sigma > 0 or rank == args.long_rank:
        print(f"rank {rank}: rollout lengths {sizes}", flush=True)
    if hog is not None:
        stop.set()
        hog.join()
    dist.barrier()
    time.sleep(0.2)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
