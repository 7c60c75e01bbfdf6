"""Harnesses that measure mapp's analyses against known answers (``mapp bench``).

``suite``: simulated jobs with faults injected and negatives, scored per fault class and scale.
``real``: recorded jobs of a corpus whose injected faults (or their absence) a manifest states.
Harnesses drive the simulator and the detector; nothing in ``mapp.analysis`` imports them.
"""
