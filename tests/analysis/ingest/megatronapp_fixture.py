"""Writes small MegatronApp (MegaScan) per-rank trace dirs for tests.

Shapes follow the original tracer's files: ``benchmark-data-{dp}-pipeline-{pp}-tensor-{tp}.json``
holding a JSON array of flat B/E records with ``rel_ts`` in ns from the iteration start, core
fields ``dp_rk pp_rk tp_rk dev g_rk`` on every record, iteration brackets with ``pad_before``
and ``duration_wall``/``duration_cuda``, and ``micro_batch_index``/``expect``/``group``/``data``/
``bandwidth`` on E records.

Global ranks follow Megatron's default order (tp fastest, then dp, then pp):
``g_rk = tp + TP * (dp + DP * pp)``. Supported layouts: any TP and DP, PP in {1, 2}.

Per iteration, a rank records (``F`` = forward with its nested layer, ``B`` = backward):

* PP=1: F(mb0) B(mb0) F(mb1) B(mb1)
* PP=2, stage 0: forward-warmup(mb0) send-warmup(mb0) F(mb1) exchange-next(mb1) B(mb0)
  recv-cooldown(mb1) backward-cooldown(mb1)
* PP=2, stage 1: recv-warmup(mb0) F(mb0) B(mb0) exchange-prev(mb0) F(mb1) backward-cooldown(mb1)
  send-cooldown(mb1)

then ``grad-sync`` (when DP > 1) and ``optimizer``. A forward is
``forward{transformer_layer{attention{_reduce} mlp{_reduce}}}`` (+ ``loss`` on the last stage).
``send-*``/``recv-*``/``exchange-*`` warm-up and steady records carry ``group=[peer]``;
the cool-down ones carry no ``group`` (the reader must find the peer from coordinates).
TP ``_reduce`` records carry the *TP x DP* group minus the rank itself, as the original does.
Every B/E pair lasts a fixed number of ns (see ``LEAF_NS``/``GAP_NS``).
"""

from __future__ import annotations

import json
import pathlib
from dataclasses import dataclass, field

LEAF_NS = 100           # duration of an event with no children
GAP_NS = 10             # time between a parent's B and its first child, between siblings, and before E
P2P_BYTES = 8192
TP_BYTES = 4096
GRAD_BYTES = 65536
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


class _Recorder:
    def __init__(self, core: dict):
        self.core = core
        self.records: list[dict] = []
        self.t = 0
        self.pairs = 0

    def leaf(self, name: str, **end_attrs) -> None:
        self.begin(name)
        self.t += LEAF_NS - 2 * GAP_NS
        self.end(name, **end_attrs)

    def begin(self, name: str, **attrs) -> None:
        self.t += GAP_NS
        self.records.append({"name": name, "ph": "B", "rel_ts": self.t, **self.core, **attrs})

    def end(self, name: str, **attrs) -> None:
        self.t += GAP_NS
        self.records.append({"name": name, "ph": "E", "rel_ts": self.t, **self.core, **attrs})
        self.pairs += 1


def write_trace_dir(directory: pathlib.Path, *, tp: int = 2, pp: int = 2, dp: int = 1, iterations: int = 2,
                    truncate_last_iteration: bool = False) -> Written:
    """Write one file per rank of a TP x PP x DP job into ``directory``; return what was written.

    ``truncate_last_iteration`` stops every file in the middle of its last iteration's first
    forward (open B records, no closing ``]``), the way a killed job leaves it.
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
                    rec.records.append({"name": "iteration", "ph": "B", **core, "pad_before": PAD_BEFORE[it]})
                    cut = truncate_last_iteration and it == iterations - 1
                    _iteration(rec, t, d, p, layout, tp_dp_plane, cut)
                    if cut:
                        break
                    wall = rec.t + WALL_EXTRA_NS
                    walls.append(wall)
                    rec.records.append({"name": "iteration", "ph": "E", "rel_ts": rec.t, **core,
                                        "duration_wall": wall, "duration_cuda": rec.t})
                    rec.pairs += 1
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

    def forward(name: str, mb: int) -> None:
        rec.begin(name)
        rec.begin("transformer_layer")
        for part in ("attention", "mlp"):
            rec.begin(part)
            if tp_group is not None:
                rec.leaf("_reduce", micro_batch_index=mb, group=tp_group, data=TP_BYTES)
            if cut:
                return                       # stop with forward/transformer_layer/attention open
            rec.end(part)
        rec.end("transformer_layer")
        if last:
            rec.leaf("loss", micro_batch_index=mb)
        rec.end(name, micro_batch_index=mb)

    def backward(name: str, mb: int) -> None:
        rec.leaf(name, micro_batch_index=mb)

    def p2p(name: str, expect: str, mb: int, peer: int | None, with_group: bool) -> None:
        attrs = {"micro_batch_index": mb, "expect": expect, "data": P2P_BYTES, "bandwidth": 12.5}
        if with_group:
            attrs["group"] = [peer]
        rec.leaf(name, **attrs)

    if layout["pp"] == 1:
        forward("forward", 0)
        if cut:
            return
        backward("backward", 0)
        forward("forward", 1)
        backward("backward", 1)
    elif p == 0:
        forward("forward-warmup", 0)
        if cut:
            return
        p2p("send-warmup", "recv-warmup", 0, nxt, True)
        forward("forward", 1)
        p2p("exchange-next", "exchange-prev", 1, nxt, True)
        backward("backward", 0)
        p2p("recv-cooldown", "send-cooldown", 1, nxt, False)
        backward("backward-cooldown", 1)
    else:
        p2p("recv-warmup", "send-warmup", 0, prv, True)
        forward("forward", 0)
        if cut:
            return
        backward("backward", 0)
        p2p("exchange-prev", "exchange-next", 0, prv, True)
        forward("forward", 1)
        backward("backward-cooldown", 1)
        p2p("send-cooldown", "recv-cooldown", 1, prv, False)
    if layout["dp"] > 1:
        dp_group = [global_rank(t, dd, p, layout) for dd in range(layout["dp"]) if dd != d]
        rec.leaf("grad-sync", group=dp_group, data=GRAD_BYTES)
    rec.leaf("optimizer")


if __name__ == "__main__":
    # tests/fixtures/megatronapp was made with: python megatronapp_fixture.py tests/fixtures/megatronapp 1
    import sys

    write_trace_dir(pathlib.Path(sys.argv[1]), iterations=int(sys.argv[2]) if len(sys.argv) > 2 else 2)
