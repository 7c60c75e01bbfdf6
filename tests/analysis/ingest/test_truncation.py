"""PyTorch profiler traces cut off mid-write (a job killed while the profiler wrote, a copy in
progress), plain and gzip: wherever the cut is, the load either keeps the events before it with
one warning line, or stops with one line saying which file is damaged; never a traceback, never
a hint to pass ``--format``, never a change to the file."""

from __future__ import annotations

import gzip
import pathlib

import pytest

from mapp.analysis.ingest import load_bundle
from mapp.errors import MappError, TraceFormatError

ROOT = pathlib.Path(__file__).parent.parent.parent
GLOO = ROOT / "fixtures" / "kineto_gloo" / "rank-1.json"
H200 = ROOT / "fixtures" / "kineto_nccl_h200" / "rank-0.json"
CORPUS_GZ = ROOT / "corpus" / "cases" / "ddp4-prof-healthy" / "rank-1.json.gz"
# as torch.profiler's tensorboard_trace_handler wrote it (the corpus's other traces were
# rewritten): its text starts with a space, " {"
USERS_GZ = next((ROOT / "corpus" / "cases-users" / "ddp4-transformer-tb-fwd1.4x-r0").glob("*.pt.trace.json.gz"))

# (source, name in the bundle): names as the profiler's users write them ("rank-1.json" is also
# the mapp v1 naming; "*.pt.trace.json(.gz)" is tensorboard_trace_handler's)
SOURCES = {
    "gloo-rank-name": (GLOO, "rank-1.json"),
    "h200-tensorboard-name": (H200, "host_77.1700000000123.pt.trace.json"),
    "corpus-gzip": (CORPUS_GZ, "rank-1.json.gz"),
    "corpus-gzip-tensorboard-name": (CORPUS_GZ, "host_77.1700000000123.pt.trace.json.gz"),
    "profiler-written-gzip": (USERS_GZ, USERS_GZ.name),
    "profiler-written-plain": (USERS_GZ, USERS_GZ.name.removesuffix(".gz")),
}


def _offsets(size: int) -> list[int]:
    return sorted({1, 2, 10, 50, 100, 300, 600, 1000, 2000, size // 4, size // 2, 3 * size // 4,
                   size - 9, size - 1} - {0})


def _load(directory: pathlib.Path):
    warnings: list[str] = []
    try:
        return load_bundle(directory, warn=warnings.append), warnings, None
    except MappError as error:
        return None, warnings, error


@pytest.mark.parametrize("source", sorted(SOURCES))
def test_a_trace_cut_anywhere_is_salvaged_or_one_line_error(tmp_path, source):
    src, name = SOURCES[source]
    data = src.read_bytes()
    if src.suffix == ".gz" and not name.endswith(".gz"):
        data = gzip.decompress(data)
    full, _, error = _load(_bundle_of(tmp_path / "full", name, data))
    assert error is None
    full_events = full.events.height
    salvaged = 0
    for cut in _offsets(len(data)):
        path = _bundle_of(tmp_path / f"cut{cut}", name, data[:cut]) / name
        bundle, warnings, error = _load(path.parent)
        assert path.read_bytes() == data[:cut], "the input is never rewritten"
        if error is not None:
            assert isinstance(error, TraceFormatError), (cut, error)
            assert "\n" not in str(error) and "--format" not in str(error), (cut, str(error))
            assert str(path) in str(error), (cut, str(error))
            continue
        mine = [w for w in warnings if str(path) in w]
        assert len(mine) == 1 and "\n" not in mine[0], (cut, warnings)
        assert mine[0] == f"{path}: truncated at byte {cut}; kept {bundle.events.height} events"
        assert bundle.events.height <= full_events
        if cut < 3 * len(data) // 4 + 1:
            assert bundle.events.height < full_events, cut
        salvaged += bundle.events.height > 0
    assert salvaged >= 4, "cuts past the head keep the events before them"


def _bundle_of(directory: pathlib.Path, name: str, data: bytes) -> pathlib.Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_bytes(data)
    return directory


def test_a_gzip_stream_cut_in_its_trailer_is_read_and_said(tmp_path):
    # every byte of content came out, but the stream has no end: the file was not finished
    data = CORPUS_GZ.read_bytes()
    path = _bundle_of(tmp_path / "cut", "rank-1.json.gz", data[:-4]) / "rank-1.json.gz"
    whole = load_bundle(_bundle_of(tmp_path / "whole", "rank-1.json.gz", data))
    warnings: list[str] = []
    bundle = load_bundle(path.parent, warn=warnings.append)
    assert bundle.events.height == whole.events.height
    assert warnings == [f"{path}: truncated at byte {len(data) - 4}; kept {whole.events.height} events"]


@pytest.mark.parametrize("name", ["rank-1.json", "host_77.1700000000123.pt.trace.json", "trace-one.json"])
def test_a_trace_cut_before_its_events_names_the_file(tmp_path, name):
    data = GLOO.read_bytes()
    before_events = data.index(b'"traceEvents"') - 20
    path = _bundle_of(tmp_path, name, data[:before_events]) / name
    with pytest.raises(TraceFormatError, match=r"cut off .*before its traceEvents") as caught:
        load_bundle(tmp_path)
    assert str(path) in str(caught.value) and "--format" not in str(caught.value)


@pytest.mark.parametrize("cut", [1, 5, 12])
def test_a_gzip_file_cut_in_its_header_names_the_file(tmp_path, cut):
    path = _bundle_of(tmp_path, "rank-1.json.gz", CORPUS_GZ.read_bytes()[:cut]) / "rank-1.json.gz"
    with pytest.raises(TraceFormatError, match=r"rank-1\.json\.gz is cut off after 0 bytes") as caught:
        load_bundle(tmp_path)
    assert str(path) in str(caught.value)


def test_a_cut_file_beside_whole_traces_is_reported_not_dropped_silently(tmp_path):
    # with other ranks whole, a file cut in its first bytes is skipped, and the warning names it
    for rank in (0, 2, 3):
        (tmp_path / f"rank-{rank}.json.gz").write_bytes((CORPUS_GZ.parent / f"rank-{rank}.json.gz").read_bytes())
    (tmp_path / "rank-1.json.gz").write_bytes(gzip.compress(b'{"schem'))
    warnings: list[str] = []
    bundle = load_bundle(tmp_path, warn=warnings.append)
    assert bundle.ranks["rank"].to_list() == [0, 2, 3]
    assert any("rank-1.json.gz" in w and "damaged" in w for w in warnings), warnings
