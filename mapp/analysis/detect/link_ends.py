"""A slow link and the slow hosts beside it: which one is the other's doing.

Traffic on a link runs on its ends: a transfer that takes longer holds back the stream (or, on
CPU processes, the process) that waits for it, and its host launches late; so a slow host at an
end of a link slow by itself is the link's victim (``link_ends``). The other way round on CPU
processes sharing cores: a busy process slows the transfers of those beside it on its cores, so
a link that loses a fraction of what a slow host costs is that host's doing
(``links_beside_a_busy_host``). How much each costs the job (``excess_ns``) tells the two apart
(``LINK_EXPLAINS``). ``verdict.combine`` applies both.
"""

from __future__ import annotations

from mapp.analysis.detect.bandwidth import COUNTED, FLOOR_RATIO
from mapp.analysis.detect.findings import Overruled, Suspect
from mapp.analysis.detect.late_exits import LEFT_LAST
from mapp.analysis.detect.p2p_windows import WINDOWED

__all__ = ["LINK_EXPLAINS", "own_slowness", "link_ends", "links_beside_a_busy_host", "tp_peers"]


def own_slowness(f) -> bool:
    """A link finding whose every observation is slow by itself, whatever its ends do: its
    fastest transfers raised above its like link's (``bandwidth._raised_floors``: waiting only
    adds, so a late end does not raise them), more bytes or messages moved than its like links
    (``traffic.added_traffic``), or a job's only link whose typical message, once both ends
    were there, took longer than the slowest fabric would (``bandwidth._only_link``: a late end
    delays when a message starts, not how long it takes then; PP2 on 2 CPUs, 4 MB more a
    message: 26.7 ms of transfers beyond it a step, beside 1.1 ms of launch gaps on one end)."""
    return all(o.get("compared") in (*COUNTED, WINDOWED, LEFT_LAST) or o.get("fastest_ratio") is not None or o.get("against") == "fabric"
               for o in f.observations)


LINK_EXPLAINS = 4.0
"""A slow link explains a slow host at its end (or an end's TP peer) only where the host's
excess time is at most this many times the link's: waiting on a link costs an end about what
the link loses (real link faults, GPUs and CPUs: the host's excess 0.5-2.2x the link's)."""


def link_ends(suspects: list[Suspect], overruled: list[Overruled], coords: dict | None = None) -> list[Suspect]:
    """A host at an end of a link whose own transfers are slow is that link's victim.

    Traffic a link carries runs on its ends' GPUs: a stream that waits for the transfer holds
    back the rank's next kernels, and its host launches them late. On 4 H200s, TP2 x PP2, 512 MB
    more in every pipeline exchange of link 0-2: its fastest transfers 11-18x its like link's in
    every iteration, and rank 2 (an end) launched late and kept its TP peer waiting: "slow host
    2" at 1.15x, ranked first by those waits, the link set aside as its late launches. A link
    slower by itself (``own_slowness``) than ``bandwidth.FLOOR_RATIO`` x its like link explains
    a slow host at its end. Not a slow GPU there: a transfer does not lengthen kernels.

    An end's TP peers too (``coords`` given): their collectives wait for the end's held-back
    stream, and a host that synchronizes after its pipeline exchange (megatron-core's batched
    p2p) stalls with it. On 4 H200s, TP2 x PP2 under mapp's capture, 512 MB more in every
    exchange of link 1-3 (13.5x): rank 0, rank 1's TP peer, "slow host" 1.13x, ranked above the
    link by 33 ms of launch gaps while last in 43% of its collectives (chance 50%).

    Not a host whose stalls cost far more than the link's slowness could make it wait
    (``LINK_EXPLAINS``): that host holds its job up by itself, and on CPU processes sharing
    cores its busy process slows the transfers of those beside it, which is what raised the
    link (megatron-core TP2 x PP2 under mapp's capture, 4 processes on 2 CPUs, 26 ms of work
    before each of rank 1's microbatches: link 0-2 3.8x its like link's by its fastest
    transfers, +4 ms a step, rank 1 a host stalling 128 ms a step)."""
    links = [s for s in suspects if s.kind == "slow_link" and s.peer is not None
             and all((o.get("fastest_ratio") or 0.0) >= FLOOR_RATIO for o in s.evidence["bandwidth"]["observations"])]
    out = []
    for s in suspects:
        link = next((lk for lk in links if s.kind == "slow_host" and s.rank in (lk.rank, lk.peer)), None)
        peer_of = None
        if link is None and s.kind == "slow_host" and coords:
            link, peer_of = next(((lk, e) for lk in links for e in (lk.rank, lk.peer) if tp_peers(coords, s.rank, e)),
                                 (None, None))
        if link is None or s.excess_ns > LINK_EXPLAINS * link.excess_ns:
            out.append(s)
            continue
        ratio = min(o["fastest_ratio"] for o in link.evidence["bandwidth"]["observations"])
        link.evidence.setdefault("ends_waiting", []).append(
            {"rank": s.rank, "kind": s.kind, "slowdown": round(float(s.slowdown), 3)}
            | ({"tp_peer_of": peer_of} if peer_of is not None else {}))
        where = "an end" if peer_of is None else f"the TP peer of rank {peer_of}, an end,"
        overruled.append(Overruled(s.rank, f"rank {s.rank} (slow host {s.slowdown:.2f}x): {where} of slow link "
                                           f"{link.rank}<->{link.peer}, whose fastest transfers took {ratio:.1f}x its "
                                           "like link's"))
    return out


def links_beside_a_busy_host(suspects: list[Suspect], overruled: list[Overruled]) -> list[Suspect]:
    """On CPU processes sharing cores, a slow link beside a slow host whose excess is more than
    ``LINK_EXPLAINS`` x the link's is that host's doing, not a fault of its own: a busy process
    slows the transfers of the processes beside it on its cores, fastest ones included (the
    mirror of ``link_ends``). Megatron-core under mapp's capture, 4 processes on 2 of 16 CPUs,
    26-28 ms of matmuls before each microbatch of one rank: TP2 x PP2, link 0-2 3.8x its like
    link's, +4 ms a step, beside rank 1's 128 ms; PP2 x DP2, link 0-2 5.4x, +10 ms a step, beside
    rank 1's 134 ms (neither end the busy rank). A real link fault costs its ends' hosts at
    most about what it loses (``LINK_EXPLAINS``)."""
    hosts = [s for s in suspects if s.kind == "slow_host"]
    kept = []
    for s in suspects:
        host = next((h for h in hosts if s.kind == "slow_link" and h.excess_ns > LINK_EXPLAINS * s.excess_ns), None)
        if host is None:
            kept.append(s)
            continue
        link = f"{s.rank}<->{s.peer}" if s.peer is not None else "-".join(map(str, s.group or [s.rank]))
        overruled.append(Overruled(None, f"link {link} (slow link {s.slowdown:.2f}x, +{s.excess_ns / 1e6:.2f} ms/it): "
                                         f"not a suspect (on shared CPUs, beside rank {host.rank}'s slow host, "
                                         f"+{host.excess_ns / 1e6:.2f} ms/it: a busy process slows the transfers of "
                                         "those sharing its cores)"))
    return kept


def tp_peers(coords: dict, a: int, b: int) -> bool:
    """Two ranks of one tensor-parallel group: the same stage of the same replica."""
    ca, cb = coords.get(a), coords.get(b)
    return a != b and ca is not None and cb is not None and (ca["pp"], ca["dp"]) == (cb["pp"], cb["dp"])
