"""The discrete-event engine: runs every stage's program on (dp, tp) arrays of true times.

Semantics (true time, microseconds):
- an op starts when the rank reaches it, after a slow host's launch delay;
- compute lasts ``base x jitter x gpu factor x sequence-length factor``;
- a collective ends on every member at ``max(arrivals) + transfer``;
- a p2p message completes at ``max(send posted, recv posted) + transfer``, so a receive never
  ends before the matching send started plus the transfer; a batch of sends and receives
  returns when its last message completes.

Stages advance in turn, each until it waits on a message its peer has not posted yet. Ranks of
one stage share the program, so the cost of an op is a handful of numpy calls whatever ``dp``
and ``tp`` are.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np

from .clock import TRUE_ORIGIN_US
from .cost import CostModel
from .effects import Effects
from .faults import Fault
from .layout import Layout
from .program import (OP_BEGIN, OP_COMPUTE, OP_DP, OP_END, OP_OPT, OP_P2P, OP_TP, StageProgram)

__all__ = ["Engine", "StageTimes"]


@dataclass(slots=True)
class StageTimes:
    """True start and end of every event of one stage in one iteration, shape (events, dp, tp)."""

    iteration: int
    stage: int
    start: np.ndarray
    end: np.ndarray


class _Stage:
    __slots__ = ("prog", "pc", "now", "start", "end", "rng", "posted")

    def __init__(self, prog: StageProgram, now: np.ndarray, rng: np.random.Generator):
        self.prog = prog
        self.pc = 0
        self.now = now
        self.rng = rng
        self.posted = False


class Engine:
    """Runs iterations one after another; ``run()`` yields each stage's times per iteration."""

    def __init__(self, layout: Layout, programs: list[StageProgram], cost: CostModel, *,
                 faults: list[Fault], iterations: int, microbatches: int, jitter_sigma: float,
                 host_overhead_us: float, seed: int, hardware_faults: bool = True):
        self.layout = layout
        self.programs = programs
        self.cost = cost
        self.faults = faults
        self.iterations = iterations
        self.microbatches = microbatches
        self.sigma = jitter_sigma
        self.host_overhead_us = host_overhead_us
        self.hardware_faults = hardware_faults
        seeds = np.random.SeedSequence([seed, 0x51A])
        children = seeds.spawn(layout.pp + 1)
        self.rngs = [np.random.Generator(np.random.PCG64(c)) for c in children[: layout.pp]]
        self.seqlen_rng = np.random.Generator(np.random.PCG64(children[-1]))
        self._node_maps()

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

    def _transfer_base(self, kind: str, nbytes: int, members: int, inter: np.ndarray) -> np.ndarray:
        intra = self.cost.transfer_us(kind, nbytes, members, False)
        inter_t = self.cost.transfer_us(kind, nbytes, members, True)
        return np.where(inter, inter_t, intra)

    def run(self) -> Iterator[StageTimes]:
        lay = self.layout
        shape = (lay.dp, lay.tp)
        stages = [_Stage(p, np.full(shape, TRUE_ORIGIN_US), self.rngs[s])
                  for s, p in enumerate(self.programs)]
        tp_base = [self._transfer_base("all_reduce", self.cost.activation_bytes, lay.tp, i)[:, None]
                   for i in self.tp_inter]
        p2p_base = {k: self._transfer_base("p2p", self.cost.activation_bytes, 2, v)
                    for k, v in self.p2p_inter.items()}
        for it in range(self.iterations):
            fx = Effects(lay, self.faults, it, self.iterations, self.host_overhead_us,
                         hardware=self.hardware_faults)
            if fx.seqlen_spread > 0:
                seqlen = self.seqlen_rng.uniform(1 - fx.seqlen_spread, 1 + fx.seqlen_spread,
                                                 (lay.dp, self.microbatches))
            else:
                seqlen = None
            ctx = {
                "tp_f": [fx.tp_factor(s, self.tp_inter[s]) for s in range(lay.pp)],
                "dp_f": [fx.dp_factor(s, self.dp_inter[s]) for s in range(lay.pp)],
                "p2p_f": {k: fx.p2p_factor(k[0], k[1], v) for k, v in self.p2p_inter.items()},
                "tp_base": tp_base, "p2p_base": p2p_base,
            }
            posts: dict[tuple, np.ndarray] = {}
            for st in stages:
                n = len(st.prog.events)
                st.start = np.empty((n, *shape))
                st.end = np.empty((n, *shape))
                st.pc = 0
                st.posted = False
            pending = list(range(lay.pp))
            while pending:
                progressed = False
                still = []
                for s in pending:
                    before = stages[s].pc
                    done = self._advance(stages[s], fx, seqlen, ctx, posts)
                    progressed |= stages[s].pc != before
                    if not done:
                        still.append(s)
                if still and not progressed:
                    raise AssertionError(f"pipeline schedule deadlocked in iteration {it}")
                pending = still
            for s, st in enumerate(stages):
                yield StageTimes(it, s, st.start, st.end)

    def _advance(self, st: _Stage, fx: Effects, seqlen, ctx, posts) -> bool:
        """Run ``st`` until it finishes the iteration (True) or waits on a peer (False)."""
        s = st.prog.stage
        ops = st.prog.ops
        gpu, host = fx.gpu[s], fx.host[s]
        any_host = fx.any_host
        start, end, rng = st.start, st.end, st.rng
        now = st.now
        shape = now.shape
        while st.pc < len(ops):
            op = ops[st.pc]
            code = op[0]
            if code == OP_BEGIN:
                start[op[1]] = now
            elif code == OP_END:
                end[op[1]] = now
            elif code == OP_COMPUTE:
                t0 = now + host if any_host else now
                dur = op[2] * gpu * self._jitter(rng, shape)
                if seqlen is not None:
                    dur = dur * seqlen[:, op[3]][:, None]
                now = t0 + dur
                if op[1] >= 0:
                    start[op[1]] = t0
                    end[op[1]] = now
            elif code == OP_OPT:
                t0 = now + host if any_host else now
                now = t0 + op[2] * gpu * self._jitter(rng, shape)
                start[op[1]] = t0
            elif code == OP_TP or code == OP_DP:
                arrive = now + host if any_host else now
                if code == OP_TP:
                    base = ctx["tp_base"][s] if op[2] == "all_reduce" else None
                    t = base * ctx["tp_f"][s] * self._jitter(rng, (shape[0], 1))
                    done = arrive.max(axis=1, keepdims=True) + t
                else:
                    inter = self.dp_inter[s]
                    base = self._transfer_base(op[2], op[3], op[4], inter)[None, :]
                    t = base * ctx["dp_f"][s] * self._jitter(rng, (1, shape[1]))
                    done = arrive.max(axis=0, keepdims=True) + t
                start[op[1]] = arrive
                now = np.broadcast_to(done, shape).copy()
                end[op[1]] = now
            elif code == OP_P2P:
                members = op[2]
                if not st.posted:
                    post = now + host if any_host else now
                    for ev, send, key, index in members:
                        posts[(key, index, send)] = post
                        start[ev] = post
                        if send:
                            peer = key[1]
                            t = (ctx["p2p_base"][(s, peer)] * ctx["p2p_f"][(s, peer)]
                                 * self._jitter(rng, shape))
                            posts[(key, index, "t")] = t
                    st.posted = True
                    st.now = now
                if any((key, index, not send) not in posts for _, send, key, index in members):
                    st.now = now
                    return False
                finish = None
                for ev, send, key, index in members:
                    both = np.maximum(posts[(key, index, True)], posts[(key, index, False)])
                    e = both + posts[(key, index, "t")]
                    end[ev] = e
                    finish = e if finish is None else np.maximum(finish, e)
                now = finish
                st.posted = False
            st.pc += 1
        st.now = now
        return True
