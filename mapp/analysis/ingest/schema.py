"""The events table and the ranks table: the one in-memory form every reader produces.

Documented for users in ``docs/trace-format.md``; keep the two in step.
Times are integer nanoseconds (``ts_ns``, ``dur_ns``) on the recording rank's own clock;
Chrome JSON's microseconds are converted at the edges.
"""

from __future__ import annotations

import polars as pl
import pyarrow as pa

__all__ = ["EVENTS_SCHEMA", "EVENTS_ARROW_SCHEMA", "to_arrow_events", "RANKS_SCHEMA", "COORDS", "ARG_COLUMNS", "COMM_KERNEL_PATTERN", "COMM_WAIT_NAMES", "LAUNCH_NAMES",
           "BUILD_KEY", "empty_events", "conform"]

COORDS = ("tp", "pp", "dp", "cp", "ep")

EVENTS_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "tp": pl.Int32(),
    "pp": pl.Int32(),
    "dp": pl.Int32(),
    "cp": pl.Int32(),
    "ep": pl.Int32(),
    "ph": pl.String(),
    "name": pl.String(),
    "cat": pl.String(),
    "lane": pl.String(),
    "ts_ns": pl.Int64(),
    "dur_ns": pl.Int64(),
    "iteration": pl.Int32(),
    "microbatch": pl.Int32(),
    "chunk": pl.Int32(),
    "layer": pl.Int32(),
    "group": pl.String(),
    "group_ranks": pl.List(pl.Int32()),
    "seq": pl.Int64(),
    "peer": pl.Int32(),
    "bytes": pl.Int64(),
    "src_file": pl.String(),
    "src_line": pl.Int64(),
    "args": pl.String(),
    # GPU work of a profiler trace: when the host call that launched it started (its runtime
    # call, joined by correlation), on the same clock as ``ts_ns``; null elsewhere. A GPU that
    # idles while its next kernel was already launched is held by something other than its
    # host (another process's time slices), which ``ts_ns`` alone cannot tell.
    "launch_ns": pl.Int64(),
    # A span timed on the host by mapp's capture (``ThreadTimeClock``): its thread's CPU time
    # (the trace's ``tdur``) and the time its thread was runnable but waited for a core
    # (``rdur``); null elsewhere. On cores shared with other processes ``dur_ns - runnable_ns``
    # is the time the span's own work took (its computing, and any sleep inside it), without
    # the time the other processes took from it.
    "thread_dur_ns": pl.Int64(),
    "runnable_ns": pl.Int64(),
}

_ARROW_TYPES = {pl.Int32(): pa.int32(), pl.Int64(): pa.int64(), pl.String(): pa.string(),
                pl.List(pl.Int32()): pa.list_(pa.int32())}
# The same schema in Arrow (plain string/list, as DuckDB produces them): the Parquet cache's schema.
EVENTS_ARROW_SCHEMA = pa.schema([(name, _ARROW_TYPES[dtype]) for name, dtype in EVENTS_SCHEMA.items()])

# Fields lifted out of an event's ``args`` into their own columns (the JSON keeps them too).
ARG_COLUMNS: dict[str, str] = {
    "iteration": "INTEGER",
    "microbatch": "INTEGER",
    "chunk": "INTEGER",
    "layer": "INTEGER",
    "group": "VARCHAR",
    "group_ranks": "INTEGER[]",
    "seq": "BIGINT",
    "peer": "INTEGER",
    "bytes": "BIGINT",
}

RANKS_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "world_size": pl.Int32(),
    **{c: pl.Int32() for c in COORDS},
    **{f"layout_{c}": pl.Int32() for c in (*COORDS, "vpp")},
    "host": pl.String(),
    "device": pl.String(),
    "clock": pl.String(),
    # wall-clock time (unix ns) at the rank's raw time 0, where the trace says (mapp v1's
    # ``clock_anchor``): places ranks that no collective or message links (``align.solve``)
    "clock_base_unix_ns": pl.Int64(),
    "run_id": pl.String(),
    "format": pl.String(),
    "src_file": pl.String(),
}


# The footer key-value metadata of every Parquet file of a cache (the events file or each file
# of a partitioned dataset, and ranks.parquet): the build id that ties it to its manifest.
BUILD_KEY = "mapp_build"

# Names of collective-library kernels (NCCL, RCCL) on a GPU stream. Those that no comm event
# stands for (megatron-core's batched p2p on NCCL launches one coalesced SendRecv kernel for a
# whole exchange) stay ``cat="other"``, but their time is communication and waiting, not work
# and not idle: a regular expression, matched case-insensitively from the name's start.
COMM_KERNEL_PATTERN = r"^(nccl|rccl|ncclDevKernel|ncclKernel)"

# The name prefixes of PyTorch's communication dispatch ops in a profiler trace: ``c10d::*``
# (``allreduce_``, ``send``, ...) and the functional collectives that DTensor and torch.compile
# call (``_c10d_functional::all_reduce``, ``wait_tensor``; ``c10d_functional::`` in older
# PyTorch). Never compute: on CPUs alone (gloo) a ``wait_tensor`` is its host blocked until its
# peers join the collective (a user's DTensor TP2 x FSDP2 job, 4 processes on 2 cores, extra
# matmuls on rank 1: its TP peer rank 0 spent 65 ms a step in ``wait_tensor``, its peers 21-25,
# read as rank 0 computing 1.56x its peers).
COMM_OP_PREFIXES = ("c10d::", "_c10d_functional::", "c10d_functional::")

# mapp capture's host waits for overlapped data-parallel communication (``megatron_hooks.ddp``:
# ``finish_grad_sync`` / ``finish_param_sync``), ``cat="other"``. With ``overlap_grad_reduce``
# the ``grad_reduce`` event only launches the all-reduce; a rank whose peers are late waits
# here instead, so this time is waiting for peers, not host work and not idle.
COMM_WAIT_NAMES = ("grad_sync_wait", "param_sync_wait")

# The profiler's span around each ``next()`` of a ``torch.utils.data.DataLoader`` iterator
# (``_BaseDataLoaderIter.__next__`` records ``enumerate(DataLoader)#<its class>.__next__``): time
# inside it is the host fetching its batch, or waiting for its loader workers to hand one over.
DATA_WAIT_PREFIX = "enumerate(DataLoader)#"

# The capture's events for that overlapped communication: with ``async`` in their args the span
# is only the launch; each wait above is for the launches of one of these, in this order
# (``grad_sync_wait`` for ``grad_reduce``, ``param_sync_wait`` for ``param_gather``). Not so other
# asynchronous collectives (``megatron_hooks.collectives``: a span from the launch until the
# handle's ``wait()`` returns).
LAUNCH_NAMES = ("grad_reduce", "param_gather")

# CUDA runtime and driver calls (``cudaMemcpyAsync``, ``cudaLaunchKernel``, ``cuLaunchKernel``,
# ...). The Kineto reader keeps them (``cat="other"``, on the calling thread) on a rank whose
# trace holds no GPU activity though its job ran on GPUs (profiled with ``ProfilerActivity.CPU``
# alone): there the CPU ops are all there is, and the time an op spends inside such a call is
# the host waiting on its GPU's queue (a copy from pageable memory waits for the stream, a launch
# for room in the queue), not work of its own (``detect.same_work.self_times``).
RUNTIME_PATTERN = r"^cu(da)?[A-Z]"


def empty_events() -> pl.DataFrame:
    """An events table with no rows and the full schema."""
    return pl.DataFrame(schema=EVENTS_SCHEMA)


def conform(frame: pl.DataFrame, schema: dict[str, pl.DataType]) -> pl.DataFrame:
    """Return ``frame`` with exactly ``schema``'s columns, in order: missing ones null, types cast."""
    columns = []
    for name, dtype in schema.items():
        if name in frame.columns:
            columns.append(pl.col(name).cast(dtype))
        else:
            columns.append(pl.lit(None, dtype=dtype).alias(name))
    return frame.select(columns)


def to_arrow_events(batch: "pl.DataFrame | pa.RecordBatch | pa.Table") -> pa.Table:
    """Any reader's batch as an Arrow table with exactly ``EVENTS_ARROW_SCHEMA``."""
    if isinstance(batch, pl.DataFrame):
        batch = conform(batch, EVENTS_SCHEMA).to_arrow()
    elif isinstance(batch, pa.RecordBatch):
        batch = pa.Table.from_batches([batch])
    if batch.schema != EVENTS_ARROW_SCHEMA:
        batch = batch.select(EVENTS_ARROW_SCHEMA.names).cast(EVENTS_ARROW_SCHEMA)
    return batch
