"""The fixed per-rank task orders of megatron-core's schedules.

``one_f_one_b`` is ``forward_backward_pipelining_without_interleaving``: rank r runs
``pp - r - 1`` warm-up forwards, then one forward and one backward in turn, then the
remaining backwards. ``interleaved`` is ``forward_backward_pipelining_with_interleaving``:
its schedule table walks the microbatches in groups of ``group`` (the last group takes what
is left), each group through chunk 0, then chunk 1, ...; the k-th forward is the table's k-th
entry and the k-th backward the same entry with the chunk mirrored (V-1-c); rank r runs
``2 (pp - r - 1) + (V - 1) group`` warm-up forwards, then forward k+warm-up and backward k in
turn, then the remaining backwards. ``order`` maps the table's microbatch positions to
microbatch ids: data order is ``range(M)``.
"""

from __future__ import annotations

from collections.abc import Sequence

from mapp.scheduling.simulate.config import ScheduleConfig
from mapp.scheduling.simulate.engine import Task

__all__ = ["one_f_one_b", "interleaved", "schedule_table", "peak_of", "reference_orders", "activation_caps"]


def schedule_table(microbatches: int, chunks: int, group: int) -> list[tuple[int, int]]:
    """(microbatch position, chunk) of each forward in a rank's order, as megatron-core builds it."""
    table: list[tuple[int, int]] = []
    for first in range(0, microbatches, group):
        last = microbatches if first + group >= microbatches else first + group
        table += [(m, c) for c in range(chunks) for m in range(first, last)]
    return table


def one_f_one_b(pp: int, microbatches: int, order: Sequence[int] | None = None) -> list[list[Task]]:
    """Every rank's order under non-interleaved 1F1B."""
    order = list(range(microbatches)) if order is None else list(order)
    ranks = []
    for rank in range(pp):
        warmup = min(pp - rank - 1, microbatches)
        forwards = [("F", rank, m) for m in order]
        backwards = [("B", rank, m) for m in order]
        ranks.append(_one_f_one_b_steps(forwards, backwards, warmup))
    return ranks


def interleaved(pp: int, chunks: int, microbatches: int, group: int,
                order: Sequence[int] | None = None) -> list[list[Task]]:
    """Every rank's order under megatron-core's interleaved 1F1B."""
    order = list(range(microbatches)) if order is None else list(order)
    table = schedule_table(microbatches, chunks, group)
    total = len(table)
    ranks = []
    for rank in range(pp):
        warmup = min(2 * (pp - rank - 1) + (chunks - 1) * group, total)
        forwards = [("F", c * pp + rank, order[m]) for m, c in table]
        backwards = [("B", (chunks - 1 - c) * pp + rank, order[m]) for m, c in table]
        ranks.append(_one_f_one_b_steps(forwards, backwards, warmup))
    return ranks


def _one_f_one_b_steps(forwards: list[Task], backwards: list[Task], warmup: int) -> list[Task]:
    steps = forwards[:warmup]
    for k in range(len(forwards) - warmup):
        steps += [forwards[k + warmup], backwards[k]]
    return steps + backwards[len(forwards) - warmup:]


def peak_of(steps: Sequence[Task]) -> int:
    """Most activations a rank holds running ``steps`` in order (a forward takes one, a backward frees it)."""
    held = peak = 0
    for kind, _, _ in steps:
        held += 1 if kind == "F" else -1 if kind == "B" else 0
        peak = max(peak, held)
    return peak


def reference_orders(config: ScheduleConfig, order: Sequence[int] | None = None) -> list[list[Task]]:
    """Megatron's order for this shape: 1F1B with one chunk per stage, interleaved with more."""
    if config.vpp == 1:
        return one_f_one_b(config.pp, config.microbatches, order)
    group = min(config.group, config.microbatches)
    return interleaved(config.pp, config.vpp, config.microbatches, group, order)


def activation_caps(config: ScheduleConfig) -> list[int]:
    """Per stage, the activations megatron's own schedule of this shape holds at its peak."""
    return [peak_of(steps) for steps in reference_orders(config)]
