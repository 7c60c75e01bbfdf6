"""The scope model: one spec file, a dist checkpoint that reshards, one-line errors, tokenizers."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("megatron.core")

from mapp.errors import InputError  # noqa: E402
from mapp.scope.model import SPEC_FILE, ModelSpec, load_checkpoint  # noqa: E402
from mapp.scope.tokenizer import ByteTokenizer, Tokenizer, load_tokenizer  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
JOB = Path(__file__).with_name("_ckpt_job.py")
SPEC = ModelSpec(num_layers=2, hidden_size=64, num_attention_heads=4, num_query_groups=2,
                 ffn_hidden_size=128, vocab_size=256, max_sequence_length=32)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="", PYTHONWARNINGS="ignore",
               PYTHONPATH=str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""))
    return env


def _job(args: list[str], nproc: int = 1, check: bool = True) -> subprocess.CompletedProcess:
    if nproc == 1:
        cmd = [sys.executable, str(JOB), *args]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
               str(JOB), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=_env(), cwd=ROOT)
    if check:
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    return proc


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A fresh model saved at TP=1 PP=1, and its logits on the job's fixed tokens."""
    root = tmp_path_factory.mktemp("scope-ckpt")
    _job(["--save-new", str(root / "tp1"), "--logits", str(root / "tp1.pt")])
    return root


def test_a_checkpoint_saved_at_tp1_gives_the_same_logits_at_tp2_and_back_at_pp2(saved):
    reference = torch.load(saved / "tp1.pt")
    assert reference.shape == (3, 20, 256)
    assert (saved / "tp1" / SPEC_FILE).is_file()
    assert ModelSpec.load(saved / "tp1") == SPEC

    # TP=1 -> TP=2 (GQA: one query group per rank); the TP=2 run saves again at TP=2
    _job(["--tp", "2", "--load", str(saved / "tp1"), "--save", str(saved / "tp2"),
          "--logits", str(saved / "tp2.pt")], nproc=2)
    assert torch.allclose(torch.load(saved / "tp2.pt"), reference, rtol=0, atol=1e-5)

    # TP=2 -> PP=2 (the tied output layer of the last stage comes from the embedding)
    _job(["--pp", "2", "--load", str(saved / "tp2"), "--logits", str(saved / "pp2.pt")], nproc=2)
    assert torch.allclose(torch.load(saved / "pp2.pt"), reference, rtol=0, atol=1e-5)


def test_weights_that_do_not_fit_the_spec_are_a_one_line_error(saved, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(saved / "tp1", bad)
    (bad / SPEC_FILE).write_text(json.dumps({**asdict(SPEC), "ffn_hidden_size": 256}))
    proc = _job(["--load", str(bad), "--logits", str(tmp_path / "x.pt")], check=False)
    assert proc.returncode == 2, proc.stderr[-3000:]
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith(f"InputError: cannot load the weights of {bad}: ")
    assert "mismatch" in line and "linear_fc1.weight" in line


def _one_line_error(directory) -> str:
    with pytest.raises(InputError) as info:
        load_checkpoint(directory)
    text = str(info.value)
    assert "\n" not in text and len(text) < 400
    return text


def test_missing_or_invalid_checkpoints_are_one_line_errors(tmp_path):
    assert "is not a directory" in _one_line_error(tmp_path / "nope")
    (tmp_path / "file").write_text("x")
    assert "is not a directory" in _one_line_error(tmp_path / "file")
    assert f"has no {SPEC_FILE}" in _one_line_error(tmp_path)

    (tmp_path / SPEC_FILE).write_text("{not json")
    assert "is not valid JSON" in _one_line_error(tmp_path)
    (tmp_path / SPEC_FILE).write_text(json.dumps({**asdict(SPEC), "colour": "red"}))
    assert "unknown fields: colour" in _one_line_error(tmp_path)
    (tmp_path / SPEC_FILE).write_text(json.dumps({**asdict(SPEC), "num_query_groups": 3}))
    assert "not a multiple of num_query_groups" in _one_line_error(tmp_path)
    (tmp_path / SPEC_FILE).write_text(json.dumps({k: v for k, v in asdict(SPEC).items() if k != "vocab_size"}))
    assert "vocab_size" in _one_line_error(tmp_path)
    (tmp_path / SPEC_FILE).write_text(json.dumps({**asdict(SPEC), "activation": "relu"}))
    assert "activation 'relu'" in _one_line_error(tmp_path)

    SPEC.save(tmp_path)    # a valid spec, but no weights
    assert "not a Megatron distributed checkpoint" in _one_line_error(tmp_path)


def test_spec_round_trips_through_its_json_file(tmp_path):
    SPEC.save(tmp_path)
    assert json.loads((tmp_path / SPEC_FILE).read_text()) == asdict(SPEC)
    assert ModelSpec.load(tmp_path) == SPEC
    assert [p.name for p in tmp_path.iterdir()] == [SPEC_FILE]   # no temporary file left


def test_transformer_config_carries_the_spec():
    import torch.nn.functional as F

    from mapp.scope.model import gelu_tanh

    cfg = ModelSpec(**{**asdict(SPEC), "activation": "gelu_tanh", "add_bias_linear": False}).transformer_config(tp=2)
    assert (cfg.num_layers, cfg.hidden_size, cfg.num_attention_heads, cfg.num_query_groups, cfg.ffn_hidden_size) \
        == (2, 64, 4, 2, 128)
    assert cfg.tensor_model_parallel_size == 2 and cfg.use_cpu_initialization
    assert cfg.attention_dropout == 0 and cfg.hidden_dropout == 0 and not cfg.add_bias_linear
    assert cfg.activation_func is gelu_tanh
    x = torch.linspace(-4, 4, 101)
    assert torch.allclose(gelu_tanh(x), F.gelu(x, approximate="tanh"))
    assert SPEC.transformer_config().activation_func is F.gelu


def test_byte_tokenizer_round_trips_and_shows_each_byte_printably():
    tok = load_tokenizer("unused", SPEC)
    assert isinstance(tok, ByteTokenizer) and isinstance(tok, Tokenizer) and tok.vocab_size == 256
    text = "Anna gave Tom 3 apples.\nÜber café ✓"
    ids = tok.encode(text)
    assert ids[:4] == [65, 110, 110, 97] and len(ids) == len(text.encode("utf-8"))
    assert tok.decode(ids) == text
    assert tok.decode([72, 105, 300]) == "Hi\ufffd"      # an id of a padded vocabulary
    assert [tok.token_text(i) for i in tok.encode("a b\n\t")] == ["a", " ", "b", "\\n", "\\t"]
    assert tok.token_text(0) == "\\x00" and tok.token_text(0x7F) == "\\x7f"
    assert [tok.token_text(i) for i in "é".encode("utf-8")] == ["\\xc3", "\\xa9"]
    assert all(tok.token_text(i).isprintable() for i in range(256))
