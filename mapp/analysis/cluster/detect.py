"""Detection on a Ray cluster: each window of iterations (``mapp.analysis.detect.windows``) is
matched, aligned and judged by one task, on a worker that reads the window's events from the
shared dataset (a filter on ``iteration``; the dataset's row groups are ordered by rank, so it
reads every file), and only its verdict travels to the driver, which merges them."""

from __future__ import annotations

from collections.abc import Callable

from mapp.analysis.cluster.engine import RayEngine
from mapp.analysis.detect.windows import detect_windows

__all__ = ["detect_on_cluster"]


def detect_on_cluster(bundle, engine: RayEngine, *, window: int, threshold, layout=None,
                      progress: Callable[[int, int], None] | None = None):
    """``detect_windows`` with the windows spread over ``engine``'s workers."""

    def run(windows):
        tasks = [(bundle.window(its), threshold, layout) for its in windows]
        done = 0

        def finished(_verdict) -> None:
            nonlocal done
            done += 1
            if progress is not None:
                progress(done, len(tasks))

        return engine.map(_detect_window, tasks, on_done=finished)

    return detect_windows(bundle, window=window, threshold=threshold, layout=layout, run=run)


def _detect_window(task):
    from mapp.analysis.detect.detector import detect_bundle

    bundle, threshold, layout = task
    return detect_bundle(bundle, threshold=threshold, layout=layout, onsets=False)   # (as ``windows`` does)
