"""What each test rank runs (module-level functions: spawned processes import them)."""

from __future__ import annotations

import random
import time
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


def single_copy(rank: int, world: int, count: int, big: int) -> tuple[str, list[int]]:
    """``exchange`` over shared memory, also saying which peers this rank reads from by
    address (their large messages skip the arena)."""
    peers = make_transport(backend="shm").single_copy_peers  # its own job: closed at exit
    return exchange(rank, world, "shm", count, big), peers


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


def destroyed_first(rank: int, world: int, backend: str, close: bool) -> list[str]:
    """The training script's order: DPP-style subgroups, traffic, then
    ``dist.destroy_process_group()`` with the transport still open, closed after it (by
    hand, or by ``atexit`` when ``close`` is false). Returns what escaped the transport's
    threads (nothing may) and what a send after the destruction reports."""
    import threading

    import torch

    from mapp.errors import TransportError

    escaped: list[str] = []
    threading.excepthook = lambda args: escaped.append(f"{args.thread.name}: {args.exc_type.__name__}: {args.exc_value}")
    transport = make_transport(backend=backend)
    sub, _ = dist.new_subgroups_by_enumeration([list(range(world))], backend="gloo")
    peer = 1 - rank
    got = transport.irecv(peer, 3)
    transport.isend(torch.full((4,), float(rank)), peer, 3).wait(WAIT_S)
    assert same(got.wait(WAIT_S), torch.full((4,), float(peer)))
    dist.all_reduce(torch.ones(1), group=sub)
    dist.destroy_process_group()
    if close:
        transport.close()
        try:
            transport.isend(torch.ones(1), peer, 4)
        except TransportError as error:
            escaped.append(f"after close: {error}")
    return escaped


def device_exchange(rank: int, world: int, count: int, big: int, spread: bool) -> str:
    """``exchange`` with GPU tensors through the CUDA IPC path: two of every three messages
    go as GPU tensors (made on a side stream, sent from it), the rest as CPU tensors on the
    same rings; receives posted in random order, completion seen by ``test()`` for some and
    ``wait()`` for the others. Returns the digest of everything received, moved to the CPU."""
    import torch

    torch.cuda.set_device(rank % torch.cuda.device_count() if spread else 0)
    transport = make_transport(backend="shm")
    peers = [p for p in range(world) if p != rank]
    rng = random.Random(rank)
    on_gpu = lambda i: i % 3 != 0  # noqa: E731
    wanted = [(src, tag) for src in peers for tag, _ in messages(src, rank, count, big)]
    rng.shuffle(wanted)
    # equal tags match in posting order: the n-th receive of a tag gets its n-th message
    index: dict = defaultdict(deque)
    for src in peers:
        for i, (tag, _) in enumerate(messages(src, rank, count, big)):
            index[(src, tag)].append(i)
    wanted = [(src, index[(src, tag)].popleft(), tag) for src, tag in wanted]
    early = wanted[: len(wanted) // 3]
    recvs = {k: (src, i, tag, transport.irecv(src, tag)) for k, (src, i, tag) in enumerate(early)}
    dist.barrier()
    side = torch.cuda.Stream()
    sends = []
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)  # the copies below finish late: the transport must wait for them
        for dst in reversed(peers):
            for i, (tag, tensor) in enumerate(messages(rank, dst, count, big)):
                if on_gpu(i):
                    tensor = tensor.pin_memory().to("cuda", non_blocking=True) if tensor.numel() else tensor.cuda()
                sends.append(transport.isend(tensor, dst, tag))
    recvs.update({len(early) + k: (src, i, tag, transport.irecv(src, tag)) for k, (src, i, tag) in enumerate(wanted[len(early):])})
    got: dict[tuple[int, int], object] = {}
    order = list(recvs)
    rng.shuffle(order)
    for n, k in enumerate(order):
        src, i, tag, work = recvs[k]
        if n % 2:
            while not work.test():
                time.sleep(0.001)
        tensor = work.wait(WAIT_S)
        assert tensor.device.type == ("cuda" if on_gpu(i) else "cpu"), f"rank {rank}: message {i} from {src} arrived on {tensor.device}"
        if tensor.is_cuda:
            assert tensor.device.index == torch.cuda.current_device(), f"rank {rank}: landed on {tensor.device}"
            tensor = (tensor.clone() if tensor.numel() else tensor).cpu()  # on the current stream: it must see the copy
        got[(src, i)] = tensor
    for work in sends:
        assert work.wait(WAIT_S) is None
    dist.barrier()
    transport.close()
    received = sorted(((src, tag, i), got[(src, i)]) for src in peers for i, (tag, _) in enumerate(messages(src, rank, count, big)))
    return digest([tensor for _, tensor in received])


def device_fill(rank: int, world: int, arena: int) -> bool:
    """Rank 0 sends a 4 KB GPU tensor, then one of exactly ``arena`` bytes (it cannot fit in
    what is left of the arena's lap), then a small one again; rank 1 checks all three."""
    import torch

    torch.cuda.set_device(0)
    transport = make_transport(backend="shm")
    sizes = [4096, arena, 4096]
    if rank == 0:
        works = [transport.isend(torch.full((n,), i + 1, dtype=torch.uint8, device="cuda"), 1, i) for i, n in enumerate(sizes)]
        for work in works:
            work.wait(WAIT_S)
    else:
        for i, n in enumerate(sizes):
            got = transport.irecv(0, i).wait(WAIT_S)
            assert torch.equal(got.cpu(), torch.full((n,), i + 1, dtype=torch.uint8)), f"message {i} arrived corrupted"
    dist.barrier()
    transport.close()
    return True


def device_crash(rank: int, world: int, mid_copy: bool) -> dict:
    """Rank 1 dies by SIGKILL right after its large GPU message reached its arena and was
    announced (``mid_copy``), or while a large CPU one streams; its CUDA IPC arena is
    already shared with rank 0. Rank 0 must end each wait with the
    tensor as sent or a clear error, never hang."""
    import os
    import signal

    import torch

    from mapp.errors import TransportError

    torch.cuda.set_device(0)
    transport = make_transport(backend="shm")
    other = 1 - rank
    warm = transport.irecv(other, 1)
    transport.isend(torch.full((1000,), float(rank), device="cuda"), other, 1).wait(WAIT_S)
    assert torch.equal(warm.wait(WAIT_S).cpu(), torch.full((1000,), float(other)))
    dist.barrier()
    if rank == 1:
        big = torch.arange(16 << 20, dtype=torch.float32, device="cuda" if mid_copy else "cpu")
        work = transport.isend(big, 0, 7)
        if mid_copy:
            work.wait(WAIT_S)  # in the arena and announced: rank 0 copies it out of a dead process's memory
        os.kill(os.getpid(), signal.SIGKILL)
    outcome: dict = {"errors": [], "delivered": False}
    try:
        value = transport.irecv(1, 7).wait(WAIT_S)
        want = torch.arange(16 << 20, dtype=torch.float32)
        outcome["delivered"] = bool(torch.equal(value.cpu(), want))
    except TransportError as error:
        outcome["errors"].append(str(error))
    for post in (lambda: transport.irecv(1, 8), lambda: transport.isend(torch.ones(1 << 20, device="cuda"), 1, 1), lambda: transport.isend(torch.ones(4), 1, 2)):
        try:
            post().wait(WAIT_S)
        except TransportError as error:
            outcome["errors"].append(str(error))
    transport.close()
    return outcome


def nccl_rounds(rank: int, world: int, rounds: int) -> list[float]:
    """DistTransport over NCCL, one GPU a rank: each round every rank sends GPU tensors to
    every other (tags received in reverse order), then synchronizes its device and joins an
    all-reduce, as a training step does between its pipeline messages. Returns the sums
    received, round by round."""
    import torch

    transport = make_transport(backend="dist")
    peers = [p for p in range(world) if p != rank]
    sums = []
    for r in range(rounds):
        recvs = [(src, tag, transport.irecv(src, tag)) for src in peers for tag in reversed(range(4))]
        sends = [transport.isend(torch.full((1 << 16,), float(100 * rank + 10 * r + tag), device="cuda"), dst, tag)
                 for dst in peers for tag in range(4)]
        for work in sends:
            work.wait(WAIT_S)
        for src, tag, work in recvs:
            got = work.wait(WAIT_S)
            assert got.is_cuda and bool((got == 100 * src + 10 * r + tag).all()), (rank, src, tag, r)
            sums.append(float(got.sum()))
        # every device-wide synchronization waits for every kernel the device has in flight
        torch.cuda.synchronize()
        total = torch.ones(1, device="cuda")
        dist.all_reduce(total)
        torch.cuda.synchronize()
        assert float(total) == world
    transport.close()
    return sums
