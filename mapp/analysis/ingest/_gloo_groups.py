"""Which process group a gloo call ran on, in PyTorch profiler traces that do not say.

A gloo trace records a communication call as a ``gloo:<op>`` annotation (and, for p2p, the
``c10d::send``/``c10d::recv_`` op that issued it) with no process group; each rank's
``distributedInfo.pg_config`` lists the groups it belongs to, with their members in group-rank
order. Both questions below are answered across the ranks read together.

*p2p peers.* c10d's ``send``/``recv`` take the peer as its rank *within the group the call ran
on* (the c10d op's third input). A call on rank ``r`` with group-local peer ``l``: each group
``G`` of ``r`` proposes the global rank ``p = G[l]``; a proposal stands when ``p`` is traced,
``G`` is one of ``p``'s groups too, and ``p`` made calls of the other direction whose
group-local peer is ``r``'s place in ``G``, of the same size where any of that size does (the
two sides agree). One standing peer is the answer. Where two stand, the one on a group that
``r``'s calls of that size were shown to run on (calls that one group alone explains) is. Where
none stands (the peer's trace is absent, or holds no answering calls) the proposals must name
one rank whatever the group. Anything else (no group fits, or two fit) leaves the peer null,
and a note says so. Finally every resolved send ``a -> b`` is checked
against ``b``'s resolved receives from ``a`` (and the reverse), and a note names any pair whose
two sides disagree.

*pipeline peers.* Recorded without input shapes, a call has no c10d arguments, so no peer at
all; in a megatron-core job (its ``PIPELINE_MODEL_PARALLEL_GROUP`` listed) a p2p call goes to
a pipeline neighbour: the one, or of two the one whose call of the other direction ended with
it, unless the pipeline interleaves (``_pipeline_peers``).

*collective groups.* A collective call that names neither group nor members is placed in a group
of its rank whose every member is traced and made as many calls of the same op and size. A
group of one always fits (megatron calls all-reduces on a TP group of one), so where several
fit, only the groups of several members whose calls end together stay: the time from one
call's end to the next is the same on every member's own clock (median relative difference
under 10%; no clock alignment needed). Where that leaves none or several (processes sharing
cores: their scheduling shifts each end by milliseconds), the group whose members' ends scatter
least around a constant offset stays, if far less than any other's (``_closest``). The call
gets the members of the one group left, provided each of those members finds that same group
alone; otherwise it stays without a group (matching then says so); where some were placed, one
note counts them and the rest.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable

import numpy as np
import polars as pl
from scipy import sparse
from scipy.optimize import linear_sum_assignment, linprog

LOCAL = "_peer_local"
"""The temporary events column holding a call's group-local peer (dropped by :func:`resolve`)."""

_OTHER = {"send": "recv", "recv": "send"}


def resolve(events: pl.DataFrame, groups: dict[int, list[tuple[int, ...]]],
            warn: Callable[[str], None], pipelines: dict[int, tuple[int, ...] | None] | None = None) -> pl.DataFrame:
    """``events`` (with the ``LOCAL`` column) with ``peer`` set on every call that has a
    group-local peer, and on the pipeline's p2p calls that have none where their ends show
    which (``_pipeline_peers``), ``group_ranks`` on the collective calls that name no group
    where one group fits, and ``LOCAL`` dropped. ``groups``: each traced rank's process groups
    (members in group-rank order); ``pipelines``: each traced rank's pipeline group (stage
    order), where its trace names one."""
    # (where a call recorded its group-local peer, the groups name it or say why not: no guessing)
    recorded = LOCAL in events.columns and events[LOCAL].is_not_null().any()
    events = _pipeline_peers(_peers(events, groups, warn), pipelines or {})
    if not recorded:
        members = {m for gs in groups.values() for g in gs for m in g}
        events = _hub_peers(_partner_peers(events, members, warn), members, warn)
    return _collective_groups(events, groups, warn)


def _peers(events: pl.DataFrame, groups: dict[int, list[tuple[int, ...]]],
           warn: Callable[[str], None]) -> pl.DataFrame:
    calls = events.filter(pl.col(LOCAL).is_not_null())
    if calls.is_empty():
        return events.drop(LOCAL)
    # calls of one size are answered by calls of that size (a message's two sides record it)
    calls = calls.with_columns(_size=pl.col("bytes").fill_null(-1))
    keys = calls.group_by("rank", "name", LOCAL, "_size").len().rows()
    sizes: dict[tuple, set] = {}     # (rank, name, local) -> the sizes of its calls
    for r, name, local, size, _ in keys:
        sizes.setdefault((r, name, local), set()).add(size)
    members = {r: {tuple(g) for g in gs} for r, gs in groups.items()}
    mapping, notes = [], []
    # per call site (rank, name, local): each proposed peer with the groups, and the sizes on each,
    # on which the other side answers (its place in the group named back). Worked out once per
    # site: a site's sizes (one per microbatch where lengths vary) only pick among them
    answers = {}
    for rank, name, local in sizes:
        proposals: dict[int, list] = {}
        back: dict[int, list] = {}
        for g in groups.get(rank, []):
            g = tuple(g)
            if rank in g and 0 <= local < len(g) and g[local] != rank:
                p = g[local]
                proposals.setdefault(p, []).append(g)
                if p in groups and g in members[p]:
                    back.setdefault(p, []).append((g, sizes.get((p, _OTHER[name], g.index(rank)), set())))
        answers[rank, name, local] = proposals, back
    found = {}
    for rank, name, local, size, count in sorted(keys):
        proposals, back = answers[rank, name, local]
        # each standing peer with the groups on which the other side answers with calls of this
        # size; where none does, as before sizes were asked: of any size
        sized = {p: [g for g, got in gs if size in got] for p, gs in back.items()}
        anysize = {p: [g for g, got in gs if got] for p, gs in back.items()}
        standing = {p: gs for p, gs in sized.items() if gs} or {p: gs for p, gs in anysize.items() if gs}
        found[rank, name, local, size, count] = proposals, standing
    # the groups a rank's p2p calls were shown to run on: those of its calls that one group alone
    # explains, per size (else of any size). Where two groups fit a call, the one its other calls
    # ran on is taken (interleaved PP4 under gloo: stage 0's receives from group-local peer 1 fit
    # rank 1 on the pipeline group and rank 3 on the embedding group [0, 3]; its receives from
    # local peer 3, the last stage handing a microbatch back, fit the pipeline group only)
    shown: dict[tuple, set] = {}
    for (rank, _, _, size, _), (_, standing) in found.items():
        # (one group by its members: a world group and a pipeline group of the same ranks are one)
        if len(standing) == 1 and len(gs := set(next(iter(standing.values())))) == 1:
            shown.setdefault((rank, size), set()).update(gs)
            shown.setdefault((rank, None), set()).update(gs)
    unresolved: dict[tuple, list] = {}
    for (rank, name, local, size, count), (proposals, standing) in found.items():
        if len(standing) > 1:
            ran_on = shown.get((rank, size)) or shown.get((rank, None), set())
            used = {p: gs for p, gs in standing.items() if set(gs) & ran_on}
            standing = used if len(used) == 1 else standing
        standing = set(standing)
        peer = None
        if len(standing) == 1:
            peer = standing.pop()
        elif not standing and len(proposals) == 1:
            peer = next(iter(proposals))  # one rank whatever the group (its side, if traced, is checked below)
        else:
            fits = ", ".join(f"{list(gs[0])} -> {p}" for p, gs in sorted(proposals.items())) or "none"
            why = ("no process group of the rank has a member there whose calls answer them" if not standing
                   else f"{len(standing)} process groups fit")
            unresolved.setdefault((rank, name, local), [0, why, fits])[0] += count
        mapping.append((rank, name, local, size, peer))
    for (rank, name, local), (count, why, fits) in unresolved.items():   # one note per call site, all sizes
        notes.append(f"rank {rank}: {count} gloo {name} call(s) name group-local peer {local}, and the trace "
                     f"does not say which process group they ran on; {why} (groups -> peer: {fits}); "
                     "left without a peer (unmatched)")
    resolved = pl.DataFrame(mapping, schema={"rank": pl.Int32(), "name": pl.String(), LOCAL: pl.Int32(),
                                             "_size": pl.Int64(), "_resolved": pl.Int32()}, orient="row")
    out = (
        events.with_columns(_size=pl.col("bytes").fill_null(-1).cast(pl.Int64))
        .join(resolved, on=["rank", "name", LOCAL, "_size"], how="left", maintain_order="left")
        .with_columns(peer=pl.when(pl.col(LOCAL).is_not_null()).then(pl.col("_resolved")).otherwise(pl.col("peer")))
        .drop(LOCAL, "_resolved", "_size")
    )
    notes += _disagreements(resolved.drop_nulls("_resolved").drop("_size"), set(groups))
    for note in notes:
        warn(note)
    return out


def only_group(groups: list[tuple[int, ...]] | list[list[int]]) -> tuple[int, ...] | None:
    """The members (sorted) that every one of a rank's process groups of two or more lists, where
    they all list the same ones (a job whose only group is the world, however many times
    pg_config names it); None where they differ or there is none. ``kineto._pipeline_group``
    takes such a world, in rank order, for a pipeline; ``_pipeline_peers`` pairs its calls only
    where its ends show a line. A group of one rank carries no message, so it is no other group:
    a pipeline by hand over 4 processes, its data-parallel groups of one (`dist.new_group([r])`),
    had its p2p calls left without a peer, and its last stage, the LM head and the loss beside
    its layers, compared as a data-parallel peer of the others: "slow compute 3" with no fault."""
    found = {tuple(sorted(g)) for g in groups if len(g) > 1}
    return found.pop() if len(found) == 1 else None


_NEAREST = 16
"""How many of a neighbour's receives on each side of a send, by their ends, ``_paired_by_ends``
weighs as the send's partner. A schedule that sends a stage's microbatches one after another and
waits on all of them at once (``torch.distributed.pipelining``'s ``ScheduleGPipe``) ends its sends
together, far from their receives: PP3 over 6 microbatches, 3.7 ms apart by the pairing's median,
and with 4 a side no pairing took every call. (Megatron-core's PP4 and interleaved PP4 under the
profiler's defaults, 67 jobs: every verdict the same at 4 and at 16.)"""


def _pipeline_peers(events: pl.DataFrame, pipelines: dict[int, tuple[int, ...] | None]) -> pl.DataFrame:
    """The peers of a pipeline's p2p calls that record none (gloo under the profiler's defaults,
    record_shapes=False: c10d's peer is an input, and inputs are not recorded).

    Megatron-core exchanges activations and gradients with a stage's pipeline neighbours only.
    A stage of a pipeline of two has one: every such call of its goes to it (PP2 and PP2 x DP2
    on 4 gloo processes). A middle stage has two, and its calls are paired with the neighbours'
    calls of the other direction by when they end: a gloo send and the receive it feeds
    complete together (one host's clock: the processes of a gloo job on one machine). The
    calls of megatron-core PP4 under the profiler with shapes recorded, their peers known,
    paired so: 552 of 552 (five jobs, one on lognormal lengths). A pipeline any of whose calls
    finds no partner (a trace cut short), or whose ends do not show a line (it interleaves or
    loops back, ``_paired_by_ends``), keeps its calls without a peer, as before. (Ends are compared
    on each rank's own clock, which the processes of one machine share; across machines whose
    clocks differ by more than the time between exchanges, calls would pair wrongly. Not
    guarded: a Kineto trace seldom names its host, and gloo jobs recorded without shapes over
    several machines are rare.)"""
    unknown = events.with_row_index("_row").filter(
        (pl.col("cat") == "p2p") & pl.col("peer").is_null() & pl.col("name").is_in(["send", "recv"])
        & pl.col("rank").is_in([r for r, p in pipelines.items() if p and len(p) >= 2]))
    if unknown.is_empty():
        return events
    found: dict[int, int] = {}
    for pipe in sorted({p for p in pipelines.values() if p and len(p) >= 2}):
        calls = unknown.filter(pl.col("rank").is_in(list(pipe)))
        if len(pipe) == 2:
            found.update((row, pipe[1 - pipe.index(rank)]) for row, rank in zip(calls["_row"], calls["rank"]))
        else:
            found.update(_paired_by_ends(calls, pipe))
    if not found:
        return events
    return _placed(events, list(found), list(found.values()))


def _paired_by_ends(calls: pl.DataFrame, pipe: tuple[int, ...]) -> dict[int, int]:
    """{row: peer} for every call of a pipeline of three stages or more: each send paired with a
    neighbour's receive that ended after the send was posted, the pairs together ending closest
    (least summed distance between the two ends: a matching of the whole pipeline, not closest
    first, which on lognormal lengths paired one send of rank 1 with rank 2's receive 6 ms away
    and left two calls nothing); {}
    where no pairing takes every call, or where the pipeline's ends call p2p more than half as
    often as its middle stages (``_ends_exchange_half``): it interleaves, or loops back.

    Interleaved 1F1B also hands each microbatch from the last stage back to the first, and its
    calls cluster in time so that their ends do not tell which neighbour a call went to: paired
    with its ends as neighbours too, megatron-core PP4 with 2 model chunks a rank, no fault (5
    runs), had link 1-2 carry 33-44 messages each way where it carries 32 and the ends' link
    17-28 for 16; paired as a line, a third of its calls were forced onto others (link 1-2 16,
    the others 48): a link named in a healthy job either way, so its calls keep no peer. Nor do
    the pairs' distances tell whether it interleaves: pairing with the ends' link too came 0.61-
    2.5x closer in pipelines that do not, and 1.04-2.02x in ones that do (megatron-core's
    interleaved PP4 by hand, no fault, 4 processes on 2 cores: 1.04, paired as a line, "slow link
    0<->1" for its 1.5x the messages of link 1-2). How often its ends call does: half the middle
    stages' in every line pipeline of the corpora (0.33 where one link carried extra traffic),
    3/4 in every interleaved one."""
    if not _ends_exchange_half(calls, pipe):
        return {}
    n = len(pipe)
    neighbours = {r: [pipe[k] for k in (i - 1, i + 1) if 0 <= k < n] for i, r in enumerate(pipe)}
    return _matching(calls, neighbours) or {}


RING_LEAST = 4
"""The fewest messages each rank must send for ``_partner_peers`` to tell who its partner is."""

RING_APART = 0.05
"""The least share of the messages it sends elsewhere that every other pairing must have received
before they were sent, for ``_partner_peers`` to take the one that has none (two pairings fitting
say nothing)."""

PAIRINGS_UPTO = 7
"""Up to this many ranks ``_partner_peers`` weighs every way of giving each rank one partner to
send to (1,854 at 7); beyond, the rings only (each rank sending the same number of places on)."""


def _partner_peers(events: pl.DataFrame, members: set[int], warn: Callable[[str], None]) -> pl.DataFrame:
    """The peers of p2p calls that record none (gloo under the profiler's defaults), where every
    traced rank sends all its messages to one other rank and receives all its own from one: round
    a ring (hand-written ring all-reduces, collective matmuls, DSGD's rotating blocks, elite
    sharing) or between fixed pairs (two pipelines of two stages side by side, with no pipeline
    group listed for ``_pipeline_peers``).

    The calls' ends do not tell the partners: every rank sends and receives at once (a DSGD
    ring and an evolution-strategies ring on 4 gloo processes, paired by ends with any rank: each
    rank's messages spread over all three others, no two steps alike). Causality does: a message
    is received no earlier than it was posted. Under the true pairing, each rank's n-th send
    paired with its receiver's n-th receive, none is received before it was sent; under a wrong
    one, a rank that posts late (descheduled, slower, or its link slower) has its message received
    early (user jobs of three families on 4 gloo processes, healthy, a slowed rank and a padded
    link: 0 under the true pairing, 9-37% under each other ring, and under every other pairing of
    a GPipe PP2 x DP2 job 10 or more of 128). So the calls get the one pairing under which no message was
    received before it was sent, where every other has at least ``RING_APART`` of the messages it
    sends elsewhere so; each rank sending ``RING_LEAST`` times or more and as often as its partner
    receives (prefill workers sending their KV caches 0 -> 2 and 1 -> 3, ten messages a round, the
    decode workers the tokens back, one: the pairing that crossed only the tokens had 6 of their
    16 received early, 6 of all 176); otherwise they keep no peer
    (ring attention posting each send beside its receive and waiting on both: the rings either
    way both fit). Not where some calls have peers, a traced rank makes none, or a member of the
    ranks' process groups (``members``) was not traced, or none are listed: a ring through a rank
    whose trace is lost would pair its two neighbours, its one pairing without early messages
    (a blocking ring of 4, rank 3's trace removed: "2 -> 0" where every other had 20 of 60)."""
    unknown = _unpeered(events, members)
    if unknown is None:
        return events
    ranks = sorted(unknown["rank"].unique().to_list())
    n = len(ranks)
    sends, recvs = {}, {}
    for (rank, name), calls in unknown.sort("ts_ns").group_by("rank", "name"):
        rows = calls["_row"].to_numpy()
        if name == "send":
            sends[rank] = (rows, calls["ts_ns"].to_numpy())
        else:
            recvs[rank] = (rows, (calls["ts_ns"] + calls["dur_ns"]).to_numpy())
    # (a rank may send more than it receives, a prefill worker its caches and its decode worker
    # the tokens back, so a pairing must give each rank's sends as many receives on its partner)
    sent = [len(sends.get(r, ((), ()))[0]) for r in ranks]
    came = [len(recvs.get(r, ((), ()))[0]) for r in ranks]
    if min(sent) < RING_LEAST or min(came) < 1:
        return events
    # (each pairing as the place each rank's messages go to, in ``ranks``' order)
    pairings = ([p for p in itertools.permutations(range(n)) if all(p[i] != i for i in range(n))]
                if n <= PAIRINGS_UPTO else [tuple((i + shift) % n for i in range(n)) for shift in range(1, n)])
    pairings = [p for p in pairings if all(sent[i] == came[p[i]] for i in range(n))]
    early: dict[tuple, int] = {}
    fits = []
    for p in pairings:
        early[p] = sum(int((recvs[ranks[p[i]]][1] < sends[ranks[i]][1]).sum()) for i in range(n))
        if early[p] == 0:
            fits.append(p)
            if len(fits) > 1:                                   # two fit: nothing to tell
                return events
    total = sum(sent)
    if len(fits) != 1:
        return events
    # (each other pairing judged on the messages it sends elsewhere: two prefill workers' caches
    # may go to their own decode workers under two pairings that differ only in the 8 tokens sent back)
    fit = fits[0]
    if any(v < max(2, RING_APART * sum(sent[i] for i in range(n) if q[i] != fit[i]))
           for q, v in early.items() if v):
        return events
    rows, peers = [], []
    for i, a in enumerate(ranks):
        b = ranks[fit[i]]
        rows += list(sends[a][0]) + list(recvs[b][0])
        peers += [b] * sent[i] + [a] * sent[i]
    others = [v for v in early.values() if v]
    to = ", ".join(f"{a} -> {ranks[j]}" for a, j in zip(ranks, fit))
    against = f" (under the others, {min(others)} or more of {total})" if others else ""
    warn(f"gloo p2p calls record no peer (profiled without record_shapes): paired {to}, the one pairing "
         f"under which no message was received before it was sent{against}")
    return _placed(events, rows, peers)


def _hub_peers(events: pl.DataFrame, members: set[int], warn: Callable[[str], None]) -> pl.DataFrame:
    """The peers of p2p calls that record none where one traced rank, the hub, is the other end
    of every message: it only receives and every other rank only sends (a server gathering its
    clients' updates by ``dist.send``/``dist.recv``: federated averaging, a parameter server by
    hand), or it only sends and every other only receives (a scatter by hand). Every spoke's calls
    go to the hub; the hub's calls are paired with the spokes' by when they end, each receive
    with a send posted before it ended (``_matching``'s cheapest pairing of them all), as a gloo
    message's two sides complete together. A user's FedAvg on 4 gloo processes, each client's
    update and sample count received in turn by rank 0, recorded without shapes: its p2p calls
    had no peer, and a client whose uploads were padded 1024x (107 ms a send against 6-11 ms)
    was "no suspect". Not where a spoke makes fewer than ``RING_LEAST`` calls, no pairing takes
    every call, some calls have peers, a traced rank makes none, or a member of the ranks'
    process groups was not traced (its messages would be pinned on the hub's other partners)."""
    unknown = _unpeered(events, members)
    if unknown is None:
        return events
    kinds = dict(unknown.group_by("rank").agg(pl.col("name").unique().sort()).iter_rows())
    if any(len(k) != 1 for k in kinds.values()):
        return events
    hubs = {name: [r for r, k in kinds.items() if k == [name]] for name in ("send", "recv")}
    hub_side = next((name for name, rs in hubs.items() if len(rs) == 1), None)
    if hub_side is None:
        return events
    hub = hubs[hub_side][0]
    counts = unknown.filter(pl.col("rank") != hub).group_by("rank").len()
    if counts["len"].min() < RING_LEAST:
        return events
    spokes = sorted(r for r in kinds if r != hub)
    # (a spoke's sends go to the hub; the hub's, to any spoke)
    found = _matching(unknown, {r: [hub] for r in spokes} if hub_side == "recv" else {hub: spokes})
    if found is None:
        return events
    what = "receives only, and ranks {} send only" if hub_side == "recv" else "sends only, and ranks {} receive only"
    warn(f"gloo p2p calls record no peer (profiled without record_shapes): rank {hub} "
         f"{what.format(', '.join(map(str, spokes)))}: "
         f"each of their calls paired with rank {hub}'s, the hub's with theirs by when the two sides ended")
    return _placed(events, list(found), list(found.values()))


def _unpeered(events: pl.DataFrame, members: set[int]) -> pl.DataFrame | None:
    """The p2p calls that record no peer (with their ``_row`` in ``events``), where who their
    peers are may be worked out from the calls alone (``_partner_peers``, ``_hub_peers``): three
    ranks or more make them, every traced rank among them, the ranks' process groups are listed
    (``members``) and none of their members went untraced, and no p2p call has a peer already.
    None otherwise."""
    unknown = events.with_row_index("_row").filter(
        (pl.col("cat") == "p2p") & pl.col("peer").is_null() & pl.col("name").is_in(["send", "recv"]))
    if unknown.is_empty():
        return None
    ranks = set(unknown["rank"].unique().to_list())
    traced = set(events["rank"].unique().to_list())
    placed_already = events.filter((pl.col("cat") == "p2p") & pl.col("peer").is_not_null()).height
    if len(ranks) < 3 or ranks != traced or not members or not members <= traced or placed_already:
        return None
    return unknown


def _placed(events: pl.DataFrame, rows: list, peers: list) -> pl.DataFrame:
    """``events`` with ``peer`` set to ``peers`` on its rows numbered ``rows`` (where it has none)."""
    placed = pl.DataFrame({"_row": rows, "_peer": peers}, schema={"_row": pl.UInt32(), "_peer": pl.Int32()})
    return (events.with_row_index("_row").join(placed, on="_row", how="left", maintain_order="left")
            .with_columns(peer=pl.coalesce("peer", "_peer")).drop("_row", "_peer"))


LINE_ENDS = 0.6
"""At most this share of a middle stage's p2p calls (the middle stages' median), made by each of
a pipeline's two ends, shows a pipeline that does not interleave (``_ends_exchange_half``)."""


def _ends_exchange_half(calls: pl.DataFrame, pipe: tuple[int, ...]) -> bool:
    """Whether the pipeline's two ends call p2p about half as often as its middle stages: an end
    has one neighbour to exchange with where a middle stage has two, unless the pipeline
    interleaves and its ends exchange with each other too (megatron-core PP4 with 2 model
    chunks a rank: the ends' calls about 3/4 of the middle's; a looped
    ``torch.distributed.pipelining`` PP4 of 2 stages a process, ``ScheduleInterleaved1F1B``, the
    same). The pairing's distances do not say it: 4 processes of a ``torch.distributed.pipelining``
    PP4 on 2 shared cores, the last stage sleeping 25 ms before each step, its ends' calls half the
    middle's, paired 2.5x closer with the ends' link than without."""
    counts = dict(calls.group_by("rank").len().iter_rows())
    middle = [counts.get(r, 0) for r in pipe[1:-1]]
    if not middle or float(np.median(middle)) <= 0:
        return False
    return max(counts.get(pipe[0], 0), counts.get(pipe[-1], 0)) <= LINE_ENDS * float(np.median(middle))


def _matching(calls: pl.DataFrame, partners: dict[int, list[int]]) -> dict[int, int] | None:
    """{row: peer}: each send paired with a receive of a rank in its sender's ``partners``, one
    that ended after the send was posted, the pairs together ending closest (``_paired_by_ends``,
    ``_hub_peers``); None where no pairing takes every call."""
    ends = calls.select("_row", "rank", "name", start=pl.col("ts_ns"), end=pl.col("ts_ns") + pl.col("dur_ns")).sort("end")
    sends = ends.filter(pl.col("name") == "send")
    recvs = ends.filter(pl.col("name") == "recv").with_row_index("_col")
    if len(sends) != len(recvs) or sends.is_empty():
        return None
    theirs = {rank: (r["end"].to_list(), r["_col"].to_list()) for (rank,), r in recvs.group_by("rank", maintain_order=True)}
    rows, cols, cost = [], [], []
    for i, (rank, start, end) in enumerate(sends.select("rank", "start", "end").iter_rows()):
        for q in partners.get(rank, ()):
            their_ends, their_cols = theirs.get(q, ([], []))
            k = bisect.bisect_left(their_ends, end)
            for j in range(max(k - _NEAREST, 0), min(k + _NEAREST, len(their_ends))):
                # a receive done before the send was posted is not its message's: an isend's
                # span ends where its caller waits, which can be later than the neighbour's
                # next receive (a hand-written zero-bubble PP4 and a scan's carries: 37-39% of
                # their messages so paired, by ends alone)
                if their_ends[j] < start:
                    continue
                rows.append(i)
                cols.append(their_cols[j])
                cost.append(abs(their_ends[j] - end) + 1.0)   # (a zero would be no edge)
    graph = sparse.csr_matrix((cost, (rows, cols)), shape=(len(sends), len(recvs)))
    send_to = _cheapest_full_matching(graph)
    if send_to is None:                 # no pairing takes every call
        return None
    send_rows, send_ranks = sends["_row"].to_list(), sends["rank"].to_list()
    recv_rows, recv_ranks = recvs["_row"].to_list(), recvs["rank"].to_list()
    found: dict[int, int] = {}
    for i, j in enumerate(send_to):
        found[send_rows[i]], found[recv_rows[j]] = recv_ranks[j], send_ranks[i]
    return found


DENSE = 2048
"""The most sends ``_cheapest_full_matching`` pairs as a dense assignment (32 MB of costs);
more, as a linear program."""


def _cheapest_full_matching(graph: sparse.csr_matrix) -> np.ndarray | None:
    """For each row of ``graph`` (sends x receives, a stored entry an allowed pair, its value the
    pair's cost), its column in the full matching of least total cost; None where no matching
    takes every row and column.

    Not scipy's ``min_weight_full_bipartite_matching``: its feasibility check (Hopcroft-Karp)
    takes time exponential in the depth of a layered graph (scipy issue 26147), and a ring's
    calls paired as a line make one. Hand-written ring attention on 4 gloo ranks, 480 sends
    and 21,488 allowed pairs: no answer after 60 s (ingest hung), where the dense assignment
    below takes 3 ms and the linear program 0.1 s."""
    n, m = graph.shape
    if n != m or n == 0:
        return None
    coo = graph.tocoo()
    if n <= DENSE:
        cost = np.full((n, m), np.inf)
        cost[coo.row, coo.col] = coo.data
        try:
            rows, cols = linear_sum_assignment(cost)
        except ValueError:              # "cost matrix is infeasible"
            return None
        return cols[np.argsort(rows)]
    # the assignment polytope's vertices are whole matchings, and the dual simplex ends on one
    edge = np.arange(coo.nnz)
    ones = np.ones(coo.nnz)
    taken = sparse.vstack([sparse.csr_matrix((ones, (coo.row, edge)), shape=(n, coo.nnz)),
                           sparse.csr_matrix((ones, (coo.col, edge)), shape=(m, coo.nnz))])
    solved = linprog(coo.data, A_eq=taken, b_eq=np.ones(n + m), bounds=(0, 1), method="highs-ds")
    if solved.status != 0:
        return None
    chosen = solved.x > 0.5
    send_to = np.full(n, -1)
    send_to[coo.row[chosen]] = coo.col[chosen]
    if int(chosen.sum()) != n or (send_to < 0).any():
        return None
    return send_to


def _disagreements(resolved: pl.DataFrame, traced: set[int]) -> list[str]:
    """Pairs of traced ranks where one side's calls name the other and the other's do not answer."""
    edges = {(name, r, p) for r, name, _, p in resolved.rows()}
    notes = []
    for name, r, p in sorted(edges):
        if p in traced and (_OTHER[name], p, r) not in edges:
            notes.append(f"rank {r}'s gloo {name} calls go to rank {p}, but rank {p} has no {_OTHER[name]} "
                         f"calls resolved to rank {r}: the two sides disagree")
    return notes


_TOGETHER = 0.1
_CLOSER = 2.0
"""How much more tightly a group's members must end their calls together than any other
group's for ``_closest`` to choose it."""


def _closest(groups: list[tuple[int, ...]], ends: list[list]) -> list[tuple[int, ...]]:
    """Of several groups whose members made as many calls, the one whose members end them
    together far more tightly than any other's ([] when none stands out so).

    Tightness: the scatter of the members' end times around a constant offset from the first
    member's (the median absolute deviation of the differences; the offset absorbs the hosts'
    clocks, and a trace lasts seconds, over which they do not drift). The members of the group a
    call ran on leave it together, up to their processes' scheduling; the members of another
    group end their own calls whenever their work does. Intervals between calls (``together``)
    are too short for that scheduling where processes share cores: 4 gloo ranks on 2 cores,
    TP2 x DP2, the TP group's calls end within 0.3-2.6 ms of each other around their offset,
    the DP group's 6-26 ms, but the intervals of both differ by over 10% (13.8 ms apart)."""
    spread = []
    for g, member_ends in zip(groups, ends):
        first = np.asarray(member_ends[0], dtype=np.float64)
        worst = 0.0
        for other in member_ends[1:]:
            d = np.asarray(other, dtype=np.float64) - first
            worst = max(worst, float(np.median(np.abs(d - np.median(d)))))
        spread.append(worst)
    if not groups or len(ends[0][0]) < 3:
        return []
    order = np.argsort(spread)
    best = spread[order[0]]
    # and tightly against the time between its calls, also where no other group fits
    gap = float(np.median(np.diff(np.asarray(ends[order[0]][0], dtype=np.float64))))
    if not best * _CLOSER <= gap or (len(groups) > 1 and not best * _CLOSER <= spread[order[1]]):
        return []
    return [groups[order[0]]]


_UNGROUPED = (pl.col("cat") == "collective") & pl.col("group").is_null() & pl.col("group_ranks").is_null()


def _collective_groups(events: pl.DataFrame, groups: dict[int, list[tuple[int, ...]]],
                       warn: Callable[[str], None]) -> pl.DataFrame:
    calls = (events.filter(_UNGROUPED).sort("ts_ns").group_by("rank", "name", "bytes", maintain_order=True)
             .agg(ends=pl.col("ts_ns") + pl.col("dur_ns")))
    ends = {(r, name, size): e for r, name, size, e in calls.rows()}
    if not ends:
        return events
    counts = {k: len(e) for k, e in ends.items()}
    members = {r: {tuple(sorted(g)) for g in gs} for r, gs in groups.items()}

    def fits(rank: int, name: str, size) -> list[tuple[int, ...]]:
        n = counts[rank, name, size]
        return [g for g in sorted(members.get(rank, ())) if all(
            m in members and g in members[m] and counts.get((m, name, size)) == n for m in g)]

    def together(g: tuple[int, ...], name: str, size) -> bool:
        # members leave a collective together: the time from each call's end to the next one's
        # is the same on every member's own clock (no clock alignment needed)
        steps = [np.diff(np.asarray(ends[m, name, size], dtype=np.float64)) for m in g]
        if len(g) < 2 or not len(steps[0]):
            return False
        ref = steps[0]
        return all(float(np.median(np.abs(ref - d) / np.maximum(np.maximum(ref, d), 1e3))) < _TOGETHER
                   for d in steps[1:])

    found = {}
    for key in counts:
        gs = fits(*key)
        if len(gs) > 1:
            # several groups have members that made as many such calls (a size-1 group always
            # does): keep the multi-member ones whose members' calls end together
            several = [g for g in gs if len(g) > 1]
            gs = [g for g in several if together(g, key[1], key[2])]
            # (calls of unknown size may be of several groups' calls at once: a profiler that
            # records no shapes gives every gloo all-reduce of a step one key)
            if len(gs) != 1 and key[2] is not None:
                gs = _closest(several, [[ends[m, key[1], key[2]] for m in g] for g in several])
        found[key] = gs
    chosen = {}
    for (rank, name, size), gs in found.items():
        # one group fits, it has other members, and every member of it finds that group alone
        if len(gs) == 1 and len(gs[0]) > 1 and all(found.get((m, name, size)) == gs for m in gs[0]):
            chosen[rank, name, size] = list(gs[0])
    n_calls = sum(counts.values())
    n_done = sum(counts[k] for k in chosen)
    left = sorted((k for k in counts if k not in chosen), key=lambda k: (-counts[k], k))
    note = (f"gloo collectives name no process group: {n_done:,} of {n_calls:,} calls placed in the one group "
            "whose members all made as many calls of that op and size, ending together")
    if left:
        r, name, size = left[0]
        n_fit = len(found[left[0]])
        why = ("no group of several ranks fits" if n_fit == 0 or (n_fit == 1 and len(found[left[0]][0]) == 1)
               else f"{n_fit} groups fit")
        note += (f"; {n_calls - n_done:,} left without a group (first: {counts[left[0]]} {name} of {size} bytes "
                 f"on rank {r}: {why})")
    if not chosen:
        return events  # nothing inferred: matching's unknown_group finding says the rest
    warn(note)
    table = pl.DataFrame([(r, name, size, g) for (r, name, size), g in chosen.items()], orient="row",
                         schema={"rank": pl.Int32(), "name": pl.String(), "bytes": pl.Int64(),
                                 "_members": pl.List(pl.Int32())})
    return (
        events.join(table, on=["rank", "name", "bytes"], how="left", nulls_equal=True, maintain_order="left")
        .with_columns(group_ranks=pl.when(_UNGROUPED).then(pl.col("_members")).otherwise(pl.col("group_ranks")))
        .drop("_members")
    )
