"""The hooks drive the tracer through its public API only: no private attribute of the tracer,
and no record tuple built by hand (their layout belongs to ``mapp.capture.writer``)."""

from __future__ import annotations

import ast
from pathlib import Path

import mapp.megatron_hooks

HOOKS = Path(mapp.megatron_hooks.__file__).resolve().parent
RECORD_KINDS = {"SPAN", "SPEC", "SPEC_LENT", "FREE", "COUNTER", "CALL", "RELEASE"}


def _offences(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        # tracer._x, self.tracer._x, ...: a private attribute of anything named *tracer
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            owner = node.value
            name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
            if name.endswith("tracer"):
                found.append(f"{path.name}:{node.lineno}: {name}.{node.attr}")
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("mapp.capture"):
            kinds = {a.name for a in node.names} & RECORD_KINDS
            if kinds:
                found.append(f"{path.name}:{node.lineno}: imports record kinds {sorted(kinds)}")
    return found


def test_hooks_use_the_tracer_public_api_only():
    offences = [o for path in sorted(HOOKS.glob("*.py")) for o in _offences(path)]
    assert offences == []


def test_the_check_sees_what_it_looks_for(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from mapp.capture.writer import SPEC, EventSpec\n"
                   "def f(tracer, self):\n    tracer._put((SPEC,))\n    self.tracer._anchor\n")
    assert len(_offences(bad)) == 3
