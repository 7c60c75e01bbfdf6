"""Lowering of a stage's schedule into timed ops and the events they emit.

Every rank of a pipeline stage runs the same program, so one program per stage serves all of
its ``dp x tp`` ranks; the engine runs it on arrays of that shape. The events it emits:

- ``iteration`` (cat iteration): one per iteration.
- ``forward`` / ``backward`` (cat compute, tid compute): one step of one (microbatch, chunk),
  spanning its layers' compute and their TP all-reduces.
- with ``per_layer``: ``attention`` and ``mlp`` (forward) and ``mlp_backward`` and
  ``attention_backward`` (cat compute, args ``layer`` = global layer index from 0): the pure
  compute kernels of one layer, nested inside the step.
- ``all_reduce`` (cat collective, tid comm, group tp): after attention and after MLP in the
  forward, and for the input gradients of both in the backward.
- ``send`` / ``recv`` (cat p2p, tid comm): activations and gradients between stages, with
  ``microbatch`` and ``chunk`` (on a send the chunk that produced the tensor, on a receive the
  chunk that consumes it: they differ where interleaving wraps from the last stage to the first).
  Sends and receives of one megatron-core batched call share a start time.
- ``reduce_scatter`` (group dp) of gradients per model chunk, ``optimizer_step`` (cat
  optimizer), ``all_gather`` (group dp) of parameters per chunk; with
  ``distributed_optimizer=False`` one gradient ``all_reduce`` per chunk instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .cost import CostModel
from .schedule import Batch, Compute, Programs

__all__ = ["EventSpec", "StageProgram", "lower", "OP_BEGIN", "OP_END", "OP_COMPUTE",
           "OP_TP", "OP_DP", "OP_OPT", "OP_P2P"]

OP_BEGIN, OP_END, OP_COMPUTE, OP_TP, OP_DP, OP_OPT, OP_P2P = range(7)

# tokens the writer replaces with each rank's own values
TOK_PID, TOK_TPG, TOK_DPG, TOK_NEXT, TOK_PREV = "@PID@", "@TPG@", "@DPG@", "@NXT@", "@PRV@"
TOK_TPO, TOK_DPO = "@TPO@", "@DPO@"  # "other members" lists (MegatronApp's group attribute)


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


@dataclass(slots=True)
class StageProgram:
    stage: int
    ops: list[tuple]
    events: list[EventSpec]
    ma_order: list[tuple[str, int]]  # MegatronApp B/E record order: ("B"|"E", event index)
    tp_calls: int = 0
    dp_calls: int = 0


def lower(programs: Programs, *, pp: int, vpp: int, tp: int, dp: int, cost: CostModel,
          per_layer: bool, distributed_optimizer: bool) -> list[StageProgram]:
    """Every stage's ops and events for one iteration."""
    lpc = cost.layers_per_chunk
    att_f, mlp_f = cost.attention_forward_us, cost.mlp_forward_us
    act = cost.activation_bytes
    out = []
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

        def collective(group: str, name: str, nbytes: int, it_args, ma_name: str) -> None:
            n = counts[group]
            counts[group] = n + 1
            toks = (TOK_TPG, TOK_TPO) if group == "tp" else (TOK_DPG, TOK_DPO)
            ev = event(EventSpec(
                name, "collective", "comm",
                it_args + [("group", group), ("group_ranks", toks[0])], seq=(n, 0),
                ma_name=ma_name,
                ma_attrs=[("group", toks[1]), ("data", nbytes)]))
            events[ev].args.append(("bytes", nbytes))
            begin(ev)
            members = tp if group == "tp" else dp
            ops.append((OP_TP if group == "tp" else OP_DP, ev, name, nbytes, members))
            end(ev)

        def compute(name: str, base_us: float, mb: int, chunk: int, layer: int) -> None:
            if per_layer:
                ev = event(EventSpec(name, "compute", "compute",
                                     [("microbatch", mb), ("chunk", chunk), ("layer", layer)],
                                     ma_name=name if not name.endswith("backward") else None,
                                     ma_attrs=[("micro_batch_index", mb)]))
                begin(ev)
                ops.append((OP_COMPUTE, ev, base_us, mb))
                end(ev)
            else:
                ops.append((OP_COMPUTE, -1, base_us, mb))

        it_ev = event(EventSpec("iteration", "iteration", "compute", []))
        ops.append((OP_BEGIN, it_ev))
        for step in steps:
            if isinstance(step, Compute):
                mb, c = step.microbatch, step.chunk
                kind = "backward" if step.backward else "forward"
                ma_name = {"warmup": "forward-warmup", "cooldown": "backward-cooldown"}.get(
                    step.phase, kind)
                ev = event(EventSpec(kind, "compute", "compute",
                                     [("microbatch", mb), ("chunk", c)],
                                     ma_name=ma_name, ma_attrs=[("micro_batch_index", mb)]))
                begin(ev)
                first_layer = (c * pp + s) * lpc
                layers = range(first_layer, first_layer + lpc)
                mb_args = [("microbatch", mb), ("chunk", c)]
                if not step.backward:
                    for layer in layers:
                        compute("attention", att_f, mb, c, layer)
                        if tp > 1:
                            collective("tp", "all_reduce", act, list(mb_args), "_reduce")
                        compute("mlp", mlp_f, mb, c, layer)
                        if tp > 1:
                            collective("tp", "all_reduce", act, list(mb_args), "_reduce")
                else:
                    for layer in reversed(layers):
                        compute("mlp_backward", 2 * mlp_f, mb, c, layer)
                        if tp > 1:
                            collective("tp", "all_reduce", act, list(mb_args), "_reduce")
                        compute("attention_backward", 2 * att_f, mb, c, layer)
                        if tp > 1:
                            collective("tp", "all_reduce", act, list(mb_args), "_reduce")
                end(ev)
            else:
                bev = event(EventSpec(step.label, "p2p", "comm", [], v1=False,
                                      ma_name=step.label))
                begin(bev)
                members = []
                for op in step.ops:
                    peer_tok = TOK_NEXT if op.peer_stage == (s + 1) % pp else TOK_PREV
                    src, dst = (s, op.peer_stage) if op.send else (op.peer_stage, s)
                    n = send_seq[(src, dst, op.direction, op.index)]
                    ev = event(EventSpec(
                        "send" if op.send else "recv", "p2p", "comm",
                        [("peer", peer_tok), ("seq", None), ("bytes", act),
                         ("microbatch", op.microbatch), ("chunk", op.chunk)],
                        seq=(n, sends_per_pair[(src, dst)]), ma_name=None))
                    members.append((ev, op.send, (src, dst, op.direction), op.index))
                    if not events[bev].ma_attrs:
                        partner = batch_label[(src, dst, op.direction, op.index, not op.send)]
                        events[bev].ma_attrs = [("micro_batch_index", op.microbatch),
                                                ("expect", partner), ("group", f"[{peer_tok}]"),
                                                ("data", act * len(step.ops))]
                ops.append((OP_P2P, bev, members))
                end(bev)
        # data-parallel gradient sync, optimizer step, parameter gather
        grad = cost.grad_bytes
        if dp > 1:
            gs = event(EventSpec("grad-sync", "other", "comm", [], v1=False, ma_name="grad-sync"))
            begin(gs)
            for c in range(vpp):
                if distributed_optimizer:
                    collective("dp", "reduce_scatter", grad, [("chunk", c)], "reduce-scatter")
                else:
                    collective("dp", "all_reduce", grad, [("chunk", c)], "allreduce")
            end(gs)
        opt = event(EventSpec("optimizer_step", "optimizer", "compute", [], ma_name="optimizer"))
        begin(opt)
        ops.append((OP_OPT, opt, cost.optimizer_us(vpp)))
        end(opt)
        if dp > 1 and distributed_optimizer:
            for c in range(vpp):
                collective("dp", "all_gather", grad, [("chunk", c)], "all-gather")
        ops.append((OP_END, it_ev))
        # per-iteration counts make seq continue across iterations
        for spec in events:
            if spec.seq is not None and spec.cat == "collective":
                spec.seq = (spec.seq[0], counts[dict(spec.args)["group"]])
        out.append(StageProgram(s, ops, events, ma, counts["tp"], counts["dp"]))
    return out
