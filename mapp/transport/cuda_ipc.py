"""GPU tensors between ranks of one host by CUDA IPC: device to device, never through host
memory, on side streams.

Per directed pair the sender owns a device arena, shared once with the receiver through its
IPC handle (with one interprocess event), in a set-up message on the shared-memory rings.
A GPU message is a copy into the arena on the sender's side stream, an IPC event record and
a small descriptor on the rings (the user's tag, the header, where in the arena). The
receiver's device thread takes descriptors in arrival order, waits for the event on its own
side stream and copies the bytes out into a fresh tensor; when that copy has finished it
acknowledges the space through a counter in the pair's segment, so the arena is a FIFO ring.
The matching by tag stays in the extension: ``wait()`` of a receive finds the copied tensor
by message id and makes the caller's stream wait for the copy. A message larger than the
arena gets a new, larger arena (a new generation) once the old one has drained. A message that does not fit in the
rest of the arena's lap skips to its start; acknowledgements are message ends, so it waits
for at most every message sent before it (never for the skipped tail).

Messages to one peer enter the rings in the order of their ``isend`` calls whatever their
device: while GPU messages to a peer wait in its sender thread's queue, a CPU message to that
peer waits in the same queue (``send_in_line``), so equal tags stay FIFO across devices.
"""

from __future__ import annotations

import os
import pickle
import queue
import threading
import time

import torch
from torch.multiprocessing.reductions import reduce_tensor

from mapp.errors import TransportError
from mapp.transport.interface import Promise, Work
from mapp.transport.message import HEADER_LEN, INTERNAL, USER, Header, as_bytes, from_bytes

__all__ = ["DevicePath"]

_DEFAULT_ARENA_BYTES = 64 << 20
_ALIGN = 256
_POLL_S = 0.5  # how often a sleeping device thread looks whether the transport closed


class DevicePath:
    """The CUDA IPC side of one ``ShmTransport``."""

    def __init__(self, transport):
        from mapp.transport import _shm

        self._t = transport
        self._engine = transport._engine
        self._notify = _shm.NOTIFY
        self._user, self._internal = USER, INTERNAL
        self._device_index = torch.cuda.current_device() if torch.cuda.is_initialized() else None
        self._senders: dict[int, _DeviceSender] = {}
        self._results: dict[tuple[int, int], tuple[torch.Tensor, torch.cuda.Event] | str] = {}
        self._peer_streams: dict[int, torch.cuda.Stream] = {}  # the receiving thread's, per sender GPU
        self._cond = threading.Condition()
        self._closed = False
        self._broken: str | None = None  # why the receiving thread stopped, if it failed
        self._receiver = threading.Thread(target=self._receive, name="mapp-cuda-ipc-recv", daemon=True)
        self._receiver.start()

    def device(self) -> int:
        if self._device_index is None:
            self._device_index = torch.cuda.current_device()
        return self._device_index

    def send(self, tensor: torch.Tensor, header: Header, dst: int) -> Work:
        self.device()  # the training thread's current device is the one results land on
        ready = torch.cuda.Event()
        ready.record(torch.cuda.current_stream(tensor.device))
        work = Promise(f"isend(dst={dst}, tag={header.tag}) on rank {self._t._rank}")
        with self._cond:
            if self._closed:
                raise TransportError(f"the transport of rank {self._t._rank} is closed")
            sender = self._senders.get(dst)
            if sender is None:
                sender = self._senders[dst] = _DeviceSender(self, dst, tensor.device.index)
                sender.start()
            sender.pending += 1  # until its descriptor is in the rings (``send_in_line``)
            sender.queue.put((tensor, header, ready, work))
        return work

    def send_in_line(self, data: torch.Tensor, header: Header, dst: int) -> Work | None:
        """A CPU message to ``dst`` while GPU messages to it wait in its device sender's queue:
        it goes through that queue too, so that messages to one peer enter the rings in the
        order of their isends whatever their device (equal tags match in send order). None
        when nothing waits there: then the caller posts it at once."""
        with self._cond:
            sender = self._senders.get(dst)
            if sender is None or sender.pending == 0 or self._closed:
                return None
            work = _InLine(f"isend(dst={dst}, tag={header.tag}) on rank {self._t._rank}")
            sender.pending += 1
            sender.queue.put((data, header, None, work))
        return work

    def copied(self, src: int, op) -> bool:
        """Whether the receiving thread has copied the message of ``op`` out (or failed to)."""
        with self._cond:
            return (src, op.msg_id) in self._results or self._closed or self._broken is not None

    def collect(self, src: int, op, header: Header, timeout: float | None = None) -> torch.Tensor:
        """The tensor of a completed receive whose message came by CUDA IPC."""
        key = (src, op.msg_id)
        with self._cond:
            if not self._cond.wait_for(lambda: key in self._results or self._closed or self._broken is not None, timeout):
                raise TransportError(f"irecv(src={src}, tag={header.tag}) on rank {self._t._rank} did not complete within {timeout:g} s (its CUDA IPC copy is pending)")
            found = self._results.pop(key, None) or self._broken or "the transport was closed"
        if isinstance(found, str):
            raise TransportError(f"irecv(src={src}, tag={header.tag}) on rank {self._t._rank} failed: {found}")
        tensor, copied = found
        stream = torch.cuda.current_stream(tensor.device)
        stream.wait_event(copied)
        tensor.record_stream(stream)
        return tensor

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        for sender in self._senders.values():
            sender.queue.put(None)
        for thread in [*self._senders.values(), self._receiver]:
            thread.join(10.0)

    # -- the receiving side ----------------------------------------------------------------

    def _receive(self) -> None:
        try:
            self._receive_loop()
        except BaseException as error:  # every waiter must learn why, never wait forever
            with self._cond:
                self._broken = f"the CUDA IPC receiving thread failed: {type(error).__name__}: {str(error).splitlines()[0][:200] if str(error) else ''}"
                self._cond.notify_all()
            raise

    def _receive_loop(self) -> None:
        arenas: dict[int, tuple[int, torch.Tensor, torch.cuda.Event]] = {}  # src -> (generation, arena, event)
        stream = None
        while not self._closed:
            arrival = self._engine.pop_arrival(_POLL_S)
            if arrival is None:
                continue
            src, msg_id, _tag, meta = arrival
            header = Header.from_words(meta[:HEADER_LEN])
            generation, offset, end = meta[HEADER_LEN : HEADER_LEN + 3]
            try:
                if stream is None:
                    torch.cuda.set_device(self.device())
                    stream = torch.cuda.Stream()
                if arenas.get(src, (None,))[0] != generation:
                    arenas[src] = (generation, *self._open_arena(src, generation))
                _gen, arena, event = arenas[src]
                value, copied = self._copy_out(arena, event, offset, header, stream)
            except Exception as error:  # noqa: BLE001  this message fails; the next ones may not
                with self._cond:
                    self._results[(src, msg_id)] = f"the CUDA IPC copy failed: {type(error).__name__}: {str(error).splitlines()[0][:200] if str(error) else ''}"
                    self._cond.notify_all()
                self._ack_after_failure(src, end, stream)
                continue
            with self._cond:
                self._results[(src, msg_id)] = (value, copied)
                self._cond.notify_all()
            copied.synchronize()  # the space may be reused once the bytes are out
            self._engine.device_ack(src, end)

    def _ack_after_failure(self, src: int, end: int, stream) -> None:
        """Give the space of a message that could not be copied back (else its sender would
        wait for it forever); a peer that is gone takes no acknowledgement."""
        try:
            if stream is not None:
                stream.synchronize()
            self._engine.device_ack(src, end)
        except Exception:  # noqa: BLE001
            pass

    def _open_arena(self, src: int, generation: int) -> tuple[torch.Tensor, torch.cuda.Event]:
        op = self._engine.post_recv(src, generation, self._internal)
        op.wait(None)  # sent before the descriptor that named it: it is here already
        if op.error:
            raise TransportError(op.error)
        rebuild, args, event_handle = pickle.loads(bytes(op.buffer))
        arena = rebuild(*args)
        return arena, torch.cuda.Event.from_ipc_handle(arena.device, event_handle)

    def _copy_out(self, arena: torch.Tensor, event: torch.cuda.Event, offset: int, header: Header, stream: torch.cuda.Stream):
        """Copy a message out of ``arena`` into a fresh tensor on this rank's GPU; the event
        that marks the copy's end on ``stream`` (this thread's stream on this rank's GPU).

        The sender's interprocess event may only be waited on by a stream of the arena's GPU
        (on a stream of another device the driver crashes), so for a sender on another GPU the
        copy runs on a stream of that GPU (where torch runs a cross-device copy anyway), fenced
        both ways with ``stream`` by torch's copy."""
        device = self.device()
        waiter = stream
        if arena.device.index != device:
            waiter = self._peer_streams.get(arena.device.index)
            if waiter is None:
                waiter = self._peer_streams[arena.device.index] = torch.cuda.Stream(arena.device)
        with torch.cuda.stream(stream), torch.cuda.stream(waiter):
            waiter.wait_event(event)
            out = torch.empty(header.nbytes, dtype=torch.uint8, device=device)
            if header.nbytes:
                out.copy_(arena[offset : offset + header.nbytes], non_blocking=True)
            copied = torch.cuda.Event(blocking=True)
            copied.record(stream)
        return from_bytes(out, header), copied


class _DeviceSender(threading.Thread):
    """Copies one peer's GPU messages into the pair's device arena, in order."""

    def __init__(self, path: DevicePath, dst: int, device: int):
        super().__init__(name=f"mapp-cuda-ipc-send-{dst}", daemon=True)
        self.queue: queue.SimpleQueue = queue.SimpleQueue()
        self._path = path
        self._dst = dst
        self._device = device
        self._capacity = int(os.environ.get("MAPP_TRANSPORT_DEVICE_ARENA_BYTES", _DEFAULT_ARENA_BYTES))
        self._arena: torch.Tensor | None = None
        self._generation = 0
        self._base = 0  # stream position where the current arena starts
        self._head = 0  # next free stream position
        self._failed: str | None = None
        self.pending = 0  # messages in the queue not yet in the rings (under the path's _cond)

    def run(self) -> None:
        try:
            torch.cuda.set_device(self._device)
            self._stream = torch.cuda.Stream()
            self._event = torch.cuda.Event(interprocess=True)
        except Exception as error:  # noqa: BLE001  then every send fails with the reason
            self._failed = f"the CUDA IPC sender could not start: {type(error).__name__}: {str(error).splitlines()[0][:300] if str(error) else ''}"
        while (item := self.queue.get()) is not None:
            tensor, header, ready, work = item
            if ready is None:  # a CPU message that waited behind GPU ones: to the rings now
                try:
                    work.place(self._path._t._send_cpu(tensor, header, self._dst))
                except Exception as error:  # noqa: BLE001
                    work.place(error=f"{type(error).__name__}: {str(error).splitlines()[0][:300] if str(error) else ''}")
                self._sent_one()
                continue
            copied = None
            if self._failed is None:
                try:
                    copied = self._send(tensor, header, ready)
                except Exception as error:  # noqa: BLE001  every later send fails with the reason
                    self._failed = f"{type(error).__name__}: {str(error).splitlines()[0][:300] if str(error) else ''}"
            self._sent_one()
            if copied is not None:
                try:
                    copied.synchronize()  # the caller may reuse the tensor once its work is done
                except Exception as error:  # noqa: BLE001
                    self._failed = f"{type(error).__name__}: {str(error).splitlines()[0][:300] if str(error) else ''}"
            work.reject(self._failed) if self._failed else work.resolve()
        self._release()

    def _sent_one(self) -> None:
        with self._path._cond:
            self.pending -= 1

    def _release(self) -> None:
        """Drop the arena and the interprocess event at close (not at interpreter exit)."""
        try:
            if self._arena is not None:
                torch.cuda.current_stream(self._device).synchronize()
                self._stream.synchronize()
        except Exception:  # noqa: BLE001
            pass
        self._arena = None
        self._event = None

    def _send(self, tensor: torch.Tensor, header: Header, ready: torch.cuda.Event) -> torch.cuda.Event:
        """Copy into the arena and post the descriptor; the event that marks the copy's end."""
        size = -(-max(header.nbytes, 1) // _ALIGN) * _ALIGN
        if self._arena is None or size > self._arena.numel():
            self._new_arena(size)
        capacity = self._arena.numel()
        pos = self._head
        offset = (pos - self._base) % capacity
        if capacity - offset < size:  # a message never wraps: skip to the start
            pos += capacity - offset
            offset = 0
        # the bytes last written there were copied out; the receiver acknowledges message
        # ends only, never the skipped tail of a lap, so at most everything sent so far
        self._wait_for_ack(min(self._head, max(0, pos + size - capacity)))
        with torch.cuda.stream(self._stream):
            self._stream.wait_event(ready)
            if header.nbytes:
                self._arena[offset : offset + header.nbytes].copy_(as_bytes(tensor), non_blocking=True)
            self._event.record(self._stream)
            copied = torch.cuda.Event(blocking=True)
            copied.record(self._stream)
        self._head = pos + size
        placement = [self._generation, offset, self._head, 0]
        self._post(header.tag, self._path._user, self._path._notify, header.words() + placement, b"")
        return copied

    def _new_arena(self, size: int) -> None:
        """A first arena, or a larger one for a message that does not fit: the old one must
        have drained first (the receiver drops it when the new generation arrives)."""
        self._wait_for_ack(self._head)
        capacity = max(self._capacity, 2 * size)  # room for two such messages in flight
        self._arena = None
        self._arena = torch.empty(capacity, dtype=torch.uint8, device=self._device)
        self._generation += 1
        self._base = self._head
        rebuild, args = reduce_tensor(self._arena)
        setup = pickle.dumps((rebuild, args, self._event.ipc_handle()))
        self._post(self._generation, self._path._internal, 0, [], setup)

    def _wait_for_ack(self, at_least: int) -> None:
        engine = self._path._engine
        while engine.wait_device_ack(self._dst, at_least, _POLL_S) < at_least:
            if self._path._closed:
                raise TransportError("the transport was closed")

    def _post(self, tag: int, channel: int, flags: int, words: list[int], payload: bytes) -> None:
        data = torch.frombuffer(bytearray(payload), dtype=torch.uint8) if payload else torch.empty(0, dtype=torch.uint8)
        op = self._path._t._post_send(self._dst, tag, channel, flags, words, data.data_ptr(), len(payload))
        op.wait(None)  # small: in the rings at once, unless the peer is gone
        if op.error:
            raise TransportError(op.error)


class _InLine(Work):
    """A CPU isend that waited in a device sender's queue behind GPU messages to the same
    peer: the extension's work once the sender thread posted it (or why it could not)."""

    __slots__ = ("_what", "_placed", "_work", "_error")

    def __init__(self, what: str):
        self._what = what
        self._placed = threading.Event()
        self._work: Work | None = None
        self._error: str | None = None

    def place(self, work: Work | None = None, error: str | None = None) -> None:
        self._work, self._error = work, error
        self._placed.set()

    def test(self) -> bool:
        if not self._placed.is_set():
            return False
        if self._error is not None:
            raise TransportError(f"{self._what} failed: {self._error}")
        return self._work.test()

    def wait(self, timeout: float | None = None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self._placed.wait(timeout):
            raise TransportError(f"{self._what} did not complete within {timeout:g} s (it waits behind GPU messages to the same peer)")
        if self._error is not None:
            raise TransportError(f"{self._what} failed: {self._error}")
        return self._work.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))

    def __repr__(self) -> str:
        return f"<Work {self._what}: {'queued' if not self._placed.is_set() else 'posted'}>"
