"""Streamed text through the server: the same text as the unary answer, stop strings held
back and honoured, and decoding work that grows with the answer, not its square."""

from __future__ import annotations

from typing import Any

import pytest

from agentworld.serve.engine import Engine
from agentworld.serve.server import make_app

from .test_server import MESSAGES, read_sse

# Sampled at temperature 1 the tiny model emits any token, byte tokens of split UTF-8
# characters and added markup tokens included: the cases a whole-text decode hid.
SAMPLED = {"max_tokens": 160, "temperature": 1.0, "ignore_eos": True, "seed": 11, "n": 3}


@pytest.fixture
async def client(aiohttp_client: Any, engine: Engine) -> Any:
    return await aiohttp_client(make_app(engine))


def joined(chunks: list[Any], chat: bool) -> dict[int, str]:
    """Each choice's streamed text, concatenated."""
    out: dict[int, str] = {}
    for c in chunks[:-1]:
        for ch in c["choices"]:
            piece = (ch["delta"].get("content") or "") if chat else ch["text"]
            out[ch["index"]] = out.get(ch["index"], "") + piece
    return out


@pytest.mark.parametrize("chat", [False, True])
async def test_streamed_text_is_the_unary_text(client: Any, chat: bool):
    route = "/v1/chat/completions" if chat else "/v1/completions"
    body = SAMPLED | ({"messages": MESSAGES} if chat else {"prompt": "the weather in"})
    whole = await (await client.post(route, json=body)).json()
    want = {
        c["index"]: (c["message"]["content"] or "") if chat else c["text"] for c in whole["choices"]
    }
    assert any(len(t) > 100 for t in want.values())
    chunks = await read_sse(await client.post(route, json=body | {"stream": True}))
    assert joined(chunks, chat) == want


async def test_a_stream_stops_at_a_stop_string_and_never_sends_it(client: Any):
    body = SAMPLED | {"prompt": "the weather in", "n": 1}
    full = (await (await client.post("/v1/completions", json=body)).json())["choices"][0]["text"]
    middle = full[len(full) // 2 :]
    at = next(i for i in range(len(middle) - 2) if "\ufffd" not in middle[i : i + 3])
    stop = middle[at : at + 3]
    want = full[: full.find(stop)]
    out = await (await client.post("/v1/completions", json=body | {"stop": [stop]})).json()
    assert out["choices"][0]["text"] == want
    resp = await client.post("/v1/completions", json=body | {"stop": [stop], "stream": True})
    chunks = await read_sse(resp)
    assert joined(chunks, chat=False) == {0: want}
    last = chunks[-2]["choices"][0]
    assert (last["finish_reason"], last["stop_reason"]) == ("stop", stop)
    sent = ""
    for c in chunks[:-1]:
        sent += c["choices"][0]["text"]
        assert stop not in sent


class _CountingDecode:
    """Wraps a tokenizer's ``decode`` to count the ids it reads."""

    def __init__(self, decode: Any) -> None:
        self._decode = decode
        self.ids = 0

    def __call__(self, ids: Any, *args: Any, **kw: Any) -> str:
        self.ids += len(ids) if isinstance(ids, list) else 1
        return self._decode(ids, *args, **kw)


async def test_a_stream_decodes_a_few_ids_per_token(
    client: Any, engine: Engine, monkeypatch: pytest.MonkeyPatch
):
    """Before, every token re-decoded the whole answer: 300 tokens read ~45,000 ids (and a
    4,000-token stream spent ~1.7 s of the event loop in decode)."""
    counting = _CountingDecode(engine.tokenizer.decode)
    monkeypatch.setattr(engine.tokenizer, "decode", counting)
    body = {"prompt": "the weather in", "max_tokens": 300, "temperature": 1.0, "seed": 5}
    body |= {"ignore_eos": True, "stream": True}
    chunks = await read_sse(await client.post("/v1/completions", json=body))
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    assert counting.ids < 8 * 300, counting.ids
