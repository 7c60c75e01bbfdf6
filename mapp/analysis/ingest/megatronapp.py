"""Reader for the original MegatronApp (MegaScan) per-rank files.

Each rank writes ``benchmark-data-{dp}-pipeline-{pp}-tensor-{tp}.json``: a JSON array of flat
``B``/``E`` records. What the original tracer writes (``megatron/training/trace.py`` of
OpenSQZ/MegatronApp, and the scopes in ``pipeline_parallel/schedules.py``,
``tensor_parallel/mappings.py``, ``training/training.py``):

* every record but the iteration's ``B`` is ``{**attrs, "name", "ph", "rel_ts", "dp_rk",
  "pp_rk", "tp_rk", "dev", "g_rk"}``; ``rel_ts`` is ns of CUDA-event time since the
  iteration's ``B`` event; ``B`` records carry no attrs, ``E`` records the scope's.
* iterations are bracketed by ``{"name": "iteration", "ph": "B", "pad_before": ns}`` (nothing
  else: no ``rel_ts``, no coordinates) and ``{"name": "iteration", "ph": "E", "rel_ts",
  ..., "duration_wall", "duration_cuda"}``: ``pad_before`` is the host (``time.time_ns``) time
  since the previous traced iteration's end (0 for the first), ``duration_wall`` the host time
  from the iteration's begin to after the ``torch.cuda.synchronize()`` at its end,
  ``duration_cuda`` its own ``rel_ts``.
* attrs: ``micro_batch_index`` on steps and on most p2p scopes; ``expect`` (the peer's scope
  name) on ``recv-warmup``/``send-warmup``/``recv-extra``/``exchange-*`` and on the TP mappings
  (``_reduce`` expects ``_reduce``); ``group`` (the *other* global ranks) on the same ones;
  ``data`` (bytes sent + received) on every p2p scope; ``bandwidth`` after ``data`` on the
  ``E`` record: ``data / 2**27`` per second since its ``B`` -- the tracer's "Gbps", binary
  gigabits per second (``data x 8 / 2**30 / s``), i.e. 7.45 x the GB/s figure (bytes/ns).
  Where a p2p call moved nothing (the first stage's ``recv-warmup``, the last stage's
  ``exchange-next``, ...) ``data``, ``group`` and ``bandwidth`` are null; with TP 1 a
  ``_reduce``'s ``group`` is null. The gradient reduction is an ``allreduce`` scope with no
  attrs, the optimizer step an ``optimizer`` scope with none; with PP 1 there are no step or
  p2p records at all.

The tracer's versions before June 2025 (OpenSQZ/MegatronApp at 2712271e, whose authors published
two PP4 runs: ``tests/fixtures/megatronapp_original``) wrote less: ``iteration``, ``forward`` and
``backward`` records only, the steps' ``E`` carrying ``microbatch``, ``model_chunk`` and ``pp_rank``,
and no ``g_rk`` or coordinates on any record. Such a file's rank comes from its name, in
megatron-core's default rank order ``tp + TP (dp + DP pp)`` over the files read (a warning says
so), its steps' ``microbatch`` and ``chunk`` from those attrs.

What this reader builds, per rank:

* one ``X`` row per ``B``/``E`` pair (a stack per name; ``E`` attrs win over ``B`` attrs);
  ``B`` records left open at the end of the file (a job killed mid-iteration) are dropped
  with a warning. An iteration bracket that repeats the previous one record for record (the
  original's ``iteration_end`` runs twice per iteration and re-emits its pending events) is
  dropped with a warning.
* an absolute time axis: iteration ``k`` starts at ``sum(pad_before[0..k]) +
  sum(duration_wall[0..k-1])`` and an event at ``start + rel_ts`` (``duration_wall`` falls
  back to the iteration ``E``'s ``rel_ts``). The clock is the rank's own.
* ``iteration``: the record's own ``iteration`` attr if it has one, else the count of traced
  iterations before it in the file (0, 1, ...); null outside any iteration bracket.
* ``cat``/``lane``: ``iteration``/"iteration"; tensor-parallel mappings (``_reduce``,
  ``_gather_along_*``, ``_reduce_scatter_along_*``), ``allreduce`` and ``grad-sync`` are
  ``collective``/"comm"; ``send-*``/``recv-*``/``exchange-*`` are ``p2p``/"comm";
  ``optimizer*`` is ``optimizer``/"compute"; everything else ``compute``/"compute". A p2p
  scope whose ``data`` is null and a TP mapping whose ``group`` is null moved nothing: they
  are ``other``/"comm".
* collectives: ``group_ranks`` = sorted(``group`` + own rank); ``group`` is "tp", "dp" or "pp"
  when the members' coordinates (from the files read) form exactly that axis, else null.
  MegatronApp tags its TP mappings with the TP x DP group; when a TP mapping's members are
  exactly this rank's TP x DP plane, the row is narrowed to the TP group (from the coordinates
  of the files read, or, when every file follows megatron-core's default rank order
  ``g_rk = tp + TP (dp + DP pp)``, from that arithmetic, so that missing files do not matter)
  and the original list is kept in ``args["mapp_original_group"]``. An ``allreduce`` without a
  ``group`` (the original's) is the data-parallel gradient reduction: its group is this rank's
  DP group, found the same way, and ``args["mapp_inferred_group"]`` says so.
* p2p: ``peer`` is the single rank in ``group`` when there is one, else the pipeline
  neighbour (``send-warmup``/``exchange-next``/``recv-cooldown`` talk to stage pp+1,
  ``recv-warmup``/``recv-extra``/``exchange-prev``/``send-extra``/``send-cooldown`` to pp-1)
  found by coordinates.
* ``microbatch`` from ``micro_batch_index`` (a compute scope without one, inside a step, that
  step's: ``_within_steps``), ``bytes`` from ``data``; ``seq``, ``chunk`` (but in
  the older files above), ``layer``, ``cp``, ``ep`` are null (the format has none of them).
  ``args`` holds the original extra attrs (``expect``, ``bandwidth`` in the original's unit,
  ``group``, ``duration_cuda``, ...).
* the ranks table: layout = max + 1 per axis over the files read, ``world_size`` their product,
  ``device`` from ``dev``, ``clock`` "cuda" (the tracer times with CUDA events).
"""

from __future__ import annotations

import pathlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import orjson
import polars as pl

from mapp.analysis.ingest import megatronapp_aggregated, schema
from mapp.analysis.ingest._json import load_document, paused_gc
from mapp.errors import TraceFormatError

__all__ = ["NAME", "LAYER_SCOPES", "BACKWARD_STEPS", "sniff", "read"]

NAME = "megatronapp"

_FILE_NAME = re.compile(r"benchmark-data-(\d+)-pipeline-(\d+)-tensor-(\d+)\.json(?:\.gz)?$")
_CORE_FIELDS = frozenset({"name", "ph", "rel_ts", "dp_rk", "pp_rk", "tp_rk", "dev", "g_rk"})
_AXES = ("tp", "dp", "pp")

_TP_MAPPINGS = frozenset({
    "_reduce", "_gather_along_last_dim", "_gather_along_first_dim",
    "_reduce_scatter_along_first_dim", "_reduce_scatter_along_last_dim",
})
_COLLECTIVES = _TP_MAPPINGS | {"allreduce", "all_reduce", "_all_to_all", "all_gather",
                               "reduce_scatter", "broadcast"}
# ``grad-sync`` is one data-parallel collective when its record names the group; a bare
# ``grad-sync`` span only encloses the allreduce / reduce-scatter calls and is not matched.
_COMM_WRAPPERS = frozenset({"grad-sync"})
_P2P_PREFIXES = ("send-", "recv-", "exchange-")
# pipeline direction of each p2p event when its peer is not recorded: +1 next stage, -1 previous
_P2P_DIRECTION = {
    "send-warmup": 1, "recv-warmup": -1, "send-cooldown": -1, "recv-cooldown": 1,
    "exchange-next": 1, "exchange-prev": -1, "recv-extra": -1, "send-extra": -1,
    "send-forward": 1, "recv-forward": -1, "send-backward": -1, "recv-backward": 1,
}
# the data-parallel gradient reduction: the original records no group on it
_DP_REDUCTIONS = frozenset({"allreduce"})
LAYER_SCOPES = frozenset({"transformer_layer", "_forward_attention", "attention", "_forward_mlp", "mlp",
                          "MLP.forward"})
"""The original's scopes of a transformer layer's forward and its parts (``decoder`` holds them all)."""
BACKWARD_STEPS = frozenset({"backward", "backward-cooldown"})
"""The original's 1F1B steps of a backward pass (it times no backward layer)."""


def sniff(path: pathlib.Path, head: bytes) -> bool:
    """True for a MegatronApp per-rank file (by its name, or a JSON array of ``rel_ts``/``g_rk``
    records) or for the aggregated trace its ``aggregate.py`` makes of them (``megatronapp_aggregated``)."""
    if _FILE_NAME.search(path.name):
        return True
    start = head.lstrip()
    return (start.startswith(b"[") and b'"rel_ts"' in head and b'"g_rk"' in head) or megatronapp_aggregated.sniff(head)


@dataclass(slots=True)
class _RankFile:
    path: pathlib.Path
    rank: int | None
    coords: dict[str, int]
    device: str | None
    records: list[dict] = field(repr=False)
    # spans already paired on an absolute time axis (a rank of an aggregated trace), else None
    spans: list[megatronapp_aggregated.Span] | None = field(default=None, repr=False)


def read(files: list[pathlib.Path], *, warn: Callable[[str], None]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Read MegatronApp per-rank files into (events, ranks) tables; see the module docstring."""
    with paused_gc():
        documents = [(path, _document(path, warn)) for path in files]
    rank_files = _rank_files(documents, warn)
    layout = {axis: max((rf.coords[axis] for rf in rank_files), default=-1) + 1 for axis in _AXES}
    _default_order(rank_files, layout, warn)
    _one_file_per_rank(rank_files)
    coords_of = {rf.rank: rf.coords for rf in rank_files}
    by_coords = {(c["tp"], c["dp"], c["pp"]): rank for rank, c in coords_of.items()}
    groups = _Groups(coords_of, layout)

    columns: dict[str, list] = {name: [] for name in _EVENT_COLUMNS}
    for rf in rank_files:
        if rf.spans is None:
            _pair(rf, columns, groups, by_coords, warn)
        else:
            for name, begin, end, ts_ns, dur_ns, iteration in rf.spans:
                _emit(rf, columns, name, begin, end, ts_ns, dur_ns, iteration, groups, by_coords)
    events = pl.DataFrame(columns, schema={name: schema.EVENTS_SCHEMA[name] for name in _EVENT_COLUMNS})
    events = _within_steps(schema.conform(events, schema.EVENTS_SCHEMA)).sort(
        ["rank", "ts_ns", "dur_ns"], descending=[False, False, True], maintain_order=True)

    world_size = layout["tp"] * layout["dp"] * layout["pp"]
    if rank_files:
        world_size = max(world_size, max(rf.rank for rf in rank_files) + 1)
    ranks = pl.DataFrame(
        {
            "rank": [rf.rank for rf in rank_files],
            "world_size": [world_size] * len(rank_files),
            **{axis: [rf.coords[axis] for rf in rank_files] for axis in _AXES},
            **{f"layout_{axis}": [layout[axis]] * len(rank_files) for axis in _AXES},
            "device": [rf.device for rf in rank_files],
            "clock": ["cuda"] * len(rank_files),
            "format": [NAME] * len(rank_files),
            "src_file": [str(rf.path) for rf in rank_files],
        },
        schema_overrides={"device": pl.String(), "src_file": pl.String()},
    )
    return events, schema.conform(ranks, schema.RANKS_SCHEMA)


_EVENT_COLUMNS = ("rank", "tp", "pp", "dp", "ph", "name", "cat", "lane", "ts_ns", "dur_ns", "iteration",
                  "microbatch", "chunk", "group", "group_ranks", "peer", "bytes", "src_file", "args")


def _document(path: pathlib.Path, warn: Callable[[str], None]) -> list:
    document, salvage = load_document(path, (b"]",), "MegatronApp trace (JSON array)")
    if not isinstance(document, list):
        raise TraceFormatError(f"{path}: expected a JSON array of B/E records, found {type(document).__name__}",
                               "this does not look like a MegatronApp benchmark-data file")
    if salvage.truncated_at is not None:
        warn(f"{path}: truncated at byte {salvage.truncated_at}; kept {len(document)} records")
    return document


def _rank_files(documents: list[tuple[pathlib.Path, list]], warn: Callable[[str], None]) -> list[_RankFile]:
    """One ``_RankFile`` per per-rank file, and per rank of each aggregated trace; an aggregated
    trace beside per-rank files is their copy (``aggregate.py`` writes it into their directory)
    and is not read twice."""
    merged: list[tuple[pathlib.Path, list]] = []
    per_rank: list[tuple[pathlib.Path, list]] = []
    for path, doc in documents:
        (merged if megatronapp_aggregated.is_aggregated(doc) else per_rank).append((path, doc))
    if merged and per_rank:
        warn(f"read the {len(per_rank)} per-rank MegatronApp files, not the aggregated trace made of them "
             f"({', '.join(path.name for path, _ in merged)})")
        merged = []
    out = [_load(path, doc) for path, doc in per_rank]
    for path, doc in merged:
        out.extend(_RankFile(path, r.rank, r.coords, r.device, [], r.spans)
                   for r in megatronapp_aggregated.split(path, doc, warn))
    return out


def _one_file_per_rank(rank_files: list[_RankFile]) -> None:
    """Refuse two traces of one global rank (by their ``g_rk``, their file names or an aggregated
    trace's ``pid``), before their records are merged into one rank's."""
    seen: dict[int, pathlib.Path] = {}
    for rf in rank_files:
        if rf.rank in seen:
            raise TraceFormatError(f"rank {rf.rank} is in two traces ({seen[rf.rank].name} and {rf.path.name}): "
                                   "the same global rank, by g_rk, file name or pid",
                                   "keep one run's MegatronApp traces per directory")
        seen[rf.rank] = rf.path


def _load(path: pathlib.Path, document: list) -> _RankFile:
    records = [r for r in document if isinstance(r, dict)]
    ident = next((r for r in records if "g_rk" in r), None)
    from_name = _FILE_NAME.search(path.name)
    if ident is None and from_name is None:
        raise TraceFormatError(f"{path}: no record carries g_rk and the file name has no coordinates",
                               "expected benchmark-data-{dp}-pipeline-{pp}-tensor-{tp}.json")
    coords: dict[str, int] = {}
    if from_name:
        coords = {"dp": int(from_name[1]), "pp": int(from_name[2]), "tp": int(from_name[3])}
    if ident is not None:
        for axis in _AXES:
            if isinstance(ident.get(f"{axis}_rk"), int):
                coords[axis] = ident[f"{axis}_rk"]
    if len(coords) < 3:
        raise TraceFormatError(f"{path}: cannot tell the rank's dp/pp/tp coordinates",
                               "keep the original benchmark-data-{dp}-pipeline-{pp}-tensor-{tp}.json name")
    # (None: placed by ``read`` from the coordinates of every file, ``_default_order``)
    rank = ident["g_rk"] if ident is not None and isinstance(ident.get("g_rk"), int) else None
    device = ident.get("dev") if ident is not None else None
    return _RankFile(path, rank, coords, None if device is None else str(device), records)


def _default_order(rank_files: list[_RankFile], layout: dict[str, int], warn: Callable[[str], None]) -> None:
    """Give the files whose records name no global rank one from their coordinates, in
    megatron-core's default rank order ``tp + TP (dp + DP pp)``. The tracer's versions before
    June 2025 wrote no coordinates in their records (only ``pp_rank``, ``microbatch`` and
    ``model_chunk`` on the steps' ``E``), so the file name is all there is (OpenSQZ/MegatronApp
    at 2712271e: PP4 runs whose every file is so)."""
    placed = [rf for rf in rank_files if rf.rank is None]
    if not placed:
        return
    for rf in placed:
        c = rf.coords
        rf.rank = c["tp"] + layout["tp"] * (c["dp"] + layout["dp"] * c["pp"])
    warn(f"{len(placed)} of {len(rank_files)} MegatronApp ranks name no global rank (g_rk) in their records: "
         "placed by their coordinates (file names; an aggregated trace's pid and tid) in megatron-core's "
         "default rank order, tp + TP x (dp + DP x pp)")


class _Groups:
    """Process groups recovered from the coordinates of the files read."""

    def __init__(self, coords_of: dict[int, dict[str, int]], layout: dict[str, int]):
        self.coords_of = coords_of
        self.layout = layout
        tp, dp = layout["tp"], layout["dp"]
        # megatron-core's default order "tp-cp-ep-dp-pp": rank = tp + TP (dp + DP pp)
        self.default_order = bool(coords_of) and all(
            r == c["tp"] + tp * (c["dp"] + dp * c["pp"]) for r, c in coords_of.items())

    def axis_of(self, members: list[int]) -> str | None:
        """The parallel axis (tp/dp/pp) whose full group is exactly ``members``, if one is."""
        coords_of, layout = self.coords_of, self.layout
        if len(members) < 2 or any(m not in coords_of for m in members):
            return None
        coords = [coords_of[m] for m in members]
        for axis in _AXES:
            fixed = [a for a in _AXES if a != axis]
            if (len({tuple(c[a] for a in fixed) for c in coords}) == 1
                    and len({c[axis] for c in coords}) == len(members) == layout[axis]):
                return axis
        return None

    def narrow_to_tp(self, rf: _RankFile, members: list[int]) -> list[int] | None:
        """This rank's TP group, when ``members`` is exactly its TP x DP plane (MegatronApp's tagging)."""
        tp, dp = self.layout["tp"], self.layout["dp"]
        if dp < 2:
            return None
        c = rf.coords
        if self.default_order:
            base = tp * dp * c["pp"]
            if members != list(range(base, base + tp * dp)):
                return None
            first = rf.rank - c["tp"]
            return list(range(first, first + tp))
        coords_of = self.coords_of
        if any(m not in coords_of for m in members):
            return None
        plane = sorted(r for r, cc in coords_of.items() if cc["pp"] == c["pp"])
        if plane != members or len(plane) != tp * dp:
            return None
        return sorted(r for r in plane if coords_of[r]["dp"] == c["dp"])

    def dp_group(self, rf: _RankFile) -> list[int] | None:
        """This rank's data-parallel group (same tp and pp), when DP > 1 and it is known in full."""
        tp, dp = self.layout["tp"], self.layout["dp"]
        if dp < 2:
            return None
        c = rf.coords
        if self.default_order:
            return [c["tp"] + tp * (d + dp * c["pp"]) for d in range(dp)]
        group = sorted(r for r, cc in self.coords_of.items() if cc["tp"] == c["tp"] and cc["pp"] == c["pp"])
        return group if len(group) == dp else None


def _category(name: str, attrs: dict) -> tuple[str, str]:
    if name == "iteration":
        return "iteration", "iteration"
    if name in _COMM_WRAPPERS:
        return ("collective", "comm") if isinstance(attrs.get("group"), list) else ("other", "comm")
    if name in _TP_MAPPINGS and "group" in attrs and attrs["group"] is None:
        return "other", "comm"  # TP size 1: the mapping returned at once
    if name in _COLLECTIVES or name.replace("-", "_") in _COLLECTIVES:
        return "collective", "comm"
    if name.startswith(_P2P_PREFIXES):
        if "data" in attrs and attrs["data"] is None:
            return "other", "comm"  # the call had nothing to move (an end of the pipeline)
        return "p2p", "comm"
    if name.startswith("optimizer"):
        return "optimizer", "compute"
    return "compute", "compute"


def _drop_repeated_iterations(records: list[dict]) -> tuple[list[dict], int]:
    """``records`` without iteration brackets that repeat the previous one record for record
    (same ``pad_before``, names, phases and ``rel_ts``; the ``E``'s ``duration_wall`` differs:
    the original's second ``iteration_end`` re-processes the same pending events with the same
    stale ``pad_before``)."""
    out: list[dict] = []
    bracket: list[dict] | None = None
    previous = None
    dropped = 0
    for record in records:
        name, ph = record.get("name"), record.get("ph")
        if name == "iteration" and ph == "B":
            if bracket is not None:
                out.extend(bracket)
            bracket = [record]
            continue
        if bracket is None:
            out.append(record)
            continue
        bracket.append(record)
        if name == "iteration" and ph == "E":
            signature = (bracket[0].get("pad_before"),
                         *((r.get("name"), r.get("ph"), r.get("rel_ts")) for r in bracket[1:]))
            if signature == previous and len(signature) > 2:
                dropped += 1
            else:
                out.extend(bracket)
                previous = signature
            bracket = None
    if bracket is not None:
        out.extend(bracket)
    return out, dropped


def _pair(rf: _RankFile, out: dict[str, list], groups: _Groups,
          by_coords: dict[tuple[int, int, int], int], warn: Callable[[str], None]) -> None:
    iteration: int | None = None
    traced = 0
    start_ns = 0          # absolute start of the current iteration
    end_ns = 0            # absolute end of the last finished iteration
    open_: dict[str, list[tuple[dict, int, int | None]]] = {}
    orphans = 0
    records, repeated = _drop_repeated_iterations(rf.records)
    if repeated:
        warn(f"{rf.path}: {repeated} iteration(s) repeat the one before record for record "
             "(MegatronApp's tracer re-emits an iteration when iteration_end runs twice); dropped them")
    for record in records:
        name, ph = record.get("name"), record.get("ph")
        if not isinstance(name, str) or ph not in ("B", "E"):
            continue
        rel = _int(record.get("rel_ts")) or 0
        if name == "iteration" and ph == "B":
            iteration = _int(record.get("iteration"))
            iteration = traced if iteration is None else iteration
            traced += 1
            start_ns = end_ns + (_int(record.get("pad_before")) or 0)
        stack = open_.setdefault(name, [])
        if ph == "B":
            stack.append((record, start_ns + rel, iteration))
            continue
        if not stack:
            orphans += 1
            continue
        begin, begin_ns, begin_iteration = stack.pop()
        end = start_ns + rel
        if name == "iteration":
            wall = _int(record.get("duration_wall"))
            end = begin_ns + (wall if wall is not None else rel)
            end_ns = end
        _emit(rf, out, name, begin, record, begin_ns, end - begin_ns, begin_iteration, groups, by_coords)
        if name == "iteration":
            iteration = None
    left_open = sum(len(stack) for stack in open_.values())
    if left_open:
        warn(f"{rf.path}: {left_open} B records have no E (file cut off mid-iteration?); dropped them")
    if orphans:
        warn(f"{rf.path}: {orphans} E records have no B; dropped them")


def _emit(rf: _RankFile, out: dict[str, list], name: str, begin: dict, end: dict, ts_ns: int, dur_ns: int,
          iteration: int | None, groups: _Groups, by_coords: dict[tuple[int, int, int], int]) -> None:
    attrs = {k: v for k, v in begin.items() if k not in _CORE_FIELDS}
    attrs.update((k, v) for k, v in end.items() if k not in _CORE_FIELDS)
    cat, lane = _category(name, attrs)
    members = attrs.get("group")
    group_ranks = group = peer = None
    if cat == "collective" and isinstance(members, list):
        group_ranks = sorted({rf.rank, *(m for m in members if isinstance(m, int))})
        group = groups.axis_of(group_ranks)
        if group is None and name in _TP_MAPPINGS:
            narrowed = groups.narrow_to_tp(rf, group_ranks)
            if narrowed is not None:
                attrs["mapp_original_group"] = members
                group_ranks, group = narrowed, "tp"
    elif cat == "collective" and name in _DP_REDUCTIONS and "group" not in attrs:
        inferred = groups.dp_group(rf)
        if inferred is not None:
            group_ranks, group = inferred, "dp"
            attrs["mapp_inferred_group"] = "dp"
    elif cat == "p2p":
        others = [m for m in members if isinstance(m, int) and m != rf.rank] if isinstance(members, list) else []
        if len(others) == 1:
            peer = others[0]
        elif name in _P2P_DIRECTION:
            c = rf.coords
            peer = by_coords.get((c["tp"], c["dp"], c["pp"] + _P2P_DIRECTION[name]))
    out["rank"].append(rf.rank)
    out["tp"].append(rf.coords["tp"])
    out["pp"].append(rf.coords["pp"])
    out["dp"].append(rf.coords["dp"])
    out["ph"].append("X")
    out["name"].append(name)
    out["cat"].append(cat)
    out["lane"].append(lane)
    out["ts_ns"].append(ts_ns)
    out["dur_ns"].append(dur_ns)
    out["iteration"].append(iteration)
    # (``microbatch`` and ``model_chunk``: the tracer's versions before June 2025)
    out["microbatch"].append(_int(attrs.get("micro_batch_index", attrs.get("microbatch"))))
    out["chunk"].append(_int(attrs.get("model_chunk")))
    out["group"].append(group)
    out["group_ranks"].append(group_ranks)
    out["peer"].append(peer)
    out["bytes"].append(_int(attrs.get("data")))
    out["src_file"].append(str(rf.path))
    out["args"].append(orjson.dumps(attrs).decode())


_WAITING_SCOPES = frozenset({"loss"})
"""Scopes inside a step that are no layer's work: the original's ``loss`` scope holds the loss
function, whose NaN check reads the loss back (a sync) and which, in the original's fork, also
all-reduces the reported loss over the data-parallel group in every microbatch: its time is
mostly waiting on the other replicas (0.08-6 ms beside forwards of 2.6-9.7 ms, simulated)."""


def _within_steps(events: pl.DataFrame) -> pl.DataFrame:
    """``events`` with each compute scope that records no microbatch (the layers' scopes: the
    tracer puts ``micro_batch_index`` on the pipeline steps only) given that of the step it
    ran inside on its rank (``forward``, ``backward`` and their warm-up and cool-down forms,
    which do not nest); not the ``_WAITING_SCOPES``, whose time follows other replicas, not
    their microbatch's data. A layer of a long microbatch is slower on every rank of its
    replica, and stage 1 fits that per microbatch (``detect.replicas``); without it, in a TP4 x
    PP2 x DP4 job on lengths of sigma 0.3 in this format, the four TP ranks of one replica's
    first stage read "slow compute" 1.15-1.17x, where mapp's own format of the same job, whose
    every span carries its microbatch, reads no suspect. (Given to the loss scope too, the fit
    took its waits for data: a healthy PP2 x DP4 job read "slow compute" 1.88x.)"""
    compute = (pl.col("cat") == "compute") & ~pl.col("name").is_in(list(_WAITING_SCOPES))
    steps = events.filter(compute & pl.col("microbatch").is_not_null()).select(
        "rank", step_ts=pl.col("ts_ns"), step_end=pl.col("ts_ns") + pl.col("dur_ns"), step_mb=pl.col("microbatch"))
    if steps.is_empty():
        return events
    events = events.with_columns(_row=pl.int_range(pl.len()))
    inner = events.filter(compute & pl.col("microbatch").is_null()).select("_row", "rank", "ts_ns", "dur_ns")
    found = inner.sort("rank", "ts_ns").join_asof(
        steps.sort("rank", "step_ts"), left_on="ts_ns", right_on="step_ts", by="rank", strategy="backward",
        check_sortedness=False).filter(pl.col("ts_ns") + pl.col("dur_ns") <= pl.col("step_end"))
    # (in the rows' own order: the sort after this keeps it among scopes of one start and length)
    return events.join(found.select("_row", "step_mb"), on="_row", how="left").sort("_row").with_columns(
        microbatch=pl.coalesce("microbatch", "step_mb")).drop("_row", "step_mb")


def _int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(round(value))
    return None
