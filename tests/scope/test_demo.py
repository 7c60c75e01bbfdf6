"""The demo model: trained here on the shipped text, saved so that a killed run looks unfinished."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("megatron.core")

from mapp.errors import OutputError  # noqa: E402
from mapp.scope.demo import (  # noqa: E402
    CORPUS, DEMO_SPEC, MARKER, corpus_text, default_demo_dir, demo_is_trained, train_demo_model,
)
from mapp.scope.model import SPEC_FILE, ModelSpec  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
JOB = Path(__file__).with_name("_demo_job.py")


def _train(directory: Path, steps: int) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="", PYTHONWARNINGS="ignore")
    proc = subprocess.run([sys.executable, str(JOB), str(directory), str(steps)], capture_output=True,
                          text=True, timeout=240, env=env, cwd=ROOT)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_training_lowers_the_loss_and_leaves_a_loadable_finished_checkpoint(tmp_path):
    directory = tmp_path / "cache" / "scope-demo"
    result = _train(directory, steps=40)
    losses = [loss for _, _, loss in result["progress"]]
    assert [(s, n) for s, n, _ in result["progress"]] == [(s, 40) for s in range(1, 41)]
    # from log(256) = 5.5 (uniform over bytes) down to at most the byte frequencies' entropy
    assert losses[0] > 5.0
    assert sum(losses[-5:]) / 5 < 3.0
    assert result["returned"] == str(directory) and result["trained"] and result["spec_is_demo"]
    assert result["eval"] and result["rng_untouched"]
    assert isinstance(result["sample"], str) and result["sample"]
    # the staging directory was renamed into place: nothing else is left beside it
    assert sorted(p.name for p in directory.parent.iterdir()) == ["scope-demo"]
    marker = json.loads((directory / MARKER).read_text())
    assert marker["steps"] == 40 and marker["final_loss"] < marker["first_loss"]


def test_a_half_written_or_foreign_directory_is_not_a_trained_demo(tmp_path):
    assert not demo_is_trained(tmp_path / "missing")
    DEMO_SPEC.save(tmp_path)                      # a spec, but no weights and no marker
    assert not demo_is_trained(tmp_path)
    (tmp_path / "metadata.json").write_text("{}")
    assert not demo_is_trained(tmp_path)          # killed before the marker was written
    (tmp_path / MARKER).write_text("{}")
    assert demo_is_trained(tmp_path)
    other = ModelSpec(**{**json.loads((tmp_path / SPEC_FILE).read_text()), "num_layers": 2})
    other.save(tmp_path)                          # an older demo of another architecture
    assert not demo_is_trained(tmp_path)


def test_training_refuses_to_replace_a_directory_that_is_not_a_checkpoint(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(OutputError, match="is not a scope checkpoint"):
        train_demo_model(tmp_path, steps=1)
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


def test_default_demo_dir_follows_mapp_home(monkeypatch, tmp_path):
    monkeypatch.setenv("MAPP_HOME", str(tmp_path))
    assert default_demo_dir() == tmp_path / "scope-demo"
    monkeypatch.delenv("MAPP_HOME")
    assert default_demo_dir() == Path.home() / ".cache" / "mapp" / "scope-demo"


def test_the_shipped_text_is_small_and_made_by_the_script_next_to_it(tmp_path):
    assert CORPUS.stat().st_size < 1_000_000
    text = corpus_text()
    assert "The secret word is" in text and "gave" in text and "Q: What color is the banana? A:" in text
    out = tmp_path / "corpus.txt"
    subprocess.run([sys.executable, str(CORPUS.with_name("make_corpus.py")), str(out)], check=True,
                   capture_output=True)
    assert out.read_text() == text
    assert DEMO_SPEC.num_query_groups < DEMO_SPEC.num_attention_heads    # the demo shows GQA
