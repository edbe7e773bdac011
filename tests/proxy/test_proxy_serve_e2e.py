"""End to end with `aw serve`'s embedded engine (a tiny random model): exact token ids through the proxy.

Skipped where the serve subsystem (or torch) is not installed.
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
serve_engine = pytest.importorskip("agentworld.serve.engine")
serve_server = pytest.importorskip("agentworld.serve.server")
serve_tiny = pytest.importorskip("agentworld.serve.tiny")

import openai  # noqa: E402
from aiohttp.test_utils import TestServer  # noqa: E402

from agentworld.proxy.config import ProxyConfig, UpstreamConfig  # noqa: E402
from agentworld.proxy.inprocess import ProxyServer  # noqa: E402
from agentworld.proxy.upstream import answer_json  # noqa: E402
from tests.proxy.conftest import steps_of  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("raw", [False, True], ids=["parsed", "raw-ids"])
async def test_proxy_records_aw_serve_token_ids(tmp_path, pool, monkeypatch, raw_made, raw):
    """``raw``: the prompt ids travel as the engine's bytes (RawIds) as a long prompt's would:
    the threshold is lowered so that this short prompt takes that path too."""
    if raw:
        monkeypatch.setattr(answer_json, "MIN_RAW_BYTES", 8)
    model_dir = serve_tiny.make_tiny_model(tmp_path / "policy0", seed=0)
    engine = serve_engine.Engine(model_dir, device="cpu", max_batch_size=4, model_name="tiny")
    upstream = TestServer(serve_server.make_app(engine), host="127.0.0.1")
    await upstream.start_server()
    try:
        cfg = ProxyConfig(
            default_upstream=UpstreamConfig.single(str(upstream.make_url("")).rstrip("/"))
        )
        async with ProxyServer(cfg, pool) as proxy:
            c = openai.AsyncOpenAI(base_url=proxy.base_url, api_key="k", max_retries=0)
            kw = {
                "model": "tiny",
                "messages": [{"role": "user", "content": "hello"}],
                "max_tokens": 12,
                "temperature": 0,
            }
            unary = await c.chat.completions.create(**kw)
            assert "token_ids" not in (unary.choices[0].model_extra or {})
            chunks = [ch async for ch in await c.chat.completions.create(stream=True, **kw)]
            assert chunks
            await c.close()
    finally:
        await upstream.close()
        engine.close()
    a, b = sorted(steps_of(pool), key=lambda s: s["timings"]["started_at"])
    for s in (a, b):
        t = s["tokens"]
        assert t["source"] == "engine" and t["prompt_ids"]
        assert len(t["completion_ids"]) == len(t["completion_logprobs"]) > 0
    assert a["tokens"] == b["tokens"]  # greedy: streamed and unary sampled the same tokens
    assert a["response"]["message"] == b["response"]["message"]
    n = len(a["tokens"]["prompt_ids"])
    assert raw_made == ([n, n] if raw else [])  # unary and streamed: both cut, checked, kept


async def test_anthropic_token_count_is_the_engines_prompt(tmp_path, pool):
    """Claude Code's count_tokens through the proxy onto `aw serve`: the count is the prompt
    (chat template, tools) the engine then generates from."""
    import anthropic

    model_dir = serve_tiny.make_tiny_model(tmp_path / "policy0", seed=0)
    engine = serve_engine.Engine(model_dir, device="cpu", max_batch_size=4, model_name="tiny")
    upstream = TestServer(serve_server.make_app(engine), host="127.0.0.1")
    await upstream.start_server()
    tools = [
        {
            "name": "add",
            "description": "Add two numbers",
            "input_schema": {"type": "object", "properties": {"a": {"type": "number"}}},
        }
    ]
    kw = {
        "model": "tiny",
        "system": "Be brief.",
        "messages": [{"role": "user", "content": "add 2 and 3"}],
        "tools": tools,
    }
    try:
        cfg = ProxyConfig(
            default_upstream=UpstreamConfig.single(str(upstream.make_url("")).rstrip("/"))
        )
        async with ProxyServer(cfg, pool) as proxy:
            c = anthropic.AsyncAnthropic(base_url=proxy.url, api_key="k", max_retries=0)
            counted = await c.messages.count_tokens(**kw)
            without_tools = await c.messages.count_tokens(**{**kw, "tools": []})
            answer = await c.messages.create(max_tokens=4, **kw)
            await c.close()
    finally:
        await upstream.close()
        engine.close()
    assert counted.input_tokens == answer.usage.input_tokens > without_tools.input_tokens
    (step,) = steps_of(pool)
    assert len(step["tokens"]["prompt_ids"]) == counted.input_tokens
