"""The simulated job: its layout, model size, hardware rates and faults, as one typed config."""

from __future__ import annotations

from dataclasses import dataclass, field

from mapp.errors import InputError

from .faults import Fault, check_faults

__all__ = ["SimConfig", "FORMATS"]

FORMATS = ("mapp", "megatronapp")


@dataclass(kw_only=True, slots=True)
class SimConfig:
    """One training job to simulate. Every field has a default except the layout."""

    tp: int
    """Tensor-parallel size (ranks that split every layer; an all-reduce after attention and MLP)."""
    pp: int
    """Pipeline-parallel size (stages; activations and gradients travel between neighbours)."""
    dp: int
    """Data-parallel size (model replicas; gradients are reduced across them each iteration)."""
    vpp: int = 1
    """Virtual pipeline size: model chunks per stage. Above 1 selects interleaved 1F1B."""
    microbatches: int = 8
    """Microbatches per iteration (per data-parallel replica)."""
    iterations: int = 2
    """Training iterations to simulate, numbered from 0."""
    layers: int = 32
    """Transformer layers in the model, split evenly over pp * vpp chunks."""
    hidden: int = 4096
    """Hidden size."""
    seq_length: int = 2048
    """Tokens per sample."""
    micro_batch_size: int = 1
    """Samples per microbatch."""
    gpus_per_node: int = 8
    """GPUs in one node; consecutive global ranks share a node and talk at intra-node speed."""
    device_tflops: float = 400.0
    """Achieved dense bf16 rate of one GPU in TFLOP/s (compute time = FLOPs / rate)."""
    intra_node_bandwidth_gbs: float = 200.0
    """Bandwidth between GPUs of one node in GB/s (NVLink)."""
    intra_node_latency_us: float = 3.0
    """Latency of one transfer step inside a node, microseconds."""
    inter_node_bandwidth_gbs: float = 40.0
    """Bandwidth of one GPU's NIC between nodes in GB/s."""
    inter_node_latency_us: float = 10.0
    """Latency of one transfer step between nodes, microseconds."""
    host_overhead_us: float = 10.0
    """Host time to launch one op (a simulated op stands for the dozens of kernels of an
    attention or MLP block). Without ``host_ahead`` it is hidden and a slow host adds
    (factor-1) x this before each op; with it, the host spends it on every launch."""
    host_ahead: bool = False
    """The CPU runs ahead of the GPU, as PyTorch's asynchronous launches make it: an op starts on
    the GPU at max(stream free, host launch), and the host waits for the GPU only where
    megatron-core synchronises (after each batched p2p, at the optimizer's grad-norm ``.item()``).
    Spans are then what CUDA events record: they start when the stream reaches them, so host
    delays show only where the host falls behind. It also makes the first and last stage's
    TP rank 0 fetch each microbatch (``data_load_us``) and broadcast it to its TP group.
    False: host and GPU are one timeline (the original model)."""
    host_noise_us: float = 0.0
    """Host noise of oversubscribed CPUs: every op launch on every rank is delayed by a heavy-tailed
    draw (Lomax/Pareto II, shape 1.5, scale this many us; mean 2x, P(> 20x) ~ 1%), clipped at
    10 ms. 0 = none."""
    data_load_us: float = 0.0
    """Host time of one ``next(data_iterator)`` on the ranks that read data (TP rank 0 of the
    first and last pipeline stage), inside the forward step. 0 = not modelled."""
    seqlen_sigma: float = 0.0
    """Heavy-tailed sequence lengths: every (replica, microbatch) gets ``seq_length x`` a lognormal
    draw of this sigma (mean 1, tokens clipped to 1 .. 8 x seq_length), the same on every stage
    and TP shard of its replica. Attention scales with tokens and tokens squared, MLP and the
    output layer with tokens, and the bytes of p2p messages and TP collectives with tokens
    (traces carry the real sizes). 0 = every microbatch is ``seq_length`` tokens."""
    vocab_size: int = 0
    """Vocabulary size: the last stage computes the output layer (2 b s h V / tp FLOPs forward,
    twice that backward), the vocab-parallel cross-entropy (three small TP all-reduces) and the
    loss function (whose NaN check syncs the host); with TP the embedding's and the output
    layer's TP all-reduces are added, as megatron-core does. 0 = embedding, output layer and
    loss not modelled."""
    jitter_sigma: float = 0.02
    """Sigma of the lognormal noise on every compute and transfer time (0 = deterministic)."""
    distributed_optimizer: bool = True
    """Reduce-scatter gradients and all-gather parameters over DP (else one all-reduce)."""
    skew: bool = True
    """Give every rank its own clock offset and drift (False: perfectly synchronised clocks)."""
    max_offset_us: float = 100_000.0
    """Largest clock offset, microseconds (drawn uniformly in +/- this)."""
    max_drift_ppm: float = 50.0
    """Largest clock drift, parts per million (drawn uniformly in +/- this)."""
    per_layer: bool = False
    """Also emit per-layer compute events (attention, mlp, ...) carrying the layer index."""
    faults: list[Fault] = field(default_factory=list)
    """Injected faults and negative controls (see ``mapp.analysis.simulate.faults``)."""
    seed: int = 0
    """Seed of every random draw: the same config and seed give byte-identical output."""
    format: str = "mapp"
    """Output format: "mapp" (trace format v1) or "megatronapp" (the original's per-rank files)."""

    @property
    def world_size(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def layers_per_chunk(self) -> int:
        return self.layers // (self.pp * self.vpp)

    def check(self) -> None:
        """Refuse an impossible job with one line naming the value and the rule."""
        for name in ("tp", "pp", "dp", "vpp", "microbatches", "iterations", "layers", "hidden",
                     "seq_length", "micro_batch_size", "gpus_per_node"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise InputError(f"--{name.replace('_', '-')} {value}: must be a whole number >= 1")
        for name in ("device_tflops", "intra_node_bandwidth_gbs", "inter_node_bandwidth_gbs"):
            if not getattr(self, name) > 0:
                raise InputError(f"{name} {getattr(self, name)}: must be > 0")
        for name in ("intra_node_latency_us", "inter_node_latency_us", "host_overhead_us",
                     "jitter_sigma", "max_offset_us", "max_drift_ppm", "host_noise_us",
                     "data_load_us", "seqlen_sigma"):
            if not getattr(self, name) >= 0:
                raise InputError(f"{name} {getattr(self, name)}: must be >= 0")
        if not isinstance(self.vocab_size, int) or self.vocab_size < 0:
            raise InputError(f"--vocab-size {self.vocab_size}: must be a whole number >= 0")
        if self.vocab_size % self.tp:
            raise InputError(f"--vocab-size {self.vocab_size}: must be divisible by --tp {self.tp}",
                             "megatron-core pads the vocabulary to a multiple of the TP size")
        chunks = self.pp * self.vpp
        if self.layers % chunks:
            raise InputError(
                f"--layers {self.layers}: must divide evenly into pp x vpp = {chunks} model chunks",
                f"try --layers {max(chunks, self.layers - self.layers % chunks)}",
            )
        if self.hidden % self.tp:
            raise InputError(f"--hidden {self.hidden}: must be divisible by --tp {self.tp}")
        if self.vpp > 1:
            if self.pp < 2:
                raise InputError(f"--vpp {self.vpp}: interleaving needs --pp >= 2 (got {self.pp})")
            if self.microbatches < self.pp or self.microbatches % self.pp:
                raise InputError(
                    f"--microbatches {self.microbatches}: interleaved 1F1B needs a multiple of "
                    f"--pp {self.pp} (groups of pp microbatches per chunk)",
                    f"try --microbatches {max(self.pp, self.microbatches - self.microbatches % self.pp)}",
                )
        if self.format not in FORMATS:
            raise InputError(f"--format {self.format}: must be one of {', '.join(FORMATS)}")
        if self.format == "megatronapp" and self.vpp > 1:
            raise InputError(
                f"--format megatronapp with --vpp {self.vpp}: the original format has no "
                "interleaved schedule (model chunks)", "use --format mapp"
            )
        check_faults(self.faults, tp=self.tp, pp=self.pp, dp=self.dp, vpp=self.vpp,
                     iterations=self.iterations)
