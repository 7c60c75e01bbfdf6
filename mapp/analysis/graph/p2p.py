"""Point-to-point pairs: which send on one rank is which receive on its peer.

A p2p call is a send when its name contains ``send``, a receive when it contains ``recv``, and
both when it contains ``exchange`` (MegatronApp's batched send+receive) or both words. A send on
rank ``a`` to peer ``b`` is matched to a receive on ``b`` from peer ``a`` by the per-direction
``seq`` when both carry one; otherwise by order: the n-th send ``a -> b`` is the n-th receive
(within a channel: MegatronApp's ``expect`` arg names the peer call, so ``send-warmup`` pairs
only with ``recv-warmup``). The two sides must agree on the size.

Each side keeps whether its span is only the call's post (``async``: its end is not the
message's delivery): ``send_async`` and ``recv_async`` say what the pair's times can be trusted
for (``mapp.analysis.align.anchors``, ``mapp.analysis.detect.bandwidth``).
"""

from __future__ import annotations

import polars as pl

from mapp.analysis.graph.diagnose import Finding
from mapp.analysis.graph.schema import P2P

__all__ = ["match_p2p"]

_KEY = ["src", "dst", "by_order", "channel", "seq_eff"]
_SIDE = ["name", "lane", "start_ns", "end_ns", "bytes", "iteration", "seq", "async"]


def _sides(calls: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    lname = pl.col("name").str.to_lowercase()
    calls = calls.with_columns(
        is_send=lname.str.contains("send") | lname.str.contains("exchange"),
        is_recv=lname.str.contains("recv") | lname.str.contains("exchange"),
        by_order=pl.col("seq").is_null(),
        start_ns=pl.col("ts_ns"),
        end_ns=pl.col("ts_ns") + pl.col("dur_ns"),
        # callers that build calls by hand may leave it out: a call is blocking unless marked
        **{"async": pl.col("async").fill_null(False) if "async" in calls.columns else pl.lit(False)},
    )
    lost = calls.filter(pl.col("peer").is_null() | ~(pl.col("is_send") | pl.col("is_recv")))
    calls = calls.filter(pl.col("peer").is_not_null() & (pl.col("is_send") | pl.col("is_recv")))
    ordered = calls.filter(pl.col("by_order"))
    use_channel = len(ordered) > 0 and ordered.filter(pl.col("is_recv"))["expect"].null_count() == 0
    send_channel = pl.col("name") if use_channel else pl.lit("")
    recv_channel = pl.col("expect") if use_channel else pl.lit("")
    channel = pl.when(pl.col("by_order")).then
    sends = calls.filter(pl.col("is_send")).select(
        pl.col("rank").alias("src"), pl.col("peer").alias("dst"), "by_order",
        channel(send_channel).otherwise(pl.lit("")).alias("channel"), *_SIDE,
    )
    recvs = calls.filter(pl.col("is_recv")).select(
        pl.col("peer").alias("src"), pl.col("rank").alias("dst"), "by_order",
        channel(recv_channel).otherwise(pl.lit("")).alias("channel"), *_SIDE,
    )
    return sends, recvs, lost


def _numbered(side: pl.DataFrame) -> pl.DataFrame:
    if not side["by_order"].any():
        return side.with_columns(seq_eff=pl.col("seq"))
    side = side.sort(["src", "dst", "start_ns"]).with_columns(
        _ordinal=pl.int_range(pl.len(), dtype=pl.Int64).over(["src", "dst", "by_order", "channel"])
    )
    return side.with_columns(
        seq_eff=pl.when(pl.col("by_order")).then(pl.col("_ordinal")).otherwise(pl.col("seq"))
    ).drop("_ordinal")


def match_p2p(calls: pl.DataFrame, traced_ranks: set[int]) -> tuple[pl.DataFrame, list[Finding]]:
    """Pair sends with receives. ``calls`` has the columns of ``_load.P2P_COLUMNS``.

    Returns ``(pairs, findings)``, ``pairs`` with the raw columns of ``schema.P2P``.
    """
    if calls.is_empty():
        return P2P.empty(), []
    sends, recvs, lost = _sides(calls)
    sends, recvs = _numbered(sends), _numbered(recvs)
    findings: list[Finding] = []
    if len(lost):
        first = lost.row(0, named=True)
        findings.append(Finding(
            kind="no_peer", severity="warning",
            message=f"{len(lost):,} p2p calls name no peer or no direction (first: {first['name']} on "
                    f"rank {first['rank']}); left unmatched",
            ranks=tuple(sorted(set(lost["rank"].to_list()))), op=first["name"], count=len(lost),
        ))
    sends, dup_s = _dedupe(sends)
    recvs, dup_r = _dedupe(recvs)
    for side, dup in (("send", dup_s), ("recv", dup_r)):
        if len(dup):
            first = dup.row(0, named=True)
            rank = first["src"] if side == "send" else first["dst"]
            findings.append(Finding(
                kind="duplicate_call", severity="warning",
                message=f"rank {rank} logged {first['name']} seq {first['seq_eff']} "
                        f"{first['src']}->{first['dst']} more than once ({len(dup)} duplicates); kept the first",
                ranks=(rank,), op=first["name"], seq=first["seq_eff"], iteration=first["iteration"], count=len(dup),
            ))
    joined = sends.join(recvs, on=_KEY, how="full", coalesce=True, suffix="_recv")
    matched = joined.filter(pl.col("start_ns").is_not_null() & pl.col("start_ns_recv").is_not_null())
    pairs = (
        matched.sort(["src", "dst", "channel", "seq_eff", "start_ns"])
        .with_row_index("pair_id")
        .select(
            pl.col("pair_id").cast(pl.Int64), pl.col("src").cast(pl.Int32), pl.col("dst").cast(pl.Int32),
            pl.coalesce("bytes", "bytes_recv").alias("bytes"), pl.col("seq_eff").alias("seq"), "by_order",
            pl.coalesce("iteration", "iteration_recv").alias("iteration"),
            pl.col("name").alias("send_name"), pl.col("name_recv").alias("recv_name"),
            pl.col("lane").alias("send_lane"), pl.col("lane_recv").alias("recv_lane"),
            pl.col("start_ns").alias("send_start_ns"), pl.col("end_ns").alias("send_end_ns"),
            pl.col("start_ns_recv").alias("recv_start_ns"), pl.col("end_ns_recv").alias("recv_end_ns"),
            (pl.col("bytes").is_null() | pl.col("bytes_recv").is_null() | (pl.col("bytes") == pl.col("bytes_recv")))
            .alias("bytes_match"),
            pl.col("async").alias("send_async"), pl.col("async_recv").alias("recv_async"),
            pl.col("bytes_recv").alias("_recv_bytes"),
        )
    )
    findings += _size_findings(pairs)
    findings += _unmatched_findings(joined, traced_ranks)
    if (sends["by_order"].any() or recvs["by_order"].any()):
        n = int(sends["by_order"].sum() + recvs["by_order"].sum())
        findings.append(Finding(
            kind="order_matched", severity="info",
            message=f"{n:,} p2p calls carry no seq; paired them by per-peer call order"
                    " (exact while both sides log every call)",
            count=n,
        ))
    return pairs.drop("_recv_bytes"), findings


def _dedupe(side: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    dup = side.filter(pl.struct(_KEY).is_duplicated())
    if dup.is_empty():
        return side, dup
    return side.unique(subset=_KEY, keep="first", maintain_order=True), dup.filter(pl.struct(_KEY).is_duplicated())


def _size_findings(pairs: pl.DataFrame) -> list[Finding]:
    bad = pairs.filter(~pl.col("bytes_match"))
    if bad.is_empty():
        return []
    first = bad.row(0, named=True)
    more = f" (and {len(bad) - 1} more messages)" if len(bad) > 1 else ""
    iteration = f", iteration {first['iteration']}" if first["iteration"] is not None else ""
    return [Finding(
        kind="p2p_size_mismatch", severity="error",
        message=f"size mismatch: rank {first['src']} sent {first['bytes']} bytes to rank {first['dst']} "
                f"({first['send_name']} seq {first['seq']}{iteration}) but rank {first['dst']} "
                f"received {first['_recv_bytes']} bytes{more}",
        ranks=(first["src"], first["dst"]), op=first["send_name"], seq=first["seq"],
        iteration=first["iteration"], count=len(bad),
    )]


def _unmatched_findings(joined: pl.DataFrame, traced: set[int]) -> list[Finding]:
    findings: list[Finding] = []
    for role, present, absent in (("send", "start_ns", "start_ns_recv"), ("recv", "start_ns_recv", "start_ns")):
        suffix = "" if role == "send" else "_recv"
        rows = joined.filter(pl.col(present).is_not_null() & pl.col(absent).is_null())
        if rows.is_empty():
            continue
        per_edge = (
            rows.sort(["src", "dst", "seq_eff"])
            .group_by(["src", "dst"], maintain_order=True)
            .agg(pl.len().alias("count"), pl.col("seq_eff").first(), pl.col(f"name{suffix}").first().alias("op"),
                 pl.col(f"iteration{suffix}").first().alias("iteration"))
        )
        for row in per_edge.iter_rows(named=True):
            src, dst, n = row["src"], row["dst"], row["count"]
            other = dst if role == "send" else src
            untraced = other not in traced
            plural = "message" if n == 1 else "messages"
            iteration = f", iteration {row['iteration']}" if row["iteration"] is not None else ""
            where = f"first: {row['op']} seq {row['seq_eff']}{iteration}"
            if role == "send":
                text = f"rank {src} sent {n} {plural} to rank {dst} that rank {dst} never received ({where})"
            else:
                text = f"rank {dst} waited for {n} {plural} from rank {src} that rank {src} never sent ({where})"
            if untraced:
                text += f"; rank {other} has no trace file"
            findings.append(Finding(
                kind=f"unmatched_{role}", severity="info" if untraced else "error", message=text,
                ranks=(src, dst), op=row["op"], seq=row["seq_eff"], iteration=row["iteration"], count=n,
            ))
    return findings
