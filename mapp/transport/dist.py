"""``DistTransport``: tagged asynchronous messages over torch.distributed (gloo or NCCL).

torch.distributed p2p has no tags on NCCL and matches in posting order, so every directed
pair carries one FIFO of [header, payload] messages, demultiplexed by ``(src, tag)`` into a
``Mailbox``. Per peer, a sender thread sends the queue in order and a receiver thread
always has the next header receive posted. Threads, not ``test()``, make progress: gloo's
p2p ``Work.is_completed()`` never turns true before ``wait()`` is called, and a ``wait`` that
times out closes the gloo pair for good, so the training thread must not wait on them itself.

On NCCL the headers go over a gloo group of the same ranks, and only the payloads over NCCL.
An NCCL receive is a kernel that spins on the GPU until its message comes: a header receive
always posted there would make every device-wide synchronization (``torch.cuda.synchronize``,
a ``cudaFree`` of the caching allocator, creating a communicator) wait for the peer's *next*
message, which may never come before the peer synchronizes too: both ranks hang (DPP over
NCCL did, on 2 GPUs). A payload receive is posted only once its header has arrived, with the
sender's payload send already on its way, so it never waits long.

The threads call the transport's own ``ProcessGroup`` objects directly, not ``dist.send`` and
``dist.recv``: those look the group up in torch.distributed's registry, which
``destroy_process_group()`` empties, so a transport still open then (closed by ``atexit``)
could not say goodbye, and its receivers would block the interpreter's exit. The gloo groups
keep working after that call; NCCL ones are aborted by it, which fails their threads at once.
"""

from __future__ import annotations

import atexit
import contextlib
import datetime
import queue
import threading
import time
from collections.abc import Iterable

import torch
import torch.distributed as dist

from mapp.errors import TransportError
from mapp.transport.interface import Promise, Transport, Work
from mapp.transport.mailbox import Mailbox
from mapp.transport.message import CLOSE, CUDA, HEADER_LEN, Header, as_bytes, close_header, from_bytes

__all__ = ["DistTransport"]

# The header receive of an idle peer stays posted: it must not hit the group's op timeout.
_GROUP_TIMEOUT = datetime.timedelta(days=7)
# close() is a goodbye handshake: it returns once every peer said goodbye too (or died).
_CLOSE_WAIT_S = 60.0


class DistTransport(Transport):
    """Tagged p2p over its own process groups of ``group``'s ranks (the world by default).

    Construction is collective over those ranks, and so is ``close`` (each rank waits, up
    to a minute, for its peers' goodbye). ``peers`` limits which ranks this one talks to
    (the rest of the group may go through shared memory); all of them by default.
    """

    def __init__(self, group: dist.ProcessGroup | None = None, *, peers: Iterable[int] | None = None):
        if not dist.is_initialized():
            raise TransportError("torch.distributed is not initialized", "call torch.distributed.init_process_group first")
        self._rank = dist.get_rank()
        world = dist.get_world_size()
        ranks = sorted(dist.get_process_group_ranks(group)) if group is not None else list(range(world))
        self._nccl = "nccl" in str(dist.get_backend(group)) and torch.cuda.is_available()
        self._device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
        self._comm_device = self._device if self._nccl else torch.device("cpu")
        # One group per direction: NCCL gives each (group, pair) its own stream, and a header
        # receive posted on the stream a send in the other direction also uses would block
        # that send until the peer's next message arrives -- a deadlock when both send.
        options = dict(timeout=_GROUP_TIMEOUT, backend="nccl" if self._nccl else "gloo", use_local_synchronization=len(ranks) < world)
        self._upward = dist.new_group(ranks, **options)  # lower rank -> higher rank
        self._downward = dist.new_group(ranks, **options)
        # headers (and goodbyes) on the CPU: see the module's docstring
        self._control = dist.new_group(ranks, **{**options, "backend": "gloo"}) if self._nccl else None
        self._group_rank = {r: i for i, r in enumerate(ranks)}  # both groups list ``ranks`` in order
        self._peers = set(peers) if peers is not None else set(ranks)
        self._peers.discard(self._rank)
        self._mailbox = Mailbox(self._rank)
        self._senders: dict[int, _Sender] = {}
        self._receivers: dict[int, threading.Thread] = {}
        self._lock = threading.Lock()
        self._closed = False
        # Every peer's threads start now, not on first use: a thread blocked in a gloo
        # receive when the interpreter exits aborts the process, so each receiver must get
        # its peer's goodbye at close, and every peer must be listening for ours.
        for peer in sorted(self._peers):
            self._senders[peer] = _Sender(self, peer)
            self._receivers[peer] = threading.Thread(target=self._receive, args=(peer,), name=f"mapp-dist-recv-{peer}", daemon=True)
        for peer in sorted(self._peers):
            self._senders[peer].start()
            self._receivers[peer].start()
        atexit.register(self.close)

    def isend(self, tensor: torch.Tensor, dst: int, tag: int) -> Work:
        header = Header.of(tensor, tag)
        work = Promise(f"isend(dst={dst}, tag={tag}) on rank {self._rank}")
        ready = None
        if tensor.is_cuda:
            ready = torch.cuda.Event()
            ready.record()
        self._connect(dst).submit(header, tensor, ready, work)
        return work

    def irecv(self, src: int, tag: int) -> Work:
        self._connect(src)
        return self._mailbox.post(src, int(tag))

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        atexit.unregister(self.close)
        for sender in self._senders.values():
            sender.submit(close_header(), None, None, None)
        deadline = time.monotonic() + _CLOSE_WAIT_S
        for thread in [*self._senders.values(), *self._receivers.values()]:
            thread.join(max(0.0, deadline - time.monotonic()))
        self._mailbox.close(f"the transport of rank {self._rank} was closed")

    def _group(self, src: int, dst: int) -> dist.ProcessGroup:
        """The group the payloads from ``src`` to ``dst`` go over."""
        return self._upward if src < dst else self._downward

    def _header_group(self, src: int, dst: int) -> dist.ProcessGroup:
        """The group the headers from ``src`` to ``dst`` go over: gloo's on NCCL, else the payloads'."""
        return self._control if self._control is not None else self._group(src, dst)

    def _connect(self, peer: int) -> _Sender:
        with self._lock:
            if self._closed:
                raise TransportError(f"the transport of rank {self._rank} is closed")
        sender = self._senders.get(peer)
        if sender is None:
            raise TransportError(f"rank {peer} is not a peer of rank {self._rank} in this transport", f"peers: {sorted(self._peers)}")
        return sender

    def _receive(self, src: int) -> None:
        with _side_stream(self._device):
            self._receive_loop(src)

    def _receive_loop(self, src: int) -> None:
        group, headers = self._group(src, self._rank), self._header_group(src, self._rank)
        peer = self._group_rank[src]
        # one header buffer for the thread's life: never freed, so never reused under a receive
        words = torch.empty(HEADER_LEN, dtype=torch.int64)
        try:
            while True:
                headers.recv([words], peer, 0).wait()
                header = Header.from_words(words.tolist())
                if header.kind == CLOSE:
                    self._mailbox.close_peer(src, f"rank {src} closed its transport")
                    return
                data = torch.empty(header.nbytes, dtype=torch.uint8, device=self._comm_device)
                if header.nbytes:
                    group.recv([data], peer, 0).wait()
                target = self._device if header.device == CUDA else torch.device("cpu")
                value = from_bytes(data, header).to(target)
                if self._nccl:
                    torch.cuda.current_stream().synchronize()  # this thread's stream: the bytes are in
                    if value.is_cuda:
                        # made on this thread's stream, used on the training's: the allocator
                        # must not hand the block to this stream again before that use is done
                        value.record_stream(torch.cuda.default_stream(self._device))
                self._mailbox.deliver(src, header.tag, value)
        except Exception as error:  # noqa: BLE001  the thread's end: every waiter must learn why
            reason = "the transport was closed" if self._closed else f"receiving from rank {src} failed (did it die?): {_one_line(error)}"
            self._mailbox.close_peer(src, reason)


class _Sender(threading.Thread):
    """Sends one peer's messages in order; completes each ``isend`` when its payload left."""

    def __init__(self, transport: DistTransport, dst: int):
        super().__init__(name=f"mapp-dist-send-{dst}", daemon=True)
        self._t = transport
        self._dst = dst
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._failed: str | None = None

    def submit(self, header: Header, tensor: torch.Tensor | None, ready: torch.cuda.Event | None, work: Promise | None) -> None:
        self._queue.put((header, tensor, ready, work))

    def run(self) -> None:
        with _side_stream(self._t._device):
            self._run()

    def _run(self) -> None:
        t = self._t
        group, headers = t._group(t._rank, self._dst), t._header_group(t._rank, self._dst)
        while True:
            header, tensor, ready, work = self._queue.get()
            if self._failed is None:
                try:
                    self._send(header, tensor, ready, group, headers)
                except Exception as error:  # noqa: BLE001  every later send must fail with the reason
                    self._failed = f"sending to rank {self._dst} failed (did it die?): {_one_line(error)}"
            if work is not None:
                work.reject(self._failed) if self._failed else work.resolve()
            if header.kind == CLOSE:
                return

    def _send(self, header: Header, tensor: torch.Tensor | None, ready: torch.cuda.Event | None, group: dist.ProcessGroup,
              headers: dist.ProcessGroup) -> None:
        t = self._t
        if ready is not None:
            torch.cuda.current_stream().wait_event(ready)
        peer = t._group_rank[self._dst]
        headers.send([torch.tensor(header.words(), dtype=torch.int64)], peer, 0).wait()
        if tensor is not None and header.nbytes:
            group.send([as_bytes(tensor).to(t._comm_device)], peer, 0).wait()
        if t._nccl or ready is not None:
            torch.cuda.current_stream().synchronize()  # the caller may reuse the tensor once the work is done


@contextlib.contextmanager
def _side_stream(device: torch.device):
    """A thread's own CUDA stream (nothing on CPU). NCCL's ``Work.wait()`` makes the current
    stream wait for the transfer: on the default stream, which the training thread's kernels
    use, a receive always posted for the next header would hold every later kernel until the
    peer's next message came, and that message may need those kernels (a deadlock)."""
    if device.type != "cuda":
        yield
        return
    torch.cuda.set_device(device)
    with torch.cuda.stream(torch.cuda.Stream(device)):
        yield


def _one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0][:300] if text else type(error).__name__
