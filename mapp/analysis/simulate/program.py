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
    """Microbatch whose token count sizes the ``bytes`` arg (-1: fixed size)."""
    per_token: int = 0
    """Bytes per token of the ``bytes`` arg, when ``scale_mb`` is set."""
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
    lpc = cost.layers_per_chunk
    att_f, att_lin, att_quad = cost.attention_forward_us, cost.attention_linear_us, cost.attention_quadratic_us
    mlp_f = cost.mlp_forward_us
    out_f = cost.output_layer_forward_us(vocab_size)
    act = cost.activation_bytes
    seq_len = cost.seq_length
    ma_tracer = tracer == "megatronapp"
    batch_label: dict[tuple, str] = {}
    # p2p seq: the sender's count of sends to that peer. With pp=2 the two directions between
    # a pair interleave differently on the two sides (megatron-core runs them on two
    # communicators), so the receive takes its message's number to keep (src, dst, seq) exact.
    send_seq: dict[tuple, int] = {}
    sends_per_pair: dict[tuple[int, int], int] = {}
    for s, steps in enumerate(programs.stages):
        for step in steps:
            if isinstance(step, Batch):
                for op in step.ops:
                    src, dst = (s, op.peer_stage) if op.send else (op.peer_stage, s)
                    batch_label[(src, dst, op.direction, op.index, op.send)] = step.label
                    if op.send:
                        n = sends_per_pair.get((src, dst), 0)
                        sends_per_pair[(src, dst)] = n + 1
                        send_seq[(src, dst, op.direction, op.index)] = n

    out = []
    for s, steps in enumerate(programs.stages):
        ops: list[tuple] = []
        events: list[EventSpec] = []
        ma: list[tuple[str, int]] = []
        counts = {"tp": 0, "dp": 0}

        def event(spec: EventSpec) -> int:
            events.append(spec)
            return len(events) - 1

        def begin(ev: int) -> None:
            ops.append((OP_BEGIN, ev))
            if events[ev].ma_name:
                ma.append(("B", ev))

        def end(ev: int) -> None:
            ops.append((OP_END, ev))
            if events[ev].ma_name:
                ma.append(("E", ev))

        def ma_scope(name: str, attrs: list | None = None) -> int:
            """A record only the MegatronApp tracer writes; ``begin`` it, ``end`` it later."""
            ev = event(EventSpec(name, "compute", "compute", [], v1=False, ma_name=name,
                                 ma_attrs=attrs or []))
            begin(ev)
            return ev

        def collective(group: str, name: str, nbytes: int, it_args, ma_name: str | None, *,
                       mb: int = -1, traced: bool = True) -> None:
            """One collective; ``mb`` >= 0 sizes it by that microbatch's tokens."""
            members = tp if group == "tp" else dp
            code = OP_TP if group == "tp" else OP_DP
            if not traced:
                ops.append((code, -1, name, nbytes, members, mb))
                return
            n = counts[group]
            counts[group] = n + 1
            toks = (TOK_TPG, TOK_PLO) if group == "tp" else (TOK_DPG, TOK_DPO)
            spec = EventSpec(name, "collective", "comm",
                             it_args + [("group", group), ("group_ranks", toks[0])], seq=(n, 0),
                             ma_name=ma_name if ma_tracer else None,
                             ma_attrs=[("expect", ma_name), ("group", toks[1])])
            spec.args.append(("bytes", nbytes))
            if mb >= 0:
                spec.scale_mb, spec.per_token = mb, nbytes // seq_len
            ev = event(spec)
            begin(ev)
            ops.append((code, ev, name, nbytes, members, mb))
            end(ev)

        def tp_reduce(nbytes: int, it_args, mb: int, *, ma_traced: bool) -> None:
            """A TP all-reduce: MegatronApp records those that go through ``_reduce``."""
            if tp > 1:
                collective("tp", "all_reduce", nbytes, it_args, "_reduce" if ma_traced else None, mb=mb)
            elif ma_traced and ma_tracer:  # TP=1: ``_reduce`` returns at once, group stays null
                ev = ma_scope("_reduce", [("expect", "_reduce"), ("group", None)])
                end(ev)

        def tp_barrier() -> None:
            """MegatronApp's ``torch.distributed.barrier(group=tp)``: a tiny all-reduce, host waits."""
            if tp > 1:
                ops.append((OP_TP, -1, "barrier", 4, tp, -1))
            ops.append((OP_SYNC,))

        def compute(name: str, total_us: float, lin_us: float, quad_us: float, mb: int, chunk: int,
                    layer: int | None) -> None:
            """A compute op: ``total_us`` at ``seq_length`` tokens, ``lin_us x f + quad_us x f^2`` at
            ``f x seq_length``."""
            if per_layer:
                args = [("microbatch", mb), ("chunk", chunk)]
                if layer is not None:
                    args.append(("layer", layer))
                ev = event(EventSpec(name, "compute", "compute", args))
                begin(ev)
                ops.append((OP_COMPUTE, ev, total_us, lin_us, quad_us, mb))
                end(ev)
            else:
                ops.append((OP_COMPUTE, -1, total_us, lin_us, quad_us, mb))

        def forward_body(mb: int, c: int) -> None:
            mb_args = [("microbatch", mb), ("chunk", c)]
            first_virtual, last_virtual = s == 0 and c == 0, s == pp - 1 and c == vpp - 1
            if first_virtual or last_virtual:
                ops.append((OP_DATA, mb))  # next(data_iterator) on TP rank 0, inside the step
                if host_ahead and tp > 1:  # ... broadcast to the TP group (tokens, positions, ...)
                    collective("tp", "broadcast", 3 * 8 * cost.token_values, [], None, mb=mb, traced=False)
            if first_virtual and vocab_size and tp > 1:  # vocab-parallel embedding
                collective("tp", "all_reduce", act, list(mb_args), "_reduce", mb=mb)
            dec = ma_scope("decoder") if ma_tracer and per_layer else -1
            first_layer = (c * pp + s) * lpc
            for layer in range(first_layer, first_layer + lpc):
                full = ma_tracer and per_layer
                if full:
                    tl, fa, at = ma_scope("transformer_layer"), ma_scope("_forward_attention"), ma_scope("attention")
                compute("attention", att_f, att_lin, att_quad, mb, c, layer)
                tp_reduce(act, list(mb_args), mb, ma_traced=True)
                if full:
                    end(at), end(fa)
                    fm, ml, mf = ma_scope("_forward_mlp"), ma_scope("mlp"), ma_scope("MLP.forward")
                if ma_tracer:
                    tp_barrier()  # MLP.forward's barrier when tracing
                compute("mlp", mlp_f, mlp_f, 0.0, mb, c, layer)
                tp_reduce(act, list(mb_args), mb, ma_traced=True)
                if full:
                    end(mf), end(ml), end(fm), end(tl)
            if dec >= 0:
                end(dec)
            if last_virtual:
                if vocab_size:
                    compute("output_layer", out_f, out_f, 0.0, mb, c, None)
                    if tp > 1:  # vocab-parallel cross-entropy: max, sum of exp, target logit
                        for _ in range(3):
                            collective("tp", "all_reduce", 4 * cost.token_values, list(mb_args), None, mb=mb)
                loss = ma_scope("loss") if ma_tracer else -1
                if vocab_size:
                    ops.append((OP_SYNC,))  # the loss function's NaN check (``.item()``)
                    if dp > 1 and ma_tracer:
                        # the original's fork (megatron-core 0.12) all-reduces the reported loss
                        # over DP in every microbatch's loss function; later pretrain_gpt
                        # versions reduce it once per iteration, after the optimizer step
                        collective("dp", "all_reduce", 8, [], None, traced=False)
                if loss >= 0:
                    end(loss)

        def backward_body(mb: int, c: int) -> None:
            mb_args = [("microbatch", mb), ("chunk", c)]
            if s == pp - 1 and c == vpp - 1 and vocab_size:
                compute("output_layer_backward", 2 * out_f, 2 * out_f, 0.0, mb, c, None)
                if tp > 1:
                    collective("tp", "all_reduce", act, list(mb_args), None, mb=mb)
            first_layer = (c * pp + s) * lpc
            for layer in reversed(range(first_layer, first_layer + lpc)):
                compute("mlp_backward", 2 * mlp_f, 2 * mlp_f, 0.0, mb, c, layer)
                tp_reduce(act, list(mb_args), mb, ma_traced=False)
                compute("attention_backward", 2 * att_f, 2 * att_lin, 2 * att_quad, mb, c, layer)
                tp_reduce(act, list(mb_args), mb, ma_traced=False)

        it_ev = event(EventSpec("iteration", "iteration", "compute", []))
        ops.append((OP_BEGIN, it_ev))
        steady_forwards = 0
        for step in steps:
            if isinstance(step, Compute):
                mb, c = step.microbatch, step.chunk
                kind = "backward" if step.backward else "forward"
                ma_name = {"warmup": "forward-warmup", "cooldown": "backward-cooldown"}.get(step.phase, kind)
                if ma_tracer and kind == "forward" and step.phase == "steady" and pp > 1:
                    tp_barrier()  # the original's barrier before each steady-state forward
                    steady_forwards += 1
                ev = event(EventSpec(kind, "compute", "compute", [("microbatch", mb), ("chunk", c)],
                                     ma_name=ma_name if ma_tracer and pp > 1 else None,
                                     ma_attrs=[("micro_batch_index", mb)]))
                begin(ev)
                (backward_body if step.backward else forward_body)(mb, c)
                end(ev)
                continue
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
            bev = event(EventSpec(label, "p2p", "comm", [], v1=False,
                                  ma_name=label if ma_tracer else None, ma_attrs=ma_attrs,
                                  ma_data=[(act, op.microbatch) for op in step.ops] or None))
            begin(bev)
            members = []
            for op in step.ops:
                peer_tok = TOK_NEXT if op.peer_stage == (s + 1) % pp else TOK_PREV
                src, dst = (s, op.peer_stage) if op.send else (op.peer_stage, s)
                n = send_seq[(src, dst, op.direction, op.index)]
                spec = EventSpec(
                    "send" if op.send else "recv", "p2p", "comm",
                    [("peer", peer_tok), ("seq", None), ("bytes", act),
                     ("microbatch", op.microbatch), ("chunk", op.chunk)],
                    seq=(n, sends_per_pair[(src, dst)]), scale_mb=op.microbatch,
                    per_token=act // seq_len)
                ev = event(spec)
                members.append((ev, op.send, (src, dst, op.direction), op.index, op.microbatch))
            if members:
                ops.append((OP_P2P, bev, members))
            end(bev)
        # data-parallel gradient sync, optimizer step, parameter gather
        grad = cost.grad_bytes
        wrap = ma_tracer and pp > 1  # forward_backward_no_pipelining has no allreduce scope
        gs = event(EventSpec("allreduce", "other", "comm", [], v1=False,
                             ma_name="allreduce" if wrap else None))
        begin(gs)
        if dp > 1:
            for c in range(vpp):
                if distributed_optimizer:
                    collective("dp", "reduce_scatter", grad, [("chunk", c)], None)
                else:
                    collective("dp", "all_reduce", grad, [("chunk", c)], None)
        if wrap:
            ops.append((OP_SYNC,))  # the original's torch.cuda.synchronize() in the scope
        end(gs)
        opt = event(EventSpec("optimizer_step", "optimizer", "compute", [],
                              ma_name="optimizer" if ma_tracer else None))
        begin(opt)
        ops.append((OP_OPT, opt, cost.optimizer_us(vpp)))
        if not ma_tracer:  # v1: the span ends with the step's compute (kept as it always was)
            end(opt)
        if dp > 1 and distributed_optimizer:  # the distributed optimizer's parameter all-gather
            for c in range(vpp):
                collective("dp", "all_gather", grad, [("chunk", c)], None)
        if ma_tracer:  # MegatronApp's scope wraps optimizer.step(), which runs the all-gather
            end(opt)
        if ma_tracer:
            ops.append((OP_SYNC,))  # iteration_end: record E, then torch.cuda.synchronize()
        ops.append((OP_END, it_ev))
        # per-iteration counts make seq continue across iterations
        for spec in events:
            if spec.seq is not None and spec.cat == "collective":
                spec.seq = (spec.seq[0], counts[dict(spec.args)["group"]])
        out.append(StageProgram(s, ops, events, ma, counts["tp"], counts["dp"]))
    return out
