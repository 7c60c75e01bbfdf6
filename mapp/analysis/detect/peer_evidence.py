"""What stage 1 (``peers.compare_peers``) hands the verdict: one plain record, in a module of its
own so that the rules which read it (``replicas``, ``gates``, ``tp_waits`` ...) and the stage that
makes it import it without importing each other."""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

__all__ = ["PeerEvidence"]


@dataclass(slots=True)
class PeerEvidence:
    """What stage 1 found. Times in ns."""

    mode: str
    """"dp peers", "stage peers", "layer peers", "own history", or "skipped"."""
    reason: str | None = None
    """Why the stage did not run (mode "skipped"), else None."""
    rank_iterations: pl.DataFrame = field(default_factory=pl.DataFrame)
    """Per (rank, iteration): ``effect`` (log-ratio to peers), ``z``, ``n_ops``, ``share_slow``,
    ``excess_ns`` (self time beyond the peers' medians), ``busy_ns`` (self time), ``flagged``,
    ``gap_ns``, ``gap_excess_ns``, ``gap_z``, ``gap_flagged``, ``long_excess_ns`` (the part of the
    idle excess in gaps of ``idle.LONG_GAP_NS`` or more: stalls), on spans with names,
    ``handover_excess_ns`` (the stalls where a forward pass hands over to the backward) and, where
    ``same_work`` counts calls, ``onset_effect`` (``effect`` with the iteration's own typical
    calls: ``onset``)."""
    ranks: pl.DataFrame = field(default_factory=pl.DataFrame)
    """Per rank: ``slowdown``, ``z``, ``share_slow``, ``n_ops``, ``flagged``, ``iterations``
    (flagged ones), ``excess_ns`` and ``busy_ns`` per iteration, the same for gaps, and
    ``data_stalls`` (its waits in its data loader last: ``idle.data_stalls``)."""
    z_crit: float = 0.0
    min_effect: float = 0.0
    seqlen: dict | None = None
    """Set when compute varies per microbatch the same way on every rank of a replica."""
    stages: pl.DataFrame | None = None
    """Per pipeline stage: ``compute_ns`` per iteration (its fastest rank) and ``ratio`` to the lightest."""
    pairs: bool = False
    """Some ops had only two ranks to compare: a slower one could be either's noise, so a
    verdict needs stage 2 to agree (the slow rank also arrives last)."""
    sliced: pl.DataFrame | None = None
    """Per rank, where its slowed ops land (``time_slices.scattered``); None where not judged
    (``compare_peers``'s ``time_slices``)."""
    counted: bool = False
    """Ops were compared per kind with their calls counted (``same_work``: profiler traces that
    record shapes), so work a rank adds shows in its counts, not only in its times."""
    scope: str | None = None
    """What part of the ranks' work was compared, where not all of it (for the stage's line)."""
    by_order: bool = False
    """Ops were told apart by their order in an iteration, not their sizes (recorded without
    input shapes: ``peers.nth_call``)."""
    own_time: bool = False
    """Ops were timed less their waits for a core (``own_time``: the trace records them)."""
    graded: pl.DataFrame | None = None
    """The ops the program splits unevenly by rank (``added_work.graded_work``): per op
    (``name``), its peer group, ``ranks`` and their ``calls`` in a typical iteration; None for none."""
    leading: list[int] = field(default_factory=list)
    """Ranks slower than each of their other peers in nearly every microbatch, alone or in a
    block of peers slowed alike (``slow_blocks.Blocks``)."""

