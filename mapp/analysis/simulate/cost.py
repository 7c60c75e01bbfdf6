"""How long things take on a healthy machine: compute from FLOPs, transfers from bytes.

Compute of one transformer layer for one microbatch (b samples of s tokens, hidden h), split
over ``tp`` GPUs: attention ``8 b s h^2 + 4 b s^2 h`` FLOPs (QKV, projection, scores),
MLP ``16 b s h^2`` (4h feed-forward); backward is twice the forward. The output layer (with a
vocabulary V) is ``2 b s h V`` forward. Each is split into a part linear in the tokens and a
part quadratic in them (attention scores), so that a microbatch of ``f x s`` tokens costs
``linear x f + quadratic x f^2``.
Transfers: ``steps x latency + algorithm bytes / bandwidth``, with ring algorithms for
collectives (all-reduce moves ``2 (n-1)/n`` of the buffer in ``2 (n-1)`` steps; reduce-scatter
and all-gather half of that); bandwidth is the intra-node rate when every member sits on one
node, else the inter-node (NIC) rate. Activations and parameters are bf16 (2 bytes).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CostModel"]

BYTES_PER_VALUE = 2


@dataclass(frozen=True, slots=True)
class CostModel:
    """Healthy durations in microseconds for one job (see the module doc for the formulas)."""

    tp: int
    dp: int
    hidden: int
    seq_length: int
    micro_batch_size: int
    layers_per_chunk: int
    device_tflops: float
    intra_bw_gbs: float
    intra_lat_us: float
    inter_bw_gbs: float
    inter_lat_us: float
    distributed_optimizer: bool = True

    @classmethod
    def from_config(cls, cfg) -> "CostModel":
        return cls(
            tp=cfg.tp, dp=cfg.dp, hidden=cfg.hidden, seq_length=cfg.seq_length,
            micro_batch_size=cfg.micro_batch_size, layers_per_chunk=cfg.layers_per_chunk,
            device_tflops=cfg.device_tflops,
            intra_bw_gbs=cfg.intra_node_bandwidth_gbs, intra_lat_us=cfg.intra_node_latency_us,
            inter_bw_gbs=cfg.inter_node_bandwidth_gbs, inter_lat_us=cfg.inter_node_latency_us,
            distributed_optimizer=cfg.distributed_optimizer,
        )

    def _flops_us(self, flops: float) -> float:
        return flops / (self.device_tflops * 1e6)

    @property
    def attention_forward_us(self) -> float:
        b, s, h = self.micro_batch_size, self.seq_length, self.hidden
        return self._flops_us((8 * b * s * h * h + 4 * b * s * s * h) / self.tp)

    @property
    def attention_linear_us(self) -> float:
        """QKV and output projections: linear in the tokens."""
        b, s, h = self.micro_batch_size, self.seq_length, self.hidden
        return self._flops_us(8 * b * s * h * h / self.tp)

    @property
    def attention_quadratic_us(self) -> float:
        """Scores and their product with the values: quadratic in the tokens."""
        b, s, h = self.micro_batch_size, self.seq_length, self.hidden
        return self._flops_us(4 * b * s * s * h / self.tp)

    @property
    def mlp_forward_us(self) -> float:
        b, s, h = self.micro_batch_size, self.seq_length, self.hidden
        return self._flops_us(16 * b * s * h * h / self.tp)

    def output_layer_forward_us(self, vocab: int) -> float:
        """Logits (column-parallel over the vocabulary) and the cross-entropy, forward."""
        b, s, h = self.micro_batch_size, self.seq_length, self.hidden
        return self._flops_us(2 * b * s * h * vocab / self.tp)

    @property
    def activation_bytes(self) -> int:
        """One microbatch's hidden states: what p2p carries and TP all-reduces."""
        return self.micro_batch_size * self.seq_length * self.hidden * BYTES_PER_VALUE

    @property
    def token_values(self) -> int:
        """One value per token of a microbatch (``b x s``): the cross-entropy's TP all-reduces
        carry that many fp32 values, the batch broadcast that many int64 token ids."""
        return self.micro_batch_size * self.seq_length

    @property
    def chunk_param_count(self) -> int:
        """Parameters of one model chunk held by one TP rank (12 h^2 per layer)."""
        return 12 * self.hidden * self.hidden * self.layers_per_chunk // self.tp

    @property
    def grad_bytes(self) -> int:
        return self.chunk_param_count * BYTES_PER_VALUE

    def optimizer_us(self, chunks: int) -> float:
        """Adam over this rank's share: ~16 bytes of state traffic per parameter at ~2 TB/s."""
        params = self.chunk_param_count * chunks
        if self.distributed_optimizer:
            params //= self.dp
        return params * 16 / 2e6

    def transfer_us(self, kind: str, nbytes: int, members: int, inter_node: bool) -> float:
        """Healthy duration of one transfer once every member has arrived."""
        bw = (self.inter_bw_gbs if inter_node else self.intra_bw_gbs) * 1e3  # bytes per us
        lat = self.inter_lat_us if inter_node else self.intra_lat_us
        if kind == "p2p":
            return lat + nbytes / bw
        n = members
        if n <= 1:
            return 0.0
        if kind == "all_reduce":
            return 2 * (n - 1) * lat + 2 * (n - 1) / n * nbytes / bw
        return (n - 1) * lat + (n - 1) / n * nbytes / bw
