"""Clock alignment: per-rank offset and drift onto a reference rank's clock, from sync anchors.

``align_bundle(bundle, matching) -> ClockModel``; ``ClockModel.apply(frame)`` adds
``ts_aligned_ns`` (the mapping is defined once, in ``clock.clock_mapping``);
``ClockModel.write(DIR/.mapp/clock.json)`` exports the model, lossless (mapp never reads it back).
"""

from mapp.analysis.align.anchors import Anchors, anchors_from
from mapp.analysis.align.clock import CLOCK_FILE, ClockModel, RankClock
from mapp.analysis.align.solve import AlignOptions, align_bundle, solve

__all__ = ["AlignOptions", "Anchors", "CLOCK_FILE", "ClockModel", "RankClock", "align_bundle", "anchors_from", "solve"]
