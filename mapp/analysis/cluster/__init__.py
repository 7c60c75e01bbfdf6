"""The offline toolkit's heavy stages on a Ray cluster, for jobs one process cannot read in time.

Why Ray and not Dask: the teams who train with Megatron at this scale mostly run Ray already,
next to their training jobs (KubeRay, Anyscale, Ray Train), so a cluster to run on is usually
there; ``ray.init(address=...)`` joins it. Only Ray's own APIs are used (remote functions and
``ray.wait``): no scheduler, RPC or cluster code of ours. Workers need the same mapp installed and
the trace directory at the same path (a shared file system), as every distributed reader does.

What runs where (see ``docs/scale.md``):

* per file, on the workers: parsing trace files and writing the partitioned dataset
  (:mod:`~mapp.analysis.ingest.dataset`, one task per block of ranks); selecting each block's
  communication calls for matching (:mod:`.match`), so only those travel;
* global, on the driver: checking the ranks tables, the manifest, pairing the calls (a join
  over every rank's calls), the clock solve (a sparse system over the matched pairs) and
  the verdict;
* per window of iterations, on the workers, with ``mapp detect --window N --engine ray``:
  matching, alignment and the detector's stages (:mod:`.detect`); only verdicts travel.

Nothing here is imported unless ``--engine ray`` is given: ``ray`` is an optional dependency
(``pip install 'mapp[ray]'``).
"""

from mapp._lazy import lazy_exports

__all__ = ["RayEngine", "connect", "detect_on_cluster", "ingest_on_cluster", "match_on_cluster"]

_HOMES = {"RayEngine": "engine", "connect": "engine", "detect_on_cluster": "detect", "ingest_on_cluster": "ingest",
          "match_on_cluster": "match"}

__getattr__, __dir__ = lazy_exports(__name__, _HOMES)
