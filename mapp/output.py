"""Writing the files mapp produces: through a temporary file beside the target, published by
one rename, so a reader sees the old file or the new one and a failure leaves the old one.

``tempfile.mkstemp`` creates files readable by their owner only; published files get the
mode any other tool would give them (0666 less the umask). A target that exists and is not a
regular file (a device, a pipe, a socket) is refused: renaming over it would replace, say,
``/dev/null`` with a file. A symbolic link is written through, so the link keeps working.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path
from typing import IO

from mapp.errors import OutputError

__all__ = ["output_target", "open_beside", "publish", "write_text"]


def output_target(path: Path | str) -> Path:
    """The file that writing ``path`` should replace: ``path`` itself, or the file its
    symbolic link points at. ``OutputError`` if that exists and is not a regular file."""
    target = Path(path).absolute()
    if target.is_symlink():
        target = target.resolve()
    try:
        mode = target.stat().st_mode
    except FileNotFoundError:
        return target
    except OSError as error:
        raise OutputError(f"cannot write {path}: {error.strerror}", "choose a writable path") from None
    if stat.S_ISDIR(mode):
        raise OutputError(f"{path} is a directory", "give a file name, e.g. -o merged.json")
    if not stat.S_ISREG(mode):
        raise OutputError(f"{path} is not a regular file (a device, pipe or socket)",
                          "mapp writes files and would replace it; choose a file path")
    return target


def open_beside(target: Path, mode: str = "wb", encoding: str | None = None) -> tuple[IO, Path]:
    """A new temporary file in ``target``'s directory, open for writing, and its path."""
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    return os.fdopen(fd, mode, encoding=encoding), Path(tmp)


def publish(tmp: Path, target: Path) -> None:
    """Give ``tmp`` the usual mode for a new file and rename it over ``target``."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)
    os.replace(tmp, target)


def write_text(path: Path | str, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically. ``OutputError`` for a target that is not
    a regular file; ``OSError`` if writing fails (the temporary file is removed)."""
    target = output_target(path)
    out, tmp = open_beside(target, "w", encoding="utf-8")
    try:
        with out:
            out.write(text)
        publish(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
