"""``ShmTransport``: tagged asynchronous messages between ranks of one host over POSIX
shared memory, through the C++ extension ``mapp.transport._shm``.

CPU tensors travel through the extension's rings; GPU tensors by CUDA IPC (``cuda_ipc``),
with only a small descriptor on the rings. Segments are named per job and pair
(``/mapp-<job>-<src>-<dst>``) and unlinked as soon as both ends have mapped them; at close
and at exit this rank also unlinks every name of its own pairs, in case a peer died before
mapping one. Other processes' segments are never touched.
"""

from __future__ import annotations

import atexit
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable

import torch
import torch.distributed as dist

from mapp.errors import TransportError
from mapp.transport.interface import Transport, Work
from mapp.transport.message import CUDA, INTERNAL, USER, Header, from_bytes
from mapp.transport.rendezvous import Roster, gather_roster, segment_name

__all__ = ["ShmTransport", "USER", "INTERNAL"]

_DEFAULT_ARENA_BYTES = 8 << 20
_DEFAULT_RING_SLOTS = 1024
_DEFAULT_CHUNK_BYTES = 1 << 20
_DEFAULT_CACHE_BYTES = 512 << 20
_DEFAULT_SINGLE_COPY_BYTES = 2 << 20
_MAX_COPY_THREADS = 4


class ShmTransport(Transport):
    """Shared memory to the peers on this host. Construction is collective over ``group``
    (ranks without a local peer take part too); ``peers`` narrows the peers to connect.

    Sizes per directed pair: ``$MAPP_TRANSPORT_ARENA_BYTES`` of data arena (8 MiB; larger
    messages stream through it in chunks of ``$MAPP_TRANSPORT_CHUNK_BYTES``, 1 MiB, at most a
    quarter of the arena) and ``$MAPP_TRANSPORT_RING_SLOTS`` descriptors. Received buffers of
    1 MiB and more go back to a cache of up to ``$MAPP_TRANSPORT_CACHE_BYTES`` (512 MiB) once
    dropped, for the next message of that size (fresh memory costs a fault per page).

    Messages of ``$MAPP_TRANSPORT_SINGLE_COPY_BYTES`` (2 MiB) and more skip the arena where
    the host lets one process read another's memory (``process_vm_readv``; not under Yama
    ``ptrace_scope`` >= 1 or across PID namespaces): the receiver copies them straight out of
    the sender's tensor with ``$MAPP_TRANSPORT_COPY_THREADS`` threads (up to 4), and the send
    completes once they are read. 0 turns this off. ``single_copy_peers`` says where it is on.
    """

    def __init__(self, group: dist.ProcessGroup | None = None, *, job: str | None = None, peers: Iterable[int] | None = None, roster: Roster | None = None):
        _shm = _extension()
        self._roster = roster or gather_roster(group, job)
        self._rank = self._roster.rank
        local = self._roster.local_peers()
        self._peers = sorted(set(peers) & set(local) if peers is not None else local)
        if peers is None and self._roster.remote_peers():
            far = self._roster.remote_peers()
            raise TransportError(f"ranks {far} are not on this host: shared memory cannot reach them", 'use backend="auto" or "dist"')
        self._names = [segment_name(self._roster.job, a, b) for p in self._peers for a, b in ((self._rank, p), (p, self._rank))]
        self._lock = threading.Lock()
        self._closed = False
        self._device_path = None
        self._in_flight: deque = deque()  # (op, tensor): the C++ thread reads the tensor's memory
        chunk = int(os.environ.get("MAPP_TRANSPORT_CHUNK_BYTES", _DEFAULT_CHUNK_BYTES))
        cache = int(os.environ.get("MAPP_TRANSPORT_CACHE_BYTES", _DEFAULT_CACHE_BYTES))
        single = int(os.environ.get("MAPP_TRANSPORT_SINGLE_COPY_BYTES", _DEFAULT_SINGLE_COPY_BYTES))
        threads = int(os.environ.get("MAPP_TRANSPORT_COPY_THREADS", min(_MAX_COPY_THREADS, os.cpu_count() or 1)))
        self._engine = _shm.Engine(self._rank, chunk, cache, single, threads)
        atexit.register(self.close)
        try:
            self._connect(group)
        except BaseException:
            self.close()
            raise
        if self._peers and torch.cuda.is_available():
            self._device()  # its thread copies GPU messages out as they arrive (no CUDA work before)

    def _connect(self, group: dist.ProcessGroup | None) -> None:
        """Create this rank's outgoing segments, then (once all exist) map the incoming ones
        and start the threads; each step ends with an all-gather of every rank's outcome, so a
        failure on one rank fails all of them with its reason instead of hanging them."""
        arena = int(os.environ.get("MAPP_TRANSPORT_ARENA_BYTES", _DEFAULT_ARENA_BYTES))
        slots = int(os.environ.get("MAPP_TRANSPORT_RING_SLOTS", _DEFAULT_RING_SLOTS))
        job = self._roster.job
        self._step(group, "create", lambda: [self._engine.create_outgoing(p, segment_name(job, self._rank, p), slots, arena) for p in self._peers])
        self._step(group, "map", lambda: [self._engine.open_incoming(p, segment_name(job, p, self._rank)) for p in self._peers])
        self._engine.start()
        self._step(group, "start", lambda: None)  # no traffic before every peer's threads run

    def _step(self, group: dist.ProcessGroup | None, what: str, action: Callable[[], object]) -> None:
        try:
            action()
            outcome = None
        except (OSError, RuntimeError, ValueError) as error:
            outcome = f"rank {self._rank}: {error}"
        outcomes: list = [None] * len(self._roster.ranks)
        try:
            dist.all_gather_object(outcomes, outcome, group=group)
        except RuntimeError as error:  # a rank died during set-up
            raise TransportError(f"shared-memory transport set-up failed ({what}): a rank did not answer (did it die?): {str(error).splitlines()[0][:200]}") from None
        failures = [o for o in outcomes if o]
        if failures:
            raise TransportError(f"shared-memory transport set-up failed ({what}): {failures[0]}", "is /dev/shm large enough? MAPP_TRANSPORT_ARENA_BYTES sets the arena per pair")

    @property
    def peers(self) -> list[int]:
        return list(self._peers)

    @property
    def single_copy_peers(self) -> list[int]:
        """The peers whose large messages this rank reads from their memory (one copy)."""
        return [p for p in self._peers if self._engine.single_copy(p)]

    def isend(self, tensor: torch.Tensor, dst: int, tag: int) -> Work:
        header = Header.of(tensor, tag)
        self._check(dst)
        if tensor.is_cuda:
            return self._device().send(tensor, header, dst)
        data = tensor.contiguous()
        if self._device_path is not None:  # behind GPU messages to dst still being copied?
            queued = self._device_path.send_in_line(data, header, dst)
            if queued is not None:
                return queued
        return self._send_cpu(data, header, dst)

    def irecv(self, src: int, tag: int) -> Work:
        self._check(src)
        op = self._post_recv(src, int(tag), USER)
        return OpWork(op, f"irecv(src={src}, tag={tag}) on rank {self._rank}", finish=lambda op, timeout: self._unpack(src, op, timeout), ready=lambda op: self._arrived(src, op))

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        atexit.unregister(self.close)
        if self._device_path is not None:
            self._device_path.close()
        self._engine.close()  # sends what is queued, then every op is finished
        self._in_flight.clear()
        for name in self._names:
            _extension().unlink(name)

    # -- used by the CUDA IPC path --------------------------------------------------------

    def _send_cpu(self, data: torch.Tensor, header: Header, dst: int) -> OpWork:
        """Post a contiguous CPU tensor to the rings (this thread or a device sender's)."""
        op = self._post_send(dst, header.tag, USER, 0, header.words(), data.data_ptr(), header.nbytes)
        self._keep_until_sent(op, data)
        return OpWork(op, f"isend(dst={dst}, tag={header.tag}) on rank {self._rank}")

    def _post_send(self, dst: int, tag: int, channel: int, flags: int, words: list[int], ptr: int, nbytes: int):
        try:
            return self._engine.post_send(dst, tag, channel, flags, words, ptr, nbytes)
        except ValueError as error:
            raise TransportError(str(error)) from None

    def _post_recv(self, src: int, tag: int, channel: int):
        try:
            return self._engine.post_recv(src, tag, channel)
        except ValueError as error:
            raise TransportError(str(error)) from None

    def _keep_until_sent(self, op, data: object) -> None:
        """Hold ``data`` until ``op`` sent it, even if the caller drops the work unwaited."""
        with self._lock:
            while self._in_flight and self._in_flight[0][0].test():
                self._in_flight.popleft()
            self._in_flight.append((op, data))

    def _device(self):
        with self._lock:
            if self._device_path is None:
                from mapp.transport.cuda_ipc import DevicePath

                self._device_path = DevicePath(self)
            return self._device_path

    def _check(self, peer: int) -> None:
        if self._closed:
            raise TransportError(f"the transport of rank {self._rank} is closed")
        if peer not in self._peers:
            raise TransportError(f"rank {peer} is not a peer of rank {self._rank} in this transport", f"peers: {self._peers}")

    def _unpack(self, src: int, op, timeout: float | None) -> torch.Tensor:
        header = Header.from_words(op.meta)
        if header.device == CUDA:
            return self._device().collect(src, op, header, timeout)
        return bytes_of(op, header)

    def _arrived(self, src: int, op) -> bool:
        """A completed receive op's message is here: its bytes, or for a GPU message its
        descriptor and the device copy out of the sender's arena."""
        if op.error is not None or Header.from_words(op.meta).device != CUDA:
            return True
        return self._device().copied(src, op)


def bytes_of(op, header: Header) -> torch.Tensor:
    """The tensor a completed receive op carries in its CPU buffer (no copy)."""
    if header.nbytes == 0 or op.buffer is None:
        return torch.empty(header.shape, dtype=header.dtype)
    return from_bytes(torch.frombuffer(op.buffer, dtype=torch.uint8), header)


class OpWork(Work):
    """A ``Work`` over one op of the extension: ``wait`` sleeps in C++ without the GIL."""

    __slots__ = ("_op", "_what", "_finish", "_ready", "_value", "_lock")

    def __init__(self, op, what: str, finish: Callable | None = None, ready: Callable | None = None):
        self._op = op
        self._what = what
        self._finish = finish  # (op, timeout left) -> the received tensor
        self._ready = ready  # op -> whether ``finish`` would return at once
        self._value = None
        self._lock = threading.Lock()

    def test(self) -> bool:
        if not self._op.test():
            return False
        self._raise_if_failed()
        return self._ready is None or self._finish is None or self._ready(self._op)

    def wait(self, timeout: float | None = None) -> torch.Tensor | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self._op.wait(timeout):
            raise TransportError(f"{self._what} did not complete within {timeout:g} s")
        self._raise_if_failed()
        with self._lock:
            if self._finish is not None:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                self._value, self._finish = self._finish(self._op, left), None
        return self._value

    def _raise_if_failed(self) -> None:
        error = self._op.error
        if error is not None:
            raise TransportError(f"{self._what} failed: {error}")

    def __repr__(self) -> str:
        return f"<Work {self._what}: {'done' if self._op.test() else 'pending'}>"


def _extension():
    try:
        from mapp.transport import _shm
    except ImportError as error:
        raise TransportError(f"the shared-memory transport extension is not built ({error})", "pip install -e . builds it (needs a C++17 compiler)") from None
    return _shm
