"""Read a v1 file the way a streaming reader does: line by line, a cut-off last line ignored."""

from __future__ import annotations

import json
from pathlib import Path


def read_v1(path: str | Path) -> tuple[list[dict], bool]:
    """(events, whether the last line was cut off). The first line must be ``[``."""
    lines = Path(path).read_text(encoding="utf-8").split("\n")
    assert lines[0] == "[", f"{path}: first line is {lines[0]!r}"
    events, cut = [], False
    body = [line for line in lines[1:] if line.strip()]
    for i, line in enumerate(body):
        text = line.rstrip().rstrip(",")
        if text == "]":
            continue
        try:
            events.append(json.loads(text))
        except json.JSONDecodeError:
            assert i == len(body) - 1, f"{path}: unreadable line {i + 2} that is not the last"
            cut = True
    return events, cut
