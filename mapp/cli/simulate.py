"""``mapp simulate``: write the traces of a simulated training job, with injected faults."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from mapp.analysis.simulate import SimConfig, parse_fault, simulate as run_simulation
from mapp.analysis.simulate.faults import KINDS
from mapp.cli._ui import console, guarded, progress_bar

__all__ = ["commands", "simulate"]

_D = SimConfig.__dataclass_fields__  # defaults live in one place: the config


def _default(name: str):
    return _D[name].default


commands = typer.Typer()  # its commands join the top level of `mapp` (see mapp.cli.app)


@commands.command("simulate")
@guarded
def simulate(
    tp: Annotated[int, typer.Option("--tp", help="Tensor-parallel size.")],
    pp: Annotated[int, typer.Option("--pp", help="Pipeline-parallel size (stages).")],
    dp: Annotated[int, typer.Option("--dp", help="Data-parallel size (replicas).")],
    out: Annotated[Path, typer.Option("-o", "--out", help="Directory to write the traces and ground_truth.json into.")],
    vpp: Annotated[int, typer.Option("--vpp", help="Model chunks per stage; above 1 runs interleaved 1F1B.")] = _default("vpp"),
    microbatches: Annotated[int, typer.Option("--microbatches", help="Microbatches per iteration.")] = _default("microbatches"),
    iterations: Annotated[int, typer.Option("--iterations", help="Iterations to simulate (numbered from 0).")] = _default("iterations"),
    layers: Annotated[int, typer.Option("--layers", help="Transformer layers (divisible by pp x vpp).")] = _default("layers"),
    hidden: Annotated[int, typer.Option("--hidden", help="Hidden size.")] = _default("hidden"),
    seq_length: Annotated[int, typer.Option("--seq-length", help="Tokens per sample.")] = _default("seq_length"),
    micro_batch_size: Annotated[int, typer.Option("--micro-batch-size", help="Samples per microbatch.")] = _default("micro_batch_size"),
    gpus_per_node: Annotated[int, typer.Option("--gpus-per-node", help="GPUs per node (consecutive ranks).")] = _default("gpus_per_node"),
    device_tflops: Annotated[float, typer.Option("--device-tflops", help="Achieved TFLOP/s of one GPU.")] = _default("device_tflops"),
    intra_bw: Annotated[float, typer.Option("--intra-node-bandwidth", help="GB/s between GPUs of a node.")] = _default("intra_node_bandwidth_gbs"),
    inter_bw: Annotated[float, typer.Option("--inter-node-bandwidth", help="GB/s of one GPU's NIC.")] = _default("inter_node_bandwidth_gbs"),
    intra_lat: Annotated[float, typer.Option("--intra-node-latency", help="Microseconds per transfer step inside a node.")] = _default("intra_node_latency_us"),
    inter_lat: Annotated[float, typer.Option("--inter-node-latency", help="Microseconds per transfer step between nodes.")] = _default("inter_node_latency_us"),
    jitter: Annotated[float, typer.Option("--jitter", help="Lognormal sigma of the noise on every duration (0: none).")] = _default("jitter_sigma"),
    fault: Annotated[
        Optional[list[str]],
        # A short metavar and the syntax in words: KIND:TARGET[:FACTOR[:FIRST-LAST]] is one
        # 34-column word that an 80-column help table cannot hold, so rich cut it short (and,
        # squeezing the table, --no-distributed-optimizer too).
        typer.Option("--fault", metavar="FAULT", help="A fault to inject, repeatable: KIND:TARGET, then optionally "
                     ":FACTOR and :FIRST-LAST iterations, e.g. slow_gpu:5:1.5:0-1. Kinds: " + ", ".join(KINDS) + "."),
    ] = None,
    no_skew: Annotated[bool, typer.Option("--no-skew", help="Perfectly synchronised clocks (no offset or drift).")] = False,
    per_layer: Annotated[bool, typer.Option("--per-layer", help="Also emit per-layer compute events.")] = False,
    all_reduce_grads: Annotated[bool, typer.Option("--no-distributed-optimizer", help="One gradient all-reduce per chunk instead of reduce-scatter + all-gather.")] = False,
    format: Annotated[str, typer.Option("--format", help="Trace format: mapp (v1) or megatronapp.")] = "mapp",
    seed: Annotated[int, typer.Option("--seed", help="Seed of every random draw.")] = _default("seed"),
    force: Annotated[bool, typer.Option("--force", help="Replace traces already in the output directory.")] = False,
) -> None:
    """Simulate a Megatron-core training job and write its per-rank traces.

    Writes one trace per rank plus ground_truth.json (layout, injected faults, every rank's
    clock offset and drift, healthy iteration time), the key for detection tests.
    """
    config = SimConfig(
        tp=tp, pp=pp, dp=dp, vpp=vpp, microbatches=microbatches, iterations=iterations,
        layers=layers, hidden=hidden, seq_length=seq_length, micro_batch_size=micro_batch_size,
        gpus_per_node=gpus_per_node, device_tflops=device_tflops,
        intra_node_bandwidth_gbs=intra_bw, inter_node_bandwidth_gbs=inter_bw,
        intra_node_latency_us=intra_lat, inter_node_latency_us=inter_lat, jitter_sigma=jitter,
        skew=not no_skew, per_layer=per_layer, distributed_optimizer=not all_reduce_grads,
        faults=[parse_fault(f) for f in fault or []], seed=seed, format=format,
    )
    with progress_bar(f"simulating {config.world_size} ranks", unit="ranks") as update:
        result = run_simulation(config, out, force=force, progress=update)
    truth = result.ground_truth
    console.print(
        f"[mapp.ok]simulated[/] {config.world_size:,} ranks x {iterations} iterations: "
        f"{result.events:,} events in [mapp.path]{out}[/]"
    )
    console.print(
        f"iteration {', '.join(f'{t / 1e3:,.1f}' for t in truth['iteration_us'])} ms "
        f"(healthy {truth['healthy_iteration_us'] / 1e3:,.1f} ms); "
        f"{len(truth['faults'])} fault(s); key in [mapp.path]{out / 'ground_truth.json'}[/]",
        style="mapp.dim",
    )
