"""Connecting to Ray and running plain functions on its workers, with results as they finish."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from mapp.errors import InputError, MappError

__all__ = ["RayEngine", "connect", "EngineUnavailable"]

T = TypeVar("T")
R = TypeVar("R")
_INSTALL = "install it with: pip install 'mapp[ray]'"
# How long the driver waits for the next task before it redraws the progress (seconds).
_POLL_S = 0.25


class EngineUnavailable(MappError):
    """The cluster engine is not installed or cannot be reached."""

    exit_code = 6


@dataclass(slots=True)
class RayEngine:
    """A connection to a Ray cluster: one this process started (``local``) or one it joined."""

    address: str | None
    workers: int            # CPUs the cluster offers: tasks that run at once
    local: bool

    def describe(self) -> dict:
        return {"name": "ray", "workers": self.workers, "address": self.address or "local"}

    def map(self, fn: Callable[[T], R], items: Sequence[T], *,
            on_done: Callable[[R], None] | None = None) -> list[R]:
        """``[fn(item) for item in items]``, each call a Ray task on some worker; ``on_done`` is
        called on the driver with each result as it arrives (in any order). The first task that
        fails raises its own error here (a mapp error stays one line), after cancelling the rest."""
        import ray

        remote = ray.remote(num_cpus=1)(fn)
        pending = {remote.remote(item): index for index, item in enumerate(items)}
        results: list[Any] = [None] * len(items)
        try:
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1, timeout=_POLL_S)
                for ref in done:
                    index = pending.pop(ref)
                    results[index] = _get(ref)
                    if on_done is not None:
                        on_done(results[index])
        except BaseException:
            for ref in pending:
                ray.cancel(ref, force=True)
            raise
        return results


def _get(ref):
    import ray

    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as error:
        cause = getattr(error, "cause", None)
        if isinstance(cause, BaseException):
            raise cause from None
        raise


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0][:300] if text else type(error).__name__


@contextmanager
def connect(address: str | None = None, workers: int | None = None) -> Iterator[RayEngine]:
    """Join the Ray cluster at ``address`` (``auto``, ``ray://host:10001``, ``host:6379``), or
    start a local one with ``workers`` CPUs (default: this machine's) and stop it afterwards."""
    try:
        import ray
    except ImportError:
        raise EngineUnavailable("--engine ray needs Ray, which is not installed", _INSTALL) from None
    if address is not None and workers is not None:
        raise InputError("--workers with --address", "a cluster you join has its own workers; give one of the two")
    if workers is not None and workers < 1:
        raise InputError(f"--workers {workers}", "give at least 1 worker")
    started = not ray.is_initialized()
    if started:
        options = dict(include_dashboard=False, log_to_driver=False, configure_logging=False)
        # Ray announces on every start that a local cluster has token authentication on: it
        # should, and saying so each time is noise on mapp's stderr
        quiet = logging.getLogger("ray._private.authentication.authentication_token_setup")
        level = quiet.level
        quiet.setLevel(logging.ERROR)
        try:
            if address is None:
                # Ray's own processes: its gRPC ports listen on every interface (Ray has no
                # setting to narrow them) and answer only with the token Ray makes for the
                # session; the dashboard, an HTTP server, is not started
                ray.init(num_cpus=workers or os.cpu_count() or 1, **options)
            else:
                ray.init(address=address, **options)
        except ConnectionError as error:
            if address is None:
                raise EngineUnavailable(f"cannot start a local Ray cluster: {_first_line(error)}",
                                        "see Ray's logs under /tmp/ray, or join a running cluster with --address") from None
            raise EngineUnavailable(f"cannot reach the Ray cluster at {address}: {_first_line(error)}",
                                    "check --address (ray status on a node prints it)") from None
        except (RuntimeError, OSError) as error:   # Ray's own processes did not come up
            raise EngineUnavailable(f"cannot start a local Ray cluster: {_first_line(error)}" if address is None
                                    else f"cannot join the Ray cluster at {address}: {_first_line(error)}",
                                    "see Ray's logs under /tmp/ray") from None
        finally:
            quiet.setLevel(level)
    try:
        cpus = int(ray.cluster_resources().get("CPU", 1))
        yield RayEngine(address=address, workers=cpus, local=address is None)
    finally:
        if started:
            ray.shutdown()
