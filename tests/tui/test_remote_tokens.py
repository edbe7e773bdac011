"""No tokenizer on disk: the token view asks the step's server (`aw serve`, vLLM's shape)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from textual.widgets import Static

from agentworld import records
from agentworld.tui.app import make_app
from agentworld.tui.data import TuiConfig
from agentworld.tui.remote_tokens import RemoteDecoder, RemoteTokensError, server_of

from .conftest import T0, write_pool
from .test_screens import shown_inspector, until

VOCAB = {i: f"w{i} " for i in range(200)}  # a fake tokenizer: id i is "w<i> "


def fake_server(*, tokenize: bool = True, seen: list[Any] | None = None) -> web.Application:
    """/detokenize (and /tokenize) as vLLM and `aw serve` answer them, over VOCAB plus a
    separator made of ids 500-501."""
    pieces = {**VOCAB, 500: "\n\u241e", 501: "\u241e\n"}

    async def detokenize(request: web.Request) -> web.Response:
        body = await request.json()
        if seen is not None:
            seen.append(("detokenize", body["model"], len(body["tokens"])))
        return web.json_response({"prompt": "".join(pieces[t] for t in body["tokens"])})

    async def tokenize_(request: web.Request) -> web.Response:
        body = await request.json()
        assert body["prompt"] == "\n\u241e\u241e\n"
        return web.json_response({"tokens": [500, 501], "count": 2, "max_model_len": 64})

    app = web.Application()
    app.router.add_post("/detokenize", detokenize)
    if tokenize:
        app.router.add_post("/tokenize", tokenize_)
    return app


def step_from(url: str, tid: str = "tr_remote") -> dict:
    return records.make_step(
        id=f"st_{tid}_0",
        trajectory=tid,
        index=0,
        agent="a",
        request={"model": "tiny", "messages": [{"role": "user", "content": "hi"}]},
        response={"message": {"role": "assistant", "content": "w7"}, "finish_reason": "stop"},
        metadata={"upstream": url},
        tokens={"source": "engine", "prompt_ids": list(range(100)), "completion_ids": [7, 8]},
    )


async def test_pieces_come_in_a_few_requests_and_are_kept(aiohttp_server: Any) -> None:
    seen: list[Any] = []
    server = await aiohttp_server(fake_server(seen=seen))
    base, model = server_of(step_from(f"http://127.0.0.1:{server.port}/v1"))
    assert (base, model) == (f"http://127.0.0.1:{server.port}", "tiny")
    remote = RemoteDecoder(base, model)
    ids = list(range(150))
    await _in_thread(remote.fetch, ids)
    assert [remote.decode(i) for i in ids] == [VOCAB[i] for i in ids]
    # /tokenize once, the separator's text once, then 150 ids in one request.
    assert remote.requests == 3 and seen[-1] == ("detokenize", "tiny", 150 * 3 - 2)
    await _in_thread(remote.fetch, ids)  # known: nothing asked
    assert remote.requests == 3
    assert remote.decode(999) == "⟨999⟩"


async def test_a_server_without_tokenize_is_asked_a_token_at_a_time(aiohttp_server: Any) -> None:
    server = await aiohttp_server(fake_server(tokenize=False))
    remote = RemoteDecoder(f"http://127.0.0.1:{server.port}", "tiny")
    await _in_thread(remote.fetch, [3, 4, 5])
    assert [remote.decode(i) for i in (3, 4, 5)] == ["w3 ", "w4 ", "w5 "]


def test_an_unreachable_server_is_a_clear_error(unused_tcp_port: int) -> None:
    remote = RemoteDecoder(f"http://127.0.0.1:{unused_tcp_port}", "tiny", timeout_s=2)
    with pytest.raises(
        RemoteTokensError, match=rf"127.0.0.1:{unused_tcp_port}/tokenize: unreachable"
    ):
        remote.fetch([1])


async def _in_thread(fn: Any, *args: Any) -> Any:
    """Blocking HTTP off the loop the test server runs on (as the app's workers do)."""
    import asyncio

    return await asyncio.to_thread(fn, *args)


def app_on(pool: Path) -> Any:
    # No --tokenizer and no models folder: nothing on disk decodes "tiny".
    return make_app(TuiConfig(str(pool), "tester"), start="trajectories", clock=lambda: T0)


async def test_token_view_decodes_with_the_steps_server(
    tmp_path: Path, aiohttp_server: Any
) -> None:
    server = await aiohttp_server(fake_server())
    pool = write_pool(tmp_path / "pool", [step_from(f"http://127.0.0.1:{server.port}")])
    app = app_on(pool)
    async with app.run_test(size=(100, 30)) as pilot:
        app.inspect("tr_remote")
        await shown_inspector(pilot)
        await pilot.press("t")
        body = lambda: str(app.screen.query_one("#body", Static).render())  # noqa: E731
        await until(pilot, lambda: "w99" in body())  # no second key: it changes once fetched
        assert "decoded" in body() and "w7" in body()


async def test_an_unreachable_server_is_a_notice_and_ids_stay(
    tmp_path: Path, unused_tcp_port: int
) -> None:
    pool = write_pool(tmp_path / "pool", [step_from(f"http://127.0.0.1:{unused_tcp_port}")])
    app = app_on(pool)
    async with app.run_test(size=(100, 30)) as pilot:
        app.inspect("tr_remote")
        await shown_inspector(pilot)
        await pilot.press("t")
        await until(pilot, lambda: any("unreachable" in n.message for n in app._notifications))
        body = str(app.screen.query_one("#body", Static).render())
        assert "   ids" in body and "w99" not in body
        await pilot.press("t")  # the app goes on
        await until(pilot, lambda: not app.screen.show_tokens)


@pytest.mark.slow
async def test_pieces_from_aw_serve_match_its_tokenizer(
    aiohttp_server: Any, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Against a real `aw serve` (the tiny random model): each piece is what the model's
    own tokenizer makes of that id alone, for the ids of a real prompt."""
    transformers = pytest.importorskip("transformers")
    from agentworld.serve.engine import Engine
    from agentworld.serve.server import make_app as serve_app
    from agentworld.serve.tiny import make_tiny_model

    model_dir = make_tiny_model(tmp_path_factory.mktemp("tiny") / "m", seed=0)
    tok = transformers.AutoTokenizer.from_pretrained(str(model_dir))
    ids = tok.encode("Hello world: 12 + 30 = 42, naïve café.\n  indented")
    engine = Engine(model_dir, device="cpu", max_batch_size=2, model_name="tiny")
    try:
        server = await aiohttp_server(serve_app(engine))
        remote = RemoteDecoder(f"http://127.0.0.1:{server.port}", "tiny")
        await _in_thread(remote.fetch, ids)
        assert [remote.decode(i) for i in ids] == [tok.decode([i]) for i in ids]
        assert remote.requests <= 3
    finally:
        engine.close()
