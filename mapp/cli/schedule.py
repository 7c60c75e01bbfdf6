"""``mapp schedule``: compare pipeline schedules offline (issue 17's simulator).

Parse, call, render: the simulator lives in ``mapp.scheduling.simulate`` (numpy, no torch)
and is imported when the command runs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from mapp.cli._ui import console, err_console, guarded, progress_bar
from mapp.output import check_output, is_stdout

__all__ = ["commands", "simulate"]

commands = typer.Typer(name="schedule", no_args_is_help=True,
                       help="Replay pipeline schedules (1F1B, interleaved, ZB-H1, DPP) on simulated task times.")

_SCHEDULES = "1f1b, interleaved, zb-h1, dpp-depth, dpp-breadth, dpp-adaptive"


@commands.command("simulate")
@guarded
def simulate(
    schedule: Annotated[str, typer.Option("--schedule", help=f"Which schedule: {_SCHEDULES}.")],
    pp: Annotated[int, typer.Option("--pp", help="Pipeline stages.")],
    microbatches: Annotated[int, typer.Option("--microbatches", help="Microbatches per step.")],
    vpp: Annotated[int, typer.Option("--vpp", help="Model chunks per stage (virtual stages).")] = 1,
    jitter: Annotated[float, typer.Option("--jitter", help="Lognormal sigma of each task's own noise.")] = 0.0,
    length_sigma: Annotated[float, typer.Option("--length-sigma", help="Lognormal sigma of each microbatch's length, shared by all its tasks.")] = 0.0,
    slow_stage: Annotated[Optional[str], typer.Option("--slow-stage", metavar="S:FACTOR", help="Stage S runs FACTOR times slower, e.g. 2:1.3.")] = None,
    seed: Annotated[int, typer.Option("--seed", help="First seed.")] = 0,
    seeds: Annotated[int, typer.Option("--seeds", help="Steps to average, seeds SEED, SEED+1, ...")] = 1,
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Write the figures as JSON to this file (- for stdout).")] = None,
    trace: Annotated[Optional[Path], typer.Option("--trace", help="Write the first seed's step as a Chrome trace (Perfetto).")] = None,
    forward: Annotated[float, typer.Option("--forward", help="Forward time of one chunk.")] = 1.0,
    backward: Annotated[float, typer.Option("--backward", help="Backward time of one chunk (ZB-H1 splits it half B, half W).")] = 2.0,
    latency: Annotated[float, typer.Option("--latency", help="Link latency per transfer, in task time units.")] = 0.0,
    bandwidth: Annotated[float, typer.Option("--bandwidth", help="Activations a link carries per time unit (default: no limit).")] = float("inf"),
    memory_budget: Annotated[Optional[int], typer.Option("--memory-budget", help="dpp-adaptive: breadth-first below this many activations per stage.")] = None,
    window: Annotated[int, typer.Option("--window", help="DPP: how far ahead of its plan a rank may run a ready task.")] = 2,
    plan_search: Annotated[int, typer.Option("--plan-search", help="DPP: microbatch swaps the planner tries on the known times.")] = 60,
) -> None:
    """Replay one training step's pipeline schedule and report its makespan, bubble and memory.

    Task times are forward 1 and backward 2 per chunk unless told; the step's makespan, the
    bubble ratio (idle share of the ranks' time), the peak activations per stage (in one
    microbatch's activations of one chunk) and the lower bound (busiest rank's work or the
    longest dependency chain) are means over the seeds. DPP plans the microbatch order from
    the lengths known before the step and never holds more activations than megatron's own
    schedule of the same shape.
    """
    from mapp.errors import InputError
    from mapp.scheduling.simulate import ScheduleConfig, parse_slow_stage, simulate as run, write_chrome_trace

    if seeds < 1:
        raise InputError(f"--seeds {seeds} must be at least 1")
    config = ScheduleConfig(schedule=schedule, pp=pp, vpp=vpp, microbatches=microbatches, forward=forward,
                            backward=backward, jitter=jitter, length_sigma=length_sigma,
                            slow_stage=parse_slow_stage(slow_stage) if slow_stage else None, latency=latency,
                            bandwidth=bandwidth, memory_budget=memory_budget, window=window, plan_search=plan_search)
    check_output(json_out, None, option="--json")
    check_output(trace, None, option="--trace")
    with progress_bar(f"simulating {schedule}", unit="seeds") as update:
        summary = run(config, seed=seed, seeds=seeds, progress=update)
    (err_console if is_stdout(json_out) else console).print(_table(summary))
    if trace is not None:
        write_chrome_trace(summary.steps[0], trace, schedule=schedule)
        console.print(f"trace: [mapp.path]{trace}[/]", style="mapp.dim")
    if json_out is not None:
        text = json.dumps(summary.to_dict(), indent=2)
        if is_stdout(json_out):
            print(text)
        else:
            json_out.write_text(text + "\n")
            console.print(f"figures: [mapp.path]{json_out}[/]", style="mapp.dim")


def _table(summary):
    from rich.table import Table

    c = summary.config
    title = f"{c.schedule}: pp {c.pp}, vpp {c.vpp}, {c.microbatches} microbatches, {len(summary.steps)} seed(s)"
    table = Table(title=title, title_justify="left")
    for name in ("makespan", "lower bound", "above bound", "bubble ratio", "peak activations per stage"):
        table.add_column(name, justify="left" if name.startswith("peak") else "right")
    table.add_row(f"{summary.makespan:,.2f}", f"{summary.lower_bound:,.2f}", f"{100 * summary.gap_to_lower_bound:.1f}%",
                  f"{100 * summary.bubble_ratio:.2f}%", " ".join(str(p) for p in summary.peak_activations))
    return table
