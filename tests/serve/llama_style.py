"""A Llama-2-style tokenizer (sentencepiece ``▁`` words, byte fallback, a decoder that strips
the leading space), trained offline: the other family incremental decoding must match."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentworld.serve.tiny import _corpus

# No CJK or emoji in training: those characters go through byte fallback.
_EXTRA = ["héllo wörld café", "e\u0301 n\u0303 combining"]


def make_llama_style_tokenizer(path: str | Path, vocab_size: int = 600) -> Any:
    """Train it, save it as an HF folder at ``path``, and return it loaded."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    trained = Tokenizer(models.BPE())
    trained.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False)
    trained.train_from_iterator(_corpus(500, 1) + _EXTRA, trainer=trainer)
    model = trained.get_vocab()
    # Byte-fallback tokens <0x00>..<0xFF> as ordinary vocabulary, as in Llama 2's.
    for b in range(256):
        model.setdefault(f"<0x{b:02X}>", len(model))
    specials = ["<unk>", "<s>", "</s>"]
    for s in specials:
        model.setdefault(s, len(model))
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in _merges(trained)]
    tok = Tokenizer(models.BPE(model, merges, unk_token="<unk>", byte_fallback=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.pre_tokenizer = None
    tok.decoder = decoders.Sequence(
        [
            decoders.Replace("▁", " "),
            decoders.ByteFallback(),
            decoders.Fuse(),
            decoders.Strip(" ", 1, 0),
        ]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )
    fast.save_pretrained(str(path))
    return AutoTokenizer.from_pretrained(str(path))


def _merges(tok: Any) -> list[Any]:
    import json

    return json.loads(tok.to_str())["model"]["merges"]
