"""Reversible attribute patches, and per-module views of ``torch.distributed``."""

from __future__ import annotations

import types
from typing import Any, Callable

__all__ = ["Patcher", "DistView"]

_MISSING = object()


class Patcher:
    """Sets attributes and remembers the originals, so that :meth:`restore` undoes them all."""

    def __init__(self) -> None:
        self._saved: list[tuple[Any, str, Any]] = []

    def set(self, owner: Any, name: str, value: Any) -> Any:
        """``owner.name = value``; returns the original."""
        original = owner.__dict__.get(name, _MISSING) if hasattr(owner, "__dict__") else _MISSING
        if original is _MISSING:
            original = getattr(owner, name, _MISSING)
        self._saved.append((owner, name, original))
        setattr(owner, name, value)
        return original if original is not _MISSING else None

    def wrap(self, owner: Any, name: str, make: Callable[[Any], Any]) -> None:
        """Replace ``owner.name`` by ``make(original)``."""
        original = getattr(owner, name)
        self.set(owner, name, make(original))

    def restore(self) -> None:
        for owner, name, original in reversed(self._saved):
            if original is _MISSING:
                try:
                    delattr(owner, name)
                except AttributeError:
                    pass
            else:
                setattr(owner, name, original)
        self._saved.clear()


class DistView(types.ModuleType):
    """A module's own view of ``torch``: the module's previous ``torch`` (the real one, or the
    CPU view of :mod:`mapp.megatron_hooks.cpu_patches`) with some ``torch.distributed``
    functions replaced. Lets the hooks see the collectives one megatron-core module issues
    without patching ``torch.distributed`` for everyone."""

    def __init__(self, base: Any, overrides: dict[str, Callable]):
        super().__init__("torch")
        self._base = base
        dist = types.ModuleType("torch.distributed")
        real = base.distributed
        dist.__getattr__ = lambda name: getattr(real, name)  # type: ignore[method-assign]
        for name, fn in overrides.items():
            setattr(dist, name, fn)
        self.distributed = dist

    def __getattr__(self, name: str) -> Any:
        return getattr(self._base, name)
