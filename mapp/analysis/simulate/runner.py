"""``simulate()``: check the config, run the engine, stream the traces, write the ground truth."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from mapp.errors import InputError, OutputError

from .clock import TRUE_ORIGIN_US, Clocks
from .config import SimConfig
from .cost import CostModel
from .engine import Engine
from .faults import HARDWARE_KINDS
from .layout import Layout
from .program import lower
from .schedule import build_programs
from .writer import MegatronAppWriter, V1Writer

__all__ = ["simulate", "SimResult", "GROUND_TRUTH"]

GROUND_TRUTH = "ground_truth.json"
_TRACE_GLOBS = ("rank-*.json", "benchmark-data-*-pipeline-*-tensor-*.json", GROUND_TRUTH)


@dataclass(slots=True)
class SimResult:
    """What ``simulate`` wrote."""

    ground_truth: dict[str, Any]
    """The content of ``ground_truth.json``."""
    files: list[Path] = field(default_factory=list)
    """Per-rank trace files, in rank order, then ``ground_truth.json``."""
    events: int = 0
    """Trace events (v1) or records (MegatronApp) written, metadata excluded."""


def _prepare(out_dir: Path, force: bool) -> None:
    if out_dir.exists() and not out_dir.is_dir():
        raise OutputError(f"{out_dir}: exists and is not a directory", "choose another -o")
    old = [p for g in _TRACE_GLOBS for p in out_dir.glob(g)] if out_dir.exists() else []
    if old:
        if not force:
            raise OutputError(f"{out_dir}: already holds traces ({len(old)} files)",
                              "pass --force to replace them, or choose another -o")
        for p in old:
            p.unlink()
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputError(f"{out_dir}: cannot create ({e.strerror})") from None


def _iteration_times(ends: list[float]) -> list[float]:
    """Time between the job's consecutive iteration ends (the first from the common start)."""
    marks = [TRUE_ORIGIN_US, *ends]
    return [round(b - a, 3) for a, b in zip(marks, marks[1:])]


def _run_engine(cfg: SimConfig, layout: Layout, programs, cost: CostModel, *, hardware: bool,
                sink: Callable | None) -> tuple[list[float], Engine]:
    engine = Engine(layout, programs, cost, faults=cfg.faults, iterations=cfg.iterations,
                    microbatches=cfg.microbatches, jitter_sigma=cfg.jitter_sigma,
                    host_overhead_us=cfg.host_overhead_us, seed=cfg.seed,
                    hardware_faults=hardware, host_ahead=cfg.host_ahead,
                    host_noise_us=cfg.host_noise_us, data_load_us=cfg.data_load_us,
                    seqlen_sigma=cfg.seqlen_sigma, global_barrier=cfg.format == "megatronapp")
    ends = [-np.inf] * cfg.iterations
    for times in engine.run():
        it = times.iteration
        ends[it] = max(ends[it], float(times.end[0].max()))
        if sink is not None:
            sink(times)
    return _iteration_times(ends), engine


def _faults_truth(config: SimConfig, coords, stalled: list[tuple[int, int, int]]) -> list[dict]:
    """The faults as the ground truth lists them; a data stall also says where it struck."""
    out = []
    for i, f in enumerate(config.faults):
        entry = f.ground_truth(config.iterations, coords)
        if f.kind == "data_stall":
            entry["stalls"] = [{"iteration": it, "microbatch": mb} for j, it, mb in stalled if j == i]
        out.append(entry)
    return out


def simulate(config: SimConfig, out_dir: Path, *, force: bool = False,
             progress: Callable[[int, int], None] | None = None) -> SimResult:
    """Simulate ``config`` and write per-rank traces plus ``ground_truth.json`` into ``out_dir``.

    Raises ``InputError`` for an impossible job and ``OutputError`` when ``out_dir`` already
    holds traces (unless ``force``) or cannot be written. ``progress(done_ranks, total_ranks)``
    is called as rank files are written (each rank counts once all its iterations are out).
    """
    if not isinstance(config, SimConfig):
        raise InputError(f"config must be a SimConfig, got {type(config).__name__}")
    config.check()
    out_dir = Path(out_dir)
    layout = Layout(tp=config.tp, pp=config.pp, dp=config.dp, vpp=config.vpp,
                    gpus_per_node=config.gpus_per_node)
    cost = CostModel.from_config(config)
    programs = lower(build_programs(config.pp, config.vpp, config.microbatches),
                     pp=config.pp, vpp=config.vpp, tp=config.tp, dp=config.dp, cost=cost,
                     per_layer=config.per_layer,
                     distributed_optimizer=config.distributed_optimizer, tracer=config.format,
                     vocab_size=config.vocab_size, host_ahead=config.host_ahead)
    clock_rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([config.seed, 0xC10C])))
    clocks = Clocks.draw(layout.world_size, clock_rng, skew=config.skew,
                         max_offset_us=config.max_offset_us, max_drift_ppm=config.max_drift_ppm)
    _prepare(out_dir, force)

    run_id = f"sim-{config.seed}"
    if config.format == "megatronapp":
        writer = MegatronAppWriter(out_dir, layout, programs, clocks, seq_length=config.seq_length)
    else:
        writer = V1Writer(out_dir, layout, programs, clocks, run_id=run_id,
                          extra_meta={"simulated": True})
    world = layout.world_size
    total_units = config.iterations * layout.pp
    done = [0]

    def sink(times) -> None:
        try:
            writer.write(times)
        except OSError as e:
            raise OutputError(f"{out_dir}: cannot write traces ({e.strerror})") from None
        done[0] += 1
        if progress is not None:
            progress(world * done[0] // total_units, world)

    iteration_us, engine = _run_engine(config, layout, programs, cost, hardware=True, sink=sink)
    writer.finish()
    hardware = [f for f in config.faults if f.kind in HARDWARE_KINDS]
    healthy = (_run_engine(config, layout, programs, cost, hardware=False, sink=None)[0]
               if hardware else iteration_us)
    coords = {f.rank: layout.coords(f.rank) for f in config.faults if f.rank is not None}
    settings = asdict(config)
    settings.pop("faults")
    truth: dict[str, Any] = {
        "format": "mapp-simulation",
        "version": 1,
        "run_id": run_id,
        "layout": {"tp": config.tp, "pp": config.pp, "dp": config.dp, "vpp": config.vpp,
                   "cp": 1, "ep": 1},
        "world_size": world,
        "rank_order": "tp-cp-ep-dp-pp",
        "gpus_per_node": config.gpus_per_node,
        "faults": _faults_truth(config, coords, engine.stalled),
        "healthy_iteration_us": round(float(np.median(healthy)), 3),
        "iteration_us": iteration_us,
        "healthy_iteration_us_each": healthy,
        "clock_model": "local_us = true_us * (1 + drift_ppm * 1e-6) + offset_us",
        "true_origin_us": TRUE_ORIGIN_US,
        "clocks": clocks.ground_truth(),
        "trace_format": config.format,
        "config": settings,
    }
    gt_path = out_dir / GROUND_TRUTH
    with open(gt_path, "w", encoding="utf-8") as fh:
        json.dump(truth, fh, indent=1, sort_keys=False)
        fh.write("\n")
    if progress is not None:
        progress(world, world)
    files = sorted(writer.files) + [gt_path]
    return SimResult(ground_truth=truth, files=files, events=writer.events_written)
