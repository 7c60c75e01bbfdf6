"""``mapp demo``: the main job on a built-in sample, for a first run with no GPU and no traces.

Simulates a 64-rank job (``mapp.analysis.simulate.presets.demo_config``) with one GPU slowed
down, merges the traces into one Perfetto timeline, and runs the straggler detector on them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mapp.cli._ui import console, guarded, progress_bar
from mapp.cli.trace import load, merge_with_progress

def register(app: typer.Typer) -> None:
    @app.command("demo")
    @guarded
    def demo(
        out: Annotated[Path, typer.Option("-o", "--out", help="Directory for the sample traces.")] = Path("mapp-demo"),
        seed: Annotated[int, typer.Option(help="Simulation seed.")] = 7,
        force: Annotated[bool, typer.Option("--force", help="Overwrite traces already in --out.")] = False,
    ) -> None:
        """Simulate a 64-rank job with one slowed GPU, merge its traces and find the culprit."""
        from mapp.analysis.detect import detect_bundle
        from mapp.analysis.detect.report import DetectReport
        from mapp.analysis.simulate import simulate
        from mapp.analysis.simulate.presets import DEMO_SLOW_FACTOR, DEMO_SLOW_RANK, demo_config

        config = demo_config(seed=seed)
        console.rule("[bold]mapp demo")
        console.print(f"1. simulating TP{config.tp} x PP{config.pp} x DP{config.dp} = "
                      f"{config.tp * config.pp * config.dp} ranks; [mapp.suspect]rank {DEMO_SLOW_RANK}[/] "
                      f"computes {DEMO_SLOW_FACTOR:.2f}x slower (a GPU stuck at 1400 of 1980 MHz)")
        with progress_bar("simulating ranks") as update:
            result = simulate(config, out, force=force, progress=update)
        console.print(f"   wrote {config.tp * config.pp * config.dp} rank files ({result.events:,} events) and "
                      f"ground_truth.json to [mapp.path]{out}[/]")
        console.print("2. merging into one timeline")
        bundle = load(out, None)
        merged = merge_with_progress(bundle, out / "merged.json").merged
        console.print(f"   [mapp.path]{merged.path}[/]: open it at https://ui.perfetto.dev")
        console.print("3. looking for the straggler")
        console.print(DetectReport(detect_bundle(bundle), source=str(out)))
        console.print(f"next: [bold]mapp sql {out}[/] to ask the traces anything, "
                      f"[bold]mapp report {out}[/] for a summary")
