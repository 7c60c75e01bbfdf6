"""Global ranks of a TP x PP x DP job, in megatron-core's default order ("tp-cp-ep-dp-pp").

TP is fastest, then DP, then PP: ``rank = tp_rank + tp * (dp_rank + dp * pp_rank)``
(context and expert parallel sizes are 1). A node holds ``gpus_per_node`` consecutive ranks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Layout"]


@dataclass(frozen=True, slots=True)
class Layout:
    """Rank arithmetic for one job."""

    tp: int
    pp: int
    dp: int
    vpp: int = 1
    gpus_per_node: int = 8

    @property
    def world_size(self) -> int:
        return self.tp * self.pp * self.dp

    def rank(self, tp: int, dp: int, pp: int) -> int:
        """Global rank of the given coordinates."""
        return tp + self.tp * (dp + self.dp * pp)

    def coords(self, rank: int) -> dict[str, int]:
        """``{"tp", "pp", "dp", "cp", "ep"}`` of a global rank."""
        tp = rank % self.tp
        dp = (rank // self.tp) % self.dp
        pp = rank // (self.tp * self.dp)
        return {"tp": tp, "pp": pp, "dp": dp, "cp": 0, "ep": 0}

    def node(self, rank: int) -> int:
        return rank // self.gpus_per_node

    def stage_ranks(self, pp: int) -> np.ndarray:
        """Global ranks of one pipeline stage as an int64 array of shape (dp, tp)."""
        base = self.tp * self.dp * pp
        return base + np.arange(self.dp * self.tp, dtype=np.int64).reshape(self.dp, self.tp)

    def tp_group(self, dp: int, pp: int) -> list[int]:
        first = self.rank(0, dp, pp)
        return list(range(first, first + self.tp))

    def dp_group(self, tp: int, pp: int) -> list[int]:
        return [self.rank(tp, d, pp) for d in range(self.dp)]

    def next_stage(self, pp: int) -> int:
        """Megatron's "next" pipeline rank wraps from the last stage to the first."""
        return (pp + 1) % self.pp

    def prev_stage(self, pp: int) -> int:
        return (pp - 1) % self.pp

    def spans_nodes(self, ranks: list[int]) -> bool:
        return self.node(min(ranks)) != self.node(max(ranks))

    def links(self, rank: int) -> set[int]:
        """Ranks that ``rank`` exchanges data with: TP and DP peers and pipeline neighbours."""
        c = self.coords(rank)
        peers = set(self.tp_group(c["dp"], c["pp"])) | set(self.dp_group(c["tp"], c["pp"]))
        if self.pp > 1:
            interleaved = self.vpp > 1
            if c["pp"] + 1 < self.pp or interleaved:
                peers.add(self.rank(c["tp"], c["dp"], self.next_stage(c["pp"])))
            if c["pp"] > 0 or interleaved:
                peers.add(self.rank(c["tp"], c["dp"], self.prev_stage(c["pp"])))
        peers.discard(rank)
        return peers
