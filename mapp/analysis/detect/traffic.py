"""Stage 3's links that carry more than their like links: transfers counted, not timed.

Where a link's messages are posted asynchronously (gloo's sends, a GPU rank's batched p2p under the
profiler) no transfer of it has a time, but a trace that records each message still says what it
moved: more messages than its like links, messages of sizes no like link carries, or as many of
them, larger. ``added_traffic`` finds such links for ``bandwidth.link_bandwidth``, whose findings
they join.
"""

from __future__ import annotations

import polars as pl

from mapp.analysis.detect.findings import LinkFinding
from mapp.analysis.detect.thresholds import CONSISTENT

__all__ = ["COUNTED", "HEAVIER_LIKES", "MORE_MESSAGES", "added_traffic"]

COUNTED = ("bytes moved", "messages moved")
"""An observation's ``compared`` where its link's transfers were counted, not timed
(``added_traffic``: by their bytes, or by their messages where no size was recorded)."""


MORE_MESSAGES = 1.5
"""The fewest times its like links' messages a link must carry, a step, for ``_added_messages`` to
count the surplus as work they do not move: a program that deals its work out in grades sends
more on some links by design (a user's distributed Cholesky, panels passed round a ring one way,
80, 80, 72 and 64 messages on its four links, no fault: "slow link 0-1" at 1.11x); a tensor moved
beside every exchange doubles a link's (2x)."""


def added_traffic(matching, link_threshold: float = 0.0) -> list[LinkFinding]:
    """p2p links that carry more than their like links: transfers counted, not timed.

    Links are *like* when they carry transfers of a size in common, as many per iteration (the
    pipeline links of the DP replicas of PP2 x DP2). A link that in nearly every iteration
    (``CONSISTENT``) also makes transfers of sizes no other link carries, more transfers than its
    like links in all, moves work they do not: heavier traffic, visible where a trace records
    every transfer's size (megatron-core PP2 x DP2 under the profiler, every pipeline exchange of
    one link also moving a 4 MB tensor on a group of its own: 32x its like link's bytes). Links
    that carry other sizes as often as their like links do (replicas of other sequence lengths)
    are not counted. Its cost per iteration is the fastest of those transfers' times (a blocking
    side's time spans the wait for the other end too) times their number, unknown (0, the
    observation's ``timed`` false) where every one was posted asynchronously; its ``slowdown`` is
    its bytes per iteration over its like links' median. Where no transfer's size was recorded,
    messages are counted instead (``_added_messages``). A link that carries as many messages as
    its like links, larger, by ``link_threshold`` or more, is ``_heavier_messages``'."""
    p = matching.p2p.filter(pl.col("bytes_match") & (pl.col("src") != pl.col("dst")) & pl.col("iteration").is_not_null())
    if p.is_empty():
        return []
    p = p.select(
        "bytes", "iteration", "src", "dst",
        lo=pl.min_horizontal("src", "dst"), hi=pl.max_horizontal("src", "dst"),
        time_ns=pl.min_horizontal(
            pl.when(~pl.col("send_async")).then(pl.col("send_end_ns") - pl.col("send_start_ns")),
            pl.when(~pl.col("recv_async")).then(pl.col("recv_end_ns") - pl.col("recv_start_ns"))),
    ).with_columns(link=pl.format("{}-{}", "lo", "hi"))
    iterations = p["iteration"].n_unique()
    if p["bytes"].null_count() == len(p):
        return _added_messages(p, iterations)
    # a link's two directions compared together, then each direction on its own: a gossip ring's
    # neighbours exchange both ways, and padding one direction leaves the other like its likes'
    heavier = _heavier_messages(p, iterations, link_threshold)
    named_both = {f.ranks for f in heavier}
    heavier += [f for f in _heavier_messages(p.with_columns(link=pl.format("{}-{}", "src", "dst")), iterations,
                                             link_threshold) if f.ranks not in named_both]
    counts = p.group_by("link", "bytes", "iteration").agg(n=pl.len())
    links_of = counts.group_by("bytes").agg(links=pl.col("link").unique())
    own = links_of.filter(pl.col("links").list.len() == 1)["bytes"].to_list()
    owners = set(p.filter(pl.col("bytes").is_in(own))["link"].unique().to_list())
    if not owners:
        return heavier
    per_link = p.group_by("link", "iteration").agg(n=pl.len(), b=pl.col("bytes").sum())
    findings: list[LinkFinding] = []
    seen: set[str] = set()
    # like links: those that carry as many transfers of a size as each other in every iteration.
    # (Not every link of that size need be: interleaved 1F1B hands each microbatch over the last
    # stage's link back to the first once per model chunk but over every other link twice.)
    signatures = (counts.filter(pl.col("bytes").is_in(links_of.filter(pl.col("links").list.len() >= 2)["bytes"].implode()))
                  .sort("iteration").group_by("bytes", "link")
                  .agg(its=pl.len(), sig=pl.col("n").cast(pl.String).str.join(","))
                  .filter(pl.col("its") == iterations)
                  .group_by("bytes", "sig").agg(links=pl.col("link").sort())
                  .filter(pl.col("links").list.len() >= 2).sort("bytes", "sig"))
    for _, _, links in signatures.iter_rows():
        for link in sorted((set(links) & owners) - seen):
            mine = p.filter((pl.col("link") == link) & pl.col("bytes").is_in(own))
            like = per_link.filter(pl.col("link").is_in([o for o in links if o != link])).group_by("iteration").agg(
                n_like=pl.col("n").median(), b_like=pl.col("b").median())
            both = per_link.filter(pl.col("link") == link).join(like, on="iteration")
            more = both.filter(pl.col("n") > pl.col("n_like"))
            if not len(both) or len(more) < CONSISTENT * iterations:
                continue
            seen.add(link)
            fastest = mine.group_by("bytes").agg(t=pl.col("time_ns").min(), n=pl.len())
            excess = float((fastest["t"].fill_null(0) * fastest["n"]).sum()) / iterations
            # (every transfer posted asynchronously, as a GPU rank's batched p2p under the
            # profiler: its cost is unknown, not nothing)
            timed = fastest["t"].null_count() < len(fastest)
            ratio = float(both["b"].median()) / max(float(both["b_like"].median()), 1.0)
            ranks = [int(r) for r in link.split("-")]
            findings.append(LinkFinding(
                kind="slow_link", ranks=tuple(ranks), slowdown=ratio, z=0.0, excess_ns=excess,
                observations=[{"ranks": ranks, "what": "p2p", "ratio": round(ratio, 3),
                               "iterations": sorted(int(i) for i in more["iteration"].to_list()),
                               "compared": "bytes moved", "timed": timed}],
            ))
    named = {f.ranks for f in findings}
    return findings + [f for f in heavier if f.ranks not in named]


HEAVIER_LIKES = 3
"""The fewest links of one program whose messages ``_heavier_messages`` compares: the heavier one
and two or more that agree with each other (of two, either may be the odd one)."""


def _heavier_messages(p: pl.DataFrame, iterations: int, link_threshold: float) -> list[LinkFinding]:
    """``added_traffic`` for a link that carries as many messages as its like links but larger
    ones: the same messages made heavier, its sizes carried by no other link. ``p``'s ``link``
    names a link's two directions together or, as ``src-dst``, one direction alone.

    Like links here carry as many messages as each other in every iteration, each link its own
    fixed sizes (the same in every iteration: a program's buffers, not tokens drawn per step);
    ``HEAVIER_LIKES`` or more of them, all but one moving the same bytes. The one that moves more,
    by ``link_threshold`` or more and by sizes no like link carries, in every iteration, moves work
    they do not (a user's own ring all-reduce over 4 gloo processes, recorded with shapes: every message
    from rank 2 to rank 3 carrying 5x the bytes of a gradient chunk, 18.8 MB to the other links'
    3.8 MB, 72 messages on each; "slow compute 3" before, for the padding it built). Links whose
    sizes change from step to step (replicas of other sequence lengths) are not compared, nor a
    link one of whose ends exchanges nothing on a like link (a pipeline's end). By direction: a
    user's decentralized SGD on a ring of 4 gloo processes, recorded with shapes, each rank
    averaging its 8.6 MB of parameters with both neighbours every step, rank 1's messages to rank 2
    padded to 8x (69 MB): link 1-2 carries 8.6 MB one way and 69 MB the other, so together it
    shares a size with its likes ("no suspect" before). Sizes alone cannot
    tell a boundary of a model whose width changes there by design, inside a pipeline of uniform
    links otherwise."""
    per = p.group_by("link", "iteration").agg(n=pl.len(), b=pl.col("bytes").sum(),
                                              sizes=pl.col("bytes").unique().sort())
    steady = per.group_by("link").agg(its=pl.len(), kinds=pl.col("sizes").n_unique(), n=pl.col("n").n_unique(),
                                      b=pl.col("b").median())
    steady = steady.filter((pl.col("its") == iterations) & (pl.col("kinds") == 1) & (pl.col("n") == 1))
    findings: list[LinkFinding] = []
    counts = per.filter(pl.col("link").is_in(steady["link"].implode())).group_by("link").agg(n=pl.col("n").first())
    for (n,), group in counts.group_by("n"):
        links = group["link"].to_list()
        if len(links) < HEAVIER_LIKES:
            continue
        moved = steady.filter(pl.col("link").is_in(links))
        typical = float(moved["b"].median())
        odd = moved.filter(pl.col("b") != typical)
        heavier = float(odd["b"][0]) / max(typical, 1.0) if len(odd) == 1 else 0.0
        if heavier <= 1 or heavier < 1 + link_threshold:
            continue
        link = odd["link"][0]
        # both its ends also exchange the typical messages on like links (a ring's neighbours):
        # a pipeline's first link may carry another width than the links after it by design
        alike = [x for x in links if x != link]
        if not all(any(r in x.split("-") for x in alike) for r in link.split("-")):
            continue
        own = set(p.filter(pl.col("link") == link)["bytes"].unique().to_list())
        others = set(p.filter(pl.col("link").is_in(alike))["bytes"].unique().to_list())
        if own & others:
            continue
        mine = p.filter(pl.col("link") == link)
        fastest = mine.group_by("bytes").agg(t=pl.col("time_ns").min(), n=pl.len())
        like = p.filter(pl.col("link").is_in(alike)).group_by("link").agg(
            t=pl.col("time_ns").min())
        # its cost: its transfers at their fastest beyond its like links' fastest, each message
        mine_t, like_t = fastest["t"].min(), like["t"].median()
        timed = mine_t is not None and like_t is not None
        excess = max(float(mine_t) - float(like_t), 0.0) * float(n) if timed else 0.0
        ratio = heavier
        ranks = sorted(int(r) for r in link.split("-"))
        findings.append(LinkFinding(
            kind="slow_link", ranks=tuple(ranks), slowdown=ratio, z=0.0, excess_ns=excess,
            observations=[{"ranks": ranks, "what": "p2p", "ratio": round(ratio, 3),
                           "iterations": sorted(int(i) for i in per.filter(pl.col("link") == link)["iteration"].to_list()),
                           "compared": "bytes moved", "timed": timed, "larger": True}],
        ))
    return findings


def _added_messages(p: pl.DataFrame, iterations: int) -> list[LinkFinding]:
    """``added_traffic`` where no transfer's size was recorded (gloo under the profiler's
    defaults, record_shapes=False): p2p links that carry more messages than their like links.

    Links are *like* here when each carries messages in every iteration (the pipeline links of
    the DP replicas of PP2 x DP2: as many exchanges a microbatch on each). A link that in nearly
    every iteration (``CONSISTENT``) carries more messages than the median of the others, and
    ``MORE_MESSAGES`` times theirs or more in the median step, moves
    work they do not: megatron-core PP2 x DP2 on 4 gloo processes, every exchange of link 1-3
    also moving a 4 MB tensor on a group of its own: 16 messages each way a step to link 0-2's 8,
    every step (the same job with shapes recorded is 32x by its bytes). Its ``slowdown`` is its
    messages over its like links' median. Its cost is unknown (0, ``timed`` false): no size says
    which of its messages are the surplus, and its fastest message times the surplus understates
    it (0.4 ms a step in the second run of that job, whose surplus messages each moved 4 MB)."""
    per_link = p.group_by("link", "iteration").agg(n=pl.len())
    every = per_link.group_by("link").agg(its=pl.len()).filter(pl.col("its") == iterations)["link"].to_list()
    if len(every) < 2:
        return []
    per_link = per_link.filter(pl.col("link").is_in(every))
    findings = []
    for link in sorted(every):
        like = (per_link.filter(pl.col("link") != link).group_by("iteration").agg(n_like=pl.col("n").median()))
        both = per_link.filter(pl.col("link") == link).join(like, on="iteration")
        more = both.filter(pl.col("n") > pl.col("n_like"))
        if len(more) < CONSISTENT * iterations:
            continue
        ratio = float(both["n"].median()) / max(float(both["n_like"].median()), 1.0)
        if ratio < MORE_MESSAGES:
            continue
        ranks = [int(r) for r in link.split("-")]
        findings.append(LinkFinding(
            kind="slow_link", ranks=tuple(ranks), slowdown=ratio, z=0.0, excess_ns=0.0,
            observations=[{"ranks": ranks, "what": "p2p", "ratio": round(ratio, 3),
                           "iterations": sorted(int(i) for i in more["iteration"].to_list()),
                           "compared": "messages moved", "timed": False}],
        ))
    return findings
