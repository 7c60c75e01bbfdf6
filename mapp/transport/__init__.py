"""Asynchronous tagged point-to-point transport for the pipeline schedules (issue 17).

``make_transport(group)`` gives a ``Transport``: ``isend(tensor, dst, tag)`` and
``irecv(src, tag)`` return ``Work`` handles with ``test()`` and ``wait()``. Messages describe
themselves (the receiver does not know dtype or shape in advance) and match by tag in any
order. Peers on this host go through POSIX shared memory (a pybind11 extension; GPU tensors
by CUDA IPC), the others through torch.distributed. The lowest runtime layer: it imports
nothing of mapp but the errors. Importing this package is cheap: torch loads on first use.
"""

from mapp._lazy import lazy_exports

__all__ = ["make_transport", "Transport", "Work", "DistTransport", "ShmTransport", "HybridTransport"]

__getattr__, __dir__ = lazy_exports(__name__, {
    "make_transport": "make",
    "Transport": "interface",
    "Work": "interface",
    "DistTransport": "dist",
    "ShmTransport": "shm",
    "HybridTransport": "hybrid",
})
