"""``mapp demo``: the main job on a built-in sample, for a first run with no GPU and no traces.

Simulates a 64-rank job (TP2 x PP4 x DP8) with one GPU slowed down, merges the traces into
one Perfetto timeline, and runs the straggler detector on them.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Annotated

import typer

from mapp.analysis.merge import write_chrome_trace
from mapp.analysis.simulate import SimConfig, parse_fault, simulate
from mapp.cli._ui import console, guarded, progress_bar
from mapp.cli.trace import load

DEMO_FAULT = "slow_gpu:21:1.4"


def demo_config(seed: int) -> SimConfig:
    """The demo job: small enough to run in seconds, large enough to need a detector."""
    return SimConfig(tp=2, pp=4, dp=8, microbatches=8, iterations=3, layers=16, hidden=2048,
                     seq_length=2048, faults=[parse_fault(DEMO_FAULT)], seed=seed)


def register(app: typer.Typer) -> None:
    @app.command("demo")
    @guarded
    def demo(
        out: Annotated[Path, typer.Option("-o", "--out", help="Directory for the sample traces.")] = Path("mapp-demo"),
        seed: Annotated[int, typer.Option(help="Simulation seed.")] = 7,
        force: Annotated[bool, typer.Option("--force", help="Overwrite traces already in --out.")] = False,
    ) -> None:
        """Simulate a 64-rank job with one slowed GPU, merge its traces and find the culprit."""
        config = demo_config(seed)
        console.rule("[bold]mapp demo")
        console.print(f"1. simulating TP{config.tp} x PP{config.pp} x DP{config.dp} = "
                      f"{config.tp * config.pp * config.dp} ranks, fault [mapp.suspect]{DEMO_FAULT}[/] "
                      f"(rank 21 computes 1.4x slower)")
        with progress_bar("simulating ranks") as update:
            result = simulate(config, out, force=force, progress=update)
        console.print(f"   wrote {config.tp * config.pp * config.dp} rank files ({result.events:,} events) and "
                      f"ground_truth.json to [mapp.path]{out}[/]")
        console.print("2. merging into one timeline")
        bundle = load(out, None)
        with progress_bar("writing merged trace") as update:
            merged = write_chrome_trace(bundle, out / "merged.json", progress=update)
        console.print(f"   [mapp.path]{merged.path}[/]: open it at https://ui.perfetto.dev")
        if importlib.util.find_spec("mapp.analysis.detect") is not None:
            from mapp.analysis.detect import detect_bundle

            console.print("3. looking for the straggler")
            console.print(detect_bundle(bundle))
        console.print(f"next: [bold]mapp sql {out}[/] to ask the traces anything, "
                      f"[bold]mapp report {out}[/] for a summary")
