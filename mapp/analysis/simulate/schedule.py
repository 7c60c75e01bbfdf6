"""Per-stage order of forward, backward and p2p steps, as megatron-core runs them.

``forward_backward_pipelining_without_interleaving`` (1F1B): stage ``s`` of ``p`` runs
``min(p - s - 1, m)`` warmup forwards, then 1F1B pairs, then cooldown backwards.
``forward_backward_pipelining_with_interleaving``: microbatches are taken in groups of ``p``
per model chunk (the "schedule table"), warmup is ``2 (p - s - 1) + (v - 1) p`` virtual
microbatches, and each steady step runs one forward and one backward followed by one batched
exchange. Both use megatron-core's default (non-overlapped) p2p path, whose batched ops are
issued in the order send_prev, recv_prev, send_next, recv_next.

Messages travel on channels ``(src_stage, dst_stage, direction)``; the n-th send on a channel
is the n-th receive. ``build_programs`` pairs them and labels each receive with the
microbatch and chunk it carries (and the step that consumes it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Compute", "P2P", "Batch", "build_programs", "schedule_table", "warmup_count"]


@dataclass(slots=True)
class Compute:
    """A forward or backward step of one (microbatch, chunk)."""

    backward: bool
    microbatch: int
    chunk: int
    phase: str  # warmup | steady | cooldown


@dataclass(slots=True)
class P2P:
    """One send or receive inside a batch."""

    send: bool
    peer_stage: int
    direction: str  # "f": activation toward later stages, "b": gradient toward earlier ones
    microbatch: int = -1  # what the message carries (filled in for receives by pairing)
    chunk: int = -1  # the chunk on the receiving stage that consumes it
    index: int = -1  # position on its channel


@dataclass(slots=True)
class Batch:
    """Sends and receives issued together and waited for together (none: a call that moves
    nothing on this stage, kept for the MegatronApp tracer's record of it)."""

    ops: list[P2P]
    phase: str
    label: str = ""  # MegatronApp name: send-warmup, exchange-next, ...
    ma_microbatch: int | None = None  # the micro_batch_index MegatronApp records, if any


Step = Compute | Batch


def schedule_table(m: int, v: int, group: int) -> list[tuple[int, int]]:
    """(microbatch, chunk) per virtual microbatch: groups of ``group`` microbatches per chunk."""
    table: list[tuple[int, int]] = []
    for lo in range(0, m, group):
        hi = m if lo + group >= m else lo + group
        table.extend((mb, c) for c in range(v) for mb in range(lo, hi))
    return table


def warmup_count(p: int, v: int, m: int, s: int) -> int:
    """Warmup forwards of stage ``s`` (virtual microbatches when ``v > 1``)."""
    if p == 1:
        return 0
    total = m * v
    w = p - s - 1 if v == 1 else (p - s - 1) * 2 + (v - 1) * p
    return min(w, total)


def _one_f_one_b(p: int, m: int, s: int) -> list[Step]:
    """megatron-core's 1F1B order, with every p2p call it makes, named as MegatronApp's tracer
    names them. A call that moves nothing on this stage (the first stage's ``recv_forward``,
    the last stage's ``send_forward_recv_backward``, ...) is kept as an empty batch: the
    original tracer records its scope all the same."""
    first, last = s == 0, s == p - 1
    nxt, prv = (s + 1) % p, (s - 1) % p
    out: list[Step] = []

    def batch(label: str, phase: str, mb: int | None, *ops: P2P) -> None:
        out.append(Batch(list(ops), phase, label, mb))

    if p == 1:
        for i in range(m):
            out += [Compute(False, i, 0, "steady"), Compute(True, i, 0, "steady")]
        return out
    w = warmup_count(p, 1, m, s)
    r = m - w
    def recv_act() -> tuple[P2P, ...]:
        return () if first else (P2P(False, prv, "f"),)

    def recv_grad() -> tuple[P2P, ...]:
        return () if last else (P2P(False, nxt, "b"),)

    def send_act(mb: int) -> tuple[P2P, ...]:
        return () if last else (P2P(True, nxt, "f", mb, 0),)

    def send_grad(mb: int) -> tuple[P2P, ...]:
        return () if first else (P2P(True, prv, "b", mb, 0),)

    for i in range(w):
        batch("recv-warmup", "warmup", i, *recv_act())
        out.append(Compute(False, i, 0, "warmup"))
        batch("send-warmup", "warmup", i, *send_act(i))
    if r > 0:
        batch("recv-extra", "warmup", w, *recv_act())
    for i in range(r):
        out.append(Compute(False, w + i, 0, "steady"))
        # send_forward_recv_backward
        batch("exchange-next", "steady", None, *(send_act(w + i) + recv_grad() if not last else ()))
        out.append(Compute(True, i, 0, "steady"))
        if i == r - 1:  # send_backward (MegatronApp records the last microbatch's index)
            batch("send-extra", "steady", m - 1, *send_grad(i))
        else:  # send_backward_recv_forward
            batch("exchange-prev", "steady", None, *(send_grad(i) + recv_act() if not first else ()))
    for i in range(w):
        batch("recv-cooldown", "cooldown", r + i, *recv_grad())
        out.append(Compute(True, r + i, 0, "cooldown"))
        batch("send-cooldown", "cooldown", r + i, *send_grad(r + i))
    return out


def _interleaved(p: int, v: int, m: int, s: int) -> list[Step]:
    first, last = s == 0, s == p - 1
    nxt, prv = (s + 1) % p, (s - 1) % p
    total = m * v
    table = schedule_table(m, v, p)
    w = warmup_count(p, v, m, s)
    all_warm = w == total
    r = total - w
    out: list[Step] = []

    def chunk(k: int, forward: bool) -> int:
        c = table[k % total][1]
        return c if forward else v - 1 - c

    def will_recv(k: int, forward: bool) -> bool:
        # megatron-core's recv_tensor_from_previous_stage, reduced to its boolean
        leading = first if forward else last
        if not leading:
            return True
        if k < p - 1:
            return False
        return chunk(k - (p - 1), forward) != ((v - 1) if forward else 0)

    def batch(phase: str, send_prev=None, recv_prev=False, send_next=None, recv_next=False):
        ops = []
        if send_prev is not None:
            ops.append(P2P(True, prv, "b", *send_prev))
        if recv_prev:
            ops.append(P2P(False, prv, "f"))
        if send_next is not None:
            ops.append(P2P(True, nxt, "f", *send_next))
        if recv_next:
            ops.append(P2P(False, nxt, "b"))
        if ops:
            out.append(Batch(ops, phase))

    def fwd_out(k: int):
        c = chunk(k, True)
        return None if (c == v - 1 and last) else (table[k][0], c)

    def bwd_out(k: int):
        c = chunk(k, False)
        return None if (c == 0 and first) else (table[k][0], c)

    if not first:
        batch("warmup", recv_prev=True)
    for k in range(w):
        out.append(Compute(False, table[k][0], chunk(k, True), "warmup"))
        recv_prev = will_recv(k, True) and k != total - 1
        recv_next = k == w - 1 and not all_warm and not last
        batch("warmup", recv_prev=recv_prev, send_next=fwd_out(k), recv_next=recv_next)
    for k in range(r):
        fk = k + w
        out.append(Compute(False, table[fk][0], chunk(fk, True), "steady"))
        out.append(Compute(True, table[k][0], chunk(k, False), "steady"))
        recv_prev = will_recv(fk, True) and k != r - 1
        batch("steady", send_prev=bwd_out(k), recv_prev=recv_prev, send_next=fwd_out(fk),
              recv_next=will_recv(k, False))
    if all_warm and not last:
        batch("cooldown", recv_next=True)
    for k in range(r, total):
        out.append(Compute(True, table[k][0], chunk(k, False), "cooldown"))
        batch("cooldown", send_prev=bwd_out(k),
              recv_next=will_recv(k, False) and k != total - 1)
    return out


def _label(b: Batch) -> str:
    sends = [o for o in b.ops if o.send]
    recvs = [o for o in b.ops if not o.send]
    if sends and recvs:
        if len(b.ops) == 2 and sends[0].direction != recvs[0].direction:
            return "exchange-next" if sends[0].direction == "f" else "exchange-prev"
        return "exchange"
    if sends:
        return "send-warmup" if b.phase == "warmup" else "send-cooldown"
    return "recv-warmup" if recvs[0].direction == "f" else "recv-cooldown"


@dataclass(slots=True)
class Programs:
    """One iteration's steps for every pipeline stage, with messages paired."""

    stages: list[list[Step]]
    channels: dict[tuple[int, int, str], int] = field(default_factory=dict)  # messages per channel


def build_programs(p: int, v: int, m: int) -> Programs:
    """Every stage's steps for one iteration, receives labelled with what they carry."""
    stages = [_one_f_one_b(p, m, s) if v == 1 else _interleaved(p, v, m, s) for s in range(p)]
    sent: dict[tuple[int, int, str], list[tuple[int, int]]] = {}
    for s, program in enumerate(stages):
        for step in program:
            if isinstance(step, Batch):
                if not step.label:
                    step.label = _label(step)
                for op in step.ops:
                    if op.send:
                        key = (s, op.peer_stage, op.direction)
                        lst = sent.setdefault(key, [])
                        op.index = len(lst)
                        # consumer chunk: same chunk on the neighbour, or the next/previous
                        # chunk when the message wraps between the last and first stage
                        c = op.chunk
                        if op.direction == "f" and s == p - 1:
                            c += 1
                        elif op.direction == "b" and s == 0:
                            c -= 1
                        lst.append((op.microbatch, c))
    received: dict[tuple[int, int, str], int] = {}
    for s, program in enumerate(stages):
        for step in program:
            if isinstance(step, Batch):
                for op in step.ops:
                    if not op.send:
                        key = (op.peer_stage, s, op.direction)
                        n = received.get(key, 0)
                        received[key] = n + 1
                        msgs = sent.get(key, [])
                        if n >= len(msgs):
                            raise AssertionError(f"stage {s} receives more than is sent on {key}")
                        op.index = n
                        op.microbatch, op.chunk = msgs[n]
    for key, msgs in sent.items():
        if received.get(key, 0) != len(msgs):
            raise AssertionError(f"channel {key}: {len(msgs)} sent, {received.get(key, 0)} received")
    return Programs(stages, {k: len(v_) for k, v_ in sent.items()})
