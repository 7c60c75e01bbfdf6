"""Asynchronous point-to-point transport for the pipeline schedules (issue 17; nothing here yet).

A pybind11 extension that moves activations and gradients between pipeline stages without
blocking the compute stream, for ``mapp.scheduling``. The lowest runtime layer: it imports
nothing of mapp but the errors.
"""
