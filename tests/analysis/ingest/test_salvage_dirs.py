"""Salvaged copies of cut-off v1 files (``mapp-salvage-*`` in the temp directory) are made only
when a file needs one and never outlive the load, whichever way it ends."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from mapp.analysis.ingest import load_bundle, mapp_v1
from mapp.errors import LayoutError
from tests.v1_builder import job


def _fresh(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def test_no_salvage_directory_is_left_behind(tmp_path, monkeypatch):
    tmp = _fresh(tmp_path / "tmp")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    traces = tmp_path / "traces"
    traces.mkdir()
    job(traces, dp=2)
    load_bundle(traces)                                             # nothing to salvage
    assert os.listdir(tmp) == []
    cut = traces / "rank-00001.json"
    cut.write_text(cut.read_text()[:-25])                           # salvaged from a copy
    load_bundle(traces, warn=lambda m: None)
    assert os.listdir(tmp) == []
    # a copy made, then the ranks found inconsistent before the first batch was read
    shutil.copyfile(traces / "rank-00000.json", traces / "rank-00002.json")
    with pytest.raises(LayoutError, match="claimed by more than one file"):
        load_bundle(traces, warn=lambda m: None)
    assert os.listdir(tmp) == []


def test_a_batch_stream_dropped_unread_removes_its_copies(tmp_path, monkeypatch):
    tmp = _fresh(tmp_path / "tmp")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    job(tmp_path, dp=2)
    cut = tmp_path / "rank-00001.json"
    cut.write_text(cut.read_text()[:-25])
    batches, _ = mapp_v1.read_batches(sorted(tmp_path.glob("rank-*.json")), warn=lambda m: None)
    assert [n.startswith("mapp-salvage-") for n in os.listdir(tmp)] == [True]
    del batches
    assert os.listdir(tmp) == []
