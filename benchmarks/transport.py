"""mapp.transport between two processes: shared memory vs gloo p2p (CPU), CUDA IPC (GPU).

    python benchmarks/transport.py [--sizes-mb 1,4,16,64] [--in-flight 1,4,8] [--repeats 7] [--json OUT]
    python benchmarks/transport.py --gpu [--sizes-kb 64,256,...,262144] [--json OUT]

CPU (default): two spawned processes (gloo, one file store) move CPU tensors from rank 0 to
rank 1 through

- **shm**: ``ShmTransport`` (``make_transport(backend="shm")``, the pybind11 extension);
- **dist**: ``DistTransport`` (``make_transport(backend="dist")``: tagged messages over gloo);
- **gloo p2p**: plain ``torch.distributed.isend``/``irecv`` into preallocated buffers (the
  issue's baseline: no header, no tags, no allocation on the receiving side).

With ``k`` messages in flight (k >= 2) the sender keeps ``k`` isends and the receiver ``k``
irecvs posted, a sliding window over a stream of messages; the figure is the stream's bytes
over the time the receiver took from a common barrier to the last message, and "us/msg" that
time per message. With 1 in flight it is a ping-pong (rank 1 sends each message back): the
one-way latency is half the round trip, the throughput the size over that. Each figure is the
median of ``--repeats`` runs (the spread is min-max), since the machine may be shared.

GPU (``--gpu``): two processes on GPU 0 exchange GPU tensors through ``ShmTransport``'s CUDA
IPC path (device to device, no host staging), 64 KB to 256 MB, the same two patterns, beside
a device-to-device copy in one process (the ceiling: one ``copy_`` timed with CUDA events).
With 2+ GPUs it adds, on GPUs 0 and 1, NCCL p2p (``isend``/``irecv`` on an NCCL group) and the
CUDA IPC path between the two devices (the multi-GPU issue's comparison).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import queue
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

MB = 1 << 20
KB = 1 << 10
CPU_BACKENDS = ("shm", "dist", "gloo")
LABELS = {"shm": "shm", "dist": "dist (gloo)", "gloo": "gloo p2p", "ipc": "CUDA IPC", "ipc-2gpu": "CUDA IPC 0->1",
          "nccl": "NCCL p2p 0->1", "d2d": "copy_ (1 proc)"}
WAIT_S = 120.0


# -- what each of the two processes runs -------------------------------------------------------
class _Raw:
    """Plain torch.distributed p2p behind the same isend/irecv calls (receives into buffers)."""

    def __init__(self, size: int, window: int, device, group=None):
        import torch

        self._buffers = [torch.empty(size, dtype=torch.uint8, device=device) for _ in range(window)]
        self._next = 0
        self._group = group

    def isend(self, tensor, dst, tag):
        import torch.distributed as dist

        return _RawWork(dist.isend(tensor, dst, group=self._group), None)

    def irecv(self, src, tag):
        import torch.distributed as dist

        buf = self._buffers[self._next % len(self._buffers)]
        self._next += 1
        return _RawWork(dist.irecv(buf, src, group=self._group), buf)

    def close(self):
        pass


class _RawWork:
    def __init__(self, work, buf):
        self._work, self._buf = work, buf

    def wait(self, timeout=None):
        self._work.wait()
        return self._buf


def _count(size: int, window: int) -> int:
    """Messages per timed stream: about 512 MB (at most 2000 messages), at least 4 windows and 16."""
    return max(16, 4 * window, min(2000, (512 * MB) // size))


def _stream(transport, rank: int, payloads: list, count: int, window: int, sync) -> float:
    """Rank 0 streams ``count`` messages to rank 1, ``window`` in flight; rank 1's seconds."""
    import torch.distributed as dist

    dist.barrier()
    t0 = time.perf_counter()
    if rank == 0:
        sends = []
        for i in range(count):
            if len(sends) >= window:
                sends.pop(0).wait(WAIT_S)
            sends.append(transport.isend(payloads[i % len(payloads)], 1, i))
        for work in sends:
            work.wait(WAIT_S)
    else:
        recvs = [transport.irecv(0, i) for i in range(min(window, count))]
        for i in range(count):
            recvs.pop(0).wait(WAIT_S)
            if i + window < count:
                recvs.append(transport.irecv(0, i + window))
        sync()
    elapsed = time.perf_counter() - t0
    dist.barrier()
    return elapsed


def _ping_pong(transport, rank: int, payload, count: int, sync) -> float:
    """Round trips of one message (rank 1 echoes what it got); rank 0's seconds per one way."""
    import torch.distributed as dist

    dist.barrier()
    t0 = time.perf_counter()
    for i in range(count):
        if rank == 0:
            transport.isend(payload, 1, 2 * i).wait(WAIT_S)
            transport.irecv(1, 2 * i + 1).wait(WAIT_S)
        else:
            got = transport.irecv(0, 2 * i).wait(WAIT_S)
            transport.isend(got, 0, 2 * i + 1).wait(WAIT_S)
    sync()
    elapsed = time.perf_counter() - t0
    dist.barrier()
    return elapsed / (2 * count)


def _check(transport, rank: int, payload) -> None:
    """One message, compared byte for byte (outside the timings)."""
    import torch

    if rank == 0:
        transport.isend(payload, 1, -1).wait(WAIT_S)
    else:
        got = transport.irecv(0, -1).wait(WAIT_S)
        assert torch.equal(got.cpu(), payload.cpu()), "the benchmark's message arrived corrupted"


def _measure(transports: dict, rank: int, size: int, windows: list[int], repeats: int, device, sync) -> list[dict]:
    """Every backend's figures for one message size; the backends take turns within each
    repeat, so that a change in the machine's load hits all of them alike."""
    import torch

    gen = torch.Generator().manual_seed(size)
    payloads = [torch.randint(0, 256, (size,), dtype=torch.uint8, generator=gen).to(device) for _ in range(max(windows))]
    for transport in transports.values():
        _check(transport, rank, payloads[0])
    rows = []
    for window in windows:
        if window == 1:
            count = max(4, min(200, (256 * MB) // size))
            run = lambda t, n: _ping_pong(t, rank, payloads[0], n, sync)  # noqa: E731
        else:
            count = _count(size, window)
            run = lambda t, n: _stream(t, rank, payloads, n, window, sync) / n  # noqa: E731
        for transport in transports.values():
            run(transport, max(2, count // 4) if window == 1 else min(count, 4 * window))  # warm-up
        times: dict = {backend: [] for backend in transports}
        for _ in range(repeats):
            for backend, transport in transports.items():
                times[backend].append(run(transport, count))
        for backend, per_message in times.items():
            rows.append({"backend": backend, "size_bytes": size, "in_flight": window, "pattern": "ping-pong" if window == 1 else "stream",
                         "us_per_msg": [t * 1e6 for t in per_message], "gbps": [size / t / 1e9 for t in per_message]})
    return rows


def _make(backend: str, size: int, windows: list[int], device, group=None):
    from mapp.transport import make_transport

    if backend in ("gloo", "nccl"):
        return _Raw(size, max(windows), device, group)
    return make_transport(backend="shm" if backend.startswith("ipc") else backend)


def _run(rank: int, plan: dict, device, sync, group=None) -> list[dict]:
    import torch.distributed as dist

    rows = []
    persistent = {b: _make(b, 0, plan["windows"], device) for b in plan["backends"] if b not in ("gloo", "nccl")}
    try:
        for size in plan["sizes"]:
            transports = {b: persistent[b] if b in persistent else _make(b, size, plan["windows"], device, group) for b in plan["backends"]}
            rows += _measure(transports, rank, size, plan["windows"], plan["repeats"], device, sync)
            del transports
            dist.barrier()
    finally:
        for transport in persistent.values():
            transport.close()
    return rows


def cpu_worker(rank: int, plan: dict) -> list[dict]:
    return _run(rank, plan, "cpu", lambda: None)


def gpu_worker(rank: int, plan: dict) -> list[dict]:
    """Rank r on GPU ``plan['devices'][r]``."""
    import torch
    import torch.distributed as dist

    device = torch.device("cuda", plan["devices"][rank])
    torch.cuda.set_device(device)
    group = dist.new_group([0, 1], backend="nccl") if "nccl" in plan["backends"] else None
    return _run(rank, plan, device, torch.cuda.synchronize, group)


def device_copy(sizes: list[int], repeats: int) -> list[dict]:
    """The ceiling: one device-to-device copy on GPU 0 in this process, timed by CUDA events."""
    import torch

    rows = []
    for size in sizes:
        src = torch.randint(0, 256, (size,), dtype=torch.uint8, device="cuda:0")
        dst = torch.empty_like(src)
        count = max(4, min(200, (1 << 30) // size))
        dst.copy_(src)
        times = []
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(count):
                dst.copy_(src)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3 / count)
        rows.append({"backend": "d2d", "size_bytes": size, "in_flight": 1, "pattern": "copy",
                     "us_per_msg": [t * 1e6 for t in times], "gbps": [size / t / 1e9 for t in times]})
    return rows


def _entry(fn, rank: int, store: str, plan: dict, results) -> None:
    os.environ.update(plan.get("env", {}))
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    try:
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
        results.put((rank, True, fn(rank, plan)))
    except BaseException:
        results.put((rank, False, traceback.format_exc()))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def run_pair(fn, plan: dict, timeout: float) -> list[dict]:
    """``fn(rank, plan)`` on two spawned processes; rank 1's rows (the receiver's view for
    streams; rank 0's for ping-pongs, whose clock sees the round trips)."""
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    with tempfile.TemporaryDirectory(prefix="mapp-bench-transport-") as tmp:
        procs = [ctx.Process(target=_entry, args=(fn, rank, str(Path(tmp) / "store"), plan, results)) for rank in range(2)]
        for proc in procs:
            proc.start()
        outcomes = {}
        deadline = time.monotonic() + timeout
        while len(outcomes) < 2:
            try:
                rank, ok, value = results.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                break
            if not ok:
                for proc in procs:
                    proc.kill()
                raise SystemExit(f"rank {rank} failed:\n{value}")
            outcomes[rank] = value
        for proc in procs:
            proc.join(30)
            if proc.is_alive():
                proc.kill()
    if len(outcomes) < 2:
        raise SystemExit(f"the benchmark processes did not finish within {timeout:.0f} s")
    return [r1 if r1["pattern"] == "stream" else r0 for r0, r1 in zip(outcomes[0], outcomes[1])]


# -- summary and display -----------------------------------------------------------------------
def summarize(rows: list[dict], baseline: str | None) -> list[dict]:
    out = []
    base = {(r["size_bytes"], r["in_flight"]): statistics.median(r["gbps"]) for r in rows if r["backend"] == baseline}
    for r in rows:
        gbps = statistics.median(r["gbps"])
        ref = base.get((r["size_bytes"], r["in_flight"]))
        out.append({**r, "gbps_median": gbps, "gbps_min": min(r["gbps"]), "gbps_max": max(r["gbps"]),
                    "us_per_msg_median": statistics.median(r["us_per_msg"]),
                    "vs_baseline": gbps / ref if ref and r["backend"] != baseline else None})
    return out


def _size(n: int) -> str:
    return f"{n // MB} MB" if n >= MB else f"{n // KB} KB"


def render(title: str, rows: list[dict], baseline: str | None) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for name in ("backend", "size", "in flight", "GB/s (median)", "GB/s min-max", "us / message"):
        table.add_column(name, justify="left" if name == "backend" else "right")
    if baseline:
        table.add_column(f"x {LABELS[baseline]}", justify="right")
    table.caption = "shm: ShmTransport; dist: DistTransport; gloo p2p: torch.distributed isend/irecv into ready buffers"
    order = {b: i for i, b in enumerate(LABELS)}
    for r in sorted(rows, key=lambda r: (r["size_bytes"], r["in_flight"], order[r["backend"]])):
        cells = [LABELS[r["backend"]], _size(r["size_bytes"]), f"{r['in_flight']}" + (" (ping-pong)" if r["pattern"] == "ping-pong" else ""),
                 f"{r['gbps_median']:.2f}", f"{r['gbps_min']:.2f}-{r['gbps_max']:.2f}", f"{r['us_per_msg_median']:.0f}"]
        if baseline:
            cells.append(f"{r['vs_baseline']:.2f}" if r["vs_baseline"] else "")
        table.add_row(*cells)
    Console(width=max(100, Console().width)).print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", action="store_true", help="GPU tensors by CUDA IPC (and NCCL p2p with 2+ GPUs) instead of the CPU table")
    parser.add_argument("--sizes-mb", default="1,4,16,64", help="CPU message sizes in MB")
    parser.add_argument("--sizes-kb", default="64,256,1024,4096,16384,65536,262144", help="GPU message sizes in KB")
    parser.add_argument("--in-flight", default="1,4,8", help="messages in flight (1: ping-pong)")
    parser.add_argument("--backends", default=None, help=f"CPU: a subset of {','.join(CPU_BACKENDS)}")
    parser.add_argument("--repeats", type=int, default=7, help="timed runs per figure (the median is shown)")
    parser.add_argument("--json", type=Path, default=None, help="also write every run's figures here")
    args = parser.parse_args()
    windows = [int(w) for w in args.in_flight.split(",")]
    env = {"MAPP_TRANSPORT_JOB": f"bench{os.getpid()}"}
    if not args.gpu:
        sizes = [int(float(s) * MB) for s in args.sizes_mb.split(",")]
        backends = args.backends.split(",") if args.backends else list(CPU_BACKENDS)
        plan = {"backends": backends, "sizes": sizes, "windows": windows, "repeats": args.repeats, "env": env}
        rows = summarize(run_pair(cpu_worker, plan, timeout=3600), "gloo" if "gloo" in backends else None)
        render(f"CPU tensors, 2 processes, rank 0 -> rank 1 ({os.cpu_count()} cores; medians of {args.repeats})", rows, "gloo" if "gloo" in backends else None)
        report = {"kind": "cpu", "cores": os.cpu_count(), "rows": rows}
    else:
        import torch

        if not torch.cuda.is_available():
            raise SystemExit("--gpu needs CUDA")
        sizes = [int(s) * KB for s in args.sizes_kb.split(",")]
        rows = device_copy(sizes, args.repeats)
        rows += run_pair(gpu_worker, {"backends": ["ipc"], "devices": [0, 0], "sizes": sizes, "windows": windows, "repeats": args.repeats, "env": env}, timeout=3600)
        if torch.cuda.device_count() >= 2:
            rows += [{**r, "backend": "ipc-2gpu"} for r in run_pair(gpu_worker, {"backends": ["ipc"], "devices": [0, 1], "sizes": sizes, "windows": windows, "repeats": args.repeats, "env": env}, timeout=3600)]
            rows += run_pair(gpu_worker, {"backends": ["nccl"], "devices": [0, 1], "sizes": sizes, "windows": windows, "repeats": args.repeats, "env": env}, timeout=3600)
        rows = summarize(rows, None)
        name = torch.cuda.get_device_name(0)
        render(f"GPU tensors on {name} x{torch.cuda.device_count()}: 2 processes (medians of {args.repeats})", rows, None)
        report = {"kind": "gpu", "device": name, "gpus": torch.cuda.device_count(), "torch": torch.__version__, "rows": rows}
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
