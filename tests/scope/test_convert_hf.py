"""The GPT-2 converter: logits of the converted checkpoint equal Hugging Face's own.

The GPT-2 here is made locally (random weights, a tiny byte-level BPE tokenizer trained on a
few sentences): nothing is downloaded. The expected logits come from transformers' model.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("megatron.core")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

from mapp.errors import InputError, OutputError  # noqa: E402
from mapp.scope.convert_hf import convert_gpt2, interleave_qkv  # noqa: E402
from mapp.scope.model import SPEC_FILE, ModelSpec  # noqa: E402
from mapp.scope.tokenizer import GPT2Tokenizer, load_tokenizer  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
JOB = Path(__file__).with_name("_convert_job.py")
VOCAB = 300
TEXT = ["Anna gave the ball to Tom.", "The secret word is zunt, and Tom said zunt.",
        "Q: What color is the banana? A: The banana is yellow.", "3 + 4 = 7", "Über café naïve ✓"] * 20


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="", PYTHONWARNINGS="ignore",
               PYTHONPATH=str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""))
    return env


def _job(args: list[str], nproc: int = 1) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(JOB), *args] if nproc == 1 else \
        [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", str(JOB), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=_env(), cwd=ROOT)


def _make_tokenizer(directory: Path):
    """A byte-level BPE of exactly VOCAB tokens (256 bytes, merges, <|endoftext|>), saved as
    GPT-2 tokenizer files: vocab.json + merges.txt, and transformers' tokenizer.json."""
    bpe = tokenizers.ByteLevelBPETokenizer()
    bpe.train_from_iterator(TEXT, vocab_size=VOCAB, min_frequency=1, special_tokens=["<|endoftext|>"],
                            show_progress=False)
    bpe.save_model(str(directory))
    tok = transformers.GPT2TokenizerFast(tokenizer_object=bpe._tokenizer, bos_token="<|endoftext|>",
                                         eos_token="<|endoftext|>", unk_token="<|endoftext|>")
    tok.save_pretrained(str(directory))
    assert len(tok) == VOCAB
    return tok


@pytest.fixture(scope="module")
def hf_gpt2(tmp_path_factory):
    """A random GPT-2 (every weight and bias perturbed, so that no mapping hides behind zeros
    and ones) saved with save_pretrained, its tokenizer, and HF's logits on some tokens."""
    root = tmp_path_factory.mktemp("hf-gpt2")
    hf_dir = root / "gpt2"
    hf_dir.mkdir()
    tok = _make_tokenizer(hf_dir)
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=VOCAB, n_positions=64,
                                     bos_token_id=VOCAB - 1, eos_token_id=VOCAB - 1)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    model.save_pretrained(str(hf_dir))
    text_ids = tok.encode(TEXT[1] + " " + TEXT[2])
    tokens = torch.cat([
        torch.randint(0, VOCAB, (2, 64), generator=torch.Generator().manual_seed(1)),  # every position
        torch.tensor([(text_ids * 64)[:64]]),                                        # real text
    ])
    with torch.no_grad():
        expected = model(tokens).logits
    torch.save(tokens, root / "tokens.pt")
    return {"root": root, "hf_dir": hf_dir, "tokens": tokens, "expected": expected, "tok": tok}


@pytest.fixture(scope="module")
def converted(hf_gpt2):
    root = hf_gpt2["root"]
    out = root / "mcore"
    proc = _job(["convert", str(hf_gpt2["hf_dir"]), str(out), str(root / "tokens.pt"), str(root / "tp1.pt")])
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    return out


def _check_logits(got: torch.Tensor, expected: torch.Tensor) -> None:
    assert got.shape == (*expected.shape[:2], 384)            # 300 padded to a multiple of 128
    assert (got[..., :VOCAB] - expected).abs().max().item() < 1e-4
    assert torch.equal(got[..., VOCAB:], torch.zeros_like(got[..., VOCAB:]))   # zero padding rows


def test_converted_logits_equal_hugging_face_at_tp1_and_tp2(hf_gpt2, converted):
    spec = ModelSpec.load(converted)
    assert spec == ModelSpec(num_layers=2, hidden_size=64, num_attention_heads=4, num_query_groups=4,
                             ffn_hidden_size=256, vocab_size=384, max_sequence_length=64,
                             activation="gelu_tanh", layernorm_epsilon=1e-5, tokenizer="gpt2")
    _check_logits(torch.load(hf_gpt2["root"] / "tp1.pt"), hf_gpt2["expected"])

    root = hf_gpt2["root"]
    proc = _job(["load", str(converted), str(root / "tokens.pt"), str(root / "tp2.pt"), "--tp", "2"], nproc=2)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    _check_logits(torch.load(root / "tp2.pt"), hf_gpt2["expected"])


def test_the_checkpoint_carries_the_tokenizer(hf_gpt2, converted):
    names = {p.name for p in converted.iterdir()}
    assert {SPEC_FILE, "metadata.json", "vocab.json", "merges.txt", "tokenizer.json"} <= names
    assert not [p for p in converted.parent.iterdir() if p.name.startswith(".mcore")]   # no staging left
    tok = load_tokenizer(converted, ModelSpec.load(converted))
    reference = hf_gpt2["tok"]
    assert isinstance(tok, GPT2Tokenizer) and tok.vocab_size == VOCAB
    for text in TEXT[:5]:
        ids = tok.encode(text)
        assert ids == reference.encode(text)
        assert tok.decode(ids) == text
    # a token with a leading space shows the space; a byte of a multi-byte character its escape
    spaced = [i for i in range(VOCAB) if reference.convert_ids_to_tokens(i).startswith("Ġ")
              and len(reference.convert_ids_to_tokens(i)) > 1]
    assert spaced and tok.token_text(spaced[0]) == " " + reference.convert_ids_to_tokens(spaced[0])[1:]
    assert tok.token_text(tok.encode("é")[0]) in ("é", "\\xc3")
    assert tok.token_text(reference.convert_tokens_to_ids("<|endoftext|>")) == "<|endoftext|>" and tok.token_text(VOCAB + 5) == f"<{VOCAB + 5}>"
    assert tok.decode([*tok.encode("Tom"), VOCAB + 5]) == "Tom"    # padded ids are skipped


def test_vocab_and_merges_alone_are_a_gpt2_tokenizer(hf_gpt2, tmp_path):
    for name in ("vocab.json", "merges.txt"):
        shutil.copy(hf_gpt2["hf_dir"] / name, tmp_path / name)
    tok = load_tokenizer(tmp_path, ModelSpec.load(hf_gpt2["root"] / "mcore") if (hf_gpt2["root"] / "mcore").exists()
                         else ModelSpec(1, 64, 4, 4, 256, 384, 64, tokenizer="gpt2"))
    reference = hf_gpt2["tok"]
    assert tok.vocab_size == VOCAB
    for text in TEXT[:5] + ["a<|endoftext|>b"]:
        assert tok.encode(text) == reference.encode(text)
        assert tok.decode(tok.encode(text)) == text


def test_interleave_puts_each_groups_q_heads_then_its_k_and_v():
    # 4 query heads in 2 groups, head_dim 1: rows named by what they hold
    q, k, v = torch.tensor([10., 11, 12, 13]), torch.tensor([20., 21]), torch.tensor([30., 31])
    assert interleave_qkv(q, k, v, groups=2).tolist() == [10, 11, 20, 30, 12, 13, 21, 31]
    assert interleave_qkv(q, torch.tensor([20., 21, 22, 23]), torch.tensor([30., 31, 32, 33]), groups=4).tolist() \
        == [10, 20, 30, 11, 21, 31, 12, 22, 32, 13, 23, 33]
    w = torch.arange(12.).reshape(6, 2)          # weights: rows move whole
    assert interleave_qkv(w[:2], w[2:4], w[4:], groups=2).tolist() == w[[0, 2, 4, 1, 3, 5]].tolist()


def test_refuses_to_write_into_the_source_or_a_non_empty_directory(hf_gpt2, tmp_path):
    hf_dir = hf_gpt2["hf_dir"]
    with pytest.raises(OutputError, match="is the Hugging Face directory"):
        convert_gpt2(hf_dir, hf_dir)
    (tmp_path / "x").write_text("mine")
    with pytest.raises(OutputError, match="exists and is not empty"):
        convert_gpt2(hf_dir, tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["x"]


def test_a_directory_that_is_not_a_gpt2_is_a_one_line_error(hf_gpt2, tmp_path):
    for setup, message in [
        (lambda d: None, "has no config.json"),
        (lambda d: (d / "config.json").write_text('{"model_type": "bert"}'), "not GPT-2"),
        (lambda d: shutil.copy(hf_gpt2["hf_dir"] / "config.json", d), "has no tokenizer files"),
    ]:
        d = tmp_path / message.replace(" ", "_")
        d.mkdir()
        setup(d)
        with pytest.raises(InputError, match=message) as info:
            convert_gpt2(d, tmp_path / "out")
        assert "\n" not in str(info.value)
    with pytest.raises(InputError, match="is not a directory"):
        convert_gpt2(tmp_path / "missing", tmp_path / "out")
    weights_missing = tmp_path / "weights_missing"
    shutil.copytree(hf_gpt2["hf_dir"], weights_missing)
    (weights_missing / "model.safetensors").unlink()
    with pytest.raises(InputError, match="cannot load the GPT-2 weights") as info:
        convert_gpt2(weights_missing, tmp_path / "out")
    assert "\n" not in str(info.value) and not (tmp_path / "out").exists()
