"""Writes small MegatronApp (MegaScan) per-rank trace dirs for tests.

Shapes follow the original tracer (OpenSQZ/MegatronApp ``megatron/training/trace.py`` and the
scopes of its 1F1B schedule): ``benchmark-data-{dp}-pipeline-{pp}-tensor-{tp}.json`` holding a
JSON array of flat B/E records ``{**attrs, "name", "ph", "rel_ts", "dp_rk", "pp_rk", "tp_rk",
"dev", "g_rk"}`` (attrs on E records only) with ``rel_ts`` in ns from the iteration start;
iteration brackets ``{"name": "iteration", "ph": "B", "pad_before"}`` (nothing else) and
``{..., "name": "iteration", "ph": "E", "rel_ts", ..., "duration_wall", "duration_cuda"}``.

Global ranks follow Megatron's default order (tp fastest, then dp, then pp):
``g_rk = tp + TP * (dp + DP * pp)``. Supported layouts: any TP and DP, PP in {1, 2}; two
microbatches.

Per iteration, a rank records (``F`` = forward with its nested layer, ``B`` = backward), as
megatron-core's 1F1B with MegatronApp's scopes does for PP=2, M=2:

* PP=1 (``forward_backward_no_pipelining`` has no scopes): the layer and ``loss`` of F(mb0),
  F(mb1) without a step record, then ``optimizer``
* PP=2, stage 0: recv-warmup(0, moves nothing) forward-warmup(0) send-warmup(0)
  recv-extra(1, nothing) forward(1) exchange-next B(0) send-extra(1, nothing) recv-cooldown(1)
  backward-cooldown(1) send-cooldown(1, nothing)
* PP=2, stage 1: recv-extra(0) forward(0) exchange-next(nothing) backward(0) exchange-prev
  forward(1) exchange-next(nothing) backward(1) send-extra(1)

then (PP=2) ``allreduce`` (no attrs) and ``optimizer``. A forward is
``forward{transformer_layer{attention{_reduce} mlp{_reduce}}}`` (+ ``loss`` on the last stage).
p2p records carry ``micro_batch_index`` (except exchanges), ``expect``/``group`` on
recv-warmup, send-warmup, recv-extra and exchanges, ``data`` on all (null where the call moves
nothing, as ``group`` then is) and ``bandwidth`` = data / 2**27 / seconds (null with data).
``_reduce`` records carry ``expect: "_reduce"`` and the *TP x DP* group minus the rank itself
(null with TP 1), as the original does; no ``data``.
Every B/E pair lasts a fixed number of ns (see ``LEAF_NS``/``GAP_NS``).
"""

from __future__ import annotations

import json
import pathlib
from dataclasses import dataclass, field

LEAF_NS = 100           # duration of an event with no children
GAP_NS = 10             # time between a parent's B and its first child, between siblings, and before E
P2P_BYTES = 8192        # one tensor between stages
PAD_BEFORE = (1000, 5000, 7000, 9000)   # ns gap before traced iteration k
WALL_EXTRA_NS = 7       # duration_wall = last rel_ts + this (host-side overhead)
MICROBATCHES = 2


@dataclass
class Written:
    """What the generator wrote, for tests to derive expectations from."""

    files: dict[int, pathlib.Path] = field(default_factory=dict)            # rank -> path
    coords: dict[int, dict[str, int]] = field(default_factory=dict)          # rank -> {tp, dp, pp}
    iteration_walls: dict[int, list[int]] = field(default_factory=dict)      # rank -> duration_wall per iteration
    pairs: dict[int, int] = field(default_factory=dict)                      # rank -> B/E pairs written


def global_rank(tp: int, dp: int, pp: int, layout: dict[str, int]) -> int:
    return tp + layout["tp"] * (dp + layout["dp"] * pp)


def bandwidth(data: int, elapsed_ns: int) -> float:
    """The original's figure: ``data / 2**27`` "Gb" per second."""
    return data / 2 ** 27 / (elapsed_ns / 1e9)


class _Recorder:
    def __init__(self, core: dict):
        self.core = core
        self.records: list[dict] = []
        self.t = 0
        self.pairs = 0
        self._begun: list[int] = []

    def leaf(self, name: str, **end_attrs) -> None:
        self.begin(name)
        self.t += LEAF_NS - 2 * GAP_NS
        self.end(name, **end_attrs)

    def begin(self, name: str) -> None:
        self.t += GAP_NS
        self.records.append({"name": name, "ph": "B", "rel_ts": self.t, **self.core})
        self._begun.append(self.t)

    def end(self, name: str, **attrs) -> None:
        self.t += GAP_NS
        began = self._begun.pop()
        record = {**attrs, "name": name, "ph": "E", "rel_ts": self.t, **self.core}
        if "data" in attrs:
            record["bandwidth"] = None if attrs["data"] is None else bandwidth(attrs["data"], self.t - began)
        self.records.append(record)
        self.pairs += 1


def write_trace_dir(directory: pathlib.Path, *, tp: int = 2, pp: int = 2, dp: int = 1, iterations: int = 2,
                    truncate_last_iteration: bool = False, repeat_iterations: bool = False) -> Written:
    """Write one file per rank of a TP x PP x DP job into ``directory``; return what was written.

    ``truncate_last_iteration`` stops every file in the middle of its last iteration's first
    forward (open B records, no closing ``]``), the way a killed job leaves it.
    ``repeat_iterations`` writes every iteration twice, the copy with the same ``pad_before``
    and a short ``duration_wall``, as the original's second ``iteration_end`` call does
    (``Written`` describes the file without the copies).
    """
    if pp not in (1, 2):
        raise ValueError("the fixture knows PP=1 and PP=2 schedules only")
    layout = {"tp": tp, "dp": dp, "pp": pp}
    directory.mkdir(parents=True, exist_ok=True)
    written = Written()
    for p in range(pp):
        for d in range(dp):
            for t in range(tp):
                rank = global_rank(t, d, p, layout)
                core = {"dp_rk": d, "pp_rk": p, "tp_rk": t, "dev": t + tp * d, "g_rk": rank}
                rec = _Recorder(core)
                walls = []
                tp_dp_plane = [global_rank(tt, dd, p, layout) for dd in range(dp) for tt in range(tp)]
                for it in range(iterations):
                    rec.t = 0
                    first = len(rec.records)
                    rec.records.append({"name": "iteration", "ph": "B", "pad_before": PAD_BEFORE[it]})
                    cut = truncate_last_iteration and it == iterations - 1
                    _iteration(rec, t, d, p, layout, tp_dp_plane, cut)
                    if cut:
                        break
                    wall = rec.t + WALL_EXTRA_NS
                    walls.append(wall)
                    rec.records.append({"name": "iteration", "ph": "E", "rel_ts": rec.t, **core,
                                        "duration_wall": wall, "duration_cuda": rec.t})
                    rec.pairs += 1
                    if repeat_iterations:
                        copy = [dict(r) for r in rec.records[first:]]
                        copy[-1]["duration_wall"] = 3
                        rec.records += copy
                path = directory / f"benchmark-data-{d}-pipeline-{p}-tensor-{t}.json"
                text = "[\n" + ",\n".join(json.dumps(r, separators=(",", ":")) for r in rec.records)
                if truncate_last_iteration:
                    text += ',\n{"name":"mlp","ph":"E","rel_'       # a record cut mid-write
                else:
                    text += "\n]\n"
                path.write_text(text)
                written.files[rank] = path
                written.coords[rank] = {"tp": t, "dp": d, "pp": p}
                written.iteration_walls[rank] = walls
                written.pairs[rank] = rec.pairs
    return written


def _iteration(rec: _Recorder, t: int, d: int, p: int, layout: dict[str, int], plane: list[int], cut: bool) -> None:
    me = global_rank(t, d, p, layout)
    nxt = global_rank(t, d, p + 1, layout) if p + 1 < layout["pp"] else None
    prv = global_rank(t, d, p - 1, layout) if p > 0 else None
    last = p == layout["pp"] - 1
    tp_group = [r for r in plane if r != me] if layout["tp"] > 1 else None

    def body(mb: int) -> None:
        rec.begin("transformer_layer")
        for part in ("attention", "mlp"):
            rec.begin(part)
            rec.leaf("_reduce", expect="_reduce", group=tp_group)
            if cut:
                return                       # stop with forward/transformer_layer/attention open
            rec.end(part)
        rec.end("transformer_layer")
        if last:
            rec.leaf("loss")

    def forward(name: str, mb: int) -> None:
        rec.begin(name)
        body(mb)
        if cut:
            return
        rec.end(name, micro_batch_index=mb)

    def backward(name: str, mb: int) -> None:
        rec.leaf(name, micro_batch_index=mb)

    def p2p(name: str, mb: int | None, peer: int | None, tensors: int) -> None:
        attrs: dict = {} if mb is None else {"micro_batch_index": mb}
        expect = {"recv-warmup": "send-warmup", "send-warmup": "recv-warmup", "recv-extra": "send-warmup",
                  "exchange-next": "exchange-prev", "exchange-prev": "exchange-next"}.get(name)
        if expect is not None:
            attrs["expect"] = expect
        attrs["data"] = P2P_BYTES * tensors if peer is not None else None
        if expect is not None:
            attrs["group"] = [peer] if peer is not None else None
        rec.leaf(name, **attrs)

    if layout["pp"] == 1:
        body(0)
        if cut:
            return
        body(1)
    elif p == 0:
        p2p("recv-warmup", 0, None, 1)
        forward("forward-warmup", 0)
        if cut:
            return
        p2p("send-warmup", 0, nxt, 1)
        p2p("recv-extra", 1, None, 1)
        forward("forward", 1)
        p2p("exchange-next", None, nxt, 2)
        backward("backward", 0)
        p2p("send-extra", 1, None, 1)
        p2p("recv-cooldown", 1, nxt, 1)
        backward("backward-cooldown", 1)
        p2p("send-cooldown", 1, None, 1)
    else:
        p2p("recv-extra", 0, prv, 1)
        forward("forward", 0)
        if cut:
            return
        p2p("exchange-next", None, None, 2)
        backward("backward", 0)
        p2p("exchange-prev", None, prv, 2)
        forward("forward", 1)
        p2p("exchange-next", None, None, 2)
        backward("backward", 1)
        p2p("send-extra", 1, prv, 1)
    if layout["pp"] > 1:
        rec.leaf("allreduce")
    rec.leaf("optimizer")


if __name__ == "__main__":
    # tests/fixtures/megatronapp was made with: python megatronapp_fixture.py tests/fixtures/megatronapp 1
    # (by an earlier version of this script, before its records followed the original field for field)
    import sys

    write_trace_dir(pathlib.Path(sys.argv[1]), iterations=int(sys.argv[2]) if len(sys.argv) > 2 else 2)
