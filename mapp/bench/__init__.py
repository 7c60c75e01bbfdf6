"""Harnesses that measure mapp's analyses against known answers (``mapp bench``).

``real``: recorded jobs of a corpus whose injected faults (or their absence) a manifest states.
The simulated scenario suite lives beside the detector today (``mapp.analysis.detect.suite``).
"""
