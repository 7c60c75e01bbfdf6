"""Streams simulated times to per-rank files: trace format v1, or MegatronApp's format.

Each stage's events share one line template per iteration; a rank's lines are that template
with the rank's own values (pid, group members, peers) substituted once and its timestamps
filled in by a single ``%`` operation. Files are appended to iteration by iteration, so only
one iteration of times is ever held.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from mapp import trace_format

from .clock import Clocks
from .engine import StageTimes
from .layout import Layout
from .program import (TOK_DPG, TOK_DPO, TOK_NEXT, TOK_PID, TOK_PREV, TOK_TPG, TOK_TPO,
                      EventSpec, StageProgram)

__all__ = ["V1Writer", "MegatronAppWriter", "megatronapp_file_name"]

_TOKENS = (TOK_PID, TOK_TPG, TOK_DPG, TOK_NEXT, TOK_PREV, TOK_TPO, TOK_DPO)
_COORDS = "@COORDS@"


def megatronapp_file_name(dp: int, pp: int, tp: int) -> str:
    return f"benchmark-data-{dp}-pipeline-{pp}-tensor-{tp}.json"


def _value(v: object) -> str:
    if isinstance(v, str) and v.startswith("@") or isinstance(v, str) and v.startswith("[@"):
        return v
    return json.dumps(v, separators=(",", ":"))


class _RankValues:
    """The strings that differ between ranks of one stage."""

    def __init__(self, layout: Layout):
        self.layout = layout

    def tokens(self, stage: int, d: int, t: int) -> dict[str, str]:
        lay = self.layout
        rank = lay.rank(t, d, stage)
        tpg = lay.tp_group(d, stage)
        dpg = lay.dp_group(t, stage)
        return {
            TOK_PID: str(rank),
            TOK_TPG: "[" + ",".join(map(str, tpg)) + "]",
            TOK_DPG: "[" + ",".join(map(str, dpg)) + "]",
            TOK_NEXT: str(lay.rank(t, d, lay.next_stage(stage))),
            TOK_PREV: str(lay.rank(t, d, lay.prev_stage(stage))),
            TOK_TPO: "[" + ",".join(str(r) for r in tpg if r != rank) + "]",
            TOK_DPO: "[" + ",".join(str(r) for r in dpg if r != rank) + "]",
            _COORDS: (f'"dp_rk":{d},"pp_rk":{stage},"tp_rk":{t},'
                      f'"dev":{rank % lay.gpus_per_node},"g_rk":{rank}'),
        }


def _fill(template: str, present: list[str], values: dict[str, str]) -> str:
    for tok in present:
        template = template.replace(tok, values[tok])
    return template


class V1Writer:
    """Writes ``rank-NNNNN.json`` files in trace format v1."""

    def __init__(self, out_dir: Path, layout: Layout, programs: list[StageProgram],
                 clocks: Clocks, *, run_id: str, extra_meta: dict):
        self.out_dir = out_dir
        self.layout = layout
        self.programs = programs
        self.clocks = clocks
        self.run_id = run_id
        self.extra_meta = extra_meta
        self.values = _RankValues(layout)
        self.events_written = 0
        self.files: list[Path] = []

    def _template(self, prog: StageProgram, iteration: int) -> tuple[str, list[int]]:
        lines, keep = [], []
        for i, spec in enumerate(prog.events):
            if not spec.v1:
                continue
            keep.append(i)
            lines.append(self._line(spec, iteration))
        return "".join(lines), keep

    @staticmethod
    def _line(spec: EventSpec, iteration: int) -> str:
        args = [f'"iteration":{iteration}']
        has_seq = False
        for k, v in spec.args:
            if k == "seq":
                has_seq = True
                v = spec.seq[0] + iteration * spec.seq[1]
            args.append(f'"{k}":{_value(v)}')
        if spec.seq is not None and not has_seq:
            args.append(f'"seq":{spec.seq[0] + iteration * spec.seq[1]}')
        return (f'{{"ph":"X","name":"{spec.name}","cat":"{spec.cat}","pid":{TOK_PID},'
                f'"tid":"{spec.tid}","ts":%.3f,"dur":%.3f,"args":{{{",".join(args)}}}}},\n')

    def write(self, times: StageTimes) -> int:
        """Append one stage's iteration to its ranks' files; returns the ranks written."""
        lay, s, it = self.layout, times.stage, times.iteration
        prog = self.programs[s]
        template, keep = self._template(prog, it)
        present = [t for t in _TOKENS if t in template]
        ranks = lay.stage_ranks(s)
        start = self.clocks.to_local(times.start[keep], ranks)
        dur = np.maximum(self.clocks.to_local(times.end[keep], ranks) - start, 0.0)
        both = np.stack([start, dur], axis=-1).transpose(1, 2, 0, 3).reshape(lay.dp, lay.tp, -1)
        n_events = len(keep)
        for d in range(lay.dp):
            for t in range(lay.tp):
                rank = int(ranks[d, t])
                vals = self.values.tokens(s, d, t)
                text = _fill(template, present, vals) % tuple(both[d, t].tolist())
                path = self.out_dir / trace_format.file_name(rank)
                if it == 0:
                    coords = lay.coords(rank)
                    head = trace_format.HEADER + "".join(
                        trace_format.encode_event(e) for e in trace_format.metadata_events(
                            rank, lay.world_size,
                            {"tp": lay.tp, "pp": lay.pp, "dp": lay.dp, "cp": 1, "ep": 1,
                             "vpp": lay.vpp},
                            coords, clock="cuda", host=f"node{lay.node(rank):04d}",
                            device="simulated GPU", run_id=self.run_id, **self.extra_meta))
                    with open(path, "w", encoding="utf-8") as fh:
                        fh.write(head)
                        fh.write(text)
                    self.files.append(path)
                else:
                    with open(path, "a", encoding="utf-8") as fh:
                        fh.write(text)
                self.events_written += n_events
        return lay.dp * lay.tp

    def finish(self) -> None:
        """v1 files stay open-ended (the closing bracket is optional)."""


class MegatronAppWriter:
    """Writes MegatronApp's ``benchmark-data-{dp}-pipeline-{pp}-tensor-{tp}.json`` files.

    B/E records with ``rel_ts`` in ns from the iteration start on the rank's own clock; E
    records carry ``micro_batch_index``, ``expect``, ``group`` (the other ranks), ``data``
    (bytes) and ``bandwidth`` (bytes per ns, i.e. GB/s) where they apply. Compute steps are
    named by phase (``forward-warmup``, ``forward``, ``backward``, ``backward-cooldown``),
    p2p batches ``send-warmup``, ``recv-warmup``, ``exchange-next``, ``exchange-prev``,
    ``recv-cooldown``, ``send-cooldown``; TP all-reduces ``_reduce``; DP gradient sync is a
    ``grad-sync`` span around ``allreduce`` or ``reduce-scatter``; then ``optimizer``.
    """

    def __init__(self, out_dir: Path, layout: Layout, programs: list[StageProgram],
                 clocks: Clocks):
        self.out_dir = out_dir
        self.layout = layout
        self.programs = programs
        self.clocks = clocks
        self.values = _RankValues(layout)
        self.events_written = 0
        self.files: list[Path] = []
        self._last_end: dict[int, float] = {}

    def _template(self, prog: StageProgram) -> tuple[str, list[int], list[int], list[int]]:
        recs = ['{"name":"iteration","ph":"B","rel_ts":0,%s,"pad_before":%%d}' % _COORDS]
        b_idx, e_idx, bw_idx = [], [], []
        for kind, i in prog.ma_order:
            spec = prog.events[i]
            if kind == "B":
                recs.append('{"name":"%s","ph":"B","rel_ts":%%d,%s}' % (spec.ma_name, _COORDS))
                b_idx.append(len(recs) - 1)
                continue
            attrs = "".join(f',"{k}":{_value(v)}' for k, v in spec.ma_attrs)
            bw = ""
            if any(k == "data" for k, _ in spec.ma_attrs):
                bw = ',"bandwidth":%.3f'
                bw_idx.append(i)
            recs.append('{"name":"%s","ph":"E","rel_ts":%%d,%s%s%s}'
                        % (spec.ma_name, _COORDS, attrs, bw))
        recs.append('{"name":"iteration","ph":"E","rel_ts":%%d,%s,"duration_wall":%%d,'
                    '"duration_cuda":%%d}' % _COORDS)
        return ",\n".join(recs), b_idx, e_idx, bw_idx

    def write(self, times: StageTimes) -> int:
        lay, s, it = self.layout, times.stage, times.iteration
        prog = self.programs[s]
        template, _, _, _ = self._template(prog)
        present = [t for t in (*_TOKENS, _COORDS) if t in template]
        ranks = lay.stage_ranks(s)
        start = self.clocks.to_local(times.start, ranks)
        end = self.clocks.to_local(times.end, ranks)
        it0 = start[0]  # the iteration event is first
        rel_s = np.rint((start - it0) * 1e3).astype(np.int64)
        rel_e = np.rint((end - it0) * 1e3).astype(np.int64)
        dur_ns = np.maximum(rel_e - rel_s, 1)
        nbytes = np.zeros(len(prog.events))
        for i, spec in enumerate(prog.events):
            nbytes[i] = dict(spec.ma_attrs).get("data", 0) or 0
        bw = nbytes[:, None, None] / dur_ns
        n_records = 2 + 2 * (len(prog.ma_order) // 2)
        for d in range(lay.dp):
            for t in range(lay.tp):
                rank = int(ranks[d, t])
                vals = self.values.tokens(s, d, t)
                pad = 0 if it == 0 else int(round((it0[d, t] - self._last_end[rank]) * 1e3))
                args: list = [pad]
                for kind, i in prog.ma_order:
                    if kind == "B":
                        args.append(int(rel_s[i, d, t]))
                    else:
                        args.append(int(rel_e[i, d, t]))
                        if dict(prog.events[i].ma_attrs).get("data") is not None:
                            args.append(float(bw[i, d, t]))
                wall = int(rel_e[0, d, t])
                args += [wall, wall, wall]
                text = _fill(template, present, vals) % tuple(args)
                self._last_end[rank] = float(end[0, d, t])
                path = self.out_dir / megatronapp_file_name(d, s, t)
                mode = "w" if it == 0 else "a"
                with open(path, mode, encoding="utf-8") as fh:
                    fh.write(("[\n" if it == 0 else ",\n") + text)
                if it == 0:
                    self.files.append(path)
                self.events_written += n_records
        return lay.dp * lay.tp

    def finish(self) -> None:
        for path in self.files:
            with open(path, "a", encoding="utf-8") as fh:
                fh.write("\n]\n")
