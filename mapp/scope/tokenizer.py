"""Tokenizers of scope models: UTF-8 bytes (the demo) and GPT-2's BPE (converted checkpoints).

Which one a checkpoint uses is ``ModelSpec.tokenizer``. The GPT-2 one reads only the files
the converter copied into the checkpoint directory: nothing is fetched from the hub.
``token_text`` is for display: the printable form of one token, so that a page can label
heatmap rows and top-k bars even when a token is a fragment of a UTF-8 character.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Protocol, runtime_checkable

from mapp.errors import InputError

__all__ = ["Tokenizer", "ByteTokenizer", "GPT2Tokenizer", "load_tokenizer", "TOKENIZER_FILES"]

TOKENIZER_FILES = ("vocab.json", "merges.txt", "tokenizer.json", "tokenizer_config.json",
                   "special_tokens_map.json")
"""The Hugging Face tokenizer files a converted checkpoint keeps (whichever the source had)."""

_END_OF_TEXT = "<|endoftext|>"
_NAMED_ESCAPES = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


@runtime_checkable
class Tokenizer(Protocol):
    """What MegaScope needs from a tokenizer."""

    vocab_size: int

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...

    def token_text(self, token_id: int) -> str: ...


def _printable_bytes(data: bytes) -> str:
    """``data`` as text where it is printable UTF-8; \\n, \\t, \\r and \\xNN escapes elsewhere."""
    out = []
    text = data.decode("utf-8", errors="backslashreplace")   # invalid bytes become \\xNN
    for ch in text:
        if ch in _NAMED_ESCAPES:
            out.append(_NAMED_ESCAPES[ch])
        elif ch.isprintable() or ch == " ":
            out.append(ch)
        else:
            out.append("".join(f"\\x{b:02x}" for b in ch.encode("utf-8")))
    return "".join(out)


class ByteTokenizer:
    """One token per UTF-8 byte: vocabulary 256, nothing to ship, any text encodes."""

    vocab_size = 256

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: list[int]) -> str:
        """Bytes back to text; ids outside 0..255 (a padded model vocabulary) and broken UTF-8
        decode to U+FFFD."""
        data = bytes(i if 0 <= i < 256 else 0xFF for i in ids)   # 0xFF is never valid UTF-8
        return data.decode("utf-8", errors="replace")

    def token_text(self, token_id: int) -> str:
        """The byte's character if printable ASCII, else an escape (\\n, \\t, \\r, \\xNN)."""
        if not 0 <= token_id < 256:
            return f"<{token_id}>"
        return _printable_bytes(bytes([token_id]))


@lru_cache(maxsize=1)
def _gpt2_byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level BPE spells byte b as a printable character; this maps it back.

    The table is GPT-2's ``bytes_to_unicode``: printable Latin-1 bytes stand for themselves,
    the others are shifted to 256 and above in byte order."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    chars = keep[:]
    extra = 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(keep, chars)}


class GPT2Tokenizer:
    """GPT-2's byte-level BPE, from tokenizer files in a local directory (no hub).

    Read with the ``tokenizers`` library (what transformers' fast tokenizers run on) from
    ``tokenizer.json``, or from ``vocab.json`` + ``merges.txt`` where that is all there is."""

    def __init__(self, directory) -> None:
        directory = Path(directory)
        try:
            self._tok = self._read(directory)
        except Exception as e:  # tokenizers raises plain Exceptions with long messages
            text = " ".join(str(e).split())[:200]
            raise InputError(f"cannot read the GPT-2 tokenizer files in {directory}: {text}",
                             "the converter copies tokenizer.json (or vocab.json and merges.txt) there") from None
        self.vocab_size = self._tok.get_vocab_size(with_added_tokens=True)

    @staticmethod
    def _read(directory: Path):
        from tokenizers import Tokenizer as HFTokenizer
        from tokenizers.implementations import ByteLevelBPETokenizer

        if (directory / "tokenizer.json").is_file():
            return HFTokenizer.from_file(str(directory / "tokenizer.json"))
        tok = ByteLevelBPETokenizer(str(directory / "vocab.json"), str(directory / "merges.txt"))
        if tok.token_to_id(_END_OF_TEXT) is not None:
            tok.add_special_tokens([_END_OF_TEXT])   # one token, not 13 bytes, as in GPT-2
        return tok

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: list[int]) -> str:
        """Text of ``ids``; ids the tokenizer does not know (a padded vocabulary) are skipped."""
        return self._tok.decode([i for i in ids if 0 <= i < self.vocab_size], skip_special_tokens=False)

    def token_text(self, token_id: int) -> str:
        """The token's bytes as text (a leading space stays a space); a token that is part of
        a multi-byte character shows its bytes as \\xNN."""
        piece = self._tok.id_to_token(token_id) if 0 <= token_id < self.vocab_size else None
        if piece is None:
            return f"<{token_id}>"
        decoder = _gpt2_byte_decoder()
        if all(ch in decoder for ch in piece):
            return _printable_bytes(bytes(decoder[ch] for ch in piece))
        return piece   # a special token such as <|endoftext|>, spelled as is


def load_tokenizer(directory, spec) -> Tokenizer:
    """The tokenizer a checkpoint's spec names: bytes, or GPT-2 files from ``directory``."""
    if spec.tokenizer == "bytes":
        return ByteTokenizer()
    if spec.tokenizer == "gpt2":
        directory = Path(directory)
        if not any((directory / name).is_file() for name in TOKENIZER_FILES):
            raise InputError(f"{directory} has no tokenizer files (vocab.json, merges.txt, tokenizer.json)",
                             "copy the GPT-2 tokenizer files into the checkpoint directory")
        return GPT2Tokenizer(directory)
    raise InputError(f"unknown tokenizer {spec.tokenizer!r} in the model spec", "use 'bytes' or 'gpt2'")
