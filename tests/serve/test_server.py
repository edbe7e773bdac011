"""HTTP behaviour of the embedded server: vLLM shapes, token ids, streaming, errors, reload."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from agentworld.serve.chat import render_prompt
from agentworld.serve.engine import Engine
from agentworld.serve.sampling import SamplingParams
from agentworld.serve.server import POLICY_HEADER, make_app

from .helpers import forward_logprobs, load_model

MESSAGES = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "add 2 and 3"}]
TOOLS = [{"type": "function", "function": {"name": "get_weather"}}]


def _named(name: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name}}


async def read_sse(resp: Any) -> list[Any]:
    """Parse an SSE body into JSON chunks; the last item is the literal '[DONE]'."""
    text = (await resp.read()).decode()
    assert text.endswith("data: [DONE]\n\n")
    events = [block for block in text.split("\n\n") if block]
    assert all(e.startswith("data: ") for e in events)
    return [orjson.loads(e[6:]) if e != "data: [DONE]" else "[DONE]" for e in events]


@pytest.fixture
async def client(aiohttp_client: Any, engine: Engine) -> Any:
    return await aiohttp_client(make_app(engine))


async def test_chat_returns_vllm_token_ids_and_exact_logprobs(
    client: Any, engine: Engine, tiny_model_dir: Path
):
    body = {
        "model": "tiny",
        "messages": MESSAGES,
        "max_tokens": 12,
        "temperature": 0.8,
        "seed": 3,
        "logprobs": True,
        "top_logprobs": 2,
        "return_token_ids": True,
        "ignore_eos": True,
    }
    resp = await client.post("/v1/chat/completions", json=body)
    assert resp.status == 200, await resp.text()
    assert resp.headers[POLICY_HEADER] == "0"
    out = await resp.json()
    assert out["object"] == "chat.completion" and out["id"].startswith("chatcmpl-")
    prompt = render_prompt(engine.tokenizer, MESSAGES)
    assert out["prompt_token_ids"] == prompt
    choice = out["choices"][0]
    ids = choice["token_ids"]
    assert len(ids) == 12 == out["usage"]["completion_tokens"]
    assert out["usage"]["prompt_tokens"] == len(prompt)
    assert choice["finish_reason"] == "length"
    assert choice["message"]["role"] == "assistant"
    assert choice["message"]["content"] == engine.tokenizer.decode(ids, skip_special_tokens=True)
    content = choice["logprobs"]["content"]
    assert [set(c) for c in content] == [{"token", "logprob", "bytes", "top_logprobs"}] * 12
    assert all(len(c["top_logprobs"]) == 2 for c in content)
    assert content[0]["bytes"] == list(content[0]["token"].encode())
    # Of the distribution sampled from (logits / 0.8), as vLLM's processed_logprobs.
    ref = forward_logprobs(load_model(tiny_model_dir), prompt, ids, SamplingParams(temperature=0.8))
    assert [c["logprob"] for c in content] == pytest.approx(ref, abs=1e-4)


async def test_without_return_token_ids_the_fields_are_null(client: Any):
    resp = await client.post("/v1/chat/completions", json={"messages": MESSAGES, "max_tokens": 3})
    out = await resp.json()
    assert out["prompt_token_ids"] is None
    assert out["choices"][0]["token_ids"] is None
    assert out["choices"][0]["logprobs"] is None


async def test_an_answer_without_tool_calls_has_no_tool_calls_field(client: Any):
    """As OpenAI and vLLM (#44104): an empty list reads as a tool-call turn to the SDK."""
    for extra in ({}, {"tools": TOOLS}):
        body = {"messages": MESSAGES, "max_tokens": 3} | extra
        out = await (await client.post("/v1/chat/completions", json=body)).json()
        message = out["choices"][0]["message"]
        assert "tool_calls" not in message and message["role"] == "assistant"


async def test_concurrent_requests_each_match_a_forward_pass(
    client: Any, engine: Engine, tiny_model_dir: Path
):
    import asyncio

    async def one(i: int) -> dict:
        msgs = [{"role": "user", "content": "hello " * (i + 1)}]
        body = {"messages": msgs, "max_tokens": 8 + i, "seed": i, "logprobs": True}
        body |= {"return_token_ids": True, "ignore_eos": True}
        resp = await client.post("/v1/chat/completions", json=body)
        return await resp.json()

    outs = await asyncio.gather(*(one(i) for i in range(6)))
    model = load_model(tiny_model_dir)
    for i, out in enumerate(outs):
        ids = out["choices"][0]["token_ids"]
        assert len(ids) == 8 + i
        lps = [c["logprob"] for c in out["choices"][0]["logprobs"]["content"]]
        assert lps == pytest.approx(forward_logprobs(model, out["prompt_token_ids"], ids), abs=1e-4)


async def test_streaming_assembles_to_the_non_streamed_greedy_answer(client: Any):
    body = {"messages": MESSAGES, "max_tokens": 20, "temperature": 0, "return_token_ids": True}
    body |= {"logprobs": True, "ignore_eos": True}
    whole = await (await client.post("/v1/chat/completions", json=body)).json()
    resp = await client.post(
        "/v1/chat/completions",
        json=body | {"stream": True, "stream_options": {"include_usage": True}},
    )
    assert resp.status == 200
    assert resp.headers["Content-Type"].startswith("text/event-stream")
    assert resp.headers[POLICY_HEADER] == "0"
    chunks = await read_sse(resp)
    assert chunks[-1] == "[DONE]"
    first, usage = chunks[0], chunks[-2]
    assert first["object"] == "chat.completion.chunk"
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert first["prompt_token_ids"] == whole["prompt_token_ids"]
    assert usage["choices"] == [] and usage["usage"] == whole["usage"]
    body_chunks = chunks[1:-2]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in body_chunks)
    ids = [t for c in body_chunks for t in c["choices"][0]["token_ids"]]
    lps = [x for c in body_chunks for x in (c["choices"][0]["logprobs"] or {}).get("content", [])]
    assert text == (whole["choices"][0]["message"]["content"] or "")
    assert ids == whole["choices"][0]["token_ids"]
    assert lps == whole["choices"][0]["logprobs"]["content"]
    assert body_chunks[-1]["choices"][0]["finish_reason"] == "length"


@pytest.mark.parametrize("route", ["/v1/chat/completions", "/v1/completions"])
async def test_continuous_usage_stats_puts_usage_on_every_chunk(client: Any, route: str):
    """vLLM's ``stream_options.continuous_usage_stats`` (its own benchmark sends it)."""
    body = {"max_tokens": 5, "ignore_eos": True, "stream": True}
    body |= {"messages": MESSAGES} if "chat" in route else {"prompt": "the weather is"}
    options = {"include_usage": True, "continuous_usage_stats": True}
    resp = await client.post(route, json=body | {"stream_options": options})
    chunks = (await read_sse(resp))[:-1]
    final = chunks[-1]["usage"]
    counts = [c["usage"]["completion_tokens"] for c in chunks[:-1]]
    assert counts == sorted(counts) and counts[-1] == final["completion_tokens"] == 5
    assert {c["usage"]["prompt_tokens"] for c in chunks} == {final["prompt_tokens"]}
    resp = await client.post(route, json=body | {"stream_options": {"include_usage": True}})
    chunks = (await read_sse(resp))[:-1]
    assert all("usage" not in c for c in chunks[:-1]) and chunks[-1]["usage"] == final


async def test_n_choices_and_seed(client: Any):
    body = {"messages": MESSAGES, "max_tokens": 10, "n": 3, "seed": 7, "return_token_ids": True}
    body |= {"ignore_eos": True}
    a = await (await client.post("/v1/chat/completions", json=body)).json()
    b = await (await client.post("/v1/chat/completions", json=body)).json()
    assert [c["index"] for c in a["choices"]] == [0, 1, 2]
    assert [c["token_ids"] for c in a["choices"]] == [c["token_ids"] for c in b["choices"]]
    assert len({tuple(c["token_ids"]) for c in a["choices"]}) > 1
    assert a["usage"]["completion_tokens"] == 30


async def test_n_beyond_16_is_answered_up_to_openais_128(client: Any):
    """A GRPO group sampled as one call (n=32) is answered, as vLLM answers it."""
    body = {"messages": MESSAGES, "max_tokens": 1, "n": 32}
    out = await (await client.post("/v1/chat/completions", json=body)).json()
    assert [c["index"] for c in out["choices"]] == list(range(32))
    resp = await client.post("/v1/chat/completions", json=body | {"n": 129})
    assert resp.status == 400 and (await resp.json())["error"]["param"] == "n"


async def test_seeds_beyond_int64_are_refused_before_they_reach_the_engine(client: Any):
    """torch refused them on the engine thread, failing the whole batch with a 500."""
    body = {"prompt": [5, 6, 7], "max_tokens": 2, "n": 2}
    for seed in (2**64 - 1, 2**63, -(2**63) - 1):
        resp = await client.post("/v1/completions", json=body | {"seed": seed})
        assert resp.status == 400, seed
        assert (await resp.json())["error"]["param"] == "seed"
    for seed in (2**63 - 1, -(2**63)):  # vLLM's bounds, each choice seeded seed + j
        resp = await client.post("/v1/completions", json=body | {"seed": seed})
        assert resp.status == 200, seed


async def test_a_seed_past_64_bits_is_named_as_too_large_not_as_a_float(client: Any):
    """The JSON parser reads an integer past 64 bits as a float; the error said "got float"."""
    body = {"prompt": [5, 6, 7], "max_tokens": 2, "seed": 2**70}
    resp = await client.post("/v1/completions", json=body)
    assert resp.status == 400
    err = (await resp.json())["error"]
    assert err["param"] == "seed"
    assert "within 64 bits" in err["message"] and "float" not in err["message"], err


async def test_completions_with_token_id_prompt(client: Any, engine: Engine):
    body = {"prompt": [5, 6, 7, 8], "max_tokens": 6, "temperature": 0, "return_token_ids": True}
    body |= {"logprobs": 2, "ignore_eos": True}
    resp = await client.post("/v1/completions", json=body)
    out = await resp.json()
    assert out["object"] == "text_completion" and out["id"].startswith("cmpl-")
    choice = out["choices"][0]
    assert choice["prompt_token_ids"] == [5, 6, 7, 8]
    assert len(choice["token_ids"]) == 6
    assert choice["text"] == engine.tokenizer.decode(choice["token_ids"], skip_special_tokens=True)
    assert set(choice["logprobs"]) == {"text_offset", "token_logprobs", "tokens", "top_logprobs"}
    assert len(choice["logprobs"]["token_logprobs"]) == 6
    resp = await client.post("/v1/completions", json=body | {"stream": True})
    chunks = await read_sse(resp)
    parts = [c["choices"][0] for c in chunks[:-1]]
    assert parts[0]["prompt_token_ids"] == [5, 6, 7, 8]
    assert "prompt_token_ids" not in parts[1] if len(parts) > 1 else True
    assert "".join(p["text"] for p in parts) == choice["text"]
    assert [t for p in parts for t in p["token_ids"]] == choice["token_ids"]
    assert parts[-1]["finish_reason"] == "length"


async def test_completions_without_max_tokens_stop_at_16_as_openai_and_vllm(client: Any):
    """Legacy completions default to 16 tokens (OpenAI's and vLLM's ``max_tokens = 16``); a
    chat without a limit may fill the context."""
    body = {"prompt": "the weather in paris is", "ignore_eos": True}
    out = await (await client.post("/v1/completions", json=body)).json()
    assert out["usage"]["completion_tokens"] == 16
    assert out["choices"][0]["finish_reason"] == "length"
    out = await (await client.post("/v1/completions", json=body | {"max_tokens": None})).json()
    assert out["usage"]["completion_tokens"] == 16


async def test_a_completion_suffix_is_refused_as_vllm_refuses_it(client: Any):
    """Answered without it, a fill-in-the-middle client took a continuation for an infill."""
    for suffix in ("\n    return x", ""):
        body = {"prompt": "def f(x):", "suffix": suffix, "max_tokens": 2}
        resp = await client.post("/v1/completions", json=body)
        assert resp.status == 400 and (await resp.json())["error"]["param"] == "suffix"


async def test_stop_string_truncates_text_and_is_reported(client: Any):
    base = {"prompt": "the weather in paris is", "max_tokens": 24, "temperature": 0}
    base |= {"ignore_eos": True}
    full = (await (await client.post("/v1/completions", json=base)).json())["choices"][0]["text"]
    stop = full[len(full) // 2 : len(full) // 2 + 3]
    assert stop and stop in full
    out = await (await client.post("/v1/completions", json=base | {"stop": [stop]})).json()
    choice = out["choices"][0]
    assert choice["text"] == full[: full.find(stop)]
    assert choice["finish_reason"] == "stop" and choice["stop_reason"] == stop
    resp = await client.post("/v1/completions", json=base | {"stop": stop, "stream": True})
    streamed = "".join(c["choices"][0]["text"] for c in (await read_sse(resp))[:-1])
    assert streamed == choice["text"]


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        (b"{not json", 400, "body"),
        (b"[1, 2]", 400, "body"),
        ({"max_tokens": 3}, 400, "messages"),
        ({"messages": [{"content": "x"}]}, 400, "messages"),
        ({"messages": MESSAGES, "temperature": "hot"}, 400, "temperature"),
        ({"messages": MESSAGES, "temperature": -1}, 400, "temperature"),
        ({"messages": MESSAGES, "n": 0}, 400, "n"),
        ({"messages": MESSAGES, "max_tokens": 0}, 400, "max_tokens"),
        ({"messages": MESSAGES, "max_completion_tokens": -2}, 400, "max_completion_tokens"),
        ({"messages": MESSAGES, "max_tokens": 10**6}, 400, "max_tokens"),
        ({"messages": MESSAGES, "top_p": 0}, 400, "top_p"),
        ({"messages": MESSAGES, "top_logprobs": 2}, 400, "top_logprobs"),
        ({"messages": MESSAGES, "stop": 5}, 400, "stop"),
        ({"messages": MESSAGES, "tools": [{"type": "function"}]}, 400, "tools"),
        # vLLM's (and OpenAI's) tool checks.
        ({"messages": MESSAGES, "tool_choice": "required"}, 400, "tool_choice"),
        ({"messages": MESSAGES, "tools": TOOLS, "tool_choice": _named("nope")}, 400, "tool_choice"),
        (
            {"messages": MESSAGES, "tools": TOOLS, "tool_choice": {"function": {}}},
            400,
            "tool_choice",
        ),
        ({"messages": MESSAGES, "stream_options": {"include_usage": True}}, 400, "stream_options"),
        ({"messages": MESSAGES, "model": "gpt-9"}, 404, "model"),
    ],
)
async def test_bad_chat_bodies_get_vllm_errors_naming_the_field(
    client: Any, body: Any, status: int, param: str
):
    kwargs = {"data": body} if isinstance(body, bytes) else {"json": body}
    resp = await client.post("/v1/chat/completions", **kwargs)
    assert resp.status == status
    err = (await resp.json())["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["param"] == param and err["message"]
    # vLLM's ErrorResponse: the status as an integer code, the type named after it.
    assert err["code"] == status
    assert err["type"] == {400: "BadRequestError", 404: "NotFoundError"}[status]
    assert POLICY_HEADER in resp.headers


async def test_tool_choice_null_or_naming_a_tool_is_answered(client: Any):
    """``tools: []`` is no tools, as vLLM's own test has it
    (tests/tool_use/test_chat_completion_request_validations.py): agents send it."""
    for extra in (
        {"tool_choice": None},
        {"tools": TOOLS, "tool_choice": _named("get_weather")},
        {"tools": []},
        {"tools": [], "tool_choice": "auto"},
    ):
        body = {"messages": MESSAGES, "max_tokens": 2} | extra
        resp = await client.post("/v1/chat/completions", json=body)
        assert resp.status == 200, await resp.text()


async def test_bad_completion_prompt_and_too_big_body(aiohttp_client: Any, engine: Engine):
    client = await aiohttp_client(make_app(engine, max_body_bytes=2000))
    resp = await client.post("/v1/completions", json={"prompt": [1, "x"]})
    assert resp.status == 400 and (await resp.json())["error"]["param"] == "prompt"
    for ids in ([-1], [1, 10**9], [[2], [True]]):  # the model's lookup failed: a 500
        resp = await client.post("/v1/completions", json={"prompt": ids})
        assert resp.status == 400, ids
        assert (await resp.json())["error"]["param"] == "prompt"
    resp = await client.post("/v1/completions", json={"prompt": "x" * 5000})
    assert resp.status == 413
    assert (await resp.json())["error"]["code"] == 413


async def test_models_health_version(client: Any):
    resp = await client.get("/health")
    assert resp.status == 200 and resp.headers[POLICY_HEADER] == "0"
    models = await (await client.get("/v1/models")).json()
    assert models["object"] == "list"
    assert [m["id"] for m in models["data"]] == ["tiny", "default"]
    assert (await (await client.get("/aw/version")).json())["policy_version"] == 0


async def test_reload_over_http_bumps_header_and_in_flight_finish_on_old_weights(
    aiohttp_client: Any, fresh_engine: Engine, tiny_model_dir: Path, tiny_checkpoint_dir: Path
):
    client = await aiohttp_client(make_app(fresh_engine))
    body = {"prompt": [5, 6, 7], "max_tokens": 300, "seed": 1, "ignore_eos": True}
    body |= {"stream": True, "logprobs": 0, "return_token_ids": True}
    running = await client.post("/v1/completions", json=body)
    assert running.headers[POLICY_HEADER] == "0"
    first_line = await running.content.readline()  # a token is out: the request is in flight
    resp = await client.post("/aw/reload", json={"path": str(tiny_checkpoint_dir)})
    assert resp.status == 200 and (await resp.json())["policy_version"] == 1
    assert resp.headers[POLICY_HEADER] == "1"
    short = {"prompt": [5, 6, 7], "max_tokens": 4, "return_token_ids": True, "logprobs": 0}
    after = await client.post("/v1/completions", json=short)
    assert after.headers[POLICY_HEADER] == "1"
    new_choice = (await after.json())["choices"][0]
    rest = (await running.read()).decode()
    text = first_line.decode() + rest
    blocks = [b for b in text.split("\n\n") if b]
    assert blocks[-1] == "data: [DONE]"
    parts = [orjson.loads(b[6:])["choices"][0] for b in blocks[:-1]]
    ids = [t for p in parts for t in p["token_ids"]]
    lps = [x for p in parts for x in p["logprobs"]["token_logprobs"]]
    assert len(ids) == 300 and parts[-1]["finish_reason"] == "length"
    old, new = load_model(tiny_model_dir), load_model(tiny_checkpoint_dir)
    assert lps == pytest.approx(forward_logprobs(old, [5, 6, 7], ids), abs=1e-4)
    assert lps != pytest.approx(forward_logprobs(new, [5, 6, 7], ids), abs=1e-3)
    assert new_choice["logprobs"]["token_logprobs"] == pytest.approx(
        forward_logprobs(new, [5, 6, 7], new_choice["token_ids"]), abs=1e-4
    )
    assert (await (await client.get("/aw/version")).json())["policy_version"] == 1


async def test_bad_reload_path_is_a_400(client: Any, tmp_path: Path):
    resp = await client.post("/aw/reload", json={"path": str(tmp_path / "missing")})
    assert resp.status == 400 and (await resp.json())["error"]["param"] == "path"
    resp = await client.post("/aw/reload", json={"path": str(tmp_path)})
    assert resp.status == 400


@pytest.mark.parametrize("stream", [True, False])
async def test_client_disconnect_cancels_generation(
    aiohttp_client: Any,
    fresh_engine: Engine,
    stream: bool,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
):
    import asyncio
    import logging

    submitted = []
    real_submit = fresh_engine.submit
    monkeypatch.setattr(fresh_engine, "submit", lambda r: submitted.append(r) or real_submit(r))
    client = await aiohttp_client(make_app(fresh_engine))
    body = {"prompt": [5, 6, 7], "max_tokens": 1000, "ignore_eos": True, "stream": stream}
    task = asyncio.ensure_future(client.post("/v1/completions", json=body))
    for _ in range(200):
        if fresh_engine.running:
            break
        await asyncio.sleep(0.02)
    assert fresh_engine.running == 1
    if stream:
        resp = await task
        await resp.content.readline()
        resp.close()  # drops the connection mid-stream
    else:
        task.cancel()  # drops the connection while waiting for the body
        with pytest.raises(asyncio.CancelledError):
            await task
    for _ in range(200):
        if submitted[0].done:
            break
        await asyncio.sleep(0.05)
    (req,) = submitted
    assert req.done and req.cancelled.is_set()
    assert len(req.output_ids) < 1000  # stopped early, not run to max_tokens
    await asyncio.sleep(0.2)  # the handler has seen the disconnect
    # an agent hanging up is routine: no traceback in the server's log
    loud = [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    assert not loud, [r.getMessage() for r in loud]


async def test_a_client_hanging_up_mid_stream_logs_no_traceback(
    fresh_engine: Engine, caplog: pytest.LogCaptureFixture
):
    """The socket closes while tokens are being written: the next write fails, and that
    is the end of the stream, not an error of the server's. Served as ``aw serve`` serves
    (an ``AppRunner``: handlers are not cancelled on a disconnect, unlike the test server's)."""
    import asyncio
    import logging

    from aiohttp import web

    runner = web.AppRunner(make_app(fresh_engine), handler_cancellation=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    body = orjson.dumps(
        {"prompt": [5, 6, 7], "max_tokens": 1000, "ignore_eos": True, "stream": True}
    )
    try:
        for _ in range(3):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(
                b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n" % len(body) + body
            )
            assert (await reader.read(12)).startswith(b"HTTP/1.1 200")
            writer.close()
            await asyncio.sleep(0.3)
        for _ in range(100):
            if not fresh_engine.running:
                break
            await asyncio.sleep(0.05)
    finally:
        await runner.cleanup()
    loud = [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    assert not loud, [r.getMessage() for r in loud]


async def test_default_alias_is_served_like_the_model_name(client: Any):
    body = {"messages": MESSAGES, "max_tokens": 3, "temperature": 0.0}
    by_name = await (
        await client.post("/v1/chat/completions", json={**body, "model": "tiny"})
    ).json()
    by_alias = await client.post("/v1/chat/completions", json={**body, "model": "default"})
    assert by_alias.status == 200
    assert (await by_alias.json())["choices"][0]["message"] == by_name["choices"][0]["message"]


async def test_tokenize_a_chat_gives_the_prompt_generation_sees(client: Any, engine: Engine):
    tools = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]
    resp = await client.post("/tokenize", json={"model": "tiny", "messages": MESSAGES})
    assert resp.status == 200, await resp.text()
    out = await resp.json()
    prompt = render_prompt(engine.tokenizer, MESSAGES)
    assert out == {
        "count": len(prompt),
        "max_model_len": engine.max_model_len,
        "tokens": prompt,
        "token_strs": None,
    }
    # the same as the prompt a chat call is answered from
    chat = await client.post(
        "/v1/chat/completions", json={"messages": MESSAGES, "max_tokens": 1, "tools": tools}
    )
    with_tools = await client.post(
        "/tokenize", json={"messages": MESSAGES, "tools": tools, "return_token_strs": True}
    )
    counted = await with_tools.json()
    assert counted["count"] == (await chat.json())["usage"]["prompt_tokens"] > out["count"]
    assert counted["token_strs"] == engine.tokenizer.convert_ids_to_tokens(counted["tokens"])
    bare = await client.post(
        "/tokenize", json={"messages": MESSAGES, "add_generation_prompt": False}
    )
    assert (await bare.json())["tokens"] == render_prompt(engine.tokenizer, MESSAGES, None, False)


async def test_tokenize_a_prompt_and_detokenize_it_back(client: Any, engine: Engine):
    resp = await client.post("/tokenize", json={"prompt": "add 2 and 3"})
    tokens = (await resp.json())["tokens"]
    assert tokens == engine.tokenizer.encode("add 2 and 3")
    back = await client.post("/detokenize", json={"tokens": tokens})
    assert back.status == 200
    assert (await back.json())["prompt"] == engine.tokenizer.decode(tokens)


@pytest.mark.parametrize(
    "path,body,status,param",
    [
        ("/tokenize", {"model": "other", "prompt": "x"}, 404, "model"),
        ("/tokenize", {"nothing": 1}, 400, "messages"),
        ("/tokenize", {"messages": []}, 400, "messages"),
        ("/tokenize", {"prompt": "x", "add_special_tokens": "yes"}, 400, "add_special_tokens"),
        (
            "/tokenize",
            {"messages": MESSAGES, "continue_final_message": True},
            400,
            "continue_final_message",
        ),
        ("/detokenize", {"tokens": [1, "2"]}, 400, "tokens"),
        ("/detokenize", {"tokens": [10**9]}, 400, "tokens"),
    ],
)
async def test_tokenize_bad_input_names_the_field(
    client: Any, path: str, body: dict, status: int, param: str
):
    resp = await client.post(path, json=body)
    assert resp.status == status, await resp.text()
    assert (await resp.json())["error"]["param"] == param


async def test_context_window_refusals_are_in_vllms_words(client: Any, engine: Engine):
    """The proxy reads these messages to cut a translated call's max_tokens (as it does vLLM's)."""
    from agentworld.proxy.recorder import Call
    from agentworld.proxy.translate import context_window

    window = engine.max_model_len
    resp = await client.post("/v1/completions", json={"prompt": [1] * 10, "max_tokens": window})
    assert resp.status == 400
    err = (await resp.json())["error"]
    assert err["param"] == "max_tokens"
    call = Call(None, 0, None, {"max_tokens": window}, None, 0)  # type: ignore[arg-type]
    assert context_window.retry_within_window(call, {}, err["message"])
    assert call.sent["max_tokens"] == window - 10
    resp = await client.post("/v1/completions", json={"prompt": [1] * window})
    err = (await resp.json())["error"]
    assert resp.status == 400 and context_window.overflow(err["message"]) == (window, window)


async def test_max_model_len_narrows_the_window_every_route_reports(
    aiohttp_client: Any, tiny_model_dir: Path
):
    from agentworld.errors import ConfigError

    with pytest.raises(ConfigError, match="--max-model-len: 100000 is more than"):
        Engine(tiny_model_dir, device="cpu", max_model_len=100_000)
    eng = Engine(tiny_model_dir, device="cpu", model_name="tiny", max_model_len=24)
    try:
        client = await aiohttp_client(make_app(eng))
        models = await (await client.get("/v1/models")).json()
        assert {m["max_model_len"] for m in models["data"]} == {24}
        body = {"prompt": [5] * 20, "max_tokens": 10}
        err = (await (await client.post("/v1/completions", json=body)).json())["error"]
        assert "maximum context length is 24 tokens" in err["message"]
        body = {"messages": [{"role": "user", "content": "hi"}], "temperature": 0}
        out = await (
            await client.post("/v1/chat/completions", json=body | {"ignore_eos": True})
        ).json()
        # A chat without max_tokens fills the rest of the window, no more.
        assert out["usage"]["completion_tokens"] == 24 - out["usage"]["prompt_tokens"]
        assert out["choices"][0]["finish_reason"] == "length"
    finally:
        eng.close()


async def test_a_chat_prefill_continues_the_final_assistant_message(client: Any, engine: Engine):
    """The proxy sends an Anthropic prefill as vLLM takes it (`continue_final_message`,
    `add_generation_prompt` false); the chat route ignored both and answered a new turn."""
    prefill = [*MESSAGES, {"role": "assistant", "content": "the sum is"}]
    flags = {"continue_final_message": True, "add_generation_prompt": False}
    body = {"messages": prefill, "max_tokens": 4, "temperature": 0, "return_token_ids": True}
    out = await (await client.post("/v1/chat/completions", json=body | flags)).json()
    counted = await (await client.post("/tokenize", json={"messages": prefill} | flags)).json()
    assert out["prompt_token_ids"] == counted["tokens"]
    prefill_ids = engine.tokenizer.encode("the sum is", add_special_tokens=False)
    assert out["prompt_token_ids"][-len(prefill_ids) :] == prefill_ids  # left open
    plain = await (await client.post("/v1/chat/completions", json=body)).json()
    assert plain["prompt_token_ids"] != out["prompt_token_ids"]  # a new turn after it
    resp = await client.post("/v1/chat/completions", json=body | {"continue_final_message": True})
    assert resp.status == 400
    assert (await resp.json())["error"]["param"] == "continue_final_message"


async def test_a_route_without_its_v1_names_the_route_meant(client: Any) -> None:
    """An OpenAI client given `aw serve`'s address without /v1 got a bare "Not Found"."""
    resp = await client.post("/chat/completions", json={"messages": MESSAGES})
    assert resp.status == 404
    message = (await resp.json())["error"]["message"]
    assert message.startswith(
        "Not Found: POST /chat/completions; did you mean /v1/chat/completions?"
    )
    resp = await client.post("/nowhere", json={})
    assert (await resp.json())["error"]["message"] == "Not Found: POST /nowhere"


async def test_a_field_no_protocol_defines_is_named_with_the_one_meant(
    client: Any, capsys: pytest.CaptureFixture[str]
):
    """A typo (``temprature``) was answered at temperature 1 and said nothing: it is
    still answered (vLLM ignores such fields too), and named once in the log."""
    body = {"messages": MESSAGES, "max_tokens": 2, "temprature": 0.2, "x_custom": 1}
    for _ in range(2):
        assert (await client.post("/v1/chat/completions", json=body)).status == 200
    err = capsys.readouterr().err
    assert err.count("no protocol defines") == 1
    assert "'temprature'; did you mean 'temperature'?, 'x_custom'" in err
    known = {"messages": MESSAGES, "max_tokens": 2, "temperature": 0.5, "user": "u", "seed": 1}
    assert (await client.post("/v1/chat/completions", json=known)).status == 200
    assert "no protocol defines" not in capsys.readouterr().err


async def test_fields_the_engine_does_not_apply_are_named_once_in_its_log(
    client: Any, capsys: pytest.CaptureFixture[str]
):
    """vLLM applies penalties, response formats and forced tool calls; the embedded
    engine answered without them and said nothing."""
    body = {"messages": MESSAGES, "max_tokens": 2, "presence_penalty": 0}
    body |= {"frequency_penalty": 0.5, "response_format": {"type": "json_object"}}
    for _ in range(2):
        assert (await client.post("/v1/chat/completions", json=body)).status == 200
    err = capsys.readouterr().err
    assert err.count("does not apply") == 1
    assert "frequency_penalty, response_format json_object" in err
    assert "presence_penalty" not in err  # at its neutral value
    tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    forced = {"messages": MESSAGES, "max_tokens": 2, "tools": tools, "tool_choice": "required"}
    assert (await client.post("/v1/chat/completions", json=forced)).status == 200
    resp = await client.post("/v1/completions", json={"prompt": [5], "max_tokens": 1, "min_p": 0.1})
    assert resp.status == 200
    err = capsys.readouterr().err
    assert "tool_choice required" in err and "min_p" in err
    assert "frequency_penalty" not in err  # said already
