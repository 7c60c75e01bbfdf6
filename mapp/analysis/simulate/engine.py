"""The discrete-event engine: runs every stage's program on (dp, tp) arrays of true times.

Semantics (true time, microseconds). Each rank has a GPU stream (free at ``g``) and, with
``host_ahead``, a host thread (at ``h``) that launches ops asynchronously:

- an op is launched by the host (``h += launch cost``: ``host_overhead_us`` times a slow
  host's factor, plus heavy-tailed host noise) and starts on the GPU at ``max(g, h)``; without
  ``host_ahead`` host and GPU are one timeline and an op starts at ``g`` plus a slow host's
  delay (and the noise);
- a span (the events' B and E) is what a CUDA event records: the time the stream reaches it,
  ``max(g, h)`` when it is recorded;
- the host waits for the GPU (``h = max(h, g)``) where megatron-core synchronises: after each
  batched p2p (``batch_p2p_sync``), at the optimizer's grad-norm ``.item()``, the loss
  function's NaN check, and wherever a tracer adds a synchronize or barrier;
- compute lasts ``base x jitter x gpu factor``, where base is ``linear x f + quadratic x f^2``
  for a microbatch of ``f x seq_length`` tokens (``seqlen_sigma``), times the uniform
  ``seqlen_imbalance`` draw where that negative control is on;
- a collective ends on every member at ``max(arrivals) + transfer`` (bytes scale with the
  microbatch's tokens where the tensor does);
- a p2p message completes at ``max(send posted, recv posted) + transfer``, so a receive never
  ends before the matching send started plus the transfer; a batch of sends and receives
  returns when its last message completes;
- the ranks that read data (TP rank 0 of the first and last stage) spend ``data_load_us`` of
  host time (plus any ``data_stall``) at the start of each forward step, then, with
  ``host_ahead`` and TP, broadcast the batch to their TP group.

Stages advance in turn, each until it waits on a message its peer has not posted yet. Ranks of
one stage share the program, so the cost of an op is a handful of numpy calls whatever ``dp``
and ``tp`` are.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from .clock import TRUE_ORIGIN_US
from .cost import CostModel
from .effects import Effects
from .faults import Fault
from .layout import Layout
from .program import (OP_BEGIN, OP_COMPUTE, OP_DATA, OP_DP, OP_END, OP_OPT, OP_P2P, OP_SYNC, OP_TP,
                      StageProgram)

__all__ = ["Engine", "StageTimes", "MAX_TOKENS_FACTOR", "HOST_NOISE_SHAPE", "HOST_NOISE_CLIP_US"]

MAX_TOKENS_FACTOR = 8
"""Longest microbatch, in multiples of ``seq_length`` tokens, that ``seqlen_sigma`` draws."""
HOST_NOISE_SHAPE = 1.5
"""Shape of the Lomax (Pareto II) host-noise draws: heavy-tailed, finite mean (2 x scale)."""
HOST_NOISE_CLIP_US = 10_000.0
"""Longest single host-noise delay (a 10 ms preemption)."""


@dataclass(slots=True)
class StageTimes:
    """True start and end of every event of one stage in one iteration, shape (events, dp, tp)."""

    iteration: int
    stage: int
    start: np.ndarray
    end: np.ndarray
    host_start: np.ndarray | None = None
    """Host time at which the iteration began (its ``iteration_begin``), shape (dp, tp)."""
    host_end: np.ndarray | None = None
    """Host time at which the host knew the iteration's GPU work done, shape (dp, tp)."""
    tokens: np.ndarray | None = None
    """Tokens of every (replica, microbatch), shape (dp, microbatches); None: all ``seq_length``."""


class _Stage:
    __slots__ = ("prog", "pc", "now", "host", "start", "end", "rng", "noise_rng", "posted")

    def __init__(self, prog: StageProgram, now: np.ndarray, rng: np.random.Generator,
                 noise_rng: np.random.Generator):
        self.prog = prog
        self.pc = 0
        self.now = now
        self.host = now.copy()
        self.rng = rng
        self.noise_rng = noise_rng
        self.posted = False


class Engine:
    """Runs iterations one after another; ``run()`` yields each stage's times per iteration."""

    def __init__(self, layout: Layout, programs: list[StageProgram], cost: CostModel, *,
                 faults: list[Fault], iterations: int, microbatches: int, jitter_sigma: float,
                 host_overhead_us: float, seed: int, hardware_faults: bool = True,
                 host_ahead: bool = False, host_noise_us: float = 0.0, data_load_us: float = 0.0,
                 seqlen_sigma: float = 0.0, global_barrier: bool = False):
        self.layout = layout
        self.programs = programs
        self.cost = cost
        self.faults = faults
        self.iterations = iterations
        self.microbatches = microbatches
        self.sigma = jitter_sigma
        self.host_overhead_us = host_overhead_us
        self.hardware_faults = hardware_faults
        self.host_ahead = host_ahead
        self.host_noise_us = host_noise_us
        self.data_load_us = data_load_us
        self.seqlen_sigma = seqlen_sigma
        self.global_barrier = global_barrier
        seeds = np.random.SeedSequence([seed, 0x51A])
        children = seeds.spawn(layout.pp + 1)
        self.rngs = [np.random.Generator(np.random.PCG64(c)) for c in children[: layout.pp]]
        self.seqlen_rng = np.random.Generator(np.random.PCG64(children[-1]))
        # streams of the realism options: spawned after the original ones, so that a job
        # without them draws exactly what it always drew
        extra = seeds.spawn(layout.pp + 2)
        self.noise_rngs = [np.random.Generator(np.random.PCG64(c)) for c in extra[: layout.pp]]
        self.token_rng = np.random.Generator(np.random.PCG64(extra[-2]))
        self.stall_rng = np.random.Generator(np.random.PCG64(extra[-1]))
        self.stalled: list[tuple[int, int, int]] = []
        """(fault index, iteration, microbatch) of every data-loader stall applied."""
        self._node_maps()
        self._transfers: dict[tuple, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

    def _node_maps(self) -> None:
        lay, g = self.layout, self.layout.gpus_per_node
        self.tp_inter, self.dp_inter, self.p2p_inter = [], [], {}
        for s in range(lay.pp):
            ranks = lay.stage_ranks(s)
            nodes = ranks // g
            self.tp_inter.append(nodes.min(axis=1) != nodes.max(axis=1))
            self.dp_inter.append(nodes.min(axis=0) != nodes.max(axis=0))
            for peer in {lay.next_stage(s), lay.prev_stage(s)}:
                self.p2p_inter[(s, peer)] = nodes != (lay.stage_ranks(peer) // g)

    def _jitter(self, rng: np.random.Generator, shape) -> np.ndarray | float:
        if self.sigma <= 0:
            return 1.0
        return np.exp(self.sigma * rng.standard_normal(shape) - 0.5 * self.sigma * self.sigma)

    def _noise(self, rng: np.random.Generator, shape) -> np.ndarray:
        draw = rng.pareto(HOST_NOISE_SHAPE, shape) * self.host_noise_us
        return np.minimum(draw, HOST_NOISE_CLIP_US)

    def _transfer_base(self, kind: str, nbytes: int, members: int, inter: np.ndarray) -> np.ndarray:
        intra = self.cost.transfer_us(kind, nbytes, members, False)
        inter_t = self.cost.transfer_us(kind, nbytes, members, True)
        return np.where(inter, inter_t, intra)

    def _transfer(self, key: tuple, kind: str, nbytes: int, members: int,
                  inter: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(total, latency part, per-byte part) of a transfer, cached per stage and size."""
        got = self._transfers.get(key)
        if got is None:
            total = self._transfer_base(kind, nbytes, members, inter)
            lat = self._transfer_base(kind, 0, members, inter)
            got = self._transfers[key] = (total, lat, total - lat)
        return got

    def _tokens(self) -> np.ndarray | None:
        if self.seqlen_sigma <= 0:
            return None
        lay, s = self.layout, self.seqlen_sigma
        f = np.exp(s * self.token_rng.standard_normal((lay.dp, self.microbatches)) - 0.5 * s * s)
        seq = self.cost.seq_length
        return np.clip(np.rint(seq * f), 1, MAX_TOKENS_FACTOR * seq).astype(np.int64)

    def _barrier(self, stages: list[_Stage]) -> None:
        """A global barrier (MegatronApp's ``torch.distributed.barrier()`` before each iteration)."""
        lay = self.layout
        latest = max(float(np.maximum(st.now, st.host).max()) for st in stages)
        steps = 2 * max(1, math.ceil(math.log2(max(lay.world_size, 2))))
        inter = lay.world_size > lay.gpus_per_node
        t = latest + steps * (self.cost.inter_lat_us if inter else self.cost.intra_lat_us)
        for st in stages:
            st.now = np.full_like(st.now, t)
            st.host = np.full_like(st.host, t)

    def run(self) -> Iterator[StageTimes]:
        lay = self.layout
        shape = (lay.dp, lay.tp)
        stages = [_Stage(p, np.full(shape, TRUE_ORIGIN_US), self.rngs[s], self.noise_rngs[s])
                  for s, p in enumerate(self.programs)]
        for it in range(self.iterations):
            fx = Effects(lay, self.faults, it, self.iterations, self.host_overhead_us,
                         hardware=self.hardware_faults, microbatches=self.microbatches,
                         stall_rng=self.stall_rng)
            self.stalled += [(i, it, mb) for i, mb in fx.stalled]
            if fx.seqlen_spread > 0:
                seqlen = self.seqlen_rng.uniform(1 - fx.seqlen_spread, 1 + fx.seqlen_spread,
                                                 (lay.dp, self.microbatches))
            else:
                seqlen = None
            tokens = self._tokens()
            ctx = {
                "tp_f": [fx.tp_factor(s, self.tp_inter[s]) for s in range(lay.pp)],
                "dp_f": [fx.dp_factor(s, self.dp_inter[s]) for s in range(lay.pp)],
                "p2p_f": {k: fx.p2p_factor(k[0], k[1], v) for k, v in self.p2p_inter.items()},
                "scale": None if tokens is None else tokens / self.cost.seq_length,
                "seqlen": seqlen,
                "data": self._data_delays(fx),
            }
            if self.global_barrier:
                self._barrier(stages)
            posts: dict[tuple, np.ndarray] = {}
            host_start = []
            for st in stages:
                n = len(st.prog.events)
                st.start = np.empty((n, *shape))
                st.end = np.empty((n, *shape))
                st.pc = 0
                st.posted = False
                host_start.append((st.host if self.host_ahead else st.now).copy())
            pending = list(range(lay.pp))
            while pending:
                progressed = False
                still = []
                for s in pending:
                    before = stages[s].pc
                    done = self._advance(stages[s], fx, ctx, posts)
                    progressed |= stages[s].pc != before
                    if not done:
                        still.append(s)
                if still and not progressed:
                    raise AssertionError(f"pipeline schedule deadlocked in iteration {it}")
                pending = still
            for s, st in enumerate(stages):
                host_end = np.maximum(st.host, st.now) if self.host_ahead else st.now.copy()
                yield StageTimes(it, s, st.start, st.end, host_start[s], host_end, tokens)

    def _data_delays(self, fx: Effects) -> dict[tuple[int, int], np.ndarray]:
        """Host time of ``next(data_iterator)`` per (stage, microbatch) that differs from the base."""
        out: dict[tuple[int, int], np.ndarray] = {}
        for s, d, t, mb, us in fx.stalls:
            arr = out.get((s, mb))
            if arr is None:
                arr = out[(s, mb)] = self._data_base().copy()
            arr[d, t] += us
        return out

    def _data_base(self) -> np.ndarray:
        base = np.zeros((self.layout.dp, self.layout.tp))
        base[:, 0] = self.data_load_us  # TP rank 0 reads, the others receive the broadcast
        return base

    def _advance(self, st: _Stage, fx: Effects, ctx, posts) -> bool:
        """Run ``st`` until it finishes the iteration (True) or waits on a peer (False)."""
        s = st.prog.stage
        ops = st.prog.ops
        gpu = fx.gpu[s]
        ahead = self.host_ahead
        if ahead:
            cost = self.host_overhead_us + fx.host[s]
        else:
            cost = fx.host[s] if fx.any_host else None
        noisy = self.host_noise_us > 0
        noise_rng = st.noise_rng
        start, end, rng = st.start, st.end, st.rng
        seqlen, scale = ctx["seqlen"], ctx["scale"]
        g, h = st.now, st.host
        shape = g.shape

        def launch() -> np.ndarray:
            """The host launches one op; returns when the GPU starts it."""
            nonlocal h
            c = cost
            if noisy:
                c = self._noise(noise_rng, shape) if c is None else c + self._noise(noise_rng, shape)
            if ahead:
                h = h + c
                return np.maximum(g, h)
            return g + c if c is not None else g

        while st.pc < len(ops):
            op = ops[st.pc]
            code = op[0]
            if code == OP_BEGIN:
                start[op[1]] = np.maximum(g, h) if ahead else g
            elif code == OP_END:
                end[op[1]] = np.maximum(g, h) if ahead else g
            elif code == OP_COMPUTE:
                t0 = launch()
                mb = op[5]
                if scale is None:
                    dur = op[2] * gpu * self._jitter(rng, shape)
                else:
                    f = scale[:, mb][:, None]
                    dur = (op[3] * f + op[4] * f * f) * gpu * self._jitter(rng, shape)
                if seqlen is not None:
                    dur = dur * seqlen[:, mb][:, None]
                g = t0 + dur
                if op[1] >= 0:
                    start[op[1]] = t0
                    end[op[1]] = g
            elif code == OP_OPT:
                if ahead:
                    h = np.maximum(h, g)  # the grad norm's .item()
                t0 = launch()
                g = t0 + op[2] * gpu * self._jitter(rng, shape)
                if not ahead:
                    start[op[1]] = t0
            elif code == OP_TP or code == OP_DP:
                arrive = launch()
                _, ev, kind, nbytes, members, mb = op
                if code == OP_TP:
                    total, lat, per_byte = self._transfer(("tp", s, kind, nbytes), kind, nbytes, members,
                                                          self.tp_inter[s])
                    if scale is not None and mb >= 0:
                        base = (lat + per_byte * scale[:, mb])[:, None]
                    else:
                        base = total[:, None]
                    t = base * ctx["tp_f"][s] * self._jitter(rng, (shape[0], 1))
                    done = arrive.max(axis=1, keepdims=True) + t
                else:
                    total, _, _ = self._transfer(("dp", s, kind, nbytes), kind, nbytes, members,
                                                 self.dp_inter[s])
                    t = total[None, :] * ctx["dp_f"][s] * self._jitter(rng, (1, shape[1]))
                    done = arrive.max(axis=0, keepdims=True) + t
                g = np.broadcast_to(done, shape).copy()
                if ev >= 0:
                    start[ev] = arrive
                    end[ev] = g
            elif code == OP_P2P:
                members = op[2]
                if not st.posted:
                    post = launch()
                    for ev, send, key, index, mb in members:
                        posts[(key, index, send)] = post
                        start[ev] = post
                        if send:
                            peer = key[1]
                            total, lat, per_byte = self._transfer(
                                ("p2p", s, peer), "p2p", self.cost.activation_bytes, 2,
                                self.p2p_inter[(s, peer)])
                            base = total if scale is None else lat + per_byte * scale[:, mb][:, None]
                            t = base * ctx["p2p_f"][(s, peer)] * self._jitter(rng, shape)
                            posts[(key, index, "t")] = t
                    st.posted = True
                if any((key, index, not send) not in posts for _, send, key, index, _ in members):
                    st.now, st.host = g, h
                    return False
                finish = None
                for ev, send, key, index, _ in members:
                    both = np.maximum(posts[(key, index, True)], posts[(key, index, False)])
                    e = both + posts[(key, index, "t")]
                    end[ev] = e
                    finish = e if finish is None else np.maximum(finish, e)
                g = finish
                if ahead:
                    h = np.maximum(h, g)  # req.wait() and torch.cuda.synchronize()
                st.posted = False
            elif code == OP_DATA:
                delay = ctx["data"].get((s, op[1]))
                if delay is None and self.data_load_us > 0:
                    delay = self._data_base()
                if delay is not None:
                    if ahead:
                        h = h + delay
                    else:
                        g = g + delay
            elif code == OP_SYNC:
                if ahead:
                    h = np.maximum(h, g)
            st.pc += 1
        st.now, st.host = g, h
        return True
