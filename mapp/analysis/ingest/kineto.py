"""Reader for PyTorch profiler (Kineto) Chrome traces, one file per rank (or per profiling cycle).

A Kineto trace is one JSON object: ``traceEvents`` plus ``distributedInfo`` (backend, rank,
world_size, pg_config), ``deviceProperties``, ``baseTimeNanoseconds`` and a few more keys.

What this reader keeps and how it maps it:

* ``X`` events (``B``/``E`` pairs are joined per thread) of the CPU categories ``cpu_op``,
  ``user_annotation`` and the GPU categories ``kernel``, ``gpu_memcpy``, ``gpu_memset``,
  ``gpu_user_annotation`` (older spellings ``Operator``, ``Kernel``, ``Memcpy``, ``Memset`` too).
  Metadata (``M``), flows (``s``/``f``), instants (``i``), ``python_function``, ``Trace`` and
  the CUDA runtime/driver calls are dropped (runtime calls are only used to date GPU work, below).
* files: one per rank, or one per profiling cycle of a rank (``schedule`` repeats its cycle and
  ``tensorboard_trace_handler`` writes each to a file): a rank's files of one OS process whose
  steps are disjoint are one trace (``_cycles_joined``).
* ``rank`` from ``distributedInfo.rank`` (else a number in the file name, else 0 for the only
  trace of a bundle: a process profiled without torch.distributed); coordinates
  (``tp``, ``pp``, ``dp`` and the ``layout_*`` sizes) from the megatron-core process groups
  that ``pg_config`` lists (the rank's place in each), else null (a plain DDP or FSDP job has no
  such layout).
* time: ``ts_ns = round(ts_us * 1000) + baseTimeNanoseconds`` (Kineto's ``ts`` is float
  microseconds; with the base added the axis is Unix-epoch ns on the host clock, which CUPTI
  also maps GPU timestamps onto). A file cut off inside ``traceEvents`` loses the trailing
  ``baseTimeNanoseconds``; its times then stay on Kineto's raw clock (still self-consistent).
* ``lane``: ``cpu:<tid>`` for CPU events, ``stream:<tid>`` for GPU events (Kineto puts the CUDA
  stream id in ``tid`` and the device in ``pid``).
* ``iteration``: ``ProfilerStep#N`` spans become ``cat="iteration"`` rows (lane "iteration")
  with iteration N; every other event gets the N of the step span containing its start, a GPU
  event that of its launching runtime call (by ``correlation``; null when the launch was not
  recorded, i.e. before the profiling window); null outside any step. A trace with no step
  spans (profiled without ``schedule``/``step()``) gets ``mapp:iteration#N`` spans from its
  optimizer steps (``Optimizer.step#*`` annotations; ``_infer_steps``) and a warning says so.
* ``launch_ns``: GPU work's launching runtime call's start (by ``correlation``; a collective
  timed by its kernel, the kernel's), on the same clock as ``ts_ns``; null for host events and
  for work launched before the profiling window. The gap to ``ts_ns`` is the work's wait in the
  queue, which tells a GPU held by another process from one its host starves.
* communication, one canonical event per call so that nothing is counted twice:
  GPU events carrying ``Collective name`` if the rank has any; else CPU events carrying it
  (``record_param_comms`` and friends). ``gloo:*`` annotations are canonical unless the rank
  only has CPU ``Collective name`` events (then those describe the same calls); ``nccl:*``
  annotations without args are canonical only when nothing above exists. Canonical events get
  ``cat`` ``collective`` or ``p2p`` and ``name`` the normalised collective (``all_reduce``,
  ``all_gather``, ``reduce_scatter``, ``broadcast``, ``all_to_all``, ``barrier``, ``send``,
  ``recv``, ...); the other copies keep their name with ``cat="other"`` and no comm fields.
  The original event name is kept in ``args["kineto_name"]``.
* comm fields: ``group_ranks`` from ``Process Group Ranks`` (else the pg_config entry of
  ``Process Group Name``; for gloo, which records no group, the ranks when every process group
  in pg_config has the same ones); ``group`` label from the group's description
  (``default_pg`` -> "world", Megatron's ``TENSOR_MODEL_PARALLEL_GROUP`` -> "tp", ... ; another
  description as written) else the PG name, null when it cannot be told; ``seq`` from ``Seq``
  (gloo has none: null); ``bytes`` = ``In msg nelems`` (or the first input's dims for gloo)
  x the dtype's size, null if either is unknown; p2p ``peer`` from ``Dst Rank``/``Src Rank``/
  ``Rank`` (group-local, mapped through the group's ranks), for gloo from the enclosing
  ``c10d::send``/``c10d::recv_`` call's arguments (group-local too, and gloo names no group:
  mapped to a global rank across the ranks read together, see ``_gloo_groups``), or the other
  rank of a 2-rank world; where shapes were not recorded (no c10d arguments), a pipeline
  neighbour of megatron-core's (``_gloo_groups``, from each rank's pipeline group, or from the
  world's rank order where the world is a rank's only group: ``_pipeline_group``). A
  ``gloo:send`` gets ``args["async"] = true``: its span lasts until its caller waits on it,
  which is not when the receive ends. A gloo collective that names no group gets one where the
  ranks' calls show which (``_gloo_groups``).
* on a rank that recorded GPU kernels the CPU runs ahead of the GPU, so its CPU side says little
  about when work happened: the canonical comm event of a call is its collective kernel (a CPU
  ``record_param_comms`` that is canonical takes the timing and stream of the NCCL/RCCL kernel it
  launched), so that arrival at a collective is when the kernel starts on its stream.
* the rest, by what the time was spent on (annotations are spans for grouping, not work):
  ``user_annotation`` and ``gpu_user_annotation`` spans are ``other`` (``Optimizer.*`` annotations
  ``optimizer`` on CPU-only ranks); on a rank with GPU kernels, compute is kernels
  (``cat="compute"``), memcpy/memset are ``memory``, and CPU ops are ``other`` (host-side launches);
  on a CPU-only rank (gloo) CPU ops are ``compute``. The ``c10d::*`` dispatch ops that start a comm
  call and the functional collectives' ops (``_c10d_functional::*``: ``schema.COMM_OP_PREFIXES``),
  comm kernels that are not canonical and the other copies of a call are ``other``.
  ``microbatch``, ``chunk``, ``layer`` are null; ``args`` is the event's own args.

Parsing: ``orjson.loads`` of the whole file with the cyclic GC paused, then one Python pass
over ``traceEvents``. On a 150 MB, 510k-event trace (2 shared cores) this whole reader took
~3.2 s, while DuckDB's ``read_json`` needed ~5.6 s just to unnest and count ``traceEvents``
and ~9.5 s to project them to Arrow; with the GC left on, ``orjson.loads`` alone took 5-10 s. The ranks table has ``format="kineto"``, ``clock="host"``, ``host`` from
``host_name``, ``device`` from ``deviceProperties[0].name`` where the rank ran GPU work (GPU events
or an NCCL process group: the profiler lists the machine's GPUs whether or not the process used
one), ``world_size`` from distributedInfo.
"""

from __future__ import annotations

import bisect
import math
import pathlib
import re
from collections.abc import Callable
from dataclasses import dataclass

import orjson
import polars as pl

from mapp.analysis.ingest import _gloo_groups, schema
from mapp.analysis.ingest._json import HEAD_BYTES, load_document, paused_gc, read_head
from mapp.errors import TraceFormatError

__all__ = ["NAME", "OPTIMIZER_STEP", "sniff", "read"]

NAME = "kineto"

_CPU_CATS = frozenset({"cpu_op", "user_annotation", "Operator"})
_GPU_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "Kernel", "Memcpy", "Memset"})
_LAUNCH_CATS = frozenset({"cuda_runtime", "cuda_driver", "Runtime"})
_KEEP_CATS = _CPU_CATS | _GPU_CATS
_COPY_CATS = frozenset({"gpu_memcpy", "gpu_memset", "Memcpy", "Memset"})
_KERNEL_CATS = frozenset({"kernel", "Kernel"})
_ANNOTATION_CATS = frozenset({"user_annotation", "gpu_user_annotation"})
# collective-library kernels: communication (and its waiting), never compute
_COMM_KERNEL = re.compile(schema.COMM_KERNEL_PATTERN, re.IGNORECASE)

_COLLECTIVE_NAMES = {
    "allreduce": "all_reduce", "all_reduce": "all_reduce", "allreduce_coalesced": "all_reduce",
    "allgather": "all_gather", "all_gather": "all_gather", "_allgather_base": "all_gather",
    "allgather_base": "all_gather", "allgather_coalesced": "all_gather", "all_gather_into_tensor": "all_gather",
    "allgather_into_tensor_coalesced": "all_gather",
    "reduce_scatter": "reduce_scatter", "reducescatter": "reduce_scatter", "_reduce_scatter_base": "reduce_scatter",
    "reduce_scatter_base": "reduce_scatter", "reduce_scatter_tensor": "reduce_scatter",
    "reduce_scatter_tensor_coalesced": "reduce_scatter",
    "alltoall": "all_to_all", "all_to_all": "all_to_all", "alltoall_base": "all_to_all", "all_to_allv": "all_to_all",
    "broadcast": "broadcast", "reduce": "reduce", "gather": "gather", "scatter": "scatter", "barrier": "barrier",
    "send": "send", "recv": "recv", "recvanysource": "recv", "recv_anysource": "recv",
}
_P2P = frozenset({"send", "recv"})
# "Collective name"s of p2p records (before _COLLECTIVE_NAMES normalises them)
_P2P_RECORDS = frozenset(k for k, v in _COLLECTIVE_NAMES.items() if v in _P2P)

_DTYPE_BYTES = {
    "float": 4, "float32": 4, "double": 8, "float64": 8, "half": 2, "float16": 2, "c10::half": 2,
    "bfloat16": 2, "c10::bfloat16": 2, "long": 8, "long int": 8, "int64": 8, "int": 4, "int32": 4,
    "short": 2, "short int": 2, "int16": 2, "char": 1, "signed char": 1, "int8": 1, "byte": 1,
    "unsigned char": 1, "uint8": 1, "bool": 1, "complexfloat": 8, "c10::complex<float>": 8,
    "complexdouble": 16, "c10::complex<double>": 16, "float8_e4m3fn": 1, "float8_e5m2": 1,
    "c10::float8_e4m3fn": 1, "c10::float8_e5m2": 1,
}

# Megatron-core's process-group descriptions -> mapp group labels
_GROUP_LABELS = {
    "default_pg": "world",
    "TENSOR_MODEL_PARALLEL_GROUP": "tp",
    "PIPELINE_MODEL_PARALLEL_GROUP": "pp",
    "DATA_PARALLEL_GROUP": "dp",
    "DATA_PARALLEL_GROUP_GLOO": "dp",
    "DATA_PARALLEL_GROUP_WITH_CP": "dp_cp",
    "DATA_PARALLEL_GROUP_WITH_CP_GLOO": "dp_cp",
    "CONTEXT_PARALLEL_GROUP": "cp",
    "EXPERT_MODEL_PARALLEL_GROUP": "ep",
    "EXPERT_TENSOR_PARALLEL_GROUP": "etp",
    "EXPERT_DATA_PARALLEL_GROUP": "edp",
    "EMBEDDING_GROUP": "embd",
    "POSITION_EMBEDDING_GROUP": "pos_embd",
    "MODEL_PARALLEL_GROUP": "mp",
    "TENSOR_AND_DATA_PARALLEL_GROUP": "tp_dp",
    "TENSOR_AND_DATA_PARALLEL_GROUP_WITH_CP": "tp_dp_cp",
    "TENSOR_AND_CONTEXT_PARALLEL_GROUP": "tp_cp",
}
_RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)
_STEP = re.compile(r"(?:ProfilerStep|mapp:iteration)#(\d+)$")
OPTIMIZER_STEP = "Optimizer.step#"
"""How a ``torch.optim`` optimizer's span around each ``step()`` is named: ``Optimizer.step#<class>.step``."""
_C10D_P2P = {"c10d::send": "send", "c10d::recv_": "recv", "c10d::recv_any_source_": "recv"}


_KINETO_KEYS = (b'"schemaVersion"', b'"distributedInfo"', b'"deviceProperties"', b'"baseTimeNanoseconds"')


def sniff(path: pathlib.Path, head: bytes) -> bool:
    """True for a PyTorch profiler trace: a JSON object with Kineto's own top-level keys.

    ``traceEvents`` is also in other Chrome traces, so one of Kineto's own keys must be in the
    head; ``traceEvents`` itself need not be. Kineto writes its metadata first, and the
    ``pg_config`` of a Megatron job (every process group of the rank, with its members) or the
    ``deviceProperties`` of an 8-GPU node push ``traceEvents`` well past the head (4 KB: the
    4-GPU traces of ``tests/corpus`` re-indented put it at 4.4 KB). A file cut off before
    ``traceEvents`` is then the damaged trace it is, which the reader reports."""
    if not head.lstrip().startswith(b"{"):
        return False
    if any(key in head for key in _KINETO_KEYS):
        return True
    deep = head if len(head) < HEAD_BYTES else read_head(path, DEEP_HEAD_BYTES)
    return b'"traceEvents"' in deep and _KINETO_CATEGORY.search(deep) is not None


DEEP_HEAD_BYTES = 1 << 20
"""How much of a file ``sniff`` reads where the head shows a JSON object but none of Kineto's
own keys: traces passed through other tools come with their keys reordered, an object of the
tool's own first and Kineto's keys last (TraceLens's H100 and MI300 test traces: a 26 KB
``metadata`` object, then ``traceEvents``, ``schemaVersion`` 8.6 MB in). Their events then
tell: a ``traceEvents`` array holding events of Kineto's categories, which other Chrome traces
do not use."""

_KINETO_CATEGORY = re.compile(rb'"cat"\s*:\s*"(cpu_op|kernel|cuda_runtime|cuda_driver|python_function|'
                              rb'user_annotation|gpu_user_annotation|gpu_memcpy|gpu_memset|ac2g|'
                              rb'Operator|Kernel|Memcpy|Memset|Runtime)"')   # (older Kineto's spellings)


def read(files: list[pathlib.Path], *, warn: Callable[[str], None]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Read Kineto traces (one per rank, or one per profiling cycle of a rank) into (events,
    ranks) tables; see the module docstring."""
    by_rank: dict[int, list[_File]] = {}
    for path in files:
        with paused_gc():
            one = _read_one(path, warn, alone=len(files) == 1)
        by_rank.setdefault(one.rank, []).append(one)
    events, ranks, groups, pipelines, joined = [], [], {}, {}, {}
    for rank, parts in by_rank.items():
        whole, how = _cycles_joined(parts)
        if how:
            joined.setdefault(how, []).append(rank)
        for one in whole:
            events.append(one.events)
            ranks.append(one.row)
            groups[rank] = one.members
            pipelines[rank] = one.pipeline
    for how, which in joined.items():
        warn(f"{'rank' if len(which) == 1 else 'ranks'} {_ranges(which)}: {how}")
    if not events:
        return schema.empty_events(), pl.DataFrame(schema=schema.RANKS_SCHEMA)
    return (_gloo_groups.resolve(pl.concat(events, how="vertical"), groups, warn, pipelines),
            pl.concat(ranks, how="vertical"))


@dataclass(slots=True)
class _File:
    """One trace file read: its events (with the ``_gloo_groups.LOCAL`` column), its rank's row,
    the members of the rank's process groups and of its pipeline group, and the OS process that
    recorded it."""

    rank: int
    events: pl.DataFrame
    row: pl.DataFrame
    members: list[tuple]
    pipeline: tuple[int, ...] | None
    pid: object

    def steps(self) -> set[int]:
        return set(self.events.filter(pl.col("cat") == "iteration")["iteration"].drop_nulls().to_list())

    def calls(self) -> int:
        return self.events.filter(pl.col("cat").is_in(["collective", "p2p"])).height


def _cycles_joined(parts: list[_File]) -> tuple[list[_File], str | None]:
    """A rank's files as one trace where they are profiling cycles of one process.

    ``torch.profiler.schedule`` repeats its wait/warmup/active cycle (forever with the default
    ``repeat=0``) and ``tensorboard_trace_handler`` writes a file per cycle: one process's files
    (the same OS pid) whose steps are disjoint are read as one trace with gaps between its
    cycles; a cycle without a communication call (the few events of a cycle cut short when the
    job ended) is left out. Anything else (two runs' files, a file copied) is returned as it
    is, and the bundle then says which rank more than one file claims. Returns the files and,
    where they were joined, how (for a warning)."""
    if len(parts) < 2 or parts[0].pid is None or any(p.pid != parts[0].pid for p in parts):
        return parts, None
    seen: set[int] = set()
    for p in parts:
        steps = p.steps()
        if not steps or steps & seen:
            return parts, None
        seen |= steps
    # (a job with no communication at all, a single process's, keeps every cycle)
    kept = sorted([p for p in parts if p.calls()] or parts, key=lambda p: min(p.steps()))
    left = len(parts) - len(kept)
    how = (f"{len(parts)} files of one process each (torch.profiler.schedule's repeated cycles) read as one trace, "
           f"steps {', '.join(_ranges(sorted(p.steps())) for p in kept)}"
           + (f"; {left} without a communication call left out" if left else ""))
    events = pl.concat([p.events for p in kept], how="vertical")
    return [_File(parts[0].rank, events, kept[0].row, kept[0].members, kept[0].pipeline, kept[0].pid)], how


def _ranges(values: list[int]) -> str:
    """``0-3`` for 0,1,2,3; ``2-5, 8-11`` for two runs of consecutive numbers."""
    values = sorted(values)
    runs, start = [], 0
    for k in range(1, len(values) + 1):
        if k == len(values) or values[k] != values[k - 1] + 1:
            a, b = values[start], values[k - 1]
            runs.append(f"{a}-{b}" if b > a else f"{a}")
            start = k
    return ", ".join(runs)


def _process_id(raw: list) -> object:
    """The OS process id that the profiler writes as the ``pid`` of host events (None if none)."""
    for e in raw:
        if isinstance(e, dict) and e.get("ph") == "X" and e.get("cat") in _CPU_CATS:
            return e.get("pid")
    return None


def _read_one(path: pathlib.Path, warn: Callable[[str], None], alone: bool = False) -> _File:
    """One file: its events, its rank's row, its process groups' members, its process id.
    ``alone``: the only trace of the bundle, which is rank 0 where nothing says its rank (a
    process profiled without ``torch.distributed``: one GPU, or inference)."""
    document, salvage = load_document(path, (b"]}", b"]", b"}"), "PyTorch profiler trace (JSON object)")
    if isinstance(document, list):          # the bare Chrome array form: events only
        document = {"traceEvents": document}
    if not isinstance(document, dict) or not isinstance(document.get("traceEvents"), list):
        if salvage.truncated_at is not None:
            raise TraceFormatError(f"{path}: cut off at byte {salvage.truncated_at}, before its traceEvents",
                                   "the file is damaged beyond salvage; move it aside to read the rest")
        raise TraceFormatError(f"{path}: no traceEvents array", "is this a PyTorch profiler trace?")
    raw = document["traceEvents"]
    dist = document.get("distributedInfo") if isinstance(document.get("distributedInfo"), dict) else {}
    rank = dist.get("rank")
    if not isinstance(rank, int):
        found = _RANK_IN_NAME.search(path.name)
        if found is not None:
            rank = int(found[1])
        elif alone:
            warn(f"{path}: no distributedInfo.rank and no rank number in the file name: read as rank 0, "
                 "the only trace here")
            rank = 0
        else:
            raise TraceFormatError(f"{path}: the trace has no distributedInfo.rank and the file name no rank number",
                                   "profile with torch.distributed initialised, or name the file rank-<N>.json")
    base = document.get("baseTimeNanoseconds")
    base = base if isinstance(base, int) else 0
    pgs = [pg for pg in dist.get("pg_config") or [] if isinstance(pg, dict)]
    world_size = dist.get("world_size") if isinstance(dist.get("world_size"), int) else None

    kept = _collect(raw)
    if str(dist.get("backend", "")).lower() == "nccl" and not any(c in _GPU_CATS for c in kept.cat):
        for e in kept.runtime:   # a GPU job traced host-only: its hosts' time in the runtime
            name, dur = str(e.get("name", "")), e.get("dur", 0)
            if re.match(schema.RUNTIME_PATTERN, name) and isinstance(dur, (int, float)):
                args = e.get("args")
                kept.add(name, str(e.get("cat")), e.get("tid"), e["ts"], dur, args if isinstance(args, dict) else {})
    inferred = _infer_steps(kept)
    if inferred:
        warn(f"{path}: no ProfilerStep spans (profiled without a schedule); {inferred} iterations "
             f"taken from its optimizer steps ({OPTIMIZER_STEP}*)")
    n = len(kept.name)
    ts_ns = (pl.Series(kept.ts, dtype=pl.Float64) * 1000.0).round(0).cast(pl.Int64) + base
    dur_ns = (pl.Series(kept.dur, dtype=pl.Float64) * 1000.0).round(0).cast(pl.Int64)
    launch_ns = {corr: int(round(t * 1000.0)) + base for corr, t in kept.launch.items()}

    cat = [None] * n
    names = list(kept.name)
    iteration: list[int | None] = [None] * n
    group: list[str | None] = [None] * n
    group_ranks: list[list[int] | None] = [None] * n
    seq: list[int | None] = [None] * n
    peer: list[int | None] = [None] * n
    peer_local: list[int | None] = [None] * n
    nbytes: list[int | None] = [None] * n
    lanes = [None] * n
    args_text = [None] * n

    comm = _CommContext(rank, world_size, pgs, kept)
    on_gpu = any(c in _KERNEL_CATS for c in kept.cat)
    timed_by = comm.kernel_timing(launch_ns, base) if on_gpu else {}
    ts_list, dur_list = ts_ns.to_list(), dur_ns.to_list()
    for i in range(n):
        name, src_cat, args = kept.name[i], kept.cat[i], kept.args[i]
        gpu = src_cat in _GPU_CATS
        lanes[i] = f"stream:{kept.tid[i]}" if gpu else f"cpu:{kept.tid[i]}"
        step = _STEP.match(name)
        if step:
            cat[i], lanes[i], iteration[i] = "iteration", "iteration", int(step[1])
        elif i in comm.canonical:
            coll = comm.collective_name(i)
            names[i] = coll
            cat[i] = "p2p" if coll in _P2P else "collective"
            group[i], group_ranks[i], seq[i], peer[i], nbytes[i], peer_local[i] = comm.fields(i, coll)
            if i in timed_by:
                k = timed_by[i]
                ts_list[i], dur_list[i] = ts_list[k], dur_list[k]
                lanes[i] = f"stream:{kept.tid[k]}"
                args = {**args, "kernel": kept.name[k]}
            elif coll == "send" and name.startswith("gloo:"):
                # a gloo send's span runs until its caller waits on it (megatron waits on a whole
                # exchange at once), not to the delivery: it does not end with its receive
                args = {**args, "async": True}
            elif on_gpu and coll in _P2P:
                # a p2p call on a GPU rank timed by its CPU record (no kernel of its own: the
                # coalesced exchange's): when it was posted, not when the message moved
                args = {**args, "async": True}
            if name.startswith("gloo:") and coll in _P2P and (posted := comm.posted(i)) is not None:
                # timed from its post (``_CommContext.posted``), to the end of gloo's own span
                start = int(round(posted * 1000.0)) + base
                ts_list[i], dur_list[i] = start, ts_list[i] + dur_list[i] - start
        else:
            cat[i] = _category(name, src_cat, on_gpu, i in comm.mirrors)
        if names[i] != name:
            args = {**args, "kineto_name": name}
        args_text[i] = orjson.dumps(args).decode()

    ts_ns, dur_ns = pl.Series(ts_list, dtype=pl.Int64), pl.Series(dur_list, dtype=pl.Int64)
    # date each event for the step lookup: GPU work by its launch, the rest by its own start
    date_ns = ts_ns.to_list()
    for i, corr in kept.correlation.items():
        # GPU work launched before the profiling window has no launch record: its start says
        # nothing about the step that launched it, so it is left outside every step
        date_ns[i] = launch_ns.get(corr)
    on_host = [c not in _GPU_CATS for c in kept.cat]
    iteration = _assign_steps(iteration, date_ns, ts_ns, dur_ns, cat, on_host)
    # GPU work's launch (a collective timed by its kernel: the kernel's), for the queue
    launched: list[int | None] = [None] * n
    for i, corr in kept.correlation.items():
        launched[i] = launch_ns.get(corr)
    for i, k in timed_by.items():
        launched[i] = launched[k]

    events = pl.DataFrame(
        {
            "rank": [rank] * n, "ph": ["X"] * n, "name": names, "cat": cat, "lane": lanes,
            "ts_ns": ts_ns, "dur_ns": dur_ns, "iteration": iteration, "group": group,
            "group_ranks": group_ranks, "seq": seq, "peer": peer, "bytes": nbytes,
            "src_file": [str(path)] * n, "args": args_text, "launch_ns": launched, _gloo_groups.LOCAL: peer_local,
        },
        schema_overrides={"group_ranks": pl.List(pl.Int32()), "iteration": pl.Int32(), "seq": pl.Int64(),
                          "peer": pl.Int32(), "bytes": pl.Int64(), "group": pl.String(), "cat": pl.String(),
                          "lane": pl.String(), "name": pl.String(), "args": pl.String(), "src_file": pl.String(),
                          "launch_ns": pl.Int64(), _gloo_groups.LOCAL: pl.Int32()},
    )
    events = schema.conform(events, {**schema.EVENTS_SCHEMA, _gloo_groups.LOCAL: pl.Int32()}).sort(
        ["ts_ns", "dur_ns"], descending=[False, True], maintain_order=True)
    if salvage.truncated_at is not None:
        # counted in the events table, not in traceEvents: those include records this reader drops
        warn(f"{path}: truncated at byte {salvage.truncated_at}; kept {events.height} events")

    props = document.get("deviceProperties")
    device = props[0].get("name") if isinstance(props, list) and props and isinstance(props[0], dict) else None
    if not (any(c in _GPU_CATS for c in kept.cat) or str(dist.get("backend", "")).lower() == "nccl"):
        # a gloo job of CPU processes on a machine with GPUs: the machine's, not the rank's (4
        # processes on a GPU host's cores read as GPU ranks, and the detector judged them so)
        device = None
    host = document.get("host_name")
    ranks = pl.DataFrame({
        "rank": [rank], "world_size": [world_size], "host": [host if isinstance(host, str) else None],
        "device": [device], "clock": ["host"], "format": [NAME], "src_file": [str(path)],
        **{k: [v] for k, v in _megatron_coords(rank, world_size, pgs).items()},
    }, schema_overrides={"world_size": pl.Int32(), "host": pl.String(), "device": pl.String()})
    members = [tuple(r) for r in (_rank_list(pg.get("ranks")) for pg in pgs) if r and rank in r]
    return _File(rank, events, schema.conform(ranks, schema.RANKS_SCHEMA), members, _pipeline_group(rank, pgs),
                 _process_id(raw))


class _Kept:
    """Column lists of the events kept from one file (plus runtime launch times by correlation)."""

    __slots__ = ("name", "cat", "tid", "ts", "dur", "args", "launch", "correlation", "runtime")

    def __init__(self) -> None:
        self.name: list[str] = []
        self.cat: list[str] = []
        self.tid: list[object] = []
        self.ts: list[float] = []
        self.dur: list[float] = []
        self.args: list[dict] = []
        self.launch: dict[object, float] = {}
        self.correlation: dict[int, object] = {}
        self.runtime: list[dict] = []   # runtime calls' events, for a trace without GPU events

    def add(self, name: str, cat: str, tid: object, ts: float, dur: float, args: dict) -> None:
        if cat in _GPU_CATS and "correlation" in args:
            self.correlation[len(self.name)] = args["correlation"]
        self.name.append(name)
        self.cat.append(cat)
        self.tid.append(tid)
        self.ts.append(ts)
        self.dur.append(dur)
        self.args.append(args)


def _infer_steps(kept: _Kept) -> int:
    """Where a trace has no ``ProfilerStep#N`` spans (a profiler used without ``schedule`` and
    ``step()``), iteration spans ``mapp:iteration#N`` from its optimizer steps: PyTorch's
    optimizers annotate each ``step()`` as ``Optimizer.step#<class>.step``, and a training step
    ends with one. Iteration N runs from the end of the N-th optimizer step (counted from 0) to
    the end of the next. What precedes the first is in no iteration: the profiler may have
    started inside that step, on each rank at another point of it, and ranks compared on
    different shares of a step would differ in their calls; what follows the last neither (a step
    the profiler stopped inside). Nested optimizer steps (a wrapper's around its inner
    optimizer's) count once. Returns how many it added (0 where the trace has step spans or
    fewer than two optimizer steps)."""
    cpu = [i for i, c in enumerate(kept.cat) if c not in _GPU_CATS]
    if not cpu or any(_STEP.match(kept.name[i]) for i in cpu):
        return 0
    opt = sorted(((kept.ts[i], kept.ts[i] + kept.dur[i], kept.tid[i]) for i in cpu
                  if kept.name[i].startswith(OPTIMIZER_STEP) and kept.cat[i] == "user_annotation"),
                 key=lambda t: (t[0], t[1]))      # (a tid may be None or text: not compared)
    outer: list[tuple] = []
    for start, end, tid in opt:
        if outer and start < outer[-1][1]:      # inside the previous one
            continue
        outer.append((start, end, tid))
    for k in range(1, len(outer)):
        begin, (_, end, tid) = outer[k - 1][1], outer[k]
        kept.add(f"mapp:iteration#{k}", "user_annotation", tid, begin, end - begin, {"mapp_inferred": OPTIMIZER_STEP})
    return max(len(outer) - 1, 0)


def _collect(raw: list) -> _Kept:
    kept = _Kept()
    open_: dict[tuple, list[dict]] = {}
    for e in raw:
        if not isinstance(e, dict):
            continue
        ph = e.get("ph")
        cat = e.get("cat")
        args = e.get("args")
        if not isinstance(args, dict):
            args = {}
        if ph == "X":
            if cat in _KEEP_CATS or "Collective name" in args:
                ts, dur = e.get("ts"), e.get("dur", 0)
                if isinstance(ts, (int, float)) and isinstance(dur, (int, float)):
                    kept.add(str(e.get("name", "")), cat if isinstance(cat, str) else "", e.get("tid"), ts, dur, args)
            elif cat in _LAUNCH_CATS and "correlation" in args and isinstance(e.get("ts"), (int, float)):
                kept.launch[args["correlation"]] = e["ts"]
                kept.runtime.append(e)   # (the event itself: most traces never need it)
        elif ph == "B" and (cat in _KEEP_CATS or "Collective name" in args):
            open_.setdefault((e.get("pid"), e.get("tid")), []).append(e)
        elif ph == "E":
            stack = open_.get((e.get("pid"), e.get("tid")))
            if stack:
                begin = stack.pop()
                ts, end = begin.get("ts"), e.get("ts")
                if isinstance(ts, (int, float)) and isinstance(end, (int, float)):
                    b_args = begin.get("args") if isinstance(begin.get("args"), dict) else {}
                    kept.add(str(begin.get("name", "")), begin.get("cat") or "", begin.get("tid"), ts, end - ts,
                             {**b_args, **args})
    return kept


class _CommContext:
    """Decides which events are the canonical record of each communication call, and their fields."""

    def __init__(self, rank: int, world_size: int | None, pgs: list[dict], kept: _Kept):
        self.rank = rank
        self.world_size = world_size
        self.pgs = {str(pg.get("pg_name")): pg for pg in pgs}
        self.kept = kept
        gpu_args, cpu_args, gloo, nccl, waits = [], [], [], [], []
        for i, (name, cat, args) in enumerate(zip(kept.name, kept.cat, kept.args)):
            if "Collective name" in args:
                # a p2p call's work.wait() is recorded as a "wait" comm record: not a call of its own
                if str(args["Collective name"]).lower() == "wait":
                    waits.append(i)
                    continue
                (gpu_args if cat in _GPU_CATS else cpu_args).append(i)
            elif name.startswith("gloo:"):
                gloo.append(i)
            elif name.startswith("nccl:"):
                nccl.append(i)
        # GPU events with the comm args stand for the CPU records of the same calls. Where no
        # GPU event is a p2p call, the p2p calls' CPU records are canonical themselves:
        # megatron-core's batched p2p on NCCL records each send and receive on the CPU but
        # launches one coalesced SendRecv kernel, without those args, for the whole exchange.
        # (A collective's CPU record without a kernel is a call on a group of one rank, which
        # NCCL skips: no communication, left a copy as before.)
        def p2p(i: int) -> bool:
            return str(kept.args[i].get("Collective name")).lower() in _P2P_RECORDS

        gpu_p2p = any(p2p(i) for i in gpu_args)
        canonical = list(gpu_args) + [i for i in cpu_args if not gpu_args or (not gpu_p2p and p2p(i))]
        if gpu_args or not cpu_args:
            canonical += gloo
        if not gpu_args and not cpu_args:
            canonical += nccl
        self.canonical = set(canonical)
        self.mirrors = set(gpu_args + cpu_args + gloo + nccl + waits) - self.canonical
        # gloo records no group: usable only when every process group has the same members
        member_sets = {tuple(sorted(pg.get("ranks") or ())) for pg in pgs}
        self.only_ranks = list(member_sets.pop()) if len(member_sets) == 1 and pgs else None
        self.only_pg = pgs[0] if len(pgs) == 1 else None
        self.c10d_p2p = self._c10d_p2p_spans()

    def kernel_timing(self, launch_ns: dict, base: int) -> dict[int, int]:
        """For canonical CPU comm events on a GPU rank: the index of the comm kernel each launched.

        A kernel belongs to the CPU call whose span contains the kernel's launch (runtime call,
        joined by ``correlation``); the first such kernel is the call's (p2p calls may launch
        one per peer)."""
        cpu = sorted((self.kept.ts[i], i) for i in self.canonical if self.kept.cat[i] not in _GPU_CATS)
        if not cpu:
            return {}
        kernels = []
        for k, corr in self.kept.correlation.items():
            if self.kept.cat[k] in _KERNEL_CATS and _COMM_KERNEL.match(self.kept.name[k]) and corr in launch_ns:
                kernels.append(((launch_ns[corr] - base) / 1000.0, k))
        kernels.sort()
        starts = [t for t, _ in kernels]
        out: dict[int, int] = {}
        for ts, i in cpu:
            at = bisect.bisect_left(starts, ts)
            if at < len(kernels) and kernels[at][0] <= ts + self.kept.dur[i]:
                out[i] = kernels[at][1]
        return out

    def collective_name(self, i: int) -> str:
        args = self.kept.args[i]
        raw = args.get("Collective name")
        if not isinstance(raw, str):
            raw = self.kept.name[i].split(":", 1)[-1]
        return _COLLECTIVE_NAMES.get(raw.lower(), raw.lower())

    def fields(self, i: int, coll: str):
        """(group, group_ranks, seq, peer, bytes, group-local peer) of canonical comm event ``i``; the
        last is set (and peer null) for a gloo p2p call whose group is unknown, for ``_gloo_groups``."""
        args = self.kept.args[i]
        if "Collective name" in args:
            pg = self.pgs.get(str(args.get("Process Group Name")))
            ranks = _rank_list(args.get("Process Group Ranks"))
            if ranks is None and pg is not None:
                ranks = _rank_list(pg.get("ranks"))
            desc = args.get("Process Group Description")
            if desc is None and pg is not None:
                desc = pg.get("pg_desc")
            name = args.get("Process Group Name")
            label = _group_label(desc, name)
            seq = _int(args.get("Seq"))
            nelems = _int(args.get("In msg nelems"))
            if nelems is None:
                nelems = _int(args.get("Out msg nelems"))
            size = _dtype_size(args.get("dtype"))
            local = args.get("Dst Rank" if coll == "send" else "Src Rank")
            local = _int(local) if local is not None else _int(args.get("Rank"))
            if coll in _P2P and ranks is not None and local is not None:
                # torch 2.11 records the peer's global rank in Dst/Src Rank and its rank in the
                # group in "Rank"; older ones a group rank in Dst/Src. Where the two agree on a
                # global rank it is the peer, whichever way the trace wrote it
                other = _int(args.get("Rank"))
                peer = ranks[other] if other is not None and 0 <= other < len(ranks) else None
                if peer is not None and peer != self.rank and peer in (local, ranks[local] if 0 <= local < len(ranks) else None):
                    local = other
        else:                                   # gloo:* / nccl:* annotation: name and input shape only
            ranks = self.only_ranks
            label = _group_label(self.only_pg.get("pg_desc"), self.only_pg.get("pg_name")) if self.only_pg else None
            seq = None
            nelems = _first_input_nelems(args)
            types = args.get("Input type")
            size = _dtype_size(types[0]) if isinstance(types, list) and types else None
            local = self._enclosing_p2p_peer(i) if coll in _P2P else None
            if local is not None and self.pgs:
                # c10d's peer argument is the rank within the group the call used, which gloo
                # does not record: resolved across the ranks read together (_gloo_groups)
                return label, None, seq, None, _nbytes(nelems, size), local
            if coll in _P2P:
                ranks = None
            # a collective of a job with one set of members (its only group, or groups that
            # all list the same ranks) keeps them: without members no clock is aligned by it
            # (plain DDP and FSDP on gloo: every rank's lateness was judged on its own clock)
        nbytes = _nbytes(nelems, size)
        if coll in _P2P:
            peer = None
            if local is not None:
                if ranks is not None:
                    peer = ranks[local] if 0 <= local < len(ranks) else None
                else:
                    peer = local  # no process group listed: the default group, local is global
            elif self.world_size == 2:
                peer = 1 - self.rank
            return label, None, seq, peer, nbytes, None
        return label, sorted(ranks) if ranks is not None else None, seq, None, nbytes, None

    def _c10d_p2p_spans(self) -> dict[object, list[tuple[float, float, int | None]]]:
        spans: dict[object, list[tuple[float, float, int | None]]] = {}
        for i, name in enumerate(self.kept.name):
            if name in _C10D_P2P:
                inputs = self.kept.args[i].get("Concrete Inputs")
                other = _int_text(inputs[2]) if isinstance(inputs, list) and len(inputs) > 2 else None
                spans.setdefault(self.kept.tid[i], []).append(
                    (self.kept.ts[i], self.kept.ts[i] + self.kept.dur[i], other))
        for rows in spans.values():
            rows.sort()
        return spans

    def _enclosing_p2p(self, i: int) -> tuple[float, float, int | None] | None:
        """The ``c10d::send``/``c10d::recv_`` call (start, end, peer argument) that started
        event ``i``, on its thread."""
        rows = self.c10d_p2p.get(self.kept.tid[i], [])
        ts = self.kept.ts[i]
        at = bisect.bisect_right(rows, (ts, math.inf, math.inf)) - 1
        while at >= 0:
            if rows[at][0] <= ts <= rows[at][1]:
                return rows[at]
            at -= 1
        return None

    def _enclosing_p2p_peer(self, i: int) -> int | None:
        row = self._enclosing_p2p(i)
        return None if row is None else row[2]

    def posted(self, i: int) -> float | None:
        """When gloo p2p event ``i`` was posted: its ``c10d`` call's start. gloo opens its own
        span only once the call has handed the message over, up to 2 ms later on shared cores
        (a user's blocking ``dist.send``: the receive was done 1.8 ms before its ``gloo:send``
        began, 0.26 ms after its ``c10d::send`` did)."""
        row = self._enclosing_p2p(i)
        return None if row is None else row[0]


def _category(name: str, src_cat: str, on_gpu: bool, mirror: bool) -> str:
    """The events-table category of a non-step, non-canonical-comm event (see the module doc)."""
    if mirror or name.startswith(schema.COMM_OP_PREFIXES) or src_cat in _LAUNCH_CATS:
        return "other"
    if src_cat in _ANNOTATION_CATS:
        return "optimizer" if name.startswith("Optimizer.") and not on_gpu else "other"
    if src_cat in _COPY_CATS:
        return "memory"
    if src_cat in _KERNEL_CATS:
        return "other" if _COMM_KERNEL.match(name) else "compute"
    return "other" if on_gpu else "compute"


def _assign_steps(iteration: list, date_ns: list[int], ts_ns: pl.Series, dur_ns: pl.Series, cat: list,
                  on_host: list[bool]) -> list:
    """Each event's step: the step span containing its date (a GPU op's launch), the host's
    ``ProfilerStep#N`` first. Kineto copies each step onto the GPU stream too (a
    ``gpu_user_annotation``: 24 ms of a 71 ms step in a real 2-GPU FSDP trace), which starts
    inside the host's span; found first, it left every launch after its end outside any step:
    10 of one rank's 45 GEMMs and 3 of its peer's, read as the peer calling GEMMs 2.3x as often
    as the other in a healthy job. The GPU copies still date events no host step contains."""
    spans = [(t, t + d, it, host) for t, d, it, c, host in zip(ts_ns.to_list(), dur_ns.to_list(), iteration, cat,
                                                               on_host) if c == "iteration"]
    if not spans:
        return iteration
    tiers = [sorted(s[:3] for s in spans if s[3]), sorted(s[:3] for s in spans if not s[3])]
    tiers = [(steps, [s[0] for s in steps]) for steps in tiers if steps]
    out = list(iteration)
    for i, when in enumerate(date_ns):
        if out[i] is not None or when is None:
            continue
        for steps, starts in tiers:
            at = bisect.bisect_right(starts, when) - 1
            if at >= 0 and when < steps[at][1]:
                out[i] = steps[at][2]
                break
    return out


def _megatron_coords(rank: int, world_size: int | None, pgs: list[dict]) -> dict[str, int]:
    """The rank's (tp, pp, dp) and the layout's sizes from the process groups megatron-core
    declares in ``pg_config`` (its place in its TENSOR_MODEL_PARALLEL_GROUP, ... as listed,
    which is group-rank order), so that a profiler trace of a Megatron job knows its layout
    whether or not its calls name their group (gloo's do not). Empty unless the rank lists one
    group of each of the three axes and they span the world (a layout with context or expert
    parallelism is more than tp x pp x dp: left to the calls' groups)."""
    found: dict[str, tuple[int, int]] = {}
    for pg in pgs:
        axis = _group_label(pg.get("pg_desc"), None)
        members = _rank_list(pg.get("ranks"))
        if axis not in ("tp", "pp", "dp") or members is None or rank not in members:
            continue
        if axis in found and found[axis] != (members.index(rank), len(members)):
            return {}
        found[axis] = (members.index(rank), len(members))
    if len(found) < 3 or (world_size is not None and found["tp"][1] * found["pp"][1] * found["dp"][1] != world_size):
        return {}
    return {**{axis: place for axis, (place, _) in found.items()},
            **{f"layout_{axis}": size for axis, (_, size) in found.items()}}


def _pipeline_group(rank: int, pgs: list[dict]) -> tuple[int, ...] | None:
    """The members of ``rank``'s pipeline group (megatron-core's PIPELINE_MODEL_PARALLEL_GROUP,
    in stage order), for ``_gloo_groups`` to place the p2p calls whose peer gloo did not record;
    None unless the rank lists exactly one.

    A job whose only process group is the world (``torch.distributed.pipelining`` as its
    tutorials run it: stage ``i`` on rank ``i``, no other group) has its world in rank order:
    ``_gloo_groups`` pairs its calls with a neighbour's only where the calls' ends pair every one
    of them so and its two ends call half as often as its middle (no loop back from the last
    rank to the first), and otherwise leaves them without a peer."""
    found = {tuple(members) for pg in pgs
             if _group_label(pg.get("pg_desc"), None) == "pp" and (members := _rank_list(pg.get("ranks"))) is not None
             and rank in members}
    if not found:
        world = _gloo_groups.only_group([m for pg in pgs if (m := _rank_list(pg.get("ranks"))) is not None])
        return world if world is not None and rank in world else None
    return found.pop() if len(found) == 1 else None


def _group_label(desc: object, name: object) -> str | None:
    if isinstance(desc, str) and desc and desc.lower() not in ("undefined", "unknown", "none"):
        return _GROUP_LABELS.get(desc, _GROUP_LABELS.get(desc.upper(), desc))
    if name is None or name == "":
        return None
    return str(name)


def _rank_list(value: object) -> list[int] | None:
    if isinstance(value, str):
        try:
            value = orjson.loads(value)
        except orjson.JSONDecodeError:
            return None
    if isinstance(value, list) and value and all(isinstance(v, int) for v in value):
        return list(value)
    return None


def _nbytes(nelems: int | None, size: int | None) -> int | None:
    return nelems * size if nelems is not None and size is not None else None


def _first_input_nelems(args: dict) -> int | None:
    dims = args.get("Input Dims")
    if not isinstance(dims, list) or not dims or not isinstance(dims[0], list):
        return None
    first = dims[0]
    if first and isinstance(first[0], list):      # a TensorList: its first tensor
        first = first[0]
    if not all(isinstance(d, int) for d in first):
        return None
    return math.prod(first)


def _dtype_size(value: object) -> int | None:
    return _DTYPE_BYTES.get(value.lower()) if isinstance(value, str) else None


def _int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        return _int_text(value)
    return None


def _int_text(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        text = value.strip()
        if text.lstrip("-").isdigit():
            return int(text)
    return None
