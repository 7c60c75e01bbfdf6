"""Finding the trace files in a directory and telling which format they are in.

Which files are looked at: every regular file whose name ends ``.json`` or ``.json.gz``, in the
directory and in its subdirectories at any depth (each host of a job often writes its own
``node0/``, ``node1/``...), except hidden files and anything under a hidden directory (a name
starting with ``.``: mapp's cache ``.mapp``, editors' and VCS directories). Symbolic links are
followed, but each real directory is read once, so a link back up the tree cannot loop.

Which of them are traces: the same rules wherever a file lies. Its content tells the format
(each reader's ``sniff``); a name only one format uses makes a file that does not hold that
format an error; the rank comes from the file's own metadata, never from its directory.
"""

from __future__ import annotations

import fnmatch
import importlib
import os
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from mapp import trace_format
from mapp.analysis.ingest._json import GZIP_MAGIC, HEAD_BYTES, cut_short, read_head
from mapp.errors import InputError, TraceFormatError

__all__ = ["FORMATS", "Discovered", "discover", "reader_module", "read_events"]

# format name -> (reader module, file name patterns that format uses)
FORMATS: dict[str, tuple[str, tuple[str, ...]]] = {
    "mapp": ("mapp.analysis.ingest.mapp_v1", ("rank-*.json",)),
    # the per-rank files by name; MegatronApp's aggregated trace (any name) by its content
    "megatronapp": ("mapp.analysis.ingest.megatronapp", ("benchmark-data-*-pipeline-*-tensor-*.json",
                                                         "benchmark-data-*-pipeline-*-tensor-*.json.gz",
                                                         "*.json", "*.json.gz")),
    "kineto": ("mapp.analysis.ingest.kineto", ("*.json", "*.json.gz")),
}
# What ``--format`` takes without looking inside, where that is fewer than FORMATS' patterns:
# other files only where the reader's sniff knows them (a simulated job's ground_truth.json
# beside its benchmark-data files is no MegatronApp trace).
_FORCED: dict[str, tuple[str, ...]] = {"megatronapp": ("benchmark-data-*-pipeline-*-tensor-*.json",
                                                       "benchmark-data-*-pipeline-*-tensor-*.json.gz")}
# Names only one format uses: a file named so that does not hold that format is a damaged
# trace (an error), not an unrelated file to skip. (PyTorch's tensorboard_trace_handler names
# its files ``<worker>.<time>.pt.trace.json``, ``.pt.trace.json.gz`` with use_gzip=True;
# other Kineto traces may have any name.)
_TELLTALE_NAMES: dict[str, tuple[str, ...]] = {
    "mapp": ("rank-*.json",),
    "megatronapp": ("benchmark-data-*-pipeline-*-tensor-*.json", "benchmark-data-*-pipeline-*-tensor-*.json.gz"),
    "kineto": ("*.pt.trace.json", "*.pt.trace.json.gz"),
}
# Trace files are JSON; ``*.json.gz`` (gzip) ones for the Kineto and MegatronApp readers, which
# read them through _json.load_document like plain ones (traces are often gzipped to be copied
# off a cluster; PyTorch writes them so with use_gzip=True).
_SUFFIXES = (".json", ".json.gz")
_MERGED = "merged"  # mapp's own merged output, found beside the traces: never an input
_CUT = "cut off"    # a JSON document cut off before it shows its format: a damaged trace


@dataclass(frozen=True, slots=True)
class Discovered:
    """The trace files of one directory, all of one format."""

    format: str
    files: list[Path]
    ignored: list[Path]  # other .json(.gz) files: not traces of this format, not mapp's own output


def reader_module(format_name: str) -> ModuleType:
    """The reader for ``format_name`` (imported on first use)."""
    if format_name not in FORMATS:
        raise InputError(f"unknown trace format {format_name!r}", f"use one of: {', '.join(FORMATS)}")
    return importlib.import_module(FORMATS[format_name][0])


def read_events(format_name: str, files: list[Path], warn, progress=None):
    """``(batches, ranks)``: the events of ``files`` as an iterator of batches and their ranks
    table, from the format's streaming reader (``read_batches``) or, for a reader that has
    none, its whole-table ``read``. ``progress(bytes)`` is called as input bytes are done."""
    module = reader_module(format_name)
    if hasattr(module, "read_batches"):
        return module.read_batches(files, warn=warn, progress=progress)
    events, ranks = module.read(files, warn=warn)
    if progress:
        progress(sum(p.stat().st_size for p in files))
    return iter([events]), ranks


def _candidates(directory: Path) -> list[Path]:
    if not directory.exists():
        raise InputError(f"{directory} does not exist", "pass the directory that holds the per-rank trace files")
    if not directory.is_dir():
        raise InputError(f"{directory} is not a directory", "pass the directory that holds the per-rank trace files")
    files = _walk(directory)
    if not files:
        raise InputError(f"{directory} is empty", "point mapp at the directory your training job wrote traces to")
    # sorted by path relative to the bundle: the same order on every machine
    return sorted((p for p in files if p.name.endswith(_SUFFIXES)), key=lambda p: p.relative_to(directory).parts)


def _walk(directory: Path) -> list[Path]:
    """The visible regular files under ``directory`` (see the module docstring for the rule)."""
    files: list[Path] = []
    seen: set[tuple[int, int]] = set()
    pending = [directory]
    while pending:
        folder = pending.pop()
        try:
            info = folder.stat()
            with os.scandir(folder) as listing:
                entries = list(listing)
        except OSError as exc:                  # traces may be in there: never skip it silently
            raise InputError(f"cannot read the directory {folder} ({exc.strerror})",
                             "fix its permissions, or move it out of the trace directory") from exc
        if (info.st_dev, info.st_ino) in seen:  # reached again through a link: already read
            continue
        seen.add((info.st_dev, info.st_ino))
        for entry in entries:
            if entry.name.startswith("."):
                continue
            # is_dir/is_file follow links and answer False (not raise) for a dangling one
            if entry.is_dir():
                pending.append(Path(entry.path))
            elif entry.is_file():
                files.append(Path(entry.path))
    return files


def _head(path: Path) -> bytes:
    """The start of the file's content: decompressed for a ``*.gz`` name (the Kineto and
    MegatronApp readers take those), raw otherwise, so a compressed file named ``rank-*.json`` is
    not taken for v1."""
    if _compressed(path):
        return read_head(path, HEAD_BYTES)
    with open(path, "rb") as f:
        return f.read(HEAD_BYTES)


def _compressed(path: Path) -> bool:
    """A ``*.gz`` file that starts as gzip does (a file cut inside the magic bytes counts)."""
    if not path.name.endswith(".gz"):
        return False
    with open(path, "rb") as f:
        start = f.read(len(GZIP_MAGIC))
    return bool(start) and GZIP_MAGIC.startswith(start)


def _sniff(path: Path) -> str | None:
    head = _head(path)
    if f'"{trace_format.MERGED_MARKER}"'.encode() in head:
        return _MERGED
    named_like = next((name for name, patterns in _TELLTALE_NAMES.items()
                       if any(fnmatch.fnmatch(path.name, pattern) for pattern in patterns)), None)
    for name, (_module, patterns) in FORMATS.items():
        if not any(fnmatch.fnmatch(path.name, pattern) for pattern in patterns):
            continue
        try:
            module = reader_module(name)
        except ImportError:
            continue
        if module.sniff(path, head):
            return name
    if cut_short(head, _compressed(path)):
        if named_like is None:
            return _CUT
        raise _cut_error(path, head)
    if named_like is not None:
        first = head.lstrip()[:40].decode("utf-8", "replace").splitlines()
        raise TraceFormatError(
            f"{path} is named like a {named_like} trace but does not hold one "
            f"(it starts with {first[0] if first else 'nothing'!r})",
            "fix the file or move it out of the directory",
        )
    return None


def _cut_error(path: Path, head: bytes) -> TraceFormatError:
    return TraceFormatError(
        f"{path} is cut off after {len(head)} bytes of content, before anything shows which trace it is",
        "the file is damaged beyond salvage; move it aside to read the rest",
    )


def discover(directory: Path, format_name: str | None = None) -> Discovered:
    """The trace files in ``directory`` and their format (detected, or ``format_name``)."""
    directory = Path(directory)
    candidates = _candidates(directory)
    if format_name is not None:
        module = reader_module(format_name)
        patterns = FORMATS[format_name][1]
        forced = _FORCED.get(format_name, patterns)
        files = [p for p in candidates if any(fnmatch.fnmatch(p.name, pat) for pat in forced)
                 or (any(fnmatch.fnmatch(p.name, pat) for pat in patterns) and module.sniff(p, _head(p)))]
        if not files:
            raise InputError(
                f"no {format_name} trace files in {directory}",
                f"{format_name} files are named like {patterns[0]}",
            )
        return Discovered(format_name, files, [p for p in candidates if p not in files])
    by_format: dict[str, list[Path]] = {}
    ignored: list[Path] = []
    cut: list[Path] = []
    merged: list[Path] = []
    for path in candidates:
        found = _sniff(path)
        if found == _MERGED:
            merged.append(path)
            continue
        if found == _CUT:
            cut.append(path)
        elif found is None:
            ignored.append(path)
        else:
            by_format.setdefault(found, []).append(path)
    if not by_format and cut:
        # nothing else to read: the cut-off file is what the user wanted read, not a stray one
        raise _cut_error(cut[0], _head(cut[0]))
    order = {path: i for i, path in enumerate(candidates)}
    ignored = sorted(ignored + cut, key=order.__getitem__)
    if not by_format and merged:
        raise InputError(
            f"{directory} holds only mapp's merged trace ({merged[0].relative_to(directory).as_posix()}), "
            "an output of `mapp trace merge`, not per-rank traces",
            "point mapp at the directory of the traces it was merged from",
        )
    if not by_format:
        raise InputError(
            f"no recognisable traces in {directory} or its subdirectories",
            "expected mapp rank-*.json, MegatronApp benchmark-data-*.json (or their aggregated trace) or PyTorch profiler "
            "traces; pass --format to force one",
        )
    if len(by_format) > 1:
        counts = ", ".join(f"{len(v)} {k}" for k, v in sorted(by_format.items()))
        raise InputError(
            f"{directory} mixes trace formats ({counts})",
            "put each run's traces in a directory of their own, or pass --format to pick one",
        )
    (name, files), = by_format.items()
    return Discovered(name, files, ignored)
