"""Which rank sits where: the (tp, pp, dp) coordinates the peer stage needs, and who was not traced.

Taken, in order of preference, from the traces (trace format v1 metadata, MegatronApp file
names), from the user (``--layout tp=2,pp=1,dp=2``), from the process groups that profiler
traces record (a rank's position in its ``tp``/``dp``/``pp`` group is its coordinate), or from
the p2p messages of a pipeline whose traces name no group (``from_p2p_chain``). Without any of
them the layout is unknown and peers are found by program (``detect.program``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from mapp.analysis.detect.added_work import PARAMETER_OP
from mapp.analysis.detect.thresholds import CONSISTENT
from mapp.errors import InputError, LayoutError

__all__ = ["AT_ONCE", "LOSS", "LayoutInfo", "exchanges_at_once", "from_p2p_chain", "links_take_turns", "loss_everywhere",
           "middle_stages", "parameters_everywhere", "parse_layout", "resolve_layout"]

_AXES = ("tp", "pp", "dp")


@dataclass(slots=True)
class LayoutInfo:
    """The job's layout as the detector sees it."""

    sizes: dict[str, int] | None
    """``{"tp", "pp", "dp"}`` sizes, or None when unknown."""
    source: str
    """Where the layout came from: "traces", "--layout", "process groups" or "unknown"."""
    ranks: pl.DataFrame
    """One row per traced rank: ``rank``, ``tp``, ``pp``, ``dp`` (null when unknown), ``host``."""
    world_size: int | None
    unrecorded: list[int] = field(default_factory=list)
    """Ranks of the job with no trace at all (known from the world size or group lists)."""
    notes: list[str] = field(default_factory=list)
    peers: str | None = None
    """Without a layout: how peers were found instead (ranks running the same program), else None."""

    @property
    def known(self) -> bool:
        return self.sizes is not None

    def describe(self) -> str:
        if self.sizes is None:
            return "unknown" if self.peers is None else f"unknown; peers by program: {self.peers}"
        return ",".join(f"{a}={self.sizes[a]}" for a in _AXES) + f" (from {self.source})"


def parse_layout(text: str) -> dict[str, int]:
    """Parse ``tp=2,pp=1,dp=2`` (any order; a missing axis is 1)."""
    sizes = {a: 1 for a in _AXES}
    seen = False
    for part in filter(None, (p.strip() for p in text.split(","))):
        m = re.fullmatch(r"(tp|pp|dp)\s*=\s*(\d+)", part)
        if not m or int(m.group(2)) < 1:
            raise InputError(f"--layout {text!r}: {part!r} is not AXIS=N with AXIS tp, pp or dp and N >= 1",
                             "write e.g. --layout tp=2,pp=1,dp=2")
        sizes[m.group(1)] = int(m.group(2))
        seen = True
    if not seen:
        raise InputError(f"--layout {text!r}: names no axis", "write e.g. --layout tp=2,pp=1,dp=2")
    return sizes


def _coords_from_sizes(ranks: pl.Series, sizes: dict[str, int]) -> pl.DataFrame:
    """Megatron-core's default order: TP fastest, then DP, then PP."""
    r = ranks.cast(pl.Int64)
    tp, dp = sizes["tp"], sizes["dp"]
    return pl.DataFrame({
        "rank": ranks.cast(pl.Int32),
        "tp": (r % tp).cast(pl.Int32),
        "pp": (r // (tp * dp)).cast(pl.Int32),
        "dp": ((r // tp) % dp).cast(pl.Int32),
    })


def _from_groups(groups: pl.DataFrame, traced: pl.Series) -> tuple[dict[str, int], pl.DataFrame] | None:
    """Coordinates from labelled process groups: a rank's index in its group of each axis."""
    labelled = groups.filter(pl.col("group").is_in(list(_AXES)))
    if labelled.is_empty():
        return None
    sizes = {}
    for axis in _AXES:
        lens = labelled.filter(pl.col("group") == axis)["group_ranks"].list.len().unique()
        if len(lens) > 1:
            return None
        sizes[axis] = int(lens[0]) if len(lens) else 1
    labelled = labelled.unique(subset=["rank", "group"], keep="first").with_row_index("_row")
    rows = labelled.with_columns(pl.col("group_ranks").list.sort()).explode("group_ranks").with_columns(
        idx=pl.int_range(pl.len()).over("_row")
    ).filter(pl.col("group_ranks") == pl.col("rank"))
    coords = rows.pivot(on="group", index="rank", values="idx", aggregate_function="first")
    out = pl.DataFrame({"rank": traced.cast(pl.Int32)}).join(coords.with_columns(pl.col("rank").cast(pl.Int32)),
                                                             on="rank", how="left")
    for axis in _AXES:
        out = out.with_columns((pl.col(axis) if axis in out.columns else pl.lit(0)).fill_null(0).cast(pl.Int32).alias(axis))
    return sizes, out.select("rank", *_AXES)


def resolve_layout(ranks: pl.DataFrame, groups: pl.DataFrame, layout: dict[str, int] | None,
                   world_size: int | None) -> LayoutInfo:
    """Work out every traced rank's coordinates.

    ``ranks`` is the bundle's ranks table; ``groups`` one row per distinct (rank, group,
    group_ranks) of its collective calls; ``layout`` what the user passed with ``--layout``.
    """
    traced = ranks["rank"].cast(pl.Int32)
    notes: list[str] = []
    hosts = _hosts(ranks, world_size, notes)
    have = all(ranks[f"layout_{a}"].null_count() == 0 and ranks[a].null_count() == 0 for a in _AXES) and len(ranks)
    if have:
        sizes = {a: int(ranks[f"layout_{a}"][0]) for a in _AXES}
        coords = ranks.select(pl.col("rank").cast(pl.Int32), *(pl.col(a).cast(pl.Int32) for a in _AXES))
        # a profiler trace's coordinates are its process groups' (ingest.kineto: pg_config)
        source = "process groups" if set(ranks["format"].to_list()) == {"kineto"} else "traces"
        if layout is not None and layout != sizes:
            notes.append(f"--layout {_fmt(layout)} ignored: the traces record {_fmt(sizes)}")
    elif layout is not None:
        sizes = dict(layout)
        world = sizes["tp"] * sizes["pp"] * sizes["dp"]
        if world_size is not None and world_size != world:
            raise LayoutError(f"--layout {_fmt(layout)} has {world} ranks but the traces say world size {world_size}",
                              "fix --layout so that tp x pp x dp equals the world size")
        if len(traced) and int(traced.max()) >= world:
            raise LayoutError(f"--layout {_fmt(layout)} has {world} ranks but rank {int(traced.max())} was traced",
                              "fix --layout so that tp x pp x dp covers every rank")
        coords = _coords_from_sizes(traced, sizes)
        source = "--layout"
    else:
        found = _from_groups(groups, traced) if len(groups) else None
        if found is None:
            coords = pl.DataFrame({"rank": traced, **{a: pl.Series([None] * len(traced), dtype=pl.Int32) for a in _AXES}})
            return LayoutInfo(None, "unknown", coords.join(hosts, on="rank", how="left"), world_size,
                              _unrecorded(traced, groups, world_size), notes)
        sizes, coords = found
        source = "process groups"
    world = world_size or sizes["tp"] * sizes["pp"] * sizes["dp"]
    info = LayoutInfo(sizes, source, coords.join(hosts, on="rank", how="left"), world,
                      _unrecorded(traced, groups, world), notes)
    return info


def from_p2p_chain(info: LayoutInfo, p2p: pl.DataFrame, *, whole_model: bool = False) -> LayoutInfo:
    """``info`` with a pipeline's layout where it is unknown and the matched p2p messages
    (``src``, ``dst``, ``send_start_aligned_ns``) join every traced rank into one chain: each
    rank exchanging with at most two others, both ways, no cycle; or, every message one way, each
    rank passing on what it received (``_served``: a pipeline serving a model, its last stage
    perhaps sending back to its first). Each rank is then a stage, in chain
    order, the first the end that sent the earliest message (a pipeline's first message is the
    first stage's first activation); ``pp`` is the chain's length. Not where its middle ranks
    send to both their neighbours at once (``exchanges_at_once``: a halo exchange), nor where
    every rank runs the whole model on its part of the data (``whole_model``, from
    ``loss_everywhere`` or ``parameters_everywhere``), nor where its links take turns
    (``links_take_turns``).
    Else ``info`` as it is.

    A pipeline written without Megatron (``torch.distributed.pipelining`` on the world group
    alone) names no group, and its stages run different programs (the first embeds, the last
    computes the loss): found by program, each stage stood alone with no peer and a fault on
    it went unseen (PP2 and the last stage of PP4, 14 of 14 runs on 16 cores). As stages, they
    are timed against each other on the work every stage does, as megatron-core's are."""
    ranks = set(info.ranks["rank"].to_list())
    # (a stage whose trace is missing would leave a chain of the others, one stage short)
    if info.known or len(ranks) < 2 or p2p.is_empty() or info.unrecorded or (info.world_size or 0) > len(ranks):
        return info
    if whole_model or exchanges_at_once(p2p) or links_take_turns(p2p):
        return info
    sent = {(int(a), int(b)) for a, b in p2p.select("src", "dst").unique().iter_rows() if a != b}
    edges = {tuple(sorted(e)) for e in sent}
    # a training pipeline sends gradients back along every link it sends activations down; a
    # message one way only (two peers handing each other a value) makes no stages of them,
    # unless every link is one way and they run one after another through every rank: a
    # pipeline serving a model, no backward (``_served``)
    if any((b, a) not in sent for a, b in sent):
        if (chain := _served(sent, ranks, p2p)) is None:
            return info
        return _staged(info, chain, "p2p chain, one way")
    nearby: dict[int, set[int]] = {r: set() for r in ranks}
    for a, b in edges:
        if a not in ranks or b not in ranks:
            return info
        nearby[a].add(b)
        nearby[b].add(a)
    ends = [r for r, n in nearby.items() if len(n) == 1]
    if len(edges) != len(ranks) - 1 or any(len(n) > 2 for n in nearby.values()) or len(ends) != 2:
        return info
    chain = [min(ends)]
    while len(chain) < len(ranks):
        step = nearby[chain[-1]] - set(chain[-2:-1])
        if len(step) != 1:
            return info
        chain.append(step.pop())
    first = p2p.sort("send_start_aligned_ns", nulls_last=True).row(0, named=True)
    if chain.index(int(first["src"])) > chain.index(int(first["dst"])):
        chain.reverse()
    return _staged(info, chain, "p2p chain")


def _staged(info: LayoutInfo, chain: list[int], source: str) -> LayoutInfo:
    """``info`` with each rank of ``chain`` a pipeline stage, in its order."""
    stage = {r: i for i, r in enumerate(chain)}
    coords = info.ranks.with_columns(
        tp=pl.lit(0, pl.Int32), dp=pl.lit(0, pl.Int32),
        pp=pl.col("rank").replace_strict(stage, return_dtype=pl.Int32)).select("rank", *_AXES, "host")
    return LayoutInfo({"tp": 1, "pp": len(chain), "dp": 1}, source, coords, info.world_size,
                      info.unrecorded, info.notes)


def _served(sent: set[tuple[int, int]], ranks: set[int], p2p: pl.DataFrame) -> list[int] | None:
    """The stages, in order, of a pipeline that serves a model: every message one way, each rank
    sending to one and receiving from one, through every rank in turn, the last stage perhaps
    sending back to the first (the tokens it sampled, the first stage's next input); the first
    stage is the one that sent the earliest message. Else None. (A user's PP4 inference server,
    prefill and decode through the stages, the sampled ids sent 3 -> 0: no two-way link, found
    by program, ranks 1 and 3 stood alone and a stage sleeping 130 ms a round went unseen.)"""
    outs: dict[int, set[int]] = {r: set() for r in ranks}
    ins: dict[int, set[int]] = {r: set() for r in ranks}
    for a, b in sent:
        if a not in ranks or b not in ranks or (b, a) in sent:
            return None
        outs[a].add(b)
        ins[b].add(a)
    if any(len(n) > 1 for n in (*outs.values(), *ins.values())) or len(sent) < len(ranks) - 1:
        return None
    heads = [r for r in ranks if not ins[r]]
    if len(sent) == len(ranks):     # a cycle: it starts where the first message left
        first = p2p.sort("send_start_aligned_ns", nulls_last=True).row(0, named=True)
        heads = [int(first["src"])]
    if len(heads) != 1:
        return None
    chain = heads[:]
    while len(chain) < len(ranks):
        nxt = outs[chain[-1]]
        if not nxt or next(iter(nxt)) in chain:
            return None
        chain.append(next(iter(nxt)))
    return chain if _passed_on(chain, p2p) else None


def _passed_on(chain: list[int], p2p: pl.DataFrame) -> bool:
    """Whether every rank after the first sends nothing in a step before its first message of the
    step has come in, in ``CONSISTENT`` of the steps: a stage passes on what it was given. Ranks
    that shift their blocks round a ring send their own first (a user's DSGD matrix
    factorisation, item blocks passed 0 -> 3 -> 2 -> 1 -> 0; evolution strategies, fitness
    passed round a ring: a cycle one way, no pipeline)."""
    if "iteration" not in p2p.columns:
        return False
    msgs = p2p.filter(pl.col("iteration").is_not_null() & (pl.col("src") != pl.col("dst")))
    sent = msgs.group_by(rank="src", iteration="iteration").agg(sent=pl.col("send_start_ns").min())
    came = msgs.group_by(rank="dst", iteration="iteration").agg(came=pl.col("recv_end_ns").min())
    per = sent.join(came, on=["rank", "iteration"]).filter(pl.col("rank").is_in(chain[1:])).drop_nulls()
    if per.is_empty():
        return False
    after = per.group_by("rank").agg(ok=(pl.col("sent") >= pl.col("came")).mean())
    return after.height == len(chain) - 1 and bool((after["ok"] >= CONSISTENT).all())


def links_take_turns(p2p: pl.DataFrame) -> bool:
    """Whether some link of the p2p messages carries none in most of the steps in which others do
    (in fewer than ``CONSISTENT`` of them). A pipeline moves every microbatch through every stage,
    so each of its links carries messages in every step; neighbours that pair off by turns do
    not (a user's replica exchange on 4 gloo processes: pairs 0-1 and 2-3 swap on even steps,
    1-2 on odd ones, a chain read as PP4 before, its replicas' 2x Langevin work on rank 1 "the
    heavier stage"). False where the messages fall in fewer than two steps (or name none)."""
    if "iteration" not in p2p.columns:
        return False
    msgs = p2p.filter((pl.col("src") != pl.col("dst")) & pl.col("iteration").is_not_null())
    msgs = msgs.select(link=pl.concat_list(pl.min_horizontal("src", "dst"), pl.max_horizontal("src", "dst")),
                       iteration="iteration")
    steps = msgs["iteration"].n_unique()
    if steps < 2:
        return False
    per_link = msgs.group_by("link").agg(n=pl.col("iteration").n_unique())["n"]
    return bool((per_link < CONSISTENT * steps).any())


AT_ONCE = 0.1
"""Ranks whose sends to one peer lie, in the median, within this share of the time between two
of them from a send to another peer exchange with their peers at once (``exchanges_at_once``)."""


def exchanges_at_once(p2p: pl.DataFrame) -> bool:
    """Whether the ranks that send to two peers or more send to them at once: a domain split in
    strips or blocks trading its boundaries each iteration (a halo exchange), every rank one
    program, its p2p partners neighbours, not pipeline stages. A stage of a pipeline that does
    not interleave computes between a send to one neighbour and a send to the other: forward to
    the next, backward to the previous. Per such rank, each send's distance to its nearest send
    to another peer, over the time between its sends to that one peer; the median of all under
    ``AT_ONCE``. (A user's heat-equation solver on 4 strips, its CG trading rows each iteration:
    0.004 on both middle ranks, read as PP4, its ends and middles as two programs; the corpora's
    pipelines on the world group alone, PP3 to PP8: 0.41-7.1.) False where no rank sends to two."""
    if p2p.is_empty():
        return False
    sends = p2p.filter(pl.col("src") != pl.col("dst")).select("src", "dst", start="send_start_aligned_ns").drop_nulls()
    ratios: list[float] = []
    for (rank,), own in sends.group_by("src"):
        starts = {int(d): np.sort(g["start"].to_numpy()) for (d,), g in own.group_by("dst")}
        if len(starts) < 2:
            continue
        for peer, at in starts.items():
            others = np.sort(np.concatenate([t for q, t in starts.items() if q != peer]))
            if len(at) < 2 or not len(others):
                continue
            spacing = float(np.median(np.diff(at)))
            if spacing <= 0:
                continue
            k = np.searchsorted(others, at)
            before = np.abs(at - others[np.clip(k - 1, 0, len(others) - 1)])
            after = np.abs(others[np.clip(k, 0, len(others) - 1)] - at)
            ratios.extend((np.minimum(before, after) / spacing).tolist())
    return bool(ratios) and float(np.median(ratios)) < AT_ONCE


LOSS = r"loss|cross_entropy"
"""A loss's ops by name (``aten::nll_loss_forward``, ``aten::mse_loss``, ``aten::cross_entropy_loss``)."""


def loss_everywhere(events: pl.DataFrame) -> bool:
    """Whether every traced rank (two or more) computes a loss (``LOSS``): each runs the whole
    model on its part of the data, so messages in a chain between them are no pipeline's, whose
    last stage alone computes the loss (the corpora's pipelines on the world group alone, PP3 to
    PP8: ``aten::mse_loss`` on the last rank only). A linear-recurrence LM split over 4 ranks by
    sequence, each layer's carry passed 0 -> 1 -> 2 -> 3 and its gradient back, every rank with
    the embedding and the loss of its part: read as PP4 before, a rank of 6x the scan's work
    "the heavier stage", no suspect."""
    ranks = events["rank"].n_unique()
    if ranks < 2:
        return False
    scoring = events.filter((pl.col("cat") == "compute") & pl.col("name").str.contains(LOSS))["rank"].n_unique()
    return scoring == ranks


def parameters_everywhere(events: pl.DataFrame) -> bool:
    """Whether every traced rank (two or more) accumulates as many parameter gradients a step
    (``PARAMETER_OP`` calls, the median over its steps, the same and above 0 on every rank): each
    holds the whole model, so a chain of messages between them is no pipeline's, whose stages
    hold different layers (the corpora's pipelines: 56, 52, 52 and 64 a step on megatron-core's
    PP4, 64, 72, 72 and 72 on ``torch.distributed.pipelining``'s; never all alike). A user's
    soft-DTW wavefront, its DP matrix in column blocks passed 0 -> 1 -> 2 -> 3 and its gradients
    back, every rank with the same embedding network (10 a step on each): read as PP4 before,
    a rank of 4x the embedding passes "the heavier stage", no suspect."""
    if events["rank"].n_unique() < 2 or "iteration" not in events.columns:
        return False
    per = (events.filter(pl.col("iteration").is_not_null())
           .group_by("rank", "iteration").agg(n=pl.col("name").str.contains(PARAMETER_OP, literal=True).sum())
           .group_by("rank").agg(pl.col("n").median()))
    counts = set(per["n"].to_list())
    return len(per) == events["rank"].n_unique() and len(counts) == 1 and counts.pop() > 0


def _hosts(ranks: pl.DataFrame, world_size: int | None, notes: list[str]) -> pl.DataFrame:
    """``rank`` -> ``host``: the traces' own, or where none records one (the MegatronApp tracer
    writes only the local device index, ``dev``) the node each rank's device index places it on.
    A launcher starts ``G`` processes a node, rank ``r`` on node ``r // G`` with device ``r % G``;
    where every traced rank's device is so, for a ``G`` of 2 or more and a world beyond one node,
    the nodes are taken from it and a note says so. Without them a pipeline link that crosses
    nodes is compared with links inside one and looks slow (simulated TP2 x PP4 x DP2 in that
    format, 8 GPUs a node, healthy: the four links from stage 1 to stage 2, 4.9x the others)."""
    hosts = ranks.select(pl.col("rank").cast(pl.Int32), "host")
    if not len(ranks) or hosts["host"].null_count() < len(ranks) or "device" not in ranks.columns:
        return hosts
    devices = ranks["device"].cast(pl.String)
    if devices.null_count() or not devices.str.contains(r"^\d+$").all():
        return hosts
    local = devices.cast(pl.Int64)
    per_node = int(local.max()) + 1
    world = max(world_size or 0, int(ranks["rank"].max()) + 1)
    if per_node < 2 or world <= per_node or not (ranks["rank"].cast(pl.Int64) % per_node == local).all():
        return hosts
    notes.append(f"hosts not recorded: ranks placed on nodes of {per_node} GPUs by their device indices "
                 f"(rank r on node r // {per_node}, as a launcher of {per_node} processes a node places them)")
    return hosts.with_columns(host=pl.format("node{}", pl.col("rank") // per_node))


def _unrecorded(traced: pl.Series, groups: pl.DataFrame, world: int | None) -> list[int]:
    known = set(range(world)) if world else set()
    if len(groups):
        known |= set(groups["group_ranks"].explode().drop_nulls().cast(pl.Int64).to_list())
    return sorted(known - set(traced.to_list()))


def _fmt(sizes: dict[str, int]) -> str:
    return ",".join(f"{a}={sizes[a]}" for a in _AXES)


def middle_stages(ranks: pl.DataFrame, first: int | None = None, last: int | None = None) -> frozenset[int]:
    """The ranks (``rank``, ``pp``) of pipeline stages strictly between ``first`` and ``last``
    (default: the lowest and the highest stage among ``ranks``): they run layers only, where the
    first stage also reads the data and the embedding and the last computes the loss."""
    pp = ranks.filter(pl.col("pp").is_not_null())
    if pp.is_empty():
        return frozenset()
    lo = int(pp["pp"].min()) if first is None else first
    hi = int(pp["pp"].max()) if last is None else last
    return frozenset(pp.filter((pl.col("pp") > lo) & (pl.col("pp") < hi))["rank"].to_list())
