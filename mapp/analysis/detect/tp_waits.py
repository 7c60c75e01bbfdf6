"""A TP peer that waits inside its own spans is the victim of the slow GPU beside it.

The original MegatronApp tracer adds TP barriers inside the spans it times (in ``MLP.forward``
and before each steady-state forward; ``ingest.megatronapp``): a rank that waits there for a
slower TP peer spends the wait inside its own ``forward``/``backward`` spans, where no
collective record stands for it, so stage 1 finds it slower too (simulated TP2 x PP2 x DP2 in
that format, a 1.5x GPU on rank 5: its TP peer, rank 4, 1.44x its stage peers at z 36 and named
second; in mapp's own format, whose waits are collectives nested in the spans and taken out of
them, rank 4 is a victim). Stage 2 tells the two apart: the culprit arrives last at nearly every
TP collective of theirs, the victim at nearly none.

Only for such a tracer: where every wait is recorded, two slow GPUs of one TP group are two
suspects, the slower one last at their collectives (``test_verdicts``).
"""

from __future__ import annotations

from mapp.analysis.detect.findings import Suspect
from mapp.analysis.detect.lateness import LatenessEvidence
from mapp.analysis.detect.thresholds import CONSISTENT

__all__ = ["tp_victims"]


def tp_victims(suspects: list[Suspect], lateness: LatenessEvidence,
               overruled: list[str]) -> tuple[list[Suspect], list[int]]:
    """``suspects`` without the slow-compute ones that a slow-compute TP peer kept waiting at
    nearly all of their TP collectives (last at ``1 - CONSISTENT`` of them or fewer, the peer at
    ``CONSISTENT`` or more), and those ranks: victims; a line for each in ``overruled``."""
    if not lateness.ran or lateness.ranks.is_empty() or "share_last_tp" not in lateness.ranks.columns:
        return suspects, []
    share = {r: s for r, s in zip(lateness.ranks["rank"].to_list(), lateness.ranks["share_last_tp"].to_list())
             if s is not None}
    compute = [s for s in suspects if s.kind == "slow_compute" and s.coords and s.rank in share]
    waiters = {s.rank for s in compute if share[s.rank] <= 1 - CONSISTENT}
    kept, victims = [], []
    for s in suspects:
        culprit = None if s.rank not in waiters or s.kind != "slow_compute" else next(
            (t for t in compute if t.rank != s.rank and _same_tp_group(s, t) and share[t.rank] >= CONSISTENT), None)
        if culprit is None:
            kept.append(s)
            continue
        overruled.append(
            f"rank {s.rank} computes {s.slowdown:.2f}x its peers: not a suspect (its TP peer {culprit.rank}, "
            f"slow compute, is last at {share[culprit.rank]:.0%} of their TP collectives and it at "
            f"{share[s.rank]:.0%}: the tracer's spans hold its waits for that peer)")
        victims.append(s.rank)
    return kept, victims


def _same_tp_group(a: Suspect, b: Suspect) -> bool:
    return all(a.coords.get(axis) == b.coords.get(axis) for axis in ("pp", "dp")) and a.coords.get("tp") != b.coords.get("tp")
