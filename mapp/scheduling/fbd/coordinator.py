"""The communication coordinator: every rank issues its ready collectives in one global order.

Workers (virtual ranks, one thread each) *post* the collectives they plan, naming a group from
a list that every process holds in the same order. Each process runs one control thread that
repeats a *round*: it writes one byte per (group, member) slot of a table, 1 where a local
member has a request waiting at the head of that group's queue, and combines the tables of all
processes with one all-reduce (MAX over uint8: the OR of the bits, which NCCL lacks). A group
whose member slots are all set is *ready*; every process sees the same table, so all of them
run the ready groups of a round in ascending group order, and no two ranks can issue two
collectives in opposite orders. Requests on one group run first in, first out per member.

The table has one byte per member of each group plus two, so any number of ranks fits (the
original's int64 masks stopped at 63). There is no central loop: every process takes part in
each round through the all-reduce, which blocks without spinning. A process whose workers all
wait for a collective enters the next round at once; otherwise it waits for a local change
(a post, a wait, a finish) or for an idle time that doubles while rounds see nothing new.
When no worker anywhere is computing and no group is ready, no request can ever become ready:
every waiting request fails with :class:`DeadlockError` instead of hanging.

Pure Python (threads and bytes); the all-reduce is injected (:mod:`.allreduce`), so tests run
it in one process. ::

    coord = Coordinator(groups=[(0, 1), (1, 2)], local_ranks=[1], allreduce_max=reduce)
    coord.start()
    request = coord.post(1, group=0, op=lambda: exchange())   # on the control thread when ready
    request.wait(timeout=30)
    coord.finish(1)
    coord.join()
"""

from __future__ import annotations

import collections
import threading
import time
from typing import Any, Callable, Iterable, Sequence

__all__ = ["Coordinator", "Request", "Round", "DeadlockError", "table_layout"]

_RUNNING, _BUSY = 0, 1  # the two trailing bytes: some worker is not finished / is computing


class DeadlockError(RuntimeError):
    """Every worker waits on a collective that no other worker will ever join."""


class Request:
    """One posted collective of one virtual rank; :meth:`wait` returns what its op returned."""

    __slots__ = ("rank", "group", "op", "result", "error", "_done", "_coordinator", "_waited")

    def __init__(self, coordinator: "Coordinator", rank: int, group: int, op: Callable[[], Any] | None):
        self.rank, self.group, self.op = rank, group, op
        self.result: Any = None
        self.error: BaseException | None = None
        self._done = threading.Event()
        self._coordinator = coordinator
        self._waited = False  # its worker blocks on it (counted in the worker's blocked count)

    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> Any:
        """Block until the collective ran (the worker counts as waiting meanwhile); re-raise its
        error; ``TimeoutError`` after ``timeout`` seconds."""
        if not self._done.is_set():
            self._coordinator._block(self, timeout)
        if self.error is not None:
            raise self.error
        return self.result


class Round:
    """What one round saw: the ready groups (ascending), the same on every process."""

    __slots__ = ("number", "ready", "table")

    def __init__(self, number: int, ready: list[int], table: bytes):
        self.number, self.ready, self.table = number, ready, table


def table_layout(groups: Sequence[Sequence[int]]) -> tuple[list[int], int]:
    """(offset of each group's first slot, table length in bytes): one slot per member, plus
    the two trailing flags."""
    offsets, at = [], 0
    for members in groups:
        offsets.append(at)
        at += len(members)
    return offsets, at + 2


class Coordinator:
    """The coordinator of one process.

    ``groups``: member virtual ranks of every group, the same list (and order) on all processes;
    a group's index is its place in the global order. ``local_ranks``: the virtual ranks whose
    workers run in this process. ``allreduce_max(bytes) -> bytes``: the element-wise MAX of
    every process's table. ``execute(group, requests)``: runs a ready group's local requests
    (ascending virtual rank), by default each request's ``op()`` in turn, its return value the
    request's result; a process with several members in one group does the group's external
    communication once there. ``idle_s``: (first, longest) wait before a round that nothing
    asks for. ``on_round``: called with each :class:`Round` (tests record the global order).
    """

    def __init__(self, groups: Sequence[Sequence[int]], local_ranks: Iterable[int],
                 allreduce_max: Callable[[bytes], bytes], *,
                 execute: Callable[[int, list[Request]], None] | None = None,
                 idle_s: tuple[float, float] = (1e-4, 2e-3),
                 on_round: Callable[[Round], None] | None = None,
                 on_start: Callable[[], None] | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.groups = [tuple(sorted(int(m) for m in g)) for g in groups]
        for index, members in enumerate(self.groups):
            if len(set(members)) != len(members) or not members:
                raise ValueError(f"group {index} must list distinct members, got {members}")
        self.offsets, self.size = table_layout(self.groups)
        self.local = sorted(set(int(r) for r in local_ranks))
        self._slots = {(g, m): self.offsets[g] + i
                       for g, members in enumerate(self.groups) for i, m in enumerate(members)}
        self._allreduce = allreduce_max
        self._execute = execute or _run_each
        self._idle = idle_s
        self._on_round = on_round
        self._on_start = on_start
        self._clock = clock
        self._lock = threading.Condition()
        self._queues: dict[tuple[int, int], collections.deque[Request]] = {}
        self._finished: set[int] = set()
        self._blocked: dict[int, int] = {r: 0 for r in self.local}
        self._dirty = False
        self._thread: threading.Thread | None = None
        self._failure: BaseException | None = None
        self.rounds = 0
        self.collectives = 0

    # -- workers ------------------------------------------------------------------------------
    def post(self, rank: int, group: int, op: Callable[[], Any] | None = None) -> Request:
        """Plan a collective of ``rank`` on ``group``; ``op`` runs on the control thread when
        every member has posted its own request there."""
        if rank not in self._blocked:
            raise ValueError(f"virtual rank {rank} is not local to this coordinator (local: {self.local})")
        if (group, rank) not in self._slots:
            raise ValueError(f"virtual rank {rank} is not a member of group {group} {self.groups[group]}")
        request = Request(self, rank, group, op)
        with self._lock:
            if self._failure is not None:
                raise self._failure
            if rank in self._finished:
                raise RuntimeError(f"virtual rank {rank} posted after finish()")
            self._queues.setdefault((group, rank), collections.deque()).append(request)
            self._touch()
        return request

    def finish(self, rank: int) -> None:
        """``rank`` posts nothing more (what it posted still runs)."""
        with self._lock:
            self._finished.add(rank)
            self._touch()

    def _block(self, request: Request, timeout: float | None) -> None:
        deadline = None if timeout is None else self._clock() + timeout
        with self._lock:
            if request._done.is_set():
                return
            self._blocked[request.rank] += 1
            request._waited = True
            self._touch()
            try:
                while not request._done.is_set():
                    left = None if deadline is None else deadline - self._clock()
                    if left is not None and left <= 0:
                        raise TimeoutError(f"virtual rank {request.rank}: collective on group {request.group} "
                                           f"{self.groups[request.group]} not ready after {timeout} s")
                    self._lock.wait(left)
            finally:
                self._unblock(request)

    def _unblock(self, request: Request) -> None:
        # under the lock; the worker counts as computing again from the moment its request is
        # done, not from when its thread wakes up (else a round could see nobody computing)
        if request._waited:
            request._waited = False
            self._blocked[request.rank] -= 1

    def _touch(self) -> None:
        self._dirty = True
        self._lock.notify_all()

    # -- control thread -----------------------------------------------------------------------
    def start(self) -> "Coordinator":
        """Start the control thread (a daemon) that runs rounds until every worker of every
        process has finished and every posted request ran."""
        self._thread = threading.Thread(target=self._loop, name="fbd-coordinator", daemon=True)
        self._thread.start()
        return self

    def join(self, timeout: float | None = None) -> None:
        """Wait for the control thread; re-raise what stopped it."""
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise TimeoutError(f"coordinator still running after {timeout} s")
        if self._failure is not None:
            raise self._failure

    def _snapshot(self) -> bytes:
        table = bytearray(self.size)
        pending = False
        for (group, rank), queue in self._queues.items():
            if queue:
                table[self._slots[group, rank]] = 1
                pending = True
        busy = any(r not in self._finished and not self._blocked[r] for r in self.local)
        running = pending or any(r not in self._finished for r in self.local)
        table[self.size - 2 + _RUNNING] = running
        table[self.size - 2 + _BUSY] = busy
        return bytes(table)

    def _ready(self, table: bytes) -> list[int]:
        return [g for g, members in enumerate(self.groups)
                if 0 not in table[self.offsets[g]:self.offsets[g] + len(members)]]

    def run_round(self) -> Round | None:
        """One round: contribute, all-reduce, run the ready local requests in group order.
        ``None`` once nothing runs anywhere any more."""
        with self._lock:
            mine = self._snapshot()
            self._dirty = False
        table = bytes(self._allreduce(mine))
        if len(table) != self.size:
            raise RuntimeError(f"all-reduce returned {len(table)} bytes, expected {self.size}")
        self.rounds += 1
        if not table[self.size - 2 + _RUNNING]:
            return None
        ready = self._ready(table)
        done = Round(self.rounds, ready, table)
        if self._on_round is not None:
            self._on_round(done)
        for group in ready:
            with self._lock:
                requests = [self._queues[group, r].popleft() for r in self.groups[group] if r in self._blocked]
            if requests:
                self._run(group, requests)
        if not ready and not table[self.size - 2 + _BUSY]:
            waiting = [f"{i}{self.groups[i]}" for i in range(len(self.groups))
                       if any(table[self.offsets[i]:self.offsets[i] + len(self.groups[i])])]
            raise DeadlockError("no worker computes and no collective is ready; groups with posted "
                                f"requests: {', '.join(waiting) or 'none'}")
        return done

    def _run(self, group: int, requests: list[Request]) -> None:
        try:
            self._execute(group, requests)
        except BaseException as error:  # the workers see it; the peers' ops fail on their own
            for request in requests:
                if not request._done.is_set() and request.error is None:
                    request.error = error
        self.collectives += 1
        with self._lock:
            for request in requests:
                request.op = None  # what the op held (tensors to send) is free now
                request._done.set()
                self._unblock(request)
            self._touch()

    def _loop(self) -> None:
        if self._on_start is not None:
            self._on_start()
        idle, previous = self._idle[0], None
        try:
            while True:
                done = self.run_round()
                if done is None:
                    return
                quiet = not done.ready and done.table == previous
                previous = done.table
                if not quiet:
                    idle = self._idle[0]
                    continue
                with self._lock:
                    # workers that all wait need the next round now; otherwise a local change or the
                    # idle time starts it (doubling while nothing changes anywhere)
                    if not self._dirty and not self._all_waiting():
                        self._lock.wait(idle)
                idle = min(idle * 2, self._idle[1])
        except BaseException as error:
            self._fail(error)

    def _all_waiting(self) -> bool:
        return all(r in self._finished or self._blocked[r] for r in self.local)

    def _fail(self, error: BaseException) -> None:
        with self._lock:
            self._failure = error
            for queue in self._queues.values():
                while queue:
                    request = queue.popleft()
                    request.error = error
                    request._done.set()
                    self._unblock(request)
            self._lock.notify_all()


def _run_each(group: int, requests: list[Request]) -> None:
    for request in requests:
        request.result = request.op() if request.op is not None else None
