"""A synchronous parameter server over ``torch.distributed.rpc``, written as PyTorch's RPC
tutorials write one ("Implementing a Parameter Server Using Distributed RPC Framework" for the
server reached through an RRef, "Implementing Batch RPC Processing Using Asynchronous
Executions" for the batch-synchronous update): rank 0 is the parameter server (PS), holding the
weights and the optimizer; ranks 1.. are trainers. CPUs, TensorPipe, no DDP, no collectives
inside the training loop.

Setup, on every rank: ``dist.init_process_group("gloo")`` (only for the barriers at the start
and the end and the final check) and ``rpc.init_rpc`` with the TensorPipe backend over the same
``env://`` rendezvous torchrun provides, named ``ps`` and ``trainer1``, ``trainer2``, ...,
``rpc_backend_options=TensorPipeRpcBackendOptions(num_worker_threads=--threads (8),
rpc_timeout=--rpc-timeout (60 s))``, no device maps (CPU). ``--transport uv`` adds
``_transports=["uv"]`` (see below); by default TensorPipe picks its own (shm and uv).

The model: an MLP classifier ``--in-dim`` (128) -> ``--width`` (1024) x ``--depth`` (2) hidden
layers with ReLU -> 10 classes, 1.19M parameters (4.7 MB) in 6 tensors at the defaults. The data:
each trainer draws its own batch every step, ``x ~ N(0, 1)`` of ``--batch`` (128) rows from a
generator seeded with (``--seed``, rank, step), labelled by a fixed random "teacher" (a two-layer
tanh network drawn from ``--seed``, the same on every rank): ``y = argmax(teacher(x))``. No
files, no loader. The loss goes from 2.29 to 2.03 in 10 steps (trainer1's), to 1.7 in 20.

The PS (rank 0) makes its ``ParameterServer`` (the model, zeroed ``.grad`` buffers and
``torch.optim.SGD(lr --lr 0.2, momentum 0.9, weight_decay 1e-4)``) through a module-level
singleton, ``get_parameter_server()``, then ``dist.barrier()``; each trainer, after the barrier,
gets an RRef to the same object with ``rpc.remote("ps", get_parameter_server)`` and its initial
weights with ``ps_rref.rpc_sync().get_weights()``. A trainer's step (one ``ProfilerStep#N``):

- ``data`` (the batch and its labels), ``forward`` (model and cross-entropy), ``backward``
  (``zero_grad``, then ``loss.backward()``);
- ``push_grads``: ``rpc.rpc_sync("ps", ParameterServer.push_grads, args=(ps_rref, name, step,
  [p.grad for p in params]))``. ``push_grads`` is a static method under
  ``@rpc.functions.async_execution``: in an RPC worker thread of the PS it adds the gradients into
  the PS's ``.grad`` buffers (under a lock), counts them, and returns the step's
  ``torch.futures.Future``, so the reply waits until the update is applied. The last trainer's push
  of a step wakes the PS's main thread (a ``queue.Queue``);
- ``load_weights``: the reply is the new weights (a list of tensors), copied into the local model.

The PS's main thread, one ``ProfilerStep#N`` per update: ``wait_grads`` (``queue.get``, nothing
in it: the trainers compute), then ``apply_update``: the gradient sums divided by the number of
trainers (every trainer weighs the same, whatever its batch), ``optimizer.step()``,
``zero_grad(set_to_none=False)``, a copy of the new weights, and ``set_result`` on the step's
future, which answers every trainer's push at once. So the update is batch-synchronous: a slow
trainer makes the others wait in ``push_grads``, and the PS waits in ``wait_grads``; every rank
does exactly ``--steps`` steps, so the traces have the same steps and ``rpc.shutdown()`` meets
every rank. A push that comes for the wrong step raises on the PS (it reaches the trainer as an
RPC error); the PS gives up after ``--rpc-timeout`` seconds without a step's gradients, a trainer
after as long without its reply.

``--pull``: the reply is only the step number, and each trainer fetches the weights with
``ps_rref.rpc_sync().get_weights()`` at the start of each step after the first (``fetch_weights``,
one more round trip a step; the first parameter-server tutorial's pattern).
``--update-in-handler``: the batch tutorial's own pattern: the last push's RPC thread applies the
update itself; the PS's main thread only waits for it (``wait_update``) and calls ``prof.step()``.

What the profiler sees: only the thread that started it (and autograd's). The RPC worker
threads are not profiled, so the PS's gradient sums never appear, and under
``--update-in-handler`` neither does its update: its steps hold one empty ``wait_update`` each.
RPC calls leave no events either (torch warns "Profiling a distributed call with the Kineto
profiler will profile the caller, but not the worker"): ``push_grads`` and ``fetch_weights`` are
``record_function`` spans with nothing inside, and with ``--no-marks`` (no spans of our own) a
trainer's wait for the PS is an empty stretch of its ``ProfilerStep``. No collective runs between
the barriers, so the traces hold no ``gloo:`` events; their metadata still says gloo, world 4.

Profiling: ``torch.profiler.profile(activities=[CPU], schedule=schedule(wait=1, warmup=1,
active=steps-2))``, ``record_shapes`` only with ``--shapes``, ``prof.step()`` after each step,
``ProfilerStep#2`` .. ``#(steps-1)`` on every rank; at the end ``prof.export_chrome_trace`` into
``--out``/``trace-rank<R>.json``, one per rank. Then each rank checks over gloo that the trainers'
last weights equal the PS's (rank 0 prints the spread: 0), ``dist.barrier()``, ``rpc.shutdown()``.

Flags:

- ``--out DIR`` (required), ``--steps N`` (10 updates, 8 traced), ``--seed S`` (0), ``--shapes``,
  ``--no-marks``.
- ``--in-dim`` (128), ``--width`` (1024), ``--depth`` (2), ``--batch B`` (128), ``--lr`` (0.2),
  ``--pull``, ``--update-in-handler``, ``--threads`` (8), ``--rpc-timeout`` (60 s),
  ``--transport default|uv|shm``.
- ``--ps-slow-ms MS``: the PS sleeps MS inside each update it applies, holding the lock (a slow
  server; needs no ``--slow-rank``).
- ``--slow-rank R`` (-1: none), and on that rank only:
  ``--factor F``: on a trainer, each linear layer's forward runs its matmul again under
  ``no_grad`` on ``F - 1`` copies of its input (whole copies, then a leading slice for the
  fraction; results thrown away), extra ``aten::linear``/``aten::addmm`` in ``forward``: the
  forward about ``F`` x, the trainer's compute about ``1 + (F - 1) / 3`` x. On the PS (``R = 0``),
  the optimizer does F times its work: a step post-hook runs the same SGD update
  (``torch.optim.sgd.sgd``) ``F - 1`` more times on copies of the weights (whole copies, then the
  leading rows for the fraction), inside the ``Optimizer.step#SGD.step`` span (in one quiet
  process 1.8 ms a step at F 1, 3.7 / 7.9 / 16.6 ms at F 2 / 4 / 8); the weights are unchanged.
  ``--hog``: a daemon thread multiplying 256x256 matrices for the whole run (any rank).
  On a trainer only: ``--sleep-ms MS``, a host sleep at the start of each step;
  ``--data-sleep-ms MS``, a sleep inside ``data``; ``--send-delay-ms MS``, a sleep inside
  ``push_grads`` before the RPC is sent (a slow link from that trainer to the PS).
- Imbalance, no fault, on trainers: ``--seq-sigma S`` (or ``--batch-sigma``), each trainer draws
  each step's batch size as ``B`` x a lognormal of sigma S (seeded by rank and step), clipped to
  [8, 4B]; ``--big-rank K --big X``, trainer K's batch is ``round(X B)`` every step.

    OMP_NUM_THREADS=1 python -m torch.distributed.run --standalone --nproc_per_node=4 \\
        tests/corpus/user_param_server.py --out DIR --ps-slow-ms 60

Any world size of 2 or more works (one PS, the rest trainers).

Measured on this 2-core machine, 4 processes, torch 2.13.0+cpu, while another helper's 4-process
jobs ran beside (load average 7-13 for most runs; 4 for a few), so numbers swing 2x from run to
run. A job takes 14-17 s wall when the machine is quiet, 20-37 s with ``--transport uv`` beside the
other jobs and 27-56 s with the default transports there; the 10 steps themselves take 1-4 s, the
rest is starting: ``import torch`` in each process, and torch's lazy import of ``torch._dynamo``
(800-odd modules), which the PS pays making its optimizer (before the start barrier) and each
trainer when its profiler first starts (at the end of step 0), 2-13 s each under that load.
Traces 0.42 MB a rank (0.60 with ``--shapes``; the PS's 0.63 / 1.15 MB at ``--factor`` 4 / 8), all
valid JSON, every rank with ``ProfilerStep#2`` .. ``#9``. Every rank's mean step is the same to
a few %: the synchronous update evens them out.

TensorPipe's default transports include shm, whose reactor thread busy-polls in every process
(``TP_SHM_reactor``, 35-45% of a core each in ``top``, waiting or not): on 2 cores the four of
them take most of a core and a half, and the healthy step, 93-191 ms, is about twice that with
``--transport uv`` (49-70 ms; compute about 20-30 ms of a trainer's step, the PS's update 5-9 ms,
its optimizer 3 ms). The numbers below are with ``--transport uv`` (mean step over the 8 traced
steps, every rank; own = a trainer's step less its ``push_grads``):

    healthy                                      55 55 60 (load 7.6-8.6)
    --ps-slow-ms 30 / 60                         117 / 141  (apply_update 38 / 74 ms)
    --slow-rank 0 --factor 2 / 4 / 8             100 / 84 / 93  (optimizer 16 / 12 / 44 ms vs 3)
    --slow-rank 3 --factor 2                     66, trainer 3's own 37 vs 19 / 26
    --slow-rank 2 --factor 1.5                   66, not seen in own (24 vs 23 / 15)
    --slow-rank 1 / 3 --send-delay-ms 30 / 60    105 / 154; every trainer's push_grads alike
    --slow-rank 2 --sleep-ms 40                  124, own 91 vs 53 / 51
    --slow-rank 3 --data-sleep-ms 40             102, own 63 vs 29 / 27
    --slow-rank 1 / 0 --hog                      108 / 118
    --big-rank 1 --big 1.5 / --big-rank 2 --big 2   86 / 91 (own 65 vs 40 / 50 at 2x)
    --seq-sigma 0.5                              54
    --pull / --update-in-handler / --shapes      110 / 83 / 101
    2 ranks: healthy 27 (default transports 58), --send-delay-ms 30 on trainer 1: 87

With the default transports (load 10-13): healthy 93-191; ``--ps-slow-ms`` 30 / 60 / 120: 116-190
/ 160-249 / 307; ``--slow-rank 0 --factor`` 2 / 4 / 8: 70-276 / 124-349 / 195-415 (its optimizer
12-57 / 23-106 / 118-229 ms); ``--slow-rank 3 --factor 2``: 342, own 228 vs 104 / 115. A sleep or
a send delay costs less than its length when the machine is busy: while the slow trainer sleeps
the others get the cores.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import queue
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.distributed.rpc as rpc
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.sgd import sgd
from torch.profiler import ProfilerActivity, record_function

PS_NAME = "ps"
CLASSES = 10
MOMENTUM = 0.9
WEIGHT_DECAY = 1e-4


def marks(on):
    """``record_function`` for the user's own spans, or nothing (``--no-marks``)."""
    return record_function if on else (lambda name: contextlib.nullcontext())


def trainer_name(rank):
    return f"trainer{rank}"


class MLP(nn.Module):
    """The student: ``in_dim -> width (x depth, ReLU) -> CLASSES``."""

    def __init__(self, in_dim, width, depth, slow_extra=0.0):
        super().__init__()
        dims = [in_dim] + [width] * depth
        self.hidden = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.head = nn.Linear(width, CLASSES)
        self.slow_extra = slow_extra        # > 0 on a slow trainer only

    def _linear(self, layer, x):
        y = layer(x)
        if self.slow_extra > 0:
            # the slow trainer's "kernel": the same matmul again on extra rows, results unused
            with torch.no_grad():
                whole, frac = divmod(self.slow_extra, 1.0)
                for _ in range(int(whole)):
                    F.linear(x, layer.weight, layer.bias)
                n = int(round(frac * x.shape[0]))
                if n > 0:
                    F.linear(x[:n], layer.weight, layer.bias)
        return y

    def forward(self, x):
        for layer in self.hidden:
            x = F.relu(self._linear(layer, x))
        return self._linear(self.head, x)


def make_teacher(in_dim, seed):
    """A fixed random two-layer tanh network whose argmax is the label: the same on every rank."""
    g = torch.Generator().manual_seed(seed * 7 + 12345)
    w1 = torch.randn(in_dim, 256, generator=g) / math.sqrt(in_dim)
    w2 = torch.randn(256, CLASSES, generator=g) / math.sqrt(256)
    return w1, w2


class ParameterServer:
    """Holds the weights and the optimizer; trainers push gradients and get the next weights back.

    The gradients of one step are summed into ``p.grad`` as they arrive (under a lock, in the RPC
    thread that received them); the last trainer's push wakes the PS's main thread, which averages
    them, steps the optimizer and completes the future every push of that step is waiting on.
    """

    def __init__(self, args, n_trainers, extra_factor=1.0, update_in_handler=False):
        torch.manual_seed(args.seed)
        self.model = MLP(args.in_dim, args.width, args.depth)
        self.params = list(self.model.parameters())
        for p in self.params:
            p.grad = torch.zeros_like(p)
        self.optimizer = torch.optim.SGD(self.params, lr=args.lr, momentum=MOMENTUM,
                                         weight_decay=WEIGHT_DECAY)
        self.n_trainers = n_trainers
        self.ps_slow_s = args.ps_slow_ms / 1000
        self.update_in_handler = update_in_handler
        self.lock = threading.Lock()
        self.pending = 0            # pushes received for the current step
        self.step = 0               # updates applied so far
        self.future = torch.futures.Future()
        self.ready = queue.Queue()  # the PS main thread waits here for each step's last push
        self.applied = queue.Queue()  # --update-in-handler: the step of each update applied
        self.pull = args.pull
        if extra_factor > 1:
            self._slow_optimizer(extra_factor - 1, args.lr)

    def _slow_optimizer(self, extra, lr):
        """``--slow-rank 0 --factor F``: each optimizer step does its SGD update ``F - 1`` more
        times, on copies of the weights (whole copies, then the leading rows for the fraction),
        from a step post-hook: inside the ``Optimizer.step`` span, as a slower optimizer would."""
        whole, frac = divmod(extra, 1.0)
        shares = [1.0] * int(whole) + ([frac] if frac >= 0.01 else [])
        copies = [[p.detach()[:max(1, round(f * p.shape[0]))].clone() for p in self.params]
                  for f in shares]
        bufs = [[torch.zeros_like(c) for c in cs] for cs in copies]

        def again(optimizer, args, kwargs):
            for cs, bs in zip(copies, bufs):
                grads = [p.grad[:c.shape[0]] for p, c in zip(self.params, cs)]
                sgd(cs, grads, bs, weight_decay=WEIGHT_DECAY, momentum=MOMENTUM, lr=lr,
                    dampening=0.0, nesterov=False, maximize=False)

        self.optimizer.register_step_post_hook(again)

    def weights(self):
        return [p.detach().clone() for p in self.params]

    def get_weights(self):
        with self.lock:
            return self.weights()

    @staticmethod
    @rpc.functions.async_execution
    def push_grads(ps_rref, trainer, step, grads):
        self = ps_rref.local_value()
        with self.lock:
            if step != self.step:
                raise RuntimeError(f"{trainer} pushed step {step} while the PS is at {self.step}")
            for p, g in zip(self.params, grads):
                p.grad.add_(g)
            self.pending += 1
            fut = self.future
            last = self.pending == self.n_trainers
        if last:
            if self.update_in_handler:
                self.apply_update()
            else:
                self.ready.put(step)
        return fut

    def apply_update(self):
        """Average the summed gradients, step, and answer every push of this step."""
        with self.lock:
            if self.ps_slow_s > 0:
                time.sleep(self.ps_slow_s)      # --ps-slow-ms: a slow server
            for p in self.params:
                p.grad.div_(self.n_trainers)
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=False)
            self.step += 1
            done = self.step - 1
            self.pending = 0
            fut, self.future = self.future, torch.futures.Future()
            reply = self.step if self.pull else self.weights()
        fut.set_result(reply)
        self.applied.put(done)


_ps = None
_ps_lock = threading.Lock()


def get_parameter_server(*init):
    """The PS singleton, made on first use (the trainers reach it through ``rpc.remote``)."""
    global _ps
    with _ps_lock:
        if _ps is None:
            _ps = ParameterServer(*init)
        return _ps


def start_hog(stop):
    """A noisy neighbour inside the process: matmuls on a daemon thread until ``stop``."""
    def spin():
        a, b = torch.randn(256, 256), torch.randn(256, 256)
        while not stop.is_set():
            torch.mm(a, b)

    t = threading.Thread(target=spin, name="hog", daemon=True)
    t.start()
    return t


def run_ps(args, rank, world, prof_kw, extra_factor):
    mark = marks(not args.no_marks)
    ps = get_parameter_server(args, world - 1, extra_factor, args.update_in_handler)
    n = sum(p.numel() for p in ps.params)
    print(f"ps: MLP {args.in_dim}-{args.width}x{args.depth}-{CLASSES}, {n / 1e6:.2f}M params, "
          f"{world - 1} trainers, {'pull' if args.pull else 'push-and-fetch'}, update in "
          f"{'handler' if args.update_in_handler else 'main thread'}", flush=True)
    dist.barrier()                              # the PS exists: trainers may start
    timeout = args.rpc_timeout
    with torch.profiler.profile(**prof_kw) as prof:
        for step in range(args.steps):
            ts = time.perf_counter()
            if args.update_in_handler:
                with mark("wait_update"):
                    try:
                        got = ps.applied.get(timeout=timeout)
                    except queue.Empty:
                        raise RuntimeError(f"ps: no update {step} within {timeout} s") from None
                    assert got == step, (got, step)
            else:
                with mark("wait_grads"):
                    try:
                        got = ps.ready.get(timeout=timeout)
                    except queue.Empty:
                        raise RuntimeError(f"ps: no gradients for step {step} within {timeout} s") from None
                    assert got == step, (got, step)
                with mark("apply_update"):
                    ps.apply_update()
            prof.step()
            print(f"ps: update {step} {(time.perf_counter() - ts) * 1000:.0f} ms", flush=True)
    return prof, ps.get_weights()


def run_trainer(args, rank, world, prof_kw, slow):
    mark = marks(not args.no_marks)
    name = trainer_name(rank)
    extra = (args.factor - 1) if slow and args.factor > 1 else 0.0
    model = MLP(args.in_dim, args.width, args.depth, slow_extra=extra)
    params = list(model.parameters())
    teacher = make_teacher(args.in_dim, args.seed)
    dist.barrier()                              # wait for the PS to exist
    ps_rref = rpc.remote(PS_NAME, get_parameter_server)

    def load(weights):
        with torch.no_grad():
            for p, w in zip(params, weights):
                p.copy_(w)

    def batch_size(step):
        b = args.batch
        if args.seq_sigma > 0:
            g = torch.Generator().manual_seed(args.seed * 1_000_003 + 7919 * rank + step)
            b = b * math.exp(args.seq_sigma * torch.randn((), generator=g).item())
            b = min(max(8, int(round(b))), 4 * args.batch)
        if rank == args.big_rank:
            b = max(1, int(round(args.big * b)))
        return b

    def get_batch(step, b):
        if slow and args.data_sleep_ms > 0:
            time.sleep(args.data_sleep_ms / 1000)      # a slow loader
        g = torch.Generator().manual_seed(args.seed * 1_000_003 + 104729 * rank + step)
        x = torch.randn(b, args.in_dim, generator=g)
        with torch.no_grad():
            y = (torch.tanh(x @ teacher[0]) @ teacher[1]).argmax(1)
        return x, y

    load(ps_rref.rpc_sync(timeout=args.rpc_timeout).get_weights())
    with torch.profiler.profile(**prof_kw) as prof:
        for step in range(args.steps):
            ts = time.perf_counter()
            if slow and args.sleep_ms > 0:
                time.sleep(args.sleep_ms / 1000)
            if args.pull and step > 0:
                with mark("fetch_weights"):
                    load(ps_rref.rpc_sync(timeout=args.rpc_timeout).get_weights())
            b = batch_size(step)
            with mark("data"):
                x, y = get_batch(step, b)
            with mark("forward"):
                loss = F.cross_entropy(model(x), y)
            with mark("backward"):
                model.zero_grad(set_to_none=False)
                loss.backward()
            with mark("push_grads"):
                if slow and args.send_delay_ms > 0:
                    time.sleep(args.send_delay_ms / 1000)   # a slow link from this trainer
                reply = rpc.rpc_sync(PS_NAME, ParameterServer.push_grads,
                                     args=(ps_rref, name, step, [p.grad for p in params]),
                                     timeout=args.rpc_timeout)
            if not args.pull:
                with mark("load_weights"):
                    load(reply)
            prof.step()
            if rank == 1:
                print(f"{name}: step {step} batch {b} loss {loss.item():.4f} "
                      f"{(time.perf_counter() - ts) * 1000:.0f} ms", flush=True)
    if args.pull:
        load(ps_rref.rpc_sync(timeout=args.rpc_timeout).get_weights())
    return prof, [p.detach() for p in params]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="directory for the chrome traces (one per rank)")
    p.add_argument("--steps", type=int, default=10, help="updates (profiler steps)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shapes", action="store_true", help="profiler record_shapes")
    p.add_argument("--in-dim", type=int, default=128)
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--depth", type=int, default=2, help="hidden layers")
    p.add_argument("--batch", type=int, default=128, help="samples per trainer per step")
    p.add_argument("--lr", type=float, default=0.2)
    p.add_argument("--pull", action="store_true",
                   help="trainers fetch the weights with an RPC at each step; a push returns the step")
    p.add_argument("--update-in-handler", action="store_true",
                   help="the last push's RPC thread applies the update (the PS main thread only waits)")
    p.add_argument("--no-marks", action="store_true", help="no record_function spans of our own")
    p.add_argument("--transport", choices=["default", "uv", "shm"], default="default",
                   help="TensorPipe transports: its own choice (shm and uv), or only one")
    p.add_argument("--threads", type=int, default=8, help="RPC worker threads")
    p.add_argument("--rpc-timeout", type=float, default=60.0, help="seconds")
    p.add_argument("--slow-rank", type=int, default=-1, help="rank the faults below apply to")
    p.add_argument("--factor", type=float, default=1.0,
                   help="compute on the slow rank, x (a trainer's forward; rank 0: the optimizer)")
    p.add_argument("--sleep-ms", type=float, default=0.0, help="a slow trainer's sleep before each step")
    p.add_argument("--data-sleep-ms", type=float, default=0.0, help="a slow trainer's sleep in each batch")
    p.add_argument("--send-delay-ms", type=float, default=0.0,
                   help="a slow trainer's delay before sending its gradients")
    p.add_argument("--hog", action="store_true", help="a busy matmul thread on the slow rank")
    p.add_argument("--ps-slow-ms", type=float, default=0.0, help="the PS sleeps this long in each update")
    p.add_argument("--seq-sigma", "--batch-sigma", type=float, default=0.0,
                   help="lognormal sigma of each trainer's batch size per step")
    p.add_argument("--big-rank", type=int, default=-1, help="trainer with a larger batch")
    p.add_argument("--big", type=float, default=1.5, help="--big-rank's batch, x --batch")
    args = p.parse_args()
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world < 2:
        p.error("run under torchrun with at least 2 processes (a PS and a trainer)")
    if args.steps < 3:
        p.error("--steps must be at least 3 (the profiler waits 1 and warms up 1)")
    if args.slow_rank >= world or args.big_rank >= world:
        p.error(f"--slow-rank and --big-rank must be below the world size ({world})")
    if args.slow_rank < 0 and (args.factor != 1 or args.hog or args.sleep_ms or args.data_sleep_ms
                               or args.send_delay_ms):
        p.error("--factor, --hog, --sleep-ms, --data-sleep-ms and --send-delay-ms need --slow-rank")
    if args.slow_rank == 0 and (args.sleep_ms or args.data_sleep_ms or args.send_delay_ms):
        p.error("--sleep-ms, --data-sleep-ms and --send-delay-ms act on a trainer (rank >= 1); "
                "for a slow PS use --ps-slow-ms or --factor")
    if args.big_rank == 0:
        p.error("--big-rank must be a trainer (rank >= 1)")
    if args.factor < 1 or args.big <= 0 or args.seq_sigma < 0:
        p.error("--factor must be at least 1, --big positive, --seq-sigma not negative")
    if min(args.sleep_ms, args.data_sleep_ms, args.send_delay_ms, args.ps_slow_ms) < 0:
        p.error("sleeps and delays must not be negative")

    dist.init_process_group("gloo", timeout=timedelta(seconds=2 * args.rpc_timeout))
    rank = dist.get_rank()
    world = dist.get_world_size()
    transports = None if args.transport == "default" else [args.transport]
    opts = rpc.TensorPipeRpcBackendOptions(num_worker_threads=args.threads,
                                           rpc_timeout=args.rpc_timeout, _transports=transports)
    rpc.init_rpc(PS_NAME if rank == 0 else trainer_name(rank), rank=rank, world_size=world,
                 rpc_backend_options=opts)
    slow = rank == args.slow_rank
    os.makedirs(args.out, exist_ok=True)
    stop = threading.Event()
    hog = start_hog(stop) if slow and args.hog else None
    prof_kw = dict(activities=[ProfilerActivity.CPU], record_shapes=args.shapes,
                   schedule=torch.profiler.schedule(wait=1, warmup=1, active=args.steps - 2))
    t0 = time.perf_counter()
    if rank == 0:
        prof, final = run_ps(args, rank, world, prof_kw, args.factor if slow else 1.0)
    else:
        prof, final = run_trainer(args, rank, world, prof_kw, slow)
    prof.export_chrome_trace(os.path.join(args.out, f"trace-rank{rank}.json"))
    if hog is not None:
        stop.set()
        hog.join()
    # every trainer's last weights are the PS's final ones
    with torch.no_grad():
        flat = torch.cat([w.reshape(-1) for w in final])
        lo, hi = flat.clone(), flat.clone()
        dist.all_reduce(lo, op=dist.ReduceOp.MIN)
        dist.all_reduce(hi, op=dist.ReduceOp.MAX)
        spread = (hi - lo).abs().max().item()
    if rank == 0:
        print(f"done in {time.perf_counter() - t0:.1f}s, max weight spread PS vs trainers "
              f"{spread:.2e}, traces in {args.out}", flush=True)
    dist.barrier()
    rpc.shutdown()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
