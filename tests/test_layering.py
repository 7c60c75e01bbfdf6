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
        "heavy = sorted(n for n in sys.modules if n.split('.')[0] in ('polars', 'duckdb', 'pyarrow', 'scipy', 'networkx', 'plotly'))\n"
        "print(','.join(heavy))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == ""


# Data flows one way: files -> ingest -> graph -> align -> run (the Analysis) -> chrome export,
# detect, sql -> report -> cli. A module may import its own unit and lower layers only. The capture side and
# the simulator produce traces: they import none of the analysis, and only harnesses (bench)
# and the CLI drive the simulator.
LAYERS: dict[str, int] = {
    "mapp": 0, "mapp.analysis": 0, "mapp.errors": 0, "mapp.trace_format": 0, "mapp._lazy": 0,
    "mapp.output": 1,  # writes files by the policy, which names the trace format's cache dir
    "mapp.snapshot_format": 1,  # MegaScope snapshots on disk: its errors are mapp.errors
    "mapp.capture": 1, "mapp.megatron_hooks": 2,
    # runtime side, reserved for what comes next: transport under scheduling; scope beside the hooks
    "mapp.transport": 1, "mapp.scheduling": 2, "mapp.scope": 3,
    "mapp.analysis.ingest": 2,
    "mapp.analysis.graph": 3,
    "mapp.analysis.align": 4,
    "mapp.analysis.run": 5, "mapp.analysis.chrome": 5,
    "mapp.analysis.detect": 6, "mapp.analysis.timeline": 6,
    "mapp.sql": 6,
    # runs ingest, matching and windows of detection on Ray's workers; only the CLI drives it
    "mapp.analysis.cluster": 7,
    # the simulator produces traces, like capture, and harnesses drive it: no analysis imports it
    "mapp.analysis.simulate": 7,
    "mapp.report": 7, "mapp.bench": 8,
    "mapp.cli": 9, "mapp.__main__": 10,
}


def _unit(module: str) -> str:
    parts = module.split(".")
    if len(parts) > 2 and parts[1] == "analysis":
        return ".".join(parts[:3])
    return ".".join(parts[:2])


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _mapp_imports(path: Path) -> set[str]:
    """Every mapp module ``path`` imports, at any depth of the file (imports inside functions
    and under TYPE_CHECKING count: they are dependencies all the same)."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            found.add(name)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {n for n in found if n == "mapp" or n.startswith("mapp.")}


def test_every_import_goes_down_the_layers():
    against = []
    for path in sorted(PACKAGE.rglob("*.py")):
        here = _unit(_module_name(path))
        assert here in LAYERS, f"{here} has no layer: add it to LAYERS"
        for name in _mapp_imports(path):
            there = _unit(name)
            if there != here and LAYERS[there] >= LAYERS[here]:
                against.append(f"{path.relative_to(PACKAGE.parent)} ({here}) imports {name} ({there})")
    assert against == []
