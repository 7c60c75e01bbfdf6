"""Dependency direction is a tested fact: the offline toolkit stays light and never reaches into capture."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import mapp

PACKAGE = Path(mapp.__file__).resolve().parent
OFFLINE = ("analysis", "bench", "cli", "sql", "report")


def test_cli_and_analysis_do_not_import_torch():
    code = (
        "import sys, pkgutil, importlib, mapp.cli.app, mapp.analysis\n"
        "for m in pkgutil.walk_packages(mapp.analysis.__path__, 'mapp.analysis.'):\n"
        "    importlib.import_module(m.name)\n"
        "heavy = sorted(n for n in sys.modules if n.split('.')[0] in ('torch', 'megatron'))\n"
        "print(','.join(heavy))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == ""


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_offline_toolkit_never_imports_capture_side():
    offenders = []
    for area in OFFLINE:
        for path in (PACKAGE / area).rglob("*.py") if (PACKAGE / area).exists() else []:
            for name in _imports(path):
                if name.startswith(("mapp.megatron_hooks", "mapp.capture", "torch", "megatron")):
                    offenders.append(f"{path.relative_to(PACKAGE)} imports {name}")
    assert offenders == []


def test_cli_start_up_leaves_the_heavy_libraries_to_the_commands():
    # `mapp --help` and option parsing should not pay for polars, DuckDB, Arrow or scipy:
    # each command imports what it needs when it runs.
    code = (
        "import sys, mapp.cli.app\n"
        "heavy = sorted(n for n in sys.modules if n.split('.')[0] in ('polars', 'duckdb', 'pyarrow', 'scipy', 'networkx'))\n"
        "print(','.join(heavy))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == ""
