"""Rank files in per-node subdirectories (each host writing its own ``node0/``, ``node1/``...)
are found at any depth and read like top-level ones; hidden directories (the ``.mapp`` cache)
are never entered and a symbolic link back up the tree does not loop."""

from __future__ import annotations

import os
import pathlib
import shutil

import polars as pl
import pytest

from mapp.analysis.ingest import load_bundle
from mapp.analysis.ingest.discover import discover
from mapp.errors import InputError, LayoutError
from tests.analysis.ingest import megatronapp_fixture
from tests.v1_builder import job

FIXTURES = pathlib.Path(__file__).parent.parent.parent / "fixtures"
H200 = FIXTURES / "kineto_nccl_h200"


def _v1_flat(directory: pathlib.Path) -> list[pathlib.Path]:
    directory.mkdir(parents=True, exist_ok=True)
    job(directory, tp=2, dp=2)
    return sorted(directory.glob("rank-*.json"))


def _kineto_flat(directory: pathlib.Path) -> list[pathlib.Path]:
    directory.mkdir(parents=True, exist_ok=True)
    # named as PyTorch's tensorboard_trace_handler names them: no rank in the name
    out = []
    for rank, src in enumerate(sorted(H200.glob("rank-*.json"))):
        out.append(directory / f"host{rank}_1234.1700000000{rank}.pt.trace.json")
        shutil.copyfile(src, out[-1])
    return out


def _megatronapp_flat(directory: pathlib.Path) -> list[pathlib.Path]:
    written = megatronapp_fixture.write_trace_dir(directory, tp=2, pp=2, dp=1, iterations=2)
    return sorted(written.files.values())


WRITERS = {"mapp": _v1_flat, "kineto": _kineto_flat, "megatronapp": _megatronapp_flat}


def _spread(files: list[pathlib.Path], root: pathlib.Path, nodes: int = 2) -> None:
    """Move the files into ``root/node<i>/`` round robin (ranks do not follow the node number)."""
    for index, path in enumerate(files):
        node = root / f"node{index % nodes}"
        node.mkdir(parents=True, exist_ok=True)
        os.replace(path, node / path.name)


def _comparable(bundle) -> pl.DataFrame:
    return bundle.events.drop("src_file").sort(bundle.events.drop("src_file").columns)


@pytest.mark.parametrize("fmt", sorted(WRITERS))
def test_rank_files_in_node_subdirectories_are_read_like_flat_ones(tmp_path, fmt):
    flat, nested = tmp_path / "flat", tmp_path / "nested"
    WRITERS[fmt](flat)
    _spread(WRITERS[fmt](nested), nested)
    assert not list(nested.glob("*.json")), "every rank file is in a subdirectory"

    expected, bundle = load_bundle(flat), load_bundle(nested)
    assert bundle.format == fmt
    assert bundle.ranks["rank"].to_list() == expected.ranks["rank"].to_list()
    assert _comparable(bundle).equals(_comparable(expected))
    # every event points at the file it came from, in its subdirectory
    sources = set(bundle.events["src_file"].unique())
    assert sources == {str(p) for p in nested.glob("node*/*.json")}


def test_files_at_any_depth_and_at_the_top_are_one_bundle(tmp_path):
    files = _v1_flat(tmp_path)
    deep = tmp_path / "a" / "b" / "c"
    deep.mkdir(parents=True)
    os.replace(files[3], deep / files[3].name)
    os.replace(files[2], tmp_path / "a" / files[2].name)
    found = discover(tmp_path)
    assert [p.relative_to(tmp_path).as_posix() for p in found.files] == [
        "a/b/c/rank-00003.json", "a/rank-00002.json", "rank-00000.json", "rank-00001.json"]
    assert load_bundle(tmp_path).ranks["rank"].to_list() == [0, 1, 2, 3]


def test_hidden_directories_and_the_cache_are_never_entered(tmp_path):
    _spread(_v1_flat(tmp_path), tmp_path)
    load_bundle(tmp_path)                        # writes tmp_path/.mapp
    # copies of rank files where a duplicate rank would be an error if they were read
    for hidden in (tmp_path / ".mapp", tmp_path / ".git" / "objects", tmp_path / "node0" / ".old"):
        hidden.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(tmp_path / "node0" / "rank-00000.json", hidden / "rank-00000.json")
    shutil.copyfile(tmp_path / "node0" / "rank-00000.json", tmp_path / "node1" / ".rank-00000.json")
    assert load_bundle(tmp_path).ranks["rank"].to_list() == [0, 1, 2, 3]


def test_a_symlink_loop_is_read_once(tmp_path):
    _spread(_v1_flat(tmp_path), tmp_path)
    (tmp_path / "node0" / "up").symlink_to(tmp_path, target_is_directory=True)
    (tmp_path / "node1" / "self").symlink_to(tmp_path / "node1", target_is_directory=True)
    (tmp_path / "node1" / "dangling").symlink_to(tmp_path / "gone", target_is_directory=True)
    found = discover(tmp_path)
    assert sorted(p.name for p in found.files) == [f"rank-0000{r}.json" for r in range(4)]
    assert load_bundle(tmp_path).ranks["rank"].to_list() == [0, 1, 2, 3]


def test_a_symlinked_node_directory_is_followed(tmp_path):
    elsewhere, bundle = tmp_path / "shared" / "node1", tmp_path / "bundle"
    files = _v1_flat(bundle)
    elsewhere.mkdir(parents=True)
    for path in files[2:]:
        os.replace(path, elsewhere / path.name)
    (bundle / "node1").symlink_to(elsewhere, target_is_directory=True)
    assert load_bundle(bundle).ranks["rank"].to_list() == [0, 1, 2, 3]


def test_two_node_directories_claiming_one_rank_is_an_error(tmp_path):
    _spread(_v1_flat(tmp_path), tmp_path)
    shutil.copyfile(tmp_path / "node1" / "rank-00001.json", tmp_path / "node0" / "rank-00001.json")
    with pytest.raises(LayoutError, match=r"rank 1 is claimed by more than one file: .*node0/rank-00001\.json, "
                                          r".*node1/rank-00001\.json"):
        load_bundle(tmp_path)


def test_moving_a_file_to_another_node_directory_invalidates_the_cache(tmp_path):
    _spread(_v1_flat(tmp_path), tmp_path)
    assert not load_bundle(tmp_path).from_cache
    assert load_bundle(tmp_path).from_cache
    # same name, size and mtime: only the directory differs
    os.replace(tmp_path / "node1" / "rank-00001.json", tmp_path / "node0" / "rank-00001.json")
    again = load_bundle(tmp_path)
    assert not again.from_cache
    moved = again.ranks.filter(pl.col("rank") == 1)["src_file"].to_list()
    assert moved == [str(tmp_path / "node0" / "rank-00001.json")]


def test_only_empty_subdirectories_is_empty(tmp_path):
    (tmp_path / "node0" / "deeper").mkdir(parents=True)
    (tmp_path / "node1").mkdir()
    with pytest.raises(InputError, match="is empty"):
        load_bundle(tmp_path)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any directory: permissions cannot make one unreadable")
def test_an_unreadable_subdirectory_is_an_error_not_a_silent_gap(tmp_path):
    _spread(_v1_flat(tmp_path), tmp_path)
    locked = tmp_path / "node1"
    locked.chmod(0)
    try:
        with pytest.raises(InputError, match="cannot read the directory .*node1"):
            load_bundle(tmp_path)
    finally:
        locked.chmod(0o755)
