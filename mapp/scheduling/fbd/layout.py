"""Which rank is which worker in a decoupled run, and the transfers between them.

Backward workers take ranks ``0 .. B-1`` in megatron-core's own order (tensor-parallel rank
fastest, then the pipeline stage), so each holds the model slice the coupled run of the same
``--tp``/``--pp`` holds on that rank. Forward workers follow, ``B .. B+F-1``, in the same order
with their own (smaller or equal) tensor-parallel degree. With backward TP = k x forward TP,
forward worker ``(stage, j)`` pairs with the backward workers ``(stage, j*k .. j*k+k-1)``: it
gathers its weights from their shards and sends them its stage inputs.

A :class:`Channel` is one directed transfer between two workers; the list of all of them, in
one order that every rank computes alike, is the coordinator's list of groups.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

__all__ = ["Worker", "Channel", "FbdLayout", "FORWARD", "BACKWARD", "CHANNEL_KINDS"]

FORWARD, BACKWARD = "forward", "backward"

CHANNEL_KINDS = ("params", "activations", "inputs", "grads")
"""``params``: backward -> forward worker of a stage, the weights after each step (one shard
each); ``activations``: forward stage s -> s+1; ``inputs``: a forward worker's stage input ->
its backward partners (not at stage 0: those read the tokens themselves); ``grads``: backward
stage s+1 -> s, the gradient of the stage input."""


class Worker(NamedTuple):
    rank: int
    role: str
    stage: int
    tp: int
    """Tensor-parallel rank inside its role's TP group of its stage."""


class Channel(NamedTuple):
    index: int
    """Coordinator group of this transfer (its place in :meth:`FbdLayout.channels`)."""
    kind: str
    src: int
    dst: int
    stage: int
    """The stage the tensor belongs to (for ``activations``/``grads``: the sender's)."""


@dataclass(frozen=True, slots=True)
class FbdLayout:
    """Ranks of a decoupled run: ``pp`` stages, ``backward_tp`` x ``pp`` backward workers,
    ``forward_tp`` x ``pp`` forward workers (``backward_tp`` a multiple of ``forward_tp``)."""

    pp: int
    backward_tp: int
    forward_tp: int

    def __post_init__(self) -> None:
        if min(self.pp, self.backward_tp, self.forward_tp) < 1:
            raise ValueError(f"sizes must be positive: pp={self.pp} backward tp={self.backward_tp} "
                             f"forward tp={self.forward_tp}")
        if self.backward_tp % self.forward_tp:
            raise ValueError(f"the backward TP ({self.backward_tp}) must be a multiple of the forward TP "
                             f"({self.forward_tp}): each forward worker gathers whole shards")

    @property
    def ratio(self) -> int:
        """Backward shards per forward worker."""
        return self.backward_tp // self.forward_tp

    @property
    def backward_ranks(self) -> int:
        return self.backward_tp * self.pp

    @property
    def world_size(self) -> int:
        return (self.backward_tp + self.forward_tp) * self.pp

    def tp_size(self, role: str) -> int:
        return self.backward_tp if role == BACKWARD else self.forward_tp

    def rank(self, role: str, stage: int, tp: int) -> int:
        if role == BACKWARD:
            return stage * self.backward_tp + tp
        return self.backward_ranks + stage * self.forward_tp + tp

    def worker(self, rank: int) -> Worker:
        if not 0 <= rank < self.world_size:
            raise ValueError(f"rank {rank} is outside the decoupled world of {self.world_size}")
        if rank < self.backward_ranks:
            stage, tp = divmod(rank, self.backward_tp)
            return Worker(rank, BACKWARD, stage, tp)
        stage, tp = divmod(rank - self.backward_ranks, self.forward_tp)
        return Worker(rank, FORWARD, stage, tp)

    def workers(self) -> list[Worker]:
        return [self.worker(r) for r in range(self.world_size)]

    # -- groups of megatron-core's layers, per role -------------------------------------------
    def tp_group(self, role: str, stage: int) -> list[int]:
        return [self.rank(role, stage, t) for t in range(self.tp_size(role))]

    def pp_group(self, role: str, tp: int) -> list[int]:
        return [self.rank(role, s, tp) for s in range(self.pp)]

    def role_ranks(self, role: str) -> list[int]:
        """Every worker of a role: its model-parallel group (gradient norm, loss)."""
        return [w.rank for w in self.workers() if w.role == role]

    # -- partners ------------------------------------------------------------------------------
    def backward_partners(self, forward: Worker) -> list[int]:
        """The backward workers whose shards make up ``forward``'s weights (ascending TP rank)."""
        k = self.ratio
        return [self.rank(BACKWARD, forward.stage, forward.tp * k + i) for i in range(k)]

    def forward_partner(self, backward: Worker) -> int:
        return self.rank(FORWARD, backward.stage, backward.tp // self.ratio)

    def shard_index(self, backward: Worker) -> int:
        """Place of ``backward``'s shard among its forward partner's ``ratio`` shards."""
        return backward.tp % self.ratio

    # -- transfers -----------------------------------------------------------------------------
    def channels(self) -> list[Channel]:
        """Every transfer of the run, in the coordinator's global order."""
        out: list[tuple[str, int, int, int]] = []
        for s in range(self.pp):
            for t in range(self.backward_tp):
                b = self.worker(self.rank(BACKWARD, s, t))
                out.append(("params", b.rank, self.forward_partner(b), s))
        for s in range(self.pp - 1):
            for t in range(self.forward_tp):
                out.append(("activations", self.rank(FORWARD, s, t), self.rank(FORWARD, s + 1, t), s))
        for s in range(1, self.pp):
            for t in range(self.backward_tp):
                b = self.worker(self.rank(BACKWARD, s, t))
                out.append(("inputs", self.forward_partner(b), b.rank, s))
        for s in range(1, self.pp):
            for t in range(self.backward_tp):
                out.append(("grads", self.rank(BACKWARD, s, t), self.rank(BACKWARD, s - 1, t), s))
        return [Channel(i, *c) for i, c in enumerate(out)]

    def channel(self, kind: str, src: int, dst: int) -> Channel:
        for c in self.channels():
            if (c.kind, c.src, c.dst) == (kind, src, dst):
                return c
        raise KeyError(f"no {kind} channel from rank {src} to rank {dst}")

    def describe(self) -> str:
        return (f"backward tp{self.backward_tp} x pp{self.pp} (ranks 0-{self.backward_ranks - 1}), "
                f"forward tp{self.forward_tp} x pp{self.pp} (ranks {self.backward_ranks}-{self.world_size - 1})")
