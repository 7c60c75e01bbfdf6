"""The styles every rendering of mapp uses, by name (``mapp.suspect``, ``mapp.victim``...).

Renderables (the verdict, the run report, the SQL tables) name styles; the console that
prints them carries this theme. Kept apart and light: the CLI imports it at start-up.
"""

from __future__ import annotations

from rich.theme import Theme

__all__ = ["THEME"]

THEME = Theme(
    {
        "mapp.error": "bold red",
        "mapp.warning": "yellow",
        "mapp.ok": "green",
        "mapp.suspect": "bold red",
        "mapp.victim": "yellow",
        "mapp.dim": "dim",
        "mapp.path": "cyan",
    }
)
