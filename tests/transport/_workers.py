"""What each test rank runs (module-level functions: spawned processes import them)."""

from __future__ import annotations

import random
from collections import defaultdict, deque

import torch.distributed as dist

from mapp.transport import make_transport
from tests.transport._messages import digest, messages, same

WAIT_S = 40.0


def exchange(rank: int, world: int, backend: str, count: int, big: int) -> str:
    """Every rank sends ``count`` messages to every other, all in flight at once; receives
    are posted in random order (some before the messages exist) and waited for in another.
    Returns a digest of everything received, in a canonical order."""
    transport = make_transport(backend=backend)
    peers = [p for p in range(world) if p != rank]
    rng = random.Random(rank)
    wanted = [(src, tag) for src in peers for tag, _ in messages(src, rank, count, big)]
    rng.shuffle(wanted)
    early = wanted[: len(wanted) // 3]
    recvs = {i: (src, tag, transport.irecv(src, tag)) for i, (src, tag) in enumerate(early)}
    dist.barrier()
    sends = [transport.isend(tensor, dst, tag) for dst in reversed(peers) for tag, tensor in messages(rank, dst, count, big)]
    recvs.update({len(early) + i: (src, tag, transport.irecv(src, tag)) for i, (src, tag) in enumerate(wanted[len(early):])})
    expected = {src: _by_tag(messages(src, rank, count, big)) for src in peers}
    got: dict[tuple[int, int], list] = defaultdict(list)
    order = list(recvs)
    rng.shuffle(order)
    for i in order:
        src, tag, work = recvs[i]
        got[(src, tag, i)] = work.wait(WAIT_S)
    for i in sorted(recvs):  # equal tags match in posting order
        src, tag, _ = recvs[i]
        tensor = got[(src, tag, i)]
        want = expected[src][tag].popleft()
        assert same(tensor, want), f"rank {rank}: message {tag} from {src}: got {tensor.dtype}{tuple(tensor.shape)}, want {want.dtype}{tuple(want.shape)}"
    for work in sends:
        assert work.wait(WAIT_S) is None
        assert work.test()
    dist.barrier()
    transport.close()
    transport.close()
    canonical = sorted(got, key=lambda k: (k[0], k[1], k[2]))
    return digest([got[k] for k in canonical])


def _by_tag(pairs: list) -> dict[int, deque]:
    out: dict[int, deque] = defaultdict(deque)
    for tag, tensor in pairs:
        out[tag].append(tensor)
    return out


def semantics(rank: int, world: int, backend: str) -> list[str]:
    """A timed-out wait leaves the receive posted; a closed peer fails what waits on it."""
    import torch

    from mapp.errors import TransportError

    transport = make_transport(backend=backend)
    errors = []
    if rank == 0:
        early = transport.irecv(1, 99)
        assert not early.test()
        try:
            early.wait(0.2)
        except TransportError as error:
            errors.append(str(error))
        dist.barrier()
        assert same(early.wait(WAIT_S), torch.arange(6.0).reshape(2, 3))
        assert early.test()
        late = transport.irecv(1, 100)
        dist.barrier()
        try:
            late.wait(WAIT_S)
        except TransportError as error:
            errors.append(str(error))
        try:
            transport.irecv(5, 0)
        except TransportError as error:
            errors.append(str(error))
    else:
        transport.irecv(0, 1)  # connects both directions
        dist.barrier()
        transport.isend(torch.arange(6.0).reshape(2, 3), 0, 99).wait(WAIT_S)
        dist.barrier()
    transport.close()
    return errors


def crash(rank: int, world: int, backend: str) -> list[str]:
    """Rank 1 dies by SIGKILL while a large message streams to rank 0; every other rank
    must fail what waits on rank 1 with a clear error, never hang."""
    import os
    import signal

    import torch

    from mapp.errors import TransportError

    transport = make_transport(backend=backend)
    if rank == 1:
        for dst in (0, 2)[: world - 1]:
            transport.irecv(dst, 1)
        dist.barrier()
        transport.isend(torch.ones(16 << 20), 0, 7)  # 64 MB through a 256 KiB arena
        os.kill(os.getpid(), signal.SIGKILL)
    dist.barrier()
    errors = []
    for post in (lambda: transport.irecv(1, 7), lambda: transport.irecv(1, 8), lambda: transport.isend(torch.ones(4 << 20), 1, 1)):
        try:
            post().wait(WAIT_S)  # the send is posted after rank 1 is known dead
        except TransportError as error:
            errors.append(str(error))
    transport.close()
    return errors


def setup_crash(rank: int, world: int) -> str | None:
    """Rank 1 dies by SIGKILL after creating its segment, before rank 0 mapped it: rank 0's
    set-up fails with a clear error and removes the orphaned name on its way out."""
    import os
    import signal

    from mapp.errors import TransportError

    if rank == 1:  # the first steps of ShmTransport's set-up, by hand, then death
        from mapp.transport import _shm
        from mapp.transport.rendezvous import gather_roster, segment_name

        roster = gather_roster()
        _shm.Engine(1).create_outgoing(0, segment_name(roster.job, 1, 0), 64, 1 << 20)
        os.kill(os.getpid(), signal.SIGKILL)
    try:
        make_transport(backend="shm")
    except TransportError as error:
        return str(error)
    return None
