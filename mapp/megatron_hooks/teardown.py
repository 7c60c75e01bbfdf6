"""The end of a megatron-core job under torchrun: leave the process groups, then exit without
interpreter finalization.

Why not just ``dist.destroy_process_group()`` and return: a gloo process group keeps its worker
threads until the last Python reference to it goes, and megatron-core holds references beyond
``destroy_model_parallel`` (0.16.1 forgets ``_INTRA_PARTIAL_DATA_PARALLEL_GROUP_WITH_CP``, and
models and optimizers keep their own). Measured on CPU, a TP1 x PP2 x DP2 example rank still
had 34 ``pt_gloo_runloop`` and 17 ``gloo_tcp_loop`` threads after destroying every group. Those
die during finalization, in an order nobody controls. Once in CI (a loaded machine) a finished
rank ended with "terminate called without an active exception" (SIGABRT) and torchrun failed
the whole job; that teardown is the likely cause (not reproduced here in 15 loaded runs), and
skipping finalization takes it out of the way.
"""

from __future__ import annotations

import atexit
import os
import sys


def leave_distributed() -> None:
    """Wait for every rank, then destroy megatron-core's groups and torch's.

    The barrier keeps a rank from tearing its groups down while a peer still talks to it (the
    last pipeline stage prints and writes while the first is still finishing)."""
    import torch.distributed as dist

    if not dist.is_initialized():
        return
    dist.barrier()
    try:
        from megatron.core import parallel_state
    except ImportError:
        parallel_state = None
    if parallel_state is not None:
        parallel_state.destroy_model_parallel()
    dist.destroy_process_group()


def exit_now(code: int = 0) -> None:
    """End the process as ``sys.exit`` would, minus finalization (see the module's docstring).

    ``atexit`` handlers still run first, while the interpreter is whole: multiprocessing's
    stops the daemonic workers megatron-core's checkpointing starts (left alive, they hold the
    caller's stdout pipe open and it waits forever), the tracer's closes its files. Call it
    last, once :func:`leave_distributed` has run."""
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
