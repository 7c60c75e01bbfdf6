"""Communication across ranks: collective instances, p2p pairs, mismatch findings, the graph.

``match_bundle(bundle) -> Matching`` matches every collective call (by group + ``seq``, or by
call order where the format has none) and every send/receive (by peer + ``seq``, or order);
``build_graph(matching)`` turns the result into a networkx graph for graph queries.
"""

from mapp.analysis.graph.build import build_graph
from mapp.analysis.graph.diagnose import Finding
from mapp.analysis.graph.matching import Matching, match_bundle, match_calls, match_events, unmatched

__all__ = ["Finding", "Matching", "build_graph", "match_bundle", "match_calls", "match_events", "unmatched"]
