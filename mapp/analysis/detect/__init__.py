"""Straggler detection: which GPU, link or host made the job slow, and which ranks only waited.

``detect_bundle(bundle, threshold=0.1) -> Verdict`` runs three stages over a trace bundle:

1. peer comparison (``peers``): a rank's own compute against ranks doing the same work (pipeline
   stages of one rank each on the ops they call alike, with what a stage adds counted:
   ``stage_gemms``, ``no_grad_passes``, a forward replayed in the backward not among it:
   ``recompute``, and a stage of more layers told from a slower one: ``more_layers``);
2. collective lateness (``lateness``): who arrives last at TP/DP collectives on aligned clocks;
3. effective bandwidth (``bandwidth``): p2p links and collective transfers once all are ready;

and combines them (``verdict``; where the ranks are CPU processes sharing cores, also
``shared_cpus``, and ``whole_process`` where one of two ran slower at everything alike; where a
rank's spans are its host's pace, ``host_paced``; where its stalls name its host, ``stalls``;
where a slow link and a slow host stand side by side, ``link_ends``; where
a rank's ops are slower at random places, as a neighbour time-slicing its GPU makes them,
``time_slices``; where a CPU process sums slower than its peers at their quickest calls, as a
busy thread beside it makes it, ``busy_neighbour``; where the MegatronApp tracer's spans hold TP
waits, ``tp_waits``) into
ranked suspects, workload imbalance and victims (``findings``: the types it reports). The
cut-offs it applies are named in ``thresholds.Thresholds``; ``threshold`` sets them all.
``detector.stage_evidence`` gives the three stages' findings without the verdict.
Where the whole trace names no one, its last iterations are judged again on their own
(``onset``: a fault that set in midway, named from its onset on).
``mapp.report.DetectReport(verdict)`` renders it; ``mapp.bench.suite`` measures accuracy on simulated faults.

The names below are imported on first use (PEP 562): the CLI takes ``Thresholds`` for its
option defaults without loading polars.
"""

from mapp._lazy import lazy_exports
from mapp.analysis.detect.thresholds import DEFAULT_THRESHOLD, Thresholds  # light: no polars

__all__ = ["detect_bundle", "detect_windows", "parse_layout", "DEFAULT_THRESHOLD", "Thresholds", "Verdict", "Suspect", "Imbalance",
           "LayoutInfo"]

_HOMES = {"detect_bundle": "detector", "detect_windows": "windows", "parse_layout": "layout", "LayoutInfo": "layout",
          "Verdict": "findings", "Suspect": "findings", "Imbalance": "findings"}

__getattr__, __dir__ = lazy_exports(__name__, _HOMES)
