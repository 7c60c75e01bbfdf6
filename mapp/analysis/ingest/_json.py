"""Loading a whole-file JSON document, salvaging one that was cut off mid-write.

Both MegatronApp files (a top-level array) and PyTorch profiler traces (an object whose
``traceEvents`` array holds nearly all the bytes) end, when a job dies while writing, in the
middle of one record. What came before is intact, so we cut back to the end of the last
complete record and close the brackets that were open there.

A gzip-compressed file (PyTorch's ``tensorboard_trace_handler(..., use_gzip=True)`` writes
``*.pt.trace.json.gz``; HTA and TraceLens ship their traces so) is decompressed first, told by
its magic bytes, not its name; a compressed stream cut off mid-write yields what it holds so far,
which is then salvaged like any other cut-off document.
"""

from __future__ import annotations

import contextlib
import gc
import pathlib
import re
import zlib
from collections.abc import Iterator

import orjson

from mapp.errors import TraceFormatError

__all__ = ["load_document", "Salvage", "paused_gc", "read_head", "GZIP_MAGIC", "HEAD_BYTES", "cut_short"]

GZIP_MAGIC = b"\x1f\x8b"
# How much of a file's content format detection looks at.
HEAD_BYTES = 4096
_BEYOND_SALVAGE = "the file is cut off or damaged beyond salvage; move it aside to read the rest"

# A record inside an array ends with ``}`` followed by ``,`` (more records were coming).
_RECORD_END = re.compile(rb"\}\s*,")
_MAX_TRIES = 64


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """Suspend the cyclic garbage collector while building millions of small objects.

    Parsing a 150 MB trace allocates a few million dicts and lists; with the collector on,
    its repeated full passes made ``orjson.loads`` alone 5-10x slower on this machine.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class Salvage:
    """What :func:`load_document` did: ``truncated_at`` is the file size when it had to cut."""

    __slots__ = ("truncated_at",)

    def __init__(self) -> None:
        self.truncated_at: int | None = None


def load_document(path: pathlib.Path, closers: tuple[bytes, ...], what: str) -> tuple[object, Salvage]:
    """Parse ``path`` as one JSON document; if it is cut off, keep the complete records.

    ``closers`` are the byte strings tried after the last complete record to close what was
    open there (``b"]"`` for a top-level array, ``b"]}"`` for an array inside an object).
    Raises :class:`TraceFormatError` naming the file when nothing can be recovered.
    """
    salvage = Salvage()
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise TraceFormatError(f"{path}: cannot read ({exc.strerror})", "check the path and its permissions") from exc
    data = _gunzip(raw, path, salvage) if raw.startswith(GZIP_MAGIC) else raw
    try:
        with paused_gc():
            return orjson.loads(data), salvage
    except orjson.JSONDecodeError as exc:
        first_error = exc
    stripped = data.rstrip()
    if not stripped and salvage.truncated_at is not None:
        raise TraceFormatError(f"{path}: the compressed stream is cut off before any content", _BEYOND_SALVAGE)
    # (the profiler itself starts its file with a space: " {")
    if not stripped or stripped.lstrip()[:1] not in (b"[", b"{"):
        raise TraceFormatError(f"{path}: not a JSON {what} ({first_error})",
                               f"is this really a {what}? pass --format to say which reader to use")
    for cut in _record_ends_from_the_back(stripped):
        head = stripped[: cut + 1]
        for closer in closers:
            try:
                with paused_gc():
                    document = orjson.loads(head + closer)
            except orjson.JSONDecodeError:
                continue
            salvage.truncated_at = len(raw)
            return document, salvage
    raise TraceFormatError(f"{path}: not valid JSON and no complete record to salvage ({first_error})",
                           _BEYOND_SALVAGE)


def cut_short(head: bytes, compressed: bool) -> bool:
    """True when ``head`` (at most ``HEAD_BYTES``) is a file's whole content and that content is
    a JSON document that was never finished: a trace whose writer died in its first bytes.
    ``compressed``: the file is gzip, so ``head`` came out of a stream that may itself be cut."""
    if len(head) >= HEAD_BYTES:
        return False
    text = head.strip()
    if not text:
        return compressed                       # a gzip header and nothing after it
    if text[:1] not in (b"{", b"["):
        return False
    try:
        orjson.loads(text)
    except orjson.JSONDecodeError:
        return True
    return False


def read_head(path: pathlib.Path, size: int) -> bytes:
    """The first ``size`` bytes of the file's content, decompressed if it is gzip.

    Only as much of a compressed file is read as is needed; a damaged compressed stream gives
    the bytes it yielded before the damage (possibly none).
    """
    with open(path, "rb") as f:
        start = f.read(size)
        if len(start) < len(GZIP_MAGIC) and GZIP_MAGIC.startswith(start):
            return b""                          # cut inside the magic bytes: no content yet
        if not start.startswith(GZIP_MAGIC):
            return start
        inflater = zlib.decompressobj(wbits=31)
        out = b""
        chunk = start
        try:
            while chunk and len(out) < size and not inflater.eof:
                out += inflater.decompress(chunk, size - len(out))
                chunk = inflater.unconsumed_tail or f.read(1 << 16)
        except zlib.error:
            pass
        return out


def _gunzip(raw: bytes, path: pathlib.Path, salvage: Salvage) -> bytes:
    """The content of every gzip member of ``raw``; a stream cut off mid-write gives what it
    holds so far (the JSON salvage then cuts back to the last complete record) and is recorded
    in ``salvage``, also when what it holds happens to be a whole document (a cut in the
    trailer): the reader says it read an unfinished file."""
    parts: list[bytes] = []
    rest = raw
    while rest.startswith(GZIP_MAGIC):
        inflater = zlib.decompressobj(wbits=31)
        try:
            parts.append(inflater.decompress(rest))
        except zlib.error as exc:
            if not parts:
                raise TraceFormatError(f"{path}: damaged gzip data ({exc})",
                                       "try `gzip -dc` on it to see how much is readable") from exc
            break
        if not inflater.eof:                    # cut off: keep what came out
            parts.append(inflater.flush())
            salvage.truncated_at = len(raw)
            break
        rest = inflater.unused_data
    return b"".join(parts)


def _record_ends_from_the_back(data: bytes) -> list[int]:
    """Offsets of the last few ``}`` that may close a record, latest first (only the tail is scanned)."""
    window = 1 << 20
    while True:
        start = max(0, len(data) - window)
        ends = [m.start() for m in _RECORD_END.finditer(data, start)]   # finditer's offsets are absolute
        if data.endswith(b"}"):
            ends.append(len(data) - 1)
        if len(ends) >= _MAX_TRIES or start == 0:
            return ends[::-1][:_MAX_TRIES]
        window *= 8
