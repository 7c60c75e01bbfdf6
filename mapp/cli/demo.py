"""``mapp demo``: the main job on a built-in sample, for a first run with no GPU and no traces.

Simulates a 64-rank job (``mapp.analysis.simulate.presets.demo_config``) with one GPU slowed
down, merges the traces into one Perfetto timeline, and runs the straggler detector on them.
Run again, it replaces what it wrote before, and nothing else.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from mapp.cli._ui import console, guarded, progress_bar
from mapp.cli._shared import load
from mapp.cli.trace import merge_with_progress
from mapp.errors import OutputError

if TYPE_CHECKING:
    from mapp.analysis.simulate import SimConfig

_MERGED = "merged.json"
_CACHE = ".mapp"  # mapp's cache beside the traces (mapp.analysis.ingest.bundle.CACHE_DIR)

commands = typer.Typer()  # its commands join the top level of `mapp` (see mapp.cli.app)


@commands.command("demo")
@guarded
def demo(
    out: Annotated[Path, typer.Option("-o", "--out", help="Directory for the sample traces; a demo run there before is replaced.")] = Path("mapp-demo"),
    seed: Annotated[int, typer.Option(help="Simulation seed.")] = 7,
    # Kept so that old scripts still run: a demo now replaces its own output unasked.
    force: Annotated[bool, typer.Option("--force", hidden=True)] = False,
) -> None:
    """Simulate a 64-rank job with one slowed GPU, merge its traces and find the culprit."""
    from mapp.analysis.detect import detect_bundle
    from mapp.analysis.run import analyse
    from mapp.report.verdict import DetectReport
    from mapp.analysis.simulate import simulate
    from mapp.analysis.simulate.presets import DEMO_SLOW_FACTOR, DEMO_SLOW_RANK, demo_config

    config = demo_config(seed=seed)
    clear_previous_demo(out, config)
    console.rule("[bold]mapp demo")
    console.print(f"1. simulating TP{config.tp} x PP{config.pp} x DP{config.dp} = "
                  f"{config.world_size} ranks; [mapp.suspect]rank {DEMO_SLOW_RANK}[/] "
                  f"computes {DEMO_SLOW_FACTOR:.2f}x slower (a GPU stuck at 1400 of 1980 MHz)")
    with progress_bar("simulating ranks") as update:
        result = simulate(config, out, progress=update)
    console.print(f"   wrote {config.world_size} rank files ({result.events:,} events) and "
                  f"ground_truth.json to [mapp.path]{out}[/]")
    console.print("2. merging into one timeline")
    bundle = load(out, None)
    analysis = analyse(bundle)  # one matching and one clock for the timeline and the detector
    merged = merge_with_progress(bundle, out / _MERGED, analysis=analysis).merged
    console.print(f"   [mapp.path]{merged.path}[/]: open it at https://ui.perfetto.dev")
    console.print("3. looking for the straggler")
    console.print(DetectReport(detect_bundle(bundle, analysis=analysis), source=str(out)))
    console.print(f"next: [bold]mapp sql {out}[/] to ask the traces anything, "
                  f"[bold]mapp report {out}[/] for a summary")


def clear_previous_demo(out: Path, config: SimConfig) -> None:
    """Empty ``out`` of what an earlier ``mapp demo`` wrote there, or refuse if it holds anything else.

    The demo's files are its rank files, ground_truth.json, merged.json and the .mapp cache, and
    only when ground_truth.json is the demo's: rank files beside no such key are someone's traces.
    """
    if not out.exists():
        return
    if not out.is_dir():
        raise OutputError(f"{out}: exists and is not a directory", "choose another -o")
    entries = sorted(out.iterdir())
    if not entries:
        return
    foreign = [p.name for p in entries if not _demo_wrote(p, config)]
    if foreign:
        raise OutputError(f"{out}: holds files mapp demo did not write ({', '.join(foreign[:3])}"
                          f"{', ...' if len(foreign) > 3 else ''})", "choose another -o; nothing was changed")
    if not _is_demo_truth(out / "ground_truth.json", config):
        raise OutputError(f"{out}: holds traces without a mapp demo's ground_truth.json",
                          "choose another -o, or delete the directory if an interrupted demo left it; "
                          "nothing was changed")
    for path in entries:
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()


def _demo_wrote(path: Path, config: SimConfig) -> bool:
    if path.is_symlink():
        return False
    if path.name == _CACHE:
        return path.is_dir()
    if path.name in ("ground_truth.json", _MERGED):
        return path.is_file()
    rank = re.fullmatch(r"rank-(\d{5})\.json", path.name)
    return rank is not None and int(rank.group(1)) < config.world_size and path.is_file()


def _is_demo_truth(path: Path, config: SimConfig) -> bool:
    """``path`` is the ground truth of a demo: the demo's layout and fault, whatever its seed."""
    try:
        truth = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(truth, dict) or truth.get("format") != "mapp-simulation":
        return False
    layout = truth.get("layout")
    if not isinstance(layout, dict):
        return False
    faults = [(f.get("kind"), f.get("rank")) for f in truth.get("faults") or [] if isinstance(f, dict)]
    return ((layout.get("tp"), layout.get("pp"), layout.get("dp")) == (config.tp, config.pp, config.dp)
            and faults == [(f.kind, f.rank) for f in config.faults])
