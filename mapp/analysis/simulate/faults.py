"""Injected faults, and the negative controls that look like faults but are workload.

Kinds and what ``factor`` means for each:

- ``slow_gpu`` (rank): every compute op on the rank takes ``factor`` x as long
  (a GPU down-clocked from 1980 to 1400 MHz is ~1.41).
- ``slow_link`` (pair of ranks ``A-B``): bandwidth / ``factor`` on transfers between the two
  (their p2p messages and any collective holding both).
- ``slow_nic`` (rank): bandwidth / ``factor`` on all of the rank's inter-node traffic.
- ``slow_host`` (rank): the host launches ops ``factor`` x slower. With ``host_ahead`` the
  launch of each op costs ``factor x host_overhead_us`` of host time (hidden while the host
  stays ahead of the GPU); without it, a delay of ``(factor - 1) x host_overhead_us`` before
  each op.
- ``data_stall`` (rank): in each iteration of its window, one microbatch's
  ``next(data_iterator)`` on the rank takes ``factor`` *milliseconds* more (a starved
  data-loader worker, slow storage); which microbatch is drawn per iteration and written to
  the ground truth. Only ranks that read data can stall: tensor-parallel rank 0 of the first
  and of the last pipeline stage (``get_batch_on_this_tp_rank`` broadcasts the batch to the
  other TP ranks, which wait for it). A host fault, transient when its window is shorter than
  the run: the detector should name the rank a slow host.
- ``stage_imbalance`` (pipeline stage): that stage's compute is ``factor`` x (negative control:
  more layers or the loss on the last stage, not a hardware fault).
- ``seqlen_imbalance`` (no target): each microbatch of each replica gets its compute scaled by a
  uniform draw in ``[1 - factor, 1 + factor]`` (negative control: uneven sequence lengths;
  ``SimConfig.seqlen_sigma`` is the heavy-tailed form that also sizes the transfers).

Any of them can be limited to an inclusive window of iterations (a transient fail-slow).
On the command line: ``KIND:TARGET[:FACTOR[:FIRST-LAST]]``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from mapp.errors import InputError

__all__ = ["Fault", "parse_fault", "check_faults", "KINDS", "HARDWARE_KINDS", "DEFAULT_FACTORS"]

KINDS = ("slow_gpu", "slow_link", "slow_nic", "slow_host", "data_stall", "stage_imbalance",
         "seqlen_imbalance")
HARDWARE_KINDS = ("slow_gpu", "slow_link", "slow_nic", "slow_host", "data_stall")
"""Faults of the machine (GPU, link, NIC, host and its data loader) that a detector should name;
the other kinds are workload (negative controls)."""
DEFAULT_FACTORS = {
    "slow_gpu": 1.4, "slow_link": 4.0, "slow_nic": 3.0, "slow_host": 10.0, "data_stall": 50.0,
    "stage_imbalance": 1.3, "seqlen_imbalance": 0.3,
}
_SYNTAX = "KIND:TARGET[:FACTOR[:FIRST-LAST]], e.g. slow_gpu:5:1.4 or slow_link:3-11:4:2-4"


@dataclass(frozen=True, slots=True)
class Fault:
    """One fault. Exactly one target field is set, as the kind needs (none for seqlen_imbalance)."""

    kind: str
    """One of ``KINDS``."""
    rank: int | None = None
    """Global rank, for slow_gpu, slow_nic, slow_host and data_stall."""
    ranks: tuple[int, int] | None = None
    """The two ends of a link, for slow_link."""
    stage: int | None = None
    """Pipeline stage, for stage_imbalance."""
    factor: float | None = None
    """Strength (see the module doc); None takes ``DEFAULT_FACTORS[kind]``."""
    iterations: tuple[int, int] | None = None
    """Inclusive window of iterations (from 0); None means every iteration."""

    @property
    def strength(self) -> float:
        return DEFAULT_FACTORS[self.kind] if self.factor is None else float(self.factor)

    def window(self, iterations: int) -> tuple[int, int]:
        return self.iterations if self.iterations is not None else (0, iterations - 1)

    def active(self, iteration: int, iterations: int) -> bool:
        first, last = self.window(iterations)
        return first <= iteration <= last

    def ground_truth(self, iterations: int, coords: dict[int, dict[str, int]]) -> dict[str, Any]:
        """The fault as ``ground_truth.json`` lists it."""
        out: dict[str, Any] = {"kind": self.kind}
        if self.rank is not None:
            out["rank"] = self.rank
            out["coords"] = {k: coords[self.rank][k] for k in ("tp", "pp", "dp")}
        if self.ranks is not None:
            out["ranks"] = list(self.ranks)
        if self.stage is not None:
            out["stage"] = self.stage
        out["factor"] = self.strength
        out["iterations"] = list(self.window(iterations))
        out["hardware"] = self.kind in HARDWARE_KINDS
        return out


def _int(text: str, what: str, spec: str) -> int:
    if not re.fullmatch(r"\d+", text):
        raise InputError(f"--fault {spec!r}: {what} {text!r} is not a whole number >= 0", _SYNTAX)
    return int(text)


def _range(text: str, what: str, spec: str) -> tuple[int, int]:
    m = re.fullmatch(r"(\d+)-(\d+)", text)
    if not m:
        if re.fullmatch(r"\d+", text):
            return int(text), int(text)
        raise InputError(f"--fault {spec!r}: {what} {text!r} is not FIRST-LAST", _SYNTAX)
    return int(m.group(1)), int(m.group(2))


def parse_fault(spec: str) -> Fault:
    """Parse ``KIND:TARGET[:FACTOR[:FIRST-LAST]]`` (the ``--fault`` syntax) into a ``Fault``."""
    parts = spec.strip().split(":")
    if len(parts) < 2 or len(parts) > 4:
        raise InputError(f"--fault {spec!r}: expected 2 to 4 fields separated by ':'", _SYNTAX)
    kind, target = parts[0], parts[1]
    if kind not in KINDS:
        raise InputError(f"--fault {spec!r}: unknown kind {kind!r}", "kinds: " + ", ".join(KINDS))
    factor = None
    if len(parts) >= 3 and parts[2] != "":
        try:
            factor = float(parts[2])
        except ValueError:
            raise InputError(f"--fault {spec!r}: factor {parts[2]!r} is not a number", _SYNTAX) from None
    window = _range(parts[3], "iterations", spec) if len(parts) == 4 else None
    fields: dict[str, Any] = {}
    if kind == "slow_link":
        m = re.fullmatch(r"(\d+)-(\d+)", target)
        if not m:
            raise InputError(f"--fault {spec!r}: link {target!r} is not two ranks A-B", _SYNTAX)
        fields["ranks"] = (int(m.group(1)), int(m.group(2)))
    elif kind == "stage_imbalance":
        fields["stage"] = _int(target, "stage", spec)
    elif kind == "seqlen_imbalance":
        if target != "":
            raise InputError(f"--fault {spec!r}: seqlen_imbalance takes no target",
                             "write seqlen_imbalance::0.3")
    else:
        fields["rank"] = _int(target, "rank", spec)
    return Fault(kind=kind, factor=factor, iterations=window, **fields)


def check_faults(faults: list[Fault], *, tp: int, pp: int, dp: int, vpp: int, iterations: int) -> None:
    """Refuse a fault on a rank, link, stage or iteration that does not exist."""
    from .layout import Layout

    layout = Layout(tp=tp, pp=pp, dp=dp, vpp=vpp)
    world = layout.world_size
    for f in faults:
        label = f"--fault {f.kind}"
        if f.kind not in KINDS:
            raise InputError(f"{label}: unknown kind", "kinds: " + ", ".join(KINDS))
        factor = f.strength
        if f.kind == "seqlen_imbalance":
            if not 0 <= factor < 1:
                raise InputError(f"{label} factor {factor}: must be in [0, 1) (relative spread)")
        elif f.kind == "data_stall":
            if not factor > 0:
                raise InputError(f"{label} factor {factor}: must be > 0 (milliseconds of stall)")
        elif not factor >= 1:
            raise InputError(f"{label} factor {factor}: must be >= 1 (how many times slower)")
        if f.kind in ("slow_gpu", "slow_nic", "slow_host", "data_stall"):
            if f.rank is None or not 0 <= f.rank < world:
                raise InputError(f"{label}:{f.rank}: rank must be in 0..{world - 1} "
                                 f"(world size {world})")
        if f.kind == "data_stall":
            c = layout.coords(f.rank)
            if c["tp"] != 0 or c["pp"] not in (0, pp - 1):
                readers = sorted({layout.rank(0, d, p) for d in range(dp) for p in {0, pp - 1}})
                shown = ", ".join(map(str, readers[:8])) + (", ..." if len(readers) > 8 else "")
                raise InputError(f"{label}:{f.rank}: rank {f.rank} reads no data (tp{c['tp']} pp{c['pp']}); "
                                 "only tensor-parallel rank 0 of the first and last pipeline stage do",
                                 f"ranks that read data: {shown}")
        if f.kind == "slow_link":
            if f.ranks is None or len(f.ranks) != 2:
                raise InputError(f"{label}: needs two ranks A-B")
            a, b = f.ranks
            for r in (a, b):
                if not 0 <= r < world:
                    raise InputError(f"{label}:{a}-{b}: rank {r} must be in 0..{world - 1} "
                                     f"(world size {world})")
            if a == b or b not in layout.links(a):
                raise InputError(f"{label}:{a}-{b}: ranks {a} and {b} do not exchange data "
                                 "(a link joins TP or DP peers or pipeline neighbours)")
        if f.kind == "stage_imbalance" and (f.stage is None or not 0 <= f.stage < pp):
            raise InputError(f"{label}:{f.stage}: stage must be in 0..{pp - 1} (--pp {pp})")
        if f.iterations is not None:
            first, last = f.iterations
            if not 0 <= first <= last < iterations:
                raise InputError(f"{label} iterations {first}-{last}: must satisfy "
                                 f"0 <= first <= last <= {iterations - 1} (--iterations {iterations})")
