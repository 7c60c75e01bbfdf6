"""Writing the files mapp produces: one policy for where they may go, and how they are written.

Where: ``check_output`` runs before any analysis, so a bad path costs nothing. ``-`` is stdout.
Nothing may replace an input trace or go into the cache (``DIR/.mapp``), and no ``.json``
may be added to a bundle (the next run would read it as a trace), save a merged trace, which is
marked so that discovery skips it.

How: through a temporary file beside the target, published by one rename, so a reader sees the
old file or the new one and a failure leaves the old one. ``tempfile.mkstemp`` creates files
readable by their owner only; published files get the mode any other tool would give them
(0666 less the umask). A target that exists and is not a regular file (a device, a pipe, a
socket) is refused: renaming over it would replace, say, ``/dev/null`` with a file. A symbolic
link is written through, so the link keeps working.
"""

from __future__ import annotations

import os
import shutil
import stat
import sys
import tempfile
from pathlib import Path
from typing import IO

from mapp.errors import OutputError
from mapp.trace_format import CACHE_DIR, MERGED_MARKER

__all__ = ["STDOUT", "is_stdout", "check_output", "check_export_dir", "output_target", "open_beside", "publish",
           "write_text", "scratch", "discard_scratch"]

STDOUT = "-"
_TRACE_SUFFIXES = (".json", ".json.gz")  # what discovery reads as a possible trace
_HEAD_BYTES = 4096


def is_stdout(path: Path | str | None) -> bool:
    """Whether an output option asks for stdout (``-``)."""
    return path is not None and str(path) == STDOUT


def check_output(path: Path | str | None, bundle: Path | str | None, *, option: str,
                 merged: bool = False, beside_traces: bool = True) -> Path | None:
    """The file that writing ``path`` will replace, checked before any work is done.

    ``None`` for no output or for ``-`` (stdout). ``OutputError`` for a path that is not a
    writable file location, or that is part of the trace bundle in ``bundle``: an input trace,
    anything in its cache, or a new ``.json`` there (``merged``: a merged trace, which may go
    beside the traces); with ``beside_traces=False``, anything inside the bundle.
    """
    if path is None or is_stdout(path):
        return None
    if bundle is not None and not Path(bundle).is_dir():
        return None  # reading the input fails first, with its own error
    target = output_target(path, option=option)
    if bundle is not None:
        _refuse_in_bundle(path, target, Path(bundle).resolve(), option, merged, beside_traces)
    if not target.parent.is_dir():
        raise OutputError(f"cannot write {option} {path}: {target.parent} does not exist",
                          "create the directory first or choose another path")
    return target


def check_export_dir(directory: Path | str, bundle: Path | str | None, *, option: str) -> Path:
    """A directory the user lets queries read and write: it must exist and share nothing with
    the bundle (neither inside it nor holding it)."""
    resolved = Path(directory).resolve()
    if not resolved.is_dir():
        raise OutputError(f"{option} {directory}: not a directory", "create it first, e.g. mkdir exports")
    if bundle is not None:
        home = Path(bundle).resolve()
        if resolved == home or home in resolved.parents or resolved in home.parents:
            raise OutputError(f"{option} {directory}: overlaps the trace bundle {bundle}",
                              f"the bundle is read-only; give a directory outside it, e.g. {option} exports")
    return resolved


def _refuse_in_bundle(path: Path | str, target: Path, bundle: Path, option: str, merged: bool,
                      beside_traces: bool) -> None:
    resolved = target.parent.resolve() / target.name
    if bundle not in resolved.parents:
        return
    if not beside_traces:
        raise OutputError(f"{option} {path}: inside the trace bundle {bundle}",
                          "the bundle is read-only; put it elsewhere")
    if resolved.relative_to(bundle).parts[0] == CACHE_DIR:
        raise OutputError(f"{option} {path}: inside mapp's cache {bundle / CACHE_DIR}",
                          f"write it elsewhere, e.g. {option} {target.name}")
    if not resolved.name.endswith(_TRACE_SUFFIXES):
        return
    if resolved.exists() and not _is_merged(resolved):
        raise OutputError(f"{option} {path} would replace one of the input traces in {bundle}",
                          "mapp never overwrites its input; write outside the bundle")
    if not merged:
        raise OutputError(f"{option} {path}: a .json inside the trace bundle {bundle} would be read as a trace",
                          f"write it outside the bundle, e.g. {option} {target.name}")


def _is_merged(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f'"{MERGED_MARKER}"'.encode() in f.read(_HEAD_BYTES)
    except OSError:
        return False


def output_target(path: Path | str, *, option: str = "") -> Path:
    """The file that writing ``path`` should replace: ``path`` itself, or the file its
    symbolic link points at. ``OutputError`` if that exists and is not a regular file."""
    named = f"{option} {path}" if option else str(path)
    target = Path(path).absolute()
    if target.is_symlink():
        target = target.resolve()
    try:
        mode = target.stat().st_mode
    except FileNotFoundError:
        return target
    except OSError as error:
        raise OutputError(f"cannot write {named}: {error.strerror}", "choose a writable path") from None
    if stat.S_ISDIR(mode):
        raise OutputError(f"{named} is a directory", "give a file name, e.g. -o merged.json")
    if not stat.S_ISREG(mode):
        raise OutputError(f"{named} is not a regular file (a device, pipe or socket)",
                          "mapp writes files and would replace it; choose a file path, or - for stdout")
    return target


def open_beside(target: Path, mode: str = "wb", encoding: str | None = None) -> tuple[IO, Path]:
    """A new temporary file in ``target``'s directory, open for writing, and its path."""
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    return os.fdopen(fd, mode, encoding=encoding), scratch(Path(tmp))


_SCRATCH: set[Path] = set()


def scratch(path: Path) -> Path:
    """Note ``path``, a temporary file or directory being written, so that an interrupted run
    removes it (``discard_scratch``); one published by a rename is simply gone by then."""
    _SCRATCH.add(Path(path))
    return Path(path)


def discard_scratch() -> None:
    """Remove every temporary file and directory still being written (on Ctrl-C)."""
    for path in list(_SCRATCH):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    _SCRATCH.clear()


def publish(tmp: Path, target: Path) -> None:
    """Give ``tmp`` the usual mode for a new file and rename it over ``target``."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)
    os.replace(tmp, target)


def write_text(path: Path | str, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically, or to stdout for ``-``. ``OutputError``
    for a target that is not a regular file; ``OSError`` if writing fails (the temporary file
    is removed)."""
    if is_stdout(path):
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    target = output_target(path)
    out, tmp = open_beside(target, "w", encoding="utf-8")
    try:
        with out:
            out.write(text)
        publish(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
