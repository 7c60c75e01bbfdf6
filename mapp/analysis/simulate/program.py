"""Lowering of a stage's schedule into timed ops and the events they emit.

Every rank of a pipeline stage runs the same program, so one program per stage serves all of
its ``dp x tp`` ranks; the engine runs it on arrays of that shape. The events it emits in
trace format v1 (what mapp's capture hooks record):

- ``iteration`` (cat iteration): one per iteration.
- ``forward`` / ``backward`` (cat compute, tid compute): one step of one (microbatch, chunk),
  spanning its layers' compute and their TP all-reduces (and, on the ranks that read data, the
  batch fetch: megatron-core's ``get_batch`` runs inside the forward step).
- with ``per_layer``: ``attention`` and ``mlp`` (forward) and ``mlp_backward`` and
  ``attention_backward`` (cat compute, args ``layer`` = global layer index from 0): the pure
  compute kernels of one layer, nested inside the step; with a vocabulary, ``output_layer`` and
  ``output_layer_backward`` on the last stage (no ``layer``).
- ``all_reduce`` (cat collective, tid comm, group tp): after attention and after MLP in the
  forward, and for the input gradients of both in the backward; with a vocabulary also after
  the embedding (first stage), the cross-entropy's three (last stage, forward) and the output
  layer's input gradient (last stage, backward).
- ``send`` / ``recv`` (cat p2p, tid comm): activations and gradients between stages, with
  ``microbatch`` and ``chunk`` (on a send the chunk that produced the tensor, on a receive the
  chunk that consumes it: they differ where interleaving wraps from the last stage to the first).
  Sends and receives of one megatron-core batched call share a start time.
- ``reduce_scatter`` (group dp) of gradients per model chunk, ``optimizer_step`` (cat
  optimizer), ``all_gather`` (group dp) of parameters per chunk; with
  ``distributed_optimizer=False`` one gradient ``all_reduce`` per chunk instead.

Calls that mapp's hooks do not record run untraced: the TP broadcast of the batch (with
``host_ahead``), and, with a vocabulary, the loss function's NaN check (a host sync).

With ``tracer="megatronapp"`` the same program also carries the records the original MegaScan
tracer writes (B/E pairs in ``ma_order``), and the ops its tracing adds to the job: a TP
barrier before every steady-state forward and inside every ``MLP.forward``, a
``torch.cuda.synchronize()`` in its ``allreduce`` scope and at the end of each iteration (and a
global barrier before each, which the engine applies); with a vocabulary, its fork's
``pretrain_gpt`` also all-reduces the reported loss over DP in every microbatch (untraced). What it records, from its source
(OpenSQZ/MegatronApp ``megatron/training/trace.py``, ``pipeline_parallel/schedules.py`` of its
tracing branches, ``tensor_parallel/mappings.py``, ``training/training.py``):

- 1F1B steps ``forward-warmup``/``forward``/``backward``/``backward-cooldown`` with
  ``micro_batch_index``; with pp=1 (``forward_backward_no_pipelining``) no step records at all;
- every p2p call's scope, in megatron-core's order: ``recv-warmup``, ``send-warmup``,
  ``recv-extra``, ``exchange-next``, ``exchange-prev``, ``send-extra``, ``recv-cooldown``,
  ``send-cooldown``; ``expect`` on the first five, ``group`` (the peer) on those too, ``data``
  (bytes sent + received) on all, ``bandwidth`` after ``data``; ``data``/``group``/``bandwidth``
  null where the call moved nothing (the first and last stage's ends of the pipeline);
- ``_reduce`` for the forward's TP all-reduces (and the embedding's) with ``expect: "_reduce"``
  and ``group`` = the TP x DP group minus the rank (null when TP is 1); the backward's TP
  all-reduces are ``torch.distributed`` calls in ``tensor_parallel.layers`` and are not recorded;
- ``loss`` on the last stage inside each forward;
- ``allreduce`` (no attributes) around the gradient reduction, ``optimizer`` (no attributes)
  around the optimizer step, which includes the distributed optimizer's parameter all-gather;
- with ``per_layer`` (its ``full`` granularity): ``decoder`` > ``transformer_layer`` >
  ``_forward_attention`` > ``attention``, and ``_forward_mlp`` > ``mlp`` > ``MLP.forward``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .cost import CostModel
from .schedule import Batch, Compute, Programs

__all__ = ["EventSpec", "StageProgram", "lower", "OP_BEGIN", "OP_END", "OP_COMPUTE",
           "OP_TP", "OP_DP", "OP_OPT", "OP_P2P", "OP_DATA", "OP_SYNC", "DATA", "TRACERS"]

OP_BEGIN, OP_END, OP_COMPUTE, OP_TP, OP_DP, OP_OPT, OP_P2P, OP_DATA, OP_SYNC = range(9)
TRACERS = ("mapp", "megatronapp")

# tokens the writer replaces with each rank's own values
TOK_PID, TOK_TPG, TOK_DPG, TOK_NEXT, TOK_PREV = "@PID@", "@TPG@", "@DPG@", "@NXT@", "@PRV@"
TOK_TPO, TOK_DPO = "@TPO@", "@DPO@"  # "other members" lists (MegatronApp's group attribute)
TOK_PLO = "@PLO@"  # the other members of the rank's TP x DP group (MegatronApp's TP tagging)

DATA = object()
"""Placeholder in ``EventSpec.ma_attrs`` for the ``data`` value (bytes), filled per rank."""

_MA_EXPECT = {"recv-warmup": "send-warmup", "send-warmup": "recv-warmup", "recv-extra": "send-warmup",
              "exchange-next": "exchange-prev", "exchange-prev": "exchange-next"}
_MA_WITH_MICROBATCH = {"recv-warmup", "send-warmup", "recv-extra", "send-extra", "recv-cooldown",
                       "send-cooldown"}


@dataclass(slots=True)
class EventSpec:
    """One event a stage's ranks emit each iteration (times filled in per rank)."""

    name: str
    cat: str
    tid: str
    args: list[tuple[str, object]]
    seq: tuple[int, int] | None = None  # (calls before it this iteration, calls per iteration)
    v1: bool = True
    ma_name: str | None = None
    ma_attrs: list[tuple[str, object]] = field(default_factory=list)
    scale_mb: int = -1
    """Microbatch whose token count sizes the ``scaled`` arg (-1: fixed size)."""
    per_token: int = 0
    """That arg per token of the microbatch's sequence, when ``scale_mb`` is set."""
    scaled: str = "bytes"
    """The arg ``scale_mb`` sizes: a transfer's ``bytes``, or a layer span's ``tokens`` (sequence
    x micro-batch, as mapp's capture records them where lengths vary)."""
    ma_data: list[tuple[int, int]] | None = None
    """MegatronApp ``data``: (bytes at ``seq_length`` tokens, microbatch or -1) per tensor moved."""


@dataclass(slots=True)
class StageProgram:
    stage: int
    ops: list[tuple]
    events: list[EventSpec]
    ma_order: list[tuple[str, int]]  # MegatronApp B/E record order: ("B"|"E", event index)
    tp_calls: int = 0
    dp_calls: int = 0


def lower(programs: Programs, *, pp: int, vpp: int, tp: int, dp: int, cost: CostModel,
          per_layer: bool, distributed_optimizer: bool, tracer: str = "mapp",
          vocab_size: int = 0, host_ahead: bool = False) -> list[StageProgram]:
    """Every stage's ops and events for one iteration (see the module doc)."""
    job = _Job(pp=pp, vpp=vpp, tp=tp, dp=dp, cost=cost, per_layer=per_layer,
               distributed_optimizer=distributed_optimizer, ma_tracer=tracer == "megatronapp",
               vocab_size=vocab_size, host_ahead=host_ahead)
    numbers = _number_sends(programs)
    return [_StageLowering(job, s, numbers).lower(steps) for s, steps in enumerate(programs.stages)]


@dataclass(frozen=True, slots=True)
class _Job:
    """What lowering needs of the job: its layout, cost model and what is traced."""

    pp: int
    vpp: int
    tp: int
    dp: int
    cost: CostModel
    per_layer: bool
    distributed_optimizer: bool
    ma_tracer: bool
    """The MegatronApp tracer's records and the ops its tracing adds."""
    vocab_size: int
    host_ahead: bool


@dataclass(frozen=True, slots=True)
class _SendNumbers:
    """p2p seq: the sender's count of sends to that peer. With pp=2 the two directions between a
    pair interleave differently on the two sides (megatron-core runs them on two communicators),
    so the receive takes its message's number to keep (src, dst, seq) exact."""

    seq: dict[tuple, int]
    """(src, dst, direction, index) -> the message's number among src's sends to dst."""
    per_pair: dict[tuple[int, int], int]
    """(src, dst) -> sends per iteration."""


def _number_sends(programs: Programs) -> _SendNumbers:
    seq: dict[tuple, int] = {}
    per_pair: dict[tuple[int, int], int] = {}
    for s, steps in enumerate(programs.stages):
        for step in steps:
            if isinstance(step, Batch):
                for op in step.ops:
                    if op.send:
                        src, dst = s, op.peer_stage
                        n = per_pair.get((src, dst), 0)
                        per_pair[(src, dst)] = n + 1
                        seq[(src, dst, op.direction, op.index)] = n
    return _SendNumbers(seq, per_pair)


class _StageLowering:
    """One stage's program, built step by step: ``ops`` (what the engine runs), ``events`` (what
    they emit) and ``ma`` (the MegatronApp tracer's B/E record order)."""

    def __init__(self, job: _Job, stage: int, numbers: _SendNumbers):
        self.job, self.s, self.numbers = job, stage, numbers
        self.ops: list[tuple] = []
        self.events: list[EventSpec] = []
        self.ma: list[tuple[str, int]] = []
        self.counts = {"tp": 0, "dp": 0}

    def lower(self, steps: list) -> StageProgram:
        """The iteration: the schedule's steps, the gradient sync and the optimizer step."""
        it_ev = self.event(EventSpec("iteration", "iteration", "compute", []))
        self.ops.append((OP_BEGIN, it_ev))
        for step in steps:
            if isinstance(step, Compute):
                self.compute_step(step)
            else:
                self.p2p_batch(step)
        self.gradient_sync()
        self.optimizer_step()
        if self.job.ma_tracer:
            self.ops.append((OP_SYNC,))  # iteration_end: record E, then torch.cuda.synchronize()
        self.ops.append((OP_END, it_ev))
        self._number_collectives()
        return StageProgram(self.s, self.ops, self.events, self.ma, self.counts["tp"], self.counts["dp"])

    # -- events and their B/E records ---------------------------------------------------------
    def event(self, spec: EventSpec) -> int:
        self.events.append(spec)
        return len(self.events) - 1

    def begin(self, ev: int) -> None:
        self.ops.append((OP_BEGIN, ev))
        if self.events[ev].ma_name:
            self.ma.append(("B", ev))

    def end(self, ev: int) -> None:
        self.ops.append((OP_END, ev))
        if self.events[ev].ma_name:
            self.ma.append(("E", ev))

    def ma_scope(self, name: str, attrs: list | None = None) -> int:
        """A record only the MegatronApp tracer writes; ``begin`` it, ``end`` it later."""
        ev = self.event(EventSpec(name, "compute", "compute", [], v1=False, ma_name=name, ma_attrs=attrs or []))
        self.begin(ev)
        return ev

    # -- ops ----------------------------------------------------------------------------------
    def collective(self, group: str, name: str, nbytes: int, it_args, ma_name: str | None, *,
                   mb: int = -1, traced: bool = True) -> None:
        """One collective; ``mb`` >= 0 sizes it by that microbatch's tokens."""
        job = self.job
        members = job.tp if group == "tp" else job.dp
        code = OP_TP if group == "tp" else OP_DP
        if not traced:
            self.ops.append((code, -1, name, nbytes, members, mb))
            return
        n = self.counts[group]
        self.counts[group] = n + 1
        toks = (TOK_TPG, TOK_PLO) if group == "tp" else (TOK_DPG, TOK_DPO)
        spec = EventSpec(name, "collective", "comm",
                         it_args + [("group", group), ("group_ranks", toks[0])], seq=(n, 0),
                         ma_name=ma_name if job.ma_tracer else None,
                         ma_attrs=[("expect", ma_name), ("group", toks[1])])
        spec.args.append(("bytes", nbytes))
        if mb >= 0:
            spec.scale_mb, spec.per_token = mb, nbytes // job.cost.seq_length
        ev = self.event(spec)
        self.begin(ev)
        self.ops.append((code, ev, name, nbytes, members, mb))
        self.end(ev)

    def tp_reduce(self, nbytes: int, it_args, mb: int, *, ma_traced: bool) -> None:
        """A TP all-reduce: MegatronApp records those that go through ``_reduce``."""
        if self.job.tp > 1:
            self.collective("tp", "all_reduce", nbytes, it_args, "_reduce" if ma_traced else None, mb=mb)
        elif ma_traced and self.job.ma_tracer:  # TP=1: ``_reduce`` returns at once, group stays null
            ev = self.ma_scope("_reduce", [("expect", "_reduce"), ("group", None)])
            self.end(ev)

    def tp_barrier(self) -> None:
        """MegatronApp's ``torch.distributed.barrier(group=tp)``: a tiny all-reduce, host waits."""
        if self.job.tp > 1:
            self.ops.append((OP_TP, -1, "barrier", 4, self.job.tp, -1))
        self.ops.append((OP_SYNC,))

    def compute(self, name: str, total_us: float, lin_us: float, quad_us: float, mb: int, chunk: int,
                layer: int | None) -> None:
        """A compute op: ``total_us`` at ``seq_length`` tokens, ``lin_us x f + quad_us x f^2`` at
        ``f x seq_length``."""
        if self.job.per_layer:
            args = [("microbatch", mb), ("chunk", chunk)]
            if layer is not None:
                args.append(("layer", layer))
            ev = self.event(EventSpec(name, "compute", "compute", args, scale_mb=mb, scaled="tokens",
                                      per_token=self.job.cost.micro_batch_size))
            self.begin(ev)
            self.ops.append((OP_COMPUTE, ev, total_us, lin_us, quad_us, mb))
            self.end(ev)
        else:
            self.ops.append((OP_COMPUTE, -1, total_us, lin_us, quad_us, mb))

    # -- the schedule's steps -----------------------------------------------------------------
    def compute_step(self, step: Compute) -> None:
        """A forward or backward step of one (microbatch, chunk)."""
        job = self.job
        mb, c = step.microbatch, step.chunk
        kind = "backward" if step.backward else "forward"
        ma_name = {"warmup": "forward-warmup", "cooldown": "backward-cooldown"}.get(step.phase, kind)
        if job.ma_tracer and kind == "forward" and step.phase == "steady" and job.pp > 1:
            self.tp_barrier()  # the original's barrier before each steady-state forward
        ev = self.event(EventSpec(kind, "compute", "compute", [("microbatch", mb), ("chunk", c)],
                                  ma_name=ma_name if job.ma_tracer and job.pp > 1 else None,
                                  ma_attrs=[("micro_batch_index", mb)]))
        self.begin(ev)
        (self.backward_body if step.backward else self.forward_body)(mb, c)
        self.end(ev)

    def forward_body(self, mb: int, c: int) -> None:
        job, cost, s = self.job, self.job.cost, self.s
        mb_args = [("microbatch", mb), ("chunk", c)]
        first_virtual, last_virtual = s == 0 and c == 0, s == job.pp - 1 and c == job.vpp - 1
        if first_virtual or last_virtual:
            self.ops.append((OP_DATA, mb))  # next(data_iterator) on TP rank 0, inside the step
            if job.host_ahead and job.tp > 1:  # ... broadcast to the TP group (tokens, positions, ...)
                self.collective("tp", "broadcast", 3 * 8 * cost.token_values, [], None, mb=mb, traced=False)
        if first_virtual and job.vocab_size and job.tp > 1:  # vocab-parallel embedding
            self.collective("tp", "all_reduce", cost.activation_bytes, list(mb_args), "_reduce", mb=mb)
        dec = self.ma_scope("decoder") if job.ma_tracer and job.per_layer else -1
        for layer in self._layers(c):
            self.forward_layer(layer, mb, c, mb_args)
        if dec >= 0:
            self.end(dec)
        if last_virtual:
            self.loss(mb, c, mb_args)

    def forward_layer(self, layer: int, mb: int, c: int, mb_args: list) -> None:
        """One transformer layer's forward: attention and MLP, each followed by its TP all-reduce."""
        job, cost = self.job, self.job.cost
        act = cost.activation_bytes
        full = job.ma_tracer and job.per_layer
        if full:
            tl, fa, at = self.ma_scope("transformer_layer"), self.ma_scope("_forward_attention"), self.ma_scope("attention")
        self.compute("attention", cost.attention_forward_us, cost.attention_linear_us, cost.attention_quadratic_us,
                     mb, c, layer)
        self.tp_reduce(act, list(mb_args), mb, ma_traced=True)
        if full:
            self.end(at), self.end(fa)
            fm, ml, mf = self.ma_scope("_forward_mlp"), self.ma_scope("mlp"), self.ma_scope("MLP.forward")
        if job.ma_tracer:
            self.tp_barrier()  # MLP.forward's barrier when tracing
        mlp_f = cost.mlp_forward_us
        self.compute("mlp", mlp_f, mlp_f, 0.0, mb, c, layer)
        self.tp_reduce(act, list(mb_args), mb, ma_traced=True)
        if full:
            self.end(mf), self.end(ml), self.end(fm), self.end(tl)

    def loss(self, mb: int, c: int, mb_args: list) -> None:
        """The last virtual stage: output layer, vocab-parallel cross-entropy and the loss."""
        job, cost = self.job, self.job.cost
        if job.vocab_size:
            out_f = cost.output_layer_forward_us(job.vocab_size)
            self.compute("output_layer", out_f, out_f, 0.0, mb, c, None)
            if job.tp > 1:  # vocab-parallel cross-entropy: max, sum of exp, target logit
                for _ in range(3):
                    self.collective("tp", "all_reduce", 4 * cost.token_values, list(mb_args), None, mb=mb)
        loss = self.ma_scope("loss") if job.ma_tracer else -1
        if job.vocab_size:
            self.ops.append((OP_SYNC,))  # the loss function's NaN check (``.item()``)
            if job.dp > 1 and job.ma_tracer:
                # the original's fork (megatron-core 0.12) all-reduces the reported loss
                # over DP in every microbatch's loss function; later pretrain_gpt
                # versions reduce it once per iteration, after the optimizer step
                self.collective("dp", "all_reduce", 8, [], None, traced=False)
        if loss >= 0:
            self.end(loss)

    def backward_body(self, mb: int, c: int) -> None:
        job, cost = self.job, self.job.cost
        act = cost.activation_bytes
        mb_args = [("microbatch", mb), ("chunk", c)]
        if self.s == job.pp - 1 and c == job.vpp - 1 and job.vocab_size:
            out_f = cost.output_layer_forward_us(job.vocab_size)
            self.compute("output_layer_backward", 2 * out_f, 2 * out_f, 0.0, mb, c, None)
            if job.tp > 1:
                self.collective("tp", "all_reduce", act, list(mb_args), None, mb=mb)
        mlp_f = cost.mlp_forward_us
        for layer in reversed(self._layers(c)):
            self.compute("mlp_backward", 2 * mlp_f, 2 * mlp_f, 0.0, mb, c, layer)
            self.tp_reduce(act, list(mb_args), mb, ma_traced=False)
            self.compute("attention_backward", 2 * cost.attention_forward_us, 2 * cost.attention_linear_us,
                         2 * cost.attention_quadratic_us, mb, c, layer)
            self.tp_reduce(act, list(mb_args), mb, ma_traced=False)

    def _layers(self, chunk: int) -> range:
        """The global indices of this stage's layers in model chunk ``chunk``."""
        lpc = self.job.cost.layers_per_chunk
        first = (chunk * self.job.pp + self.s) * lpc
        return range(first, first + lpc)

    def p2p_batch(self, step: Batch) -> None:
        """One megatron-core batched p2p call: its MegatronApp scope and its sends and receives."""
        job, s = self.job, self.s
        pp, act = job.pp, job.cost.activation_bytes
        label = step.label
        ma_attrs: list[tuple[str, object]] = []
        if step.ma_microbatch is not None and label in _MA_WITH_MICROBATCH:
            ma_attrs.append(("micro_batch_index", step.ma_microbatch))
        if label in _MA_EXPECT:
            ma_attrs.append(("expect", _MA_EXPECT[label]))
        ma_attrs.append(("data", DATA))
        if label in _MA_EXPECT:
            peers = {TOK_NEXT if op.peer_stage == (s + 1) % pp else TOK_PREV for op in step.ops}
            ma_attrs.append(("group", f"[{','.join(sorted(peers))}]" if peers else None))
        bev = self.event(EventSpec(label, "p2p", "comm", [], v1=False,
                                   ma_name=label if job.ma_tracer else None, ma_attrs=ma_attrs,
                                   ma_data=[(act, op.microbatch) for op in step.ops] or None))
        self.begin(bev)
        members = []
        for op in step.ops:
            peer_tok = TOK_NEXT if op.peer_stage == (s + 1) % pp else TOK_PREV
            src, dst = (s, op.peer_stage) if op.send else (op.peer_stage, s)
            n = self.numbers.seq[(src, dst, op.direction, op.index)]
            spec = EventSpec(
                "send" if op.send else "recv", "p2p", "comm",
                [("peer", peer_tok), ("seq", None), ("bytes", act),
                 ("microbatch", op.microbatch), ("chunk", op.chunk)],
                seq=(n, self.numbers.per_pair[(src, dst)]), scale_mb=op.microbatch,
                per_token=act // job.cost.seq_length)
            ev = self.event(spec)
            members.append((ev, op.send, (src, dst, op.direction), op.index, op.microbatch))
        if members:
            self.ops.append((OP_P2P, bev, members))
        self.end(bev)

    # -- after the schedule ---------------------------------------------------------------------
    def gradient_sync(self) -> None:
        """Data-parallel gradient sync: a reduce-scatter (or all-reduce) per model chunk."""
        job = self.job
        wrap = job.ma_tracer and job.pp > 1  # forward_backward_no_pipelining has no allreduce scope
        gs = self.event(EventSpec("allreduce", "other", "comm", [], v1=False,
                                  ma_name="allreduce" if wrap else None))
        self.begin(gs)
        if job.dp > 1:
            for c in range(job.vpp):
                op = "reduce_scatter" if job.distributed_optimizer else "all_reduce"
                self.collective("dp", op, job.cost.grad_bytes, [("chunk", c)], None)
        if wrap:
            self.ops.append((OP_SYNC,))  # the original's torch.cuda.synchronize() in the scope
        self.end(gs)

    def optimizer_step(self) -> None:
        """The optimizer step, and the distributed optimizer's parameter all-gather per chunk."""
        job = self.job
        opt = self.event(EventSpec("optimizer_step", "optimizer", "compute", [],
                                   ma_name="optimizer" if job.ma_tracer else None))
        self.begin(opt)
        self.ops.append((OP_OPT, opt, job.cost.optimizer_us(job.vpp)))
        if not job.ma_tracer:  # v1: the span ends with the step's compute (kept as it always was)
            self.end(opt)
        if job.dp > 1 and job.distributed_optimizer:  # the distributed optimizer's parameter all-gather
            for c in range(job.vpp):
                self.collective("dp", "all_gather", job.cost.grad_bytes, [("chunk", c)], None)
        if job.ma_tracer:  # MegatronApp's scope wraps optimizer.step(), which runs the all-gather
            self.end(opt)

    def _number_collectives(self) -> None:
        """Per-iteration counts make seq continue across iterations."""
        for spec in self.events:
            if spec.seq is not None and spec.cat == "collective":
                spec.seq = (spec.seq[0], self.counts[dict(spec.args)["group"]])
