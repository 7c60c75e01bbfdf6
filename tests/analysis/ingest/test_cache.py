"""The Parquet cache beside the traces (``DIR/.mapp``): checked when opened, rebuilt with one
warning when damaged or foreign, and, where it cannot be written, kept in a temporary directory
that is gone when the process exits."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import polars as pl
import pytest

from mapp.analysis.ingest import load_bundle
from tests.v1_builder import job

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def bundles(tmp_path):
    """Two bundles of the same shape (two ranks each), different events; both cached."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    job(a, dp=2, events_per_rank=3)
    job(b, dp=2, events_per_rank=5)
    expected = load_bundle(a).events
    load_bundle(b)
    return a, b, expected


def _events_parquet(cache: Path) -> None:
    data = (cache / "events.parquet").read_bytes()
    (cache / "events.parquet").write_bytes(data[: len(data) // 2])


def _garbage(cache: Path) -> None:
    (cache / "events.parquet").write_bytes(b"\x00garbage, not Parquet" * 64)


def _page_damage(cache: Path) -> None:
    # a flipped byte in the first data page: the footer (schema, rows, build) stays whole
    data = bytearray((cache / "events.parquet").read_bytes())
    data[8] ^= 0xFF
    (cache / "events.parquet").write_bytes(bytes(data))


def _directory(cache: Path) -> None:
    (cache / "events.parquet").unlink()
    (cache / "events.parquet" / "inside").mkdir(parents=True)


DAMAGE = {
    "events-garbage": (_garbage, "events.parquet: not a Parquet file"),
    "events-cut-off": (_events_parquet, "events.parquet: not a Parquet file"),
    "events-empty": (lambda c: (c / "events.parquet").write_bytes(b""), "events.parquet: not a Parquet file"),
    "events-a-directory": (_directory, "events.parquet: a directory, not a file"),
    "events-page-damaged": (_page_damage, "events.parquet: its bytes changed since it was written (checksum)"),
    "ranks-missing": (lambda c: (c / "ranks.parquet").unlink(), "ranks.parquet: missing"),
    "manifest-not-json": (lambda c: (c / "manifest.json").write_text('{"cache_version": 3, "inp'),
                          "manifest.json: not JSON"),
    "manifest-a-list": (lambda c: (c / "manifest.json").write_text("[]"), "manifest.json: not a JSON object"),
    "events-of-another-schema": (lambda c: pl.DataFrame({"rank": [0, 1]}).write_parquet(c / "events.parquet"),
                                 "events.parquet: not the expected schema"),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_cache_is_rebuilt_with_one_warning(bundles, damage):
    a, _, expected = bundles
    spoil, problem = DAMAGE[damage]
    spoil(a / ".mapp")
    warnings: list[str] = []
    bundle = load_bundle(a, warn=warnings.append)
    assert warnings == [f"{a / '.mapp'} was damaged ({problem}); rebuilt it"]
    assert not bundle.from_cache
    assert bundle.events.equals(expected)
    # healed: the next load takes the cache without a word
    again: list[str] = []
    assert load_bundle(a, warn=again.append).from_cache and again == []


def test_a_ranks_table_from_another_bundle_is_told_apart(bundles):
    # same shape (two ranks, same schema, same row count): only the build id differs
    a, b, _ = bundles
    shutil.copyfile(b / ".mapp" / "ranks.parquet", a / ".mapp" / "ranks.parquet")
    warnings: list[str] = []
    bundle = load_bundle(a, warn=warnings.append)
    assert warnings == [f"{a / '.mapp'} was damaged (ranks.parquet: from another build); rebuilt it"]
    assert bundle.ranks["src_file"].to_list() == [str(a / "rank-00000.json"), str(a / "rank-00001.json")]


def test_an_events_table_from_another_bundle_is_told_apart(bundles):
    a, b, expected = bundles
    shutil.copyfile(b / ".mapp" / "events.parquet", a / ".mapp" / "events.parquet")
    warnings: list[str] = []
    bundle = load_bundle(a, warn=warnings.append)
    assert warnings == [f"{a / '.mapp'} was damaged (events.parquet: 20 rows where the manifest counted 12); "
                        "rebuilt it"]
    assert bundle.events.equals(expected)


def test_the_manifest_counts_rows_and_the_footers_carry_its_build(bundles):
    import pyarrow.parquet as pq

    a, _, expected = bundles
    manifest = json.loads((a / ".mapp" / "manifest.json").read_text())
    assert manifest["cache_version"] == 30
    assert manifest["rows"] == {"events.parquet": expected.height, "ranks.parquet": 2}
    for name in ("events.parquet", "ranks.parquet"):
        assert pq.read_metadata(a / ".mapp" / name).metadata[b"mapp_build"] == manifest["build"].encode()


def test_a_cache_of_an_older_mapp_is_rebuilt_quietly(bundles):
    a, _, expected = bundles
    path = a / ".mapp" / "manifest.json"
    old = json.loads(path.read_text())
    old["cache_version"] = 2
    del old["rows"], old["build"]
    path.write_text(json.dumps(old))
    warnings: list[str] = []
    bundle = load_bundle(a, warn=warnings.append)
    assert not bundle.from_cache and warnings == []
    assert bundle.events.equals(expected)


def test_a_cache_directory_that_is_a_file_falls_back_and_leaves_the_file(bundles, tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(_fresh(tmp_path / "tmp")))
    a, _, expected = bundles
    shutil.rmtree(a / ".mapp")
    (a / ".mapp").write_text("not a directory")
    warnings: list[str] = []
    bundle = load_bundle(a, warn=warnings.append)
    assert len(warnings) == 1 and warnings[0].startswith(f"cannot write the cache in {a / '.mapp'}; using ")
    assert bundle.events.equals(expected)
    assert (a / ".mapp").read_text() == "not a directory"
    # the same process loading it again reuses that temporary cache
    again = load_bundle(a, warn=lambda m: None)
    assert again.from_cache and again.events_path == bundle.events_path


def _fresh(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


# --- temporary directories ------------------------------------------------------------------

_LOAD_AND_USE = textwrap.dedent("""
    import gc, os, sys
    from mapp.analysis.ingest import load_bundle
    scan = load_bundle(sys.argv[1], warn=print).scan()   # the bundle object is gone at once
    gc.collect()
    print("rows", scan.collect().height)
    print("during", sorted(n for n in os.listdir(os.environ["TMPDIR"]) if n.startswith("mapp-")))
""")


def _unwritable(directory: Path, how: str) -> None:
    if how == "cache-is-a-file":
        shutil.rmtree(directory / ".mapp", ignore_errors=True)
        (directory / ".mapp").write_text("")
    else:
        shutil.rmtree(directory / ".mapp", ignore_errors=True)
        directory.chmod(0o555)


@pytest.mark.parametrize("how", [
    "cache-is-a-file",
    pytest.param("read-only-directory", marks=pytest.mark.skipif(
        os.geteuid() == 0, reason="root writes into a read-only directory; cache-is-a-file covers this path")),
])
def test_the_fallback_cache_is_removed_when_the_process_exits(tmp_path, how):
    bundle, tmp = tmp_path / "bundle", _fresh(tmp_path / "tmp")
    bundle.mkdir()
    job(bundle, dp=2)
    _unwritable(bundle, how)
    try:
        env = {**os.environ, "TMPDIR": str(tmp), "PYTHONPATH": str(REPO)}
        run = subprocess.run([sys.executable, "-c", _LOAD_AND_USE, str(bundle)], capture_output=True, text=True,
                             env=env, cwd=REPO)
    finally:
        bundle.chmod(0o755)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].startswith(f"cannot write the cache in {bundle / '.mapp'}; using {tmp}/mapp-cache-")
    assert "rows 12" in lines                   # used after the bundle object was dropped
    assert any(line.startswith("during ['mapp-cache-") for line in lines)
    assert os.listdir(tmp) == [], "nothing of the run is left in the temp directory"


_HOLD_LOCK = textwrap.dedent("""
    import fcntl, os, sys
    fd = os.open(sys.argv[1], os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        print("taken")
    except BlockingIOError:
        print("held elsewhere")
""")


def test_a_cache_being_built_is_locked_against_other_processes(tmp_path):
    from mapp.analysis.ingest import cache as cache_files

    cache = tmp_path / ".mapp"
    cache.mkdir()
    probe = [sys.executable, "-c", _HOLD_LOCK, str(cache / cache_files.LOCK)]
    with cache_files.building(cache):
        inside = subprocess.run(probe, capture_output=True, text=True, check=True).stdout.strip()
    after = subprocess.run(probe, capture_output=True, text=True, check=True).stdout.strip()
    assert (inside, after) == ("held elsewhere", "taken")


_LOAD_AT_ONCE = textwrap.dedent("""
    import sys, time
    from mapp.analysis.ingest import load_bundle
    start = float(sys.argv[2])
    while time.time() < start:
        pass
    print(load_bundle(sys.argv[1]).events.height)
""")


def test_commands_opening_one_new_bundle_at_once_all_read_it_and_leave_one_valid_cache(tmp_path):
    # two detectors started together over the same new bundles: one stopped with a traceback
    # (FileNotFoundError), the other had renamed the ranks table it was writing
    from mapp.analysis.ingest import cache as cache_files

    bundle = tmp_path / "bundle"
    bundle.mkdir()
    job(bundle, dp=4, events_per_rank=400)
    start = str(time.time() + 3)   # all four wait for the same moment (a late starter just starts)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    runs = [subprocess.Popen([sys.executable, "-c", _LOAD_AT_ONCE, str(bundle), start], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env, cwd=REPO) for _ in range(4)]
    outs = [r.communicate(timeout=120) for r in runs]
    assert all(r.returncode == 0 for r in runs), [err for _, err in outs]
    assert len({out.strip() for out, _ in outs}) == 1
    assert cache_files.check(bundle / ".mapp", json.loads((bundle / ".mapp" / "manifest.json").read_text())).fresh
