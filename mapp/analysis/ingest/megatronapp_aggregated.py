"""The original MegatronApp's aggregated Chrome trace: every rank's records in one file.

MegatronApp's README has users run its ``aggregate.py`` after training, which merges the
per-rank ``benchmark-data-*.json`` files (``megatronapp.py``) into one Chrome-trace JSON array
for chrome://tracing or Perfetto; often that file is all that is kept. Its generations (all in
OpenSQZ/MegatronApp's history; ``tests/fixtures/megatronapp_original`` has the published ones):

* June 2025, beside the per-rank files of the authors' published PP4 runs (2712271e):
  ``B``/``E`` records as the tracer wrote them, ``ts`` in µs on one timeline, ``pid`` =
  dp x PP + pp, ``tid`` = tp, ``args`` = ``{"iteration": i, **the record's attrs}`` (the steps'
  ``E`` carry ``microbatch``, ``model_chunk``, ``pp_rank``).
* days later (b1a0d3ef, its ``profiling/`` copies of the same runs): the same, with ``i``
  (instant) records ``iteration begin`` / ``iteration end`` per rank and ``reduce``.
* later versions: each ``B``/``E`` pair joined into one ``X`` (``dur`` µs), ``pid`` = the global
  rank, ``tid`` 0, ``args`` holding every field of the tracer's record (``g_rk``, ``dp_rk``,
  ``pp_rk``, ``tp_rk``, ``dev``, ``group`` now with the rank itself in it, ``expect``, ``data``,
  ``bandwidth``, ``micro_batch_index``) and the aggregator's own ``id`` / ``related_sync_op``;
  ``M`` ``process_name`` records ``DP{d}-PP{p}-TP{t}``. The iteration records are gone: their
  pads and durations built the timeline. (This version also moves each matched warm-up and
  steady-state exchange pair, ``recv-extra`` with its ``send-warmup`` too, onto the shorter of
  the two, ends aligned: their durations are the aggregator's, not the tracer's.)

In every generation the timeline of iteration ``i`` starts, for every rank, where the aggregator
put the iterations' common start (each rank's ``rel_ts`` counts from its own iteration begin):
ranks are aligned at iteration starts, not on their clocks.

What :func:`split` makes of a file: one :class:`Rank` per rank (``pid``, and ``tid`` where the
records have no coordinates), whose spans (name, begin attrs, end attrs, start ns, duration ns,
iteration) the per-rank reader emits as it does its own. ``B``/``E`` records pair per name as
there; ``X`` records are spans. A rank's iteration ``i`` spans its ``iteration begin`` to its
``iteration end`` where those exist, else the earliest start of any rank's iteration-``i`` record
(the common start) to the end of its own last one. ``reduce`` instants (no duration) and
records of no iteration are not read. Coordinates come from ``dp_rk``/``pp_rk``/``tp_rk``, else
the ``process_name``, else (the June 2025 files) ``pp_rank`` and the ``pid``/``tid`` arithmetic
above; the global rank from ``g_rk``, else the per-rank reader's default order.
"""

from __future__ import annotations

import pathlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from mapp.errors import TraceFormatError

__all__ = ["sniff", "is_aggregated", "split", "Rank", "Span"]

_PROCESS_NAME = re.compile(r"^DP(\d+)-PP(\d+)-TP(\d+)$")
# per-rank record fields the aggregator copied into ``args``, and its own bookkeeping
_NOT_ATTRS = frozenset({"iteration", "id"})
_ITERATION_BEGIN, _ITERATION_END = "iteration begin", "iteration end"

# (name, begin attrs, end attrs, start ns, duration ns, iteration)
Span = tuple[str, dict, dict, int, int, int]


@dataclass(slots=True)
class Rank:
    pid: int
    tid: int
    rank: int | None
    coords: dict[str, int]
    device: str | None
    spans: list[Span] = field(repr=False)


def sniff(head: bytes) -> bool:
    """True for an aggregated file's start: a JSON array of Chrome records with MegatronApp's
    marks (a global rank in ``args``, or the iteration instants), not the per-rank ``rel_ts``."""
    return (head.lstrip().startswith(b"[") and b'"pid"' in head and b'"ts"' in head
            and b'"rel_ts"' not in head
            and any(mark in head for mark in (b'"g_rk"', b'"iteration begin"', b'"model_chunk"', b'"pp_rank"')))


def is_aggregated(document: list) -> bool:
    """Whether a loaded MegatronApp document is the aggregated form (Chrome records with
    ``pid``/``ts``), not a per-rank file (records with ``rel_ts``)."""
    first = next((r for r in document if isinstance(r, dict) and r.get("ph") != "M"), None)
    return first is not None and "pid" in first and "ts" in first and "rel_ts" not in first


def split(path: pathlib.Path, document: list, warn: Callable[[str], None]) -> list[Rank]:
    """The ranks of one aggregated file; see the module docstring."""
    records = [r for r in document if isinstance(r, dict) and isinstance(r.get("pid"), int)]
    names = {r["pid"]: m.groups() for r in records if r.get("ph") == "M" and r.get("name") == "process_name"
             and (m := _PROCESS_NAME.match(str((r.get("args") or {}).get("name", ""))))}
    units: dict[tuple[int, int], list[dict]] = {}
    for r in records:
        if r.get("ph") in ("B", "E", "X", "i", "I"):
            units.setdefault((r["pid"], r.get("tid") if isinstance(r.get("tid"), int) else 0), []).append(r)
    if not units:
        raise TraceFormatError(f"{path}: an aggregated MegatronApp trace with no B/E/X records",
                               "pass the aggregate.py output of a training run, or its per-rank benchmark-data files")
    # with coordinates in the records, each pid is one rank (its tid is always 0)
    identified = {pid for (pid, _), recs in units.items() if any("pp_rk" in _args(r) for r in recs)} | set(names)
    pipeline = 1 + max((a["pp_rank"] for recs in units.values() for r in recs
                        if isinstance((a := _args(r)).get("pp_rank"), int)), default=0)
    common = _common_starts(records)
    ranks = []
    for (pid, tid), recs in sorted(units.items()):
        coords, rank, device = _identity(recs, names.get(pid), pid, tid, pipeline, identified)
        if coords is None:
            raise TraceFormatError(f"{path}: cannot tell the dp/pp/tp coordinates of pid {pid} tid {tid}",
                                   "read the per-rank benchmark-data-*.json files the aggregated trace was made from")
        spans, dropped = _spans(recs, common)
        if dropped:
            warn(f"{path}: pid {pid}: {dropped} B records have no E (file cut off?); dropped them")
        ranks.append(Rank(pid, tid, rank, coords, device, spans))
    return ranks


def _args(record: dict) -> dict:
    args = record.get("args")
    return args if isinstance(args, dict) else {}


def _ns(us: object) -> int | None:
    if isinstance(us, bool) or not isinstance(us, (int, float)):
        return None
    return int(round(us * 1000))


def _iteration(record: dict) -> int | None:
    it = _args(record).get("iteration")
    return it if isinstance(it, int) and not isinstance(it, bool) else None


def _common_starts(records: list[dict]) -> dict[int, int]:
    """Iteration -> the earliest start of any rank's record of it (the iterations' common start)."""
    starts: dict[int, int] = {}
    for r in records:
        it, ts = _iteration(r), _ns(r.get("ts"))
        if it is not None and ts is not None and r.get("ph") in ("B", "X", "i", "I"):
            starts[it] = min(starts.get(it, ts), ts)
    return starts


def _identity(recs: list[dict], named: tuple[str, ...] | None, pid: int, tid: int, pipeline: int,
              identified: set[int]) -> tuple[dict[str, int] | None, int | None, str | None]:
    ident = next((a for r in recs if "pp_rk" in (a := _args(r))), None)
    if ident is not None and all(isinstance(ident.get(f"{axis}_rk"), int) for axis in ("dp", "pp", "tp")):
        coords = {axis: ident[f"{axis}_rk"] for axis in ("dp", "pp", "tp")}
        g = ident.get("g_rk")
        device = ident.get("dev")
        return coords, g if isinstance(g, int) else pid, None if device is None else str(device)
    if named is not None:
        dp, pp, tp = (int(x) for x in named)
        return {"dp": dp, "pp": pp, "tp": tp}, pid, None
    if pid in identified:
        return None, None, None
    # the June 2025 aggregator: pid = dp x PP + pp, tid = tp; pp_rank on the steps' E records
    pp = next((a["pp_rank"] for r in recs if isinstance((a := _args(r)).get("pp_rank"), int)), None)
    if pp is None or (pid - pp) % pipeline:
        return None, None, None
    return {"dp": (pid - pp) // pipeline, "pp": pp, "tp": tid}, None, None


def _spans(recs: list[dict], common: dict[int, int]) -> tuple[list[Span], int]:
    spans: list[Span] = []
    open_: dict[str, list[tuple[dict, int, int]]] = {}
    begins: dict[int, int] = {}
    ends: dict[int, int] = {}
    last_end: dict[int, int] = {}
    for r in sorted(recs, key=lambda r: (_ns(r.get("ts")) or 0)):
        name, ph, ts, it = r.get("name"), r.get("ph"), _ns(r.get("ts")), _iteration(r)
        if not isinstance(name, str) or ts is None or it is None:
            continue
        if ph in ("i", "I"):
            if name == _ITERATION_BEGIN:
                begins[it] = ts
            elif name == _ITERATION_END:
                ends[it] = ts
            continue
        attrs = {k: v for k, v in _args(r).items() if k not in _NOT_ATTRS}
        if ph == "X":
            dur = _ns(r.get("dur")) or 0
            spans.append((name, {}, attrs, ts, dur, it))
        elif ph == "B":
            open_.setdefault(name, []).append((attrs, ts, it))
            continue
        else:  # E
            stack = open_.get(name)
            if not stack:
                continue
            begin, start, it = stack.pop()
            spans.append((name, begin, attrs, start, ts - start, it))
        last_end[it] = max(last_end.get(it, ts), spans[-1][3] + spans[-1][4])
    for it in sorted(last_end.keys() | begins.keys()):
        start = begins.get(it, common.get(it))
        end = ends.get(it, last_end.get(it))
        if start is not None and end is not None and end >= start:
            spans.append(("iteration", {}, {}, start, end - start, it))
    spans.sort(key=lambda s: (s[3], -s[4]))
    return spans, sum(len(stack) for stack in open_.values())
