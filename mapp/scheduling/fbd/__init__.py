"""MegaFBD (issue 18): forward and backward passes on separate workers, with a coordinator
that orders their transfers.

Per pipeline stage a *forward worker* runs the forward passes under ``no_grad`` (activations
freed as it goes) and a *backward worker* recomputes them with autograd from the saved stage
inputs, runs the backward passes and the optimizer step, then sends the new weights to its
forward partner, which may run at a smaller tensor-parallel degree or on another device.

- :mod:`.coordinator`: the bit-table coordinator (pure Python; one all-reduce per round);
- :mod:`.allreduce`: its all-reduce over torch.distributed, or between threads;
- :mod:`.layout`: ranks, roles, partners and the transfers between workers (pure);
- :mod:`.world`, :mod:`.transfers`, :mod:`.params`, :mod:`.model`: the torch side;
- :mod:`.forward`, :mod:`.backward`: the two workers; :mod:`.train`: ``train_gpt.py --fbd``;
- :mod:`.memory`: peak activation memory of a stretch of code (benchmarks).

Importing this package does not import torch.
"""

from mapp.scheduling.fbd.allreduce import ThreadWorld, TorchMaxAllReduce
from mapp.scheduling.fbd.coordinator import Coordinator, DeadlockError, Request, Round
from mapp.scheduling.fbd.layout import BACKWARD, CHANNEL_KINDS, FORWARD, Channel, FbdLayout, Worker

__all__ = [
    "Coordinator", "Request", "Round", "DeadlockError", "ThreadWorld", "TorchMaxAllReduce",
    "FbdLayout", "Channel", "Worker", "FORWARD", "BACKWARD", "CHANNEL_KINDS",
]
