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
from .program import (DATA, TOK_DPG, TOK_DPO, TOK_NEXT, TOK_PID, TOK_PLO, TOK_PREV, TOK_TPG,
                      TOK_TPO, EventSpec, StageProgram)

__all__ = ["V1Writer", "MegatronAppWriter", "megatronapp_file_name"]

_TOKENS = (TOK_PID, TOK_TPG, TOK_DPG, TOK_NEXT, TOK_PREV, TOK_TPO, TOK_DPO, TOK_PLO)
_COORDS = "@COORDS@"


def megatronapp_file_name(dp: int, pp: int, tp: int) -> str:
    return f"benchmark-data-{dp}-pipeline-{pp}-tensor-{tp}.json"


def _value(v: object) -> str:
    if isinstance(v, str) and v.startswith("@") or isinstance(v, str) and v.startswith("[@"):
        return v
    return json.dumps(v, separators=(",", ":"))


def _ints(values) -> str:
    return "[" + ",".join(map(str, values)) + "]"


class _RankValues:
    """The strings that differ between ranks of one stage (only those a template uses)."""

    def __init__(self, layout: Layout):
        self.layout = layout

    def tokens(self, stage: int, d: int, t: int, present: list[str]) -> dict[str, str]:
        lay = self.layout
        rank = lay.rank(t, d, stage)
        out = {}
        for tok in present:
            if tok == TOK_PID:
                out[tok] = str(rank)
            elif tok == TOK_TPG:
                out[tok] = _ints(lay.tp_group(d, stage))
            elif tok == TOK_DPG:
                out[tok] = _ints(lay.dp_group(t, stage))
            elif tok == TOK_NEXT:
                out[tok] = str(lay.rank(t, d, lay.next_stage(stage)))
            elif tok == TOK_PREV:
                out[tok] = str(lay.rank(t, d, lay.prev_stage(stage)))
            elif tok == TOK_TPO:
                out[tok] = _ints(r for r in lay.tp_group(d, stage) if r != rank)
            elif tok == TOK_DPO:
                out[tok] = _ints(r for r in lay.dp_group(t, stage) if r != rank)
            elif tok == TOK_PLO:  # the TP x DP group (MegatronApp tags TP collectives with it)
                out[tok] = _ints(r for r in lay.stage_ranks(stage).ravel().tolist() if r != rank)
            elif tok == _COORDS:
                out[tok] = (f'"dp_rk":{d},"pp_rk":{stage},"tp_rk":{t},'
                            f'"dev":{rank % lay.gpus_per_node},"g_rk":{rank}')
        return out


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

    def _template(self, prog: StageProgram, iteration: int,
                  sized: bool) -> tuple[str, list[int], list[int]]:
        """The stage's lines for one iteration, the events kept, and those whose ``bytes`` (or a
        layer span's ``tokens``) is a per-rank value (``%d``, after the event's ``ts`` and
        ``dur``) because ``sized``."""
        lines, keep, scaled = [], [], []
        for i, spec in enumerate(prog.events):
            if not spec.v1:
                continue
            keep.append(i)
            per_rank = sized and spec.scale_mb >= 0
            if per_rank:
                scaled.append(i)
            lines.append(self._line(spec, iteration, per_rank))
        return "".join(lines), keep, scaled

    @staticmethod
    def _line(spec: EventSpec, iteration: int, sized: bool = False) -> str:
        args = [f'"iteration":{iteration}']
        has_seq = False
        for k, v in spec.args:
            if k == "seq":
                has_seq = True
                v = spec.seq[0] + iteration * spec.seq[1]
            if k == "bytes" and sized:
                args.append('"bytes":%d')
                continue
            args.append(f'"{k}":{_value(v)}')
        if sized and spec.scaled != "bytes":
            args.append(f'"{spec.scaled}":%d')
        if spec.seq is not None and not has_seq:
            args.append(f'"seq":{spec.seq[0] + iteration * spec.seq[1]}')
        return (f'{{"ph":"X","name":"{spec.name}","cat":"{spec.cat}","pid":{TOK_PID},'
                f'"tid":"{spec.tid}","ts":%.3f,"dur":%.3f,"args":{{{",".join(args)}}}}},\n')

    def _values(self, prog: StageProgram, times: StageTimes, keep: list[int],
                scaled: list[int]) -> np.ndarray:
        """Per rank, the numbers of the template in order: shape (dp, tp, values)."""
        lay = self.layout
        ranks = lay.stage_ranks(times.stage)
        start = self.clocks.to_local(times.start[keep], ranks)
        dur = np.maximum(self.clocks.to_local(times.end[keep], ranks) - start, 0.0)
        if not scaled:
            return np.stack([start, dur], axis=-1).transpose(1, 2, 0, 3).reshape(lay.dp, lay.tp, -1)
        is_scaled = set(scaled)
        ts_col, dur_col, bytes_col, col = [], [], [], 0
        for i in keep:
            ts_col.append(col)
            dur_col.append(col + 1)
            col += 2
            if i in is_scaled:
                bytes_col.append(col)
                col += 1
        vals = np.empty((lay.dp, lay.tp, col))
        vals[:, :, ts_col] = start.transpose(1, 2, 0)
        vals[:, :, dur_col] = dur.transpose(1, 2, 0)
        nbytes = np.array([prog.events[i].per_token * times.tokens[:, prog.events[i].scale_mb]
                           for i in scaled], dtype=np.float64)  # (scaled, dp)
        vals[:, :, bytes_col] = nbytes.T[:, None, :]
        return vals

    def write(self, times: StageTimes) -> int:
        """Append one stage's iteration to its ranks' files; returns the ranks written."""
        lay, s, it = self.layout, times.stage, times.iteration
        prog = self.programs[s]
        template, keep, scaled = self._template(prog, it, times.tokens is not None)
        present = [t for t in _TOKENS if t in template]
        ranks = lay.stage_ranks(s)
        both = self._values(prog, times, keep, scaled)
        n_events = len(keep)
        for d in range(lay.dp):
            for t in range(lay.tp):
                rank = int(ranks[d, t])
                vals = self.values.tokens(s, d, t, present)
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


_BYTES_PER_GIBIT = 2 ** 27
"""MegatronApp's bandwidth unit: ``data / 2**27`` "Gb" per second (its comment: 1 Gb = 2**30 bits)."""


class MegatronAppWriter:
    """Writes MegatronApp's ``benchmark-data-{dp}-pipeline-{pp}-tensor-{tp}.json`` files, record
    for record what the original tracer writes (``megatron/training/trace.py`` of
    OpenSQZ/MegatronApp; what it records where is in ``program``'s module doc):

    - the iteration's ``B`` record is ``{"name":"iteration","ph":"B","pad_before":ns}`` and
      nothing else (the tracer adds it by hand, without ``rel_ts`` or coordinates);
      ``pad_before`` is the host time since the previous traced iteration's end (0 for the
      first: the tracer's clock starts there);
    - every other record is ``{**attrs, "name", "ph", "rel_ts", "dp_rk", "pp_rk", "tp_rk",
      "dev", "g_rk"}`` in that key order; ``B`` records have no attrs; ``rel_ts`` is ns of
      CUDA-event time since the iteration's ``B`` event;
    - an ``E`` with a ``data`` attr gets ``bandwidth`` last: ``data / 2**27 / seconds`` since its
      own ``B`` (binary gigabits per second), null when ``data`` is null;
    - the iteration's ``E`` adds ``duration_wall`` (host ns from the iteration's begin to after
      the ``torch.cuda.synchronize()`` at its end) and ``duration_cuda`` (its own ``rel_ts``).

    Records are written one per line (the original writes ``json.dump(..., indent=2)``; the
    content is the same JSON).
    """

    def __init__(self, out_dir: Path, layout: Layout, programs: list[StageProgram],
                 clocks: Clocks, *, seq_length: int):
        self.out_dir = out_dir
        self.layout = layout
        self.programs = programs
        self.clocks = clocks
        self.seq_length = seq_length
        self.values = _RankValues(layout)
        self.events_written = 0
        self.files: list[Path] = []
        self._last_host_end: dict[int, float] = {}

    @staticmethod
    def _template(prog: StageProgram) -> str:
        """The stage's records for one iteration; per rank, ``%`` fills, in order: pad_before,
        then per record its data (when known) and rel_ts and bandwidth (when data is known),
        then the iteration's rel_ts, duration_wall and duration_cuda."""
        recs = ['{"name":"iteration","ph":"B","pad_before":%d}']
        for kind, i in prog.ma_order:
            spec = prog.events[i]
            if kind == "B":
                recs.append('{"name":"%s","ph":"B","rel_ts":%%d,%s}' % (spec.ma_name, _COORDS))
                continue
            attrs, bw = [], ""
            for k, v in spec.ma_attrs:
                if v is DATA:
                    attrs.append(f'"{k}":' + ("%d" if spec.ma_data else "null"))
                    bw = ',"bandwidth":%r' if spec.ma_data else ',"bandwidth":null'
                else:
                    attrs.append(f'"{k}":{_value(v)}')
            head = "".join(a + "," for a in attrs)
            recs.append('{%s"name":"%s","ph":"E","rel_ts":%%d,%s%s}' % (head, spec.ma_name, _COORDS, bw))
        recs.append('{"name":"iteration","ph":"E","rel_ts":%%d,%s,"duration_wall":%%d,'
                    '"duration_cuda":%%d}' % _COORDS)
        return ",\n".join(recs)

    def write(self, times: StageTimes) -> int:
        lay, s, it = self.layout, times.stage, times.iteration
        prog = self.programs[s]
        template = self._template(prog)
        present = [t for t in (*_TOKENS, _COORDS) if t in template]
        ranks = lay.stage_ranks(s)
        start = self.clocks.to_local(times.start, ranks)
        end = self.clocks.to_local(times.end, ranks)
        host_start = self.clocks.to_local(times.host_start, ranks)
        host_end = self.clocks.to_local(times.host_end, ranks)
        it0 = start[0]  # the iteration event is first: rel_ts counts from its B
        rel_s = np.rint((start - it0) * 1e3).astype(np.int64)
        rel_e = np.rint((end - it0) * 1e3).astype(np.int64)
        data: dict[int, np.ndarray] = {}  # event -> bytes per replica
        for kind, i in prog.ma_order:
            spec = prog.events[i]
            if kind == "E" and spec.ma_data:
                total = np.zeros(lay.dp, dtype=np.int64)
                for nbytes, mb in spec.ma_data:
                    if times.tokens is not None and mb >= 0:
                        total += (nbytes // self.seq_length) * times.tokens[:, mb]
                    else:
                        total += nbytes
                data[i] = total
        n_records = 2 + len(prog.ma_order)
        for d in range(lay.dp):
            for t in range(lay.tp):
                rank = int(ranks[d, t])
                vals = self.values.tokens(s, d, t, present)
                if it == 0:
                    pad = 0
                else:
                    pad = int(round((host_start[d, t] - self._last_host_end[rank]) * 1e3))
                args: list = [pad]
                for kind, i in prog.ma_order:
                    if kind == "B":
                        args.append(int(rel_s[i, d, t]))
                        continue
                    nbytes = data.get(i)
                    if nbytes is not None:
                        args.append(int(nbytes[d]))
                    args.append(int(rel_e[i, d, t]))
                    if nbytes is not None:
                        elapsed = max(int(rel_e[i, d, t] - rel_s[i, d, t]), 1)
                        args.append(float(nbytes[d]) / _BYTES_PER_GIBIT / (elapsed / 1e9))
                cuda = int(rel_e[0, d, t])
                wall = max(int(round((host_end[d, t] - host_start[d, t]) * 1e3)), cuda)
                args += [cuda, wall, cuda]
                text = _fill(template, present, vals) % tuple(args)
                self._last_host_end[rank] = float(host_end[d, t])
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
