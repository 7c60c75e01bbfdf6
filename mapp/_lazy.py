"""Package names imported on first use (PEP 562), so that importing a package stays cheap.

The CLI imports ``mapp.analysis.ingest``, ``mapp.analysis.simulate`` and ``mapp.sql`` for their
option texts; their public names pull in polars, DuckDB, Arrow or numpy, which only the
commands that run need. ``__getattr__, __dir__ = lazy_exports(__name__, {"name": "module"})``
in a package's ``__init__`` resolves ``package.name`` from ``package.module`` when first asked.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable

__all__ = ["lazy_exports"]


def lazy_exports(package: str, homes: dict[str, str]) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """Module-level ``__getattr__`` and ``__dir__`` for ``package``: ``homes`` maps each public
    name to the submodule that defines it; a resolved name is kept in the package."""

    def __getattr__(name: str) -> object:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{home}"), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(homes))

    return __getattr__, __dir__
