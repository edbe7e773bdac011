"""A tiny random Llama + locally trained tokenizer, so every test suite runs offline in seconds."""

from __future__ import annotations

import json
import random
from pathlib import Path

from agentworld.serve.chat import HERMES_CHATML_TEMPLATE

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Plain added tokens (not "special"): they must survive skip_special_tokens so the
# tool-call and reasoning parsers see them, as in Qwen2.5's tokenizer.
MARKUP_TOKENS = ["<tool_call>", "</tool_call>", "<think>", "</think>", "<tool_response>"]

_WORDS = [
    "the",
    "a",
    "an",
    "agent",
    "model",
    "tool",
    "call",
    "function",
    "name",
    "arguments",
    "json",
    "result",
    "answer",
    "question",
    "weather",
    "city",
    "paris",
    "london",
    "tokyo",
    "add",
    "number",
    "sum",
    "is",
    "of",
    "to",
    "and",
    "what",
    "how",
    "why",
    "user",
    "assistant",
    "system",
    "please",
    "compute",
    "return",
    "value",
    "true",
    "false",
    "null",
    "hello",
    "world",
    "think",
    "step",
    "first",
    "then",
    "0",
    "1",
    "2",
    "3",
    "4",
    "5",
    "6",
    "7",
    "8",
    "9",
    "{",
    "}",
    "[",
    "]",
    ":",
    ",",
    ".",
    "?",
    "!",
    '"',
    "'",
    "(",
    ")",
    "+",
    "-",
    "*",
    "/",
    "=",
    "<",
    ">",
]


def _corpus(n_lines: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    lines = [
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "paris"}}\n</tool_call>',
        "<think>first add the numbers then answer</think>",
    ]
    for _ in range(n_lines):
        lines.append(" ".join(rng.choice(_WORDS) for _ in range(rng.randint(4, 16))))
    return lines


def make_tiny_tokenizer(path: str | Path, vocab_size: int = 500, seed: int = 0) -> None:
    """Train a byte-level BPE on generated text and save it as an HF tokenizer folder."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(2000, seed), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        additional_special_tokens=["<|im_start|>"],
    )
    fast.add_tokens(MARKUP_TOKENS)
    fast.chat_template = HERMES_CHATML_TEMPLATE
    fast.save_pretrained(str(path))


def make_tiny_model(
    path: str | Path,
    seed: int = 0,
    hidden_size: int = 64,
    num_layers: int = 2,
    policy_version: int | None = None,
) -> Path:
    """Write a random-init 2-layer Llama + tokenizer as a safetensors HF folder at `path`.

    Same `seed` -> same weights, a different seed -> a different policy with the same
    architecture (what a trainer checkpoint looks like). `policy_version` adds a meta.json.
    """
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    if not (path / "tokenizer.json").exists():
        make_tiny_tokenizer(path)
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        tie_word_embeddings=False,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        # Default init gives near-uniform logits; this scale gives varied, moderately
        # peaked distributions so log-prob comparisons and sampling tests mean something.
        model.lm_head.weight.normal_(0.0, 0.25)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(str(path), safe_serialization=True)
    if policy_version is not None:
        (path / "meta.json").write_text(json.dumps({"policy_version": policy_version}))
    return path
