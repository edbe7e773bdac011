"""The proxy driven by the official OpenAI client against a fake vLLM upstream:
what the client sees, and what the pool holds."""

from __future__ import annotations

import asyncio
from typing import Any

import openai
import orjson
import pytest

from agentworld.proxy.config import UpstreamConfig
from tests.proxy.conftest import steps_of

USER = [{"role": "user", "content": "hello there"}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
        },
    },
    {
        "type": "function",
        "function": {"name": "open", "parameters": {"type": "object", "properties": {}}},
    },
]


def client(proxy: Any) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=proxy.base_url, api_key="agent-key", max_retries=0)


async def streamed(c: openai.AsyncOpenAI, **kw: Any) -> list[Any]:
    stream = await c.chat.completions.create(stream=True, **kw)
    return [chunk async for chunk in stream]


def assert_aligned(step: dict[str, Any]) -> None:
    tokens = step["tokens"]
    assert tokens["source"] == "engine"
    assert tokens["prompt_ids"], "prompt ids recorded"
    assert len(tokens["completion_ids"]) == len(tokens["completion_logprobs"]) > 0


async def test_sync_client_unary_records_engine_tokens_and_hides_them(proxy, pool, fake):
    sync = openai.OpenAI(base_url=proxy.base_url, api_key="k", max_retries=0)

    def call() -> Any:
        return sync.chat.completions.with_raw_response.create(model="m", messages=USER)

    raw = await asyncio.to_thread(call)
    body = raw.http_response.json()
    assert body["choices"][0]["message"]["content"] == "ok 1: hello there"
    # The proxy asked for ids and log-probs; the agent did not, so it does not see them.
    assert "prompt_token_ids" not in body
    assert "token_ids" not in body["choices"][0]
    assert body["choices"][0]["logprobs"] is None
    sent = fake[0].requests[-1]
    assert sent["return_token_ids"] is True and sent["logprobs"] is True
    assert raw.http_response.headers["X-AW-Trajectory"].startswith("tr_")
    sync.close()
    await proxy.stop()
    (step,) = steps_of(pool)
    assert step["status"] == "ok" and step["protocol"] == "openai.chat"
    assert step["response"]["message"] == {"role": "assistant", "content": "ok 1: hello there"}
    assert_aligned(step)
    # Completion ids spell the completion (the fake's tokens are characters).
    assert "".join(map(chr, step["tokens"]["completion_ids"])) == "ok 1: hello there"
    assert step["request"]["params"] == {}  # the proxy's own additions are not the agent's params


async def test_stream_assembles_to_the_unary_message(proxy, pool):
    c = client(proxy)
    kw = {"model": "m", "messages": [{"role": "user", "content": "please think about it"}]}
    unary = await c.chat.completions.create(**kw)
    chunks = await streamed(c, **kw)
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == unary.choices[0].message.content
    for ch in chunks:  # no token ids leak into the agent's stream
        assert "token_ids" not in (ch.model_extra or {}) and "prompt_token_ids" not in (
            ch.model_extra or {}
        )
        for choice in ch.choices:
            assert "token_ids" not in (choice.model_extra or {})
    await c.close()
    await proxy.stop()
    a, b = steps_of(pool)
    assert a["response"]["message"] == b["response"]["message"]
    assert a["response"]["message"]["reasoning"] == "Let me think."
    assert a["tokens"] == b["tokens"]
    assert_aligned(b)
    assert b["timings"]["first_token_s"] > 0


@pytest.mark.parametrize(
    ("reply", "ask", "content"),
    [
        (None, {"tools": TOOLS}, None),  # tool calls and no text
        ("", {"messages": [{"role": "user", "content": "think"}]}, None),  # reasoning alone
        ("", {}, ""),  # nothing at all
    ],
    ids=["tool-calls", "reasoning", "empty"],
)
async def test_a_streamed_answer_records_the_content_of_its_unary_twin(
    proxy, pool, fake, reply, ask, content
):
    """vLLM's first chunk carries ``content: ""`` before tool calls or reasoning; its unary
    answer says null for an empty rest. The step is the same either way."""
    fake[0].reply = reply
    c = client(proxy)
    kw = {"model": "m", "messages": USER, **ask}
    await c.chat.completions.create(**kw)
    await streamed(c, **kw)
    await c.close()
    await proxy.stop()
    unary, stream = steps_of(pool)
    assert unary["response"]["message"]["content"] == content
    assert stream["response"]["message"] == unary["response"]["message"]


@pytest.mark.parametrize("stream", [False, True])
async def test_parallel_tool_calls(proxy, pool, stream):
    c = client(proxy)
    kw = {
        "model": "m",
        "messages": [{"role": "user", "content": "parallel lookup"}],
        "tools": TOOLS,
        "tool_choice": "auto",
    }
    if stream:
        chunks = await streamed(c, **kw)
        names = [
            tc.function.name
            for ch in chunks
            if ch.choices
            for tc in ch.choices[0].delta.tool_calls or ()
            if tc.function.name
        ]
        finish = [
            ch.choices[0].finish_reason
            for ch in chunks
            if ch.choices and ch.choices[0].finish_reason
        ]
    else:
        r = await c.chat.completions.create(**kw)
        names = [tc.function.name for tc in r.choices[0].message.tool_calls]
        finish = [r.choices[0].finish_reason]
    assert names == ["search", "open"] and finish == ["tool_calls"]
    await c.close()
    await proxy.stop()
    (step,) = steps_of(pool)
    calls = step["response"]["message"]["tool_calls"]
    assert [(x["id"], x["name"]) for x in calls] == [("call_0_0", "search"), ("call_0_1", "open")]
    assert calls[0]["arguments"] == '{"q":"parallel l","j":0}'
    assert step["request"]["tools"] == TOOLS
    assert step["request"]["params"]["tool_choice"] == "auto"
    assert_aligned(step)


@pytest.mark.parametrize("stream", [False, True])
async def test_n_choices_are_steps_with_one_index(proxy, pool, stream):
    c = client(proxy)
    kw = {"model": "m", "messages": USER, "n": 3}
    if stream:
        chunks = await streamed(c, **kw)
        seen = {choice.index for ch in chunks for choice in ch.choices}
    else:
        r = await c.chat.completions.create(**kw)
        seen = {choice.index for choice in r.choices}
        assert r.choices[2].message.content.endswith("#2")
    assert seen == {0, 1, 2}
    await c.close()
    await proxy.stop()
    steps = sorted(steps_of(pool), key=lambda s: s["choice"])
    assert [s["choice"] for s in steps] == [0, 1, 2]
    assert {s["index"] for s in steps} == {0}
    assert steps[2]["response"]["message"]["content"].endswith("#2")
    for s in steps:
        assert_aligned(s)
        assert s["response"]["usage"]["completion_tokens"] == len(s["tokens"]["completion_ids"])


async def test_agent_asked_for_logprobs_and_ids_keeps_them(proxy, pool):
    c = client(proxy)
    r = await c.chat.completions.create(
        model="m", messages=USER, logprobs=True, extra_body={"return_token_ids": True}
    )
    assert len(r.choices[0].logprobs.content) == len("ok 1: hello there")
    assert r.choices[0].model_extra["token_ids"]
    assert r.model_extra["prompt_token_ids"]
    await c.close()
    await proxy.stop()
    (step,) = steps_of(pool)
    assert step["request"]["params"]["logprobs"] is True
    assert_aligned(step)


async def test_sampling_params_usage_and_response_format(proxy, pool, fake):
    c = client(proxy)
    chunks = await streamed(
        c,
        model="m",
        messages=USER,
        stop=["\n"],
        seed=7,
        response_format={"type": "json_object"},
        stream_options={"include_usage": True},
    )
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
    sent = fake[0].requests[-1]
    assert sent["stop"] == ["\n"] and sent["seed"] == 7
    await c.close()
    await proxy.stop()
    (step,) = steps_of(pool)
    assert step["request"]["params"]["response_format"] == {"type": "json_object"}
    assert step["request"]["params"]["seed"] == 7
    assert step["response"]["message"]["content"].startswith('{"answer"')
    assert step["response"]["usage"]["completion_tokens"] == len(step["tokens"]["completion_ids"])


@pytest.mark.parametrize("stream", [False, True])
async def test_completions(proxy, pool, stream):
    c = client(proxy)
    if stream:
        s = await c.completions.create(model="m", prompt="Once upon", stream=True)
        text = "".join([ch.choices[0].text async for ch in s if ch.choices])
    else:
        r = await c.completions.create(model="m", prompt="Once upon")
        text = r.choices[0].text
        assert r.choices[0].logprobs is None and "token_ids" not in (r.choices[0].model_extra or {})
    assert text == "ok 0: Once upon"
    await c.close()
    await proxy.stop()
    (step,) = steps_of(pool)
    assert step["protocol"] == "openai.completions"
    assert step["request"]["prompt"] == "Once upon"
    assert step["response"]["text"] == text
    assert step["tokens"]["prompt_ids"] == [ord(ch) for ch in "Once upon"]
    assert_aligned(step)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    "prompt", [["Once upon", "In a galaxy"], [[79, 110], [73, 110, 32]]], ids=["text", "ids"]
)
async def test_a_completions_batch_records_each_choice_with_its_prompt(proxy, pool, prompt, stream):
    """A list of prompts is a batch (OpenAI, vLLM): n choices a prompt, numbered on
    (choice = prompt index * n + j); each choice's step has the prompt it answers."""
    c = client(proxy)
    if stream:
        s = await c.completions.create(model="m", prompt=prompt, n=2, stream=True)
        texts: dict[int, str] = {}
        async for ch in s:
            for choice in ch.choices:
                texts[choice.index] = texts.get(choice.index, "") + choice.text
    else:
        r = await c.completions.create(model="m", prompt=prompt, n=2)
        texts = {choice.index: choice.text for choice in r.choices}
    assert sorted(texts) == [0, 1, 2, 3]
    await c.close()
    await proxy.stop()
    steps = sorted(steps_of(pool), key=lambda s: s["choice"])
    assert [s["choice"] for s in steps] == [0, 1, 2, 3]
    for s in steps:
        k = s["choice"] // 2
        asked = prompt[k]
        prompt_ids = [ord(ch) for ch in asked] if isinstance(asked, str) else asked
        assert s["request"]["params"]["prompt_index"] == k
        assert "prompt_list" not in s["request"]["params"]
        if isinstance(asked, str):
            assert s["request"]["prompt"] == asked
        else:
            assert s["request"]["params"]["prompt_token_ids"] == asked
        assert s["response"]["text"] == texts[s["choice"]]
        assert s["tokens"]["prompt_ids"] == prompt_ids
        assert s["response"]["usage"]["prompt_tokens"] == len(prompt_ids)
        assert_aligned(s)
    if isinstance(prompt[0], str):
        assert steps[2]["response"]["text"] == "ok 0: In a galaxy"


async def test_openai_engine_records_messages_only(make_proxy, pool, fake):
    proxy = await make_proxy(UpstreamConfig.single(fake[1], engine="openai"))
    c = client(proxy)
    r = await c.chat.completions.create(model="m", messages=USER)
    assert r.choices[0].message.content
    assert "return_token_ids" not in fake[0].requests[-1]
    await c.close()
    await proxy.stop()
    (step,) = steps_of(pool)
    assert step["tokens"] == {"source": "none"}


async def test_config_model_params_and_api_key(make_proxy, pool, fake):
    up = UpstreamConfig(
        urls=(fake[1],),
        model="served-name",
        api_key_env="KEY",
        params={"temperature": 0.3, "top_p": 0.9},
    )
    proxy = await make_proxy(agents={"coder": up}, api_keys={"coder": "sk-upstream-secret"})
    c = client(proxy)
    await c.chat.completions.create(model="coder", messages=USER, top_p=0.5)
    sent, headers = fake[0].requests[-1], fake[0].headers[-1]
    assert sent["model"] == "served-name"
    assert sent["temperature"] == 0.3 and sent["top_p"] == 0.5  # defaults never override the agent
    assert headers["Authorization"] == "Bearer sk-upstream-secret"
    await c.close()
    await proxy.stop()
    (step,) = steps_of(pool)
    assert step["agent"] == "coder"
    assert step["metadata"]["requested_model"] == "coder"
    dump = (pool.root / "objects").rglob("*")
    blob = b"".join(p.read_bytes() for p in dump if p.is_file())
    import zstandard

    text = b"".join(
        zstandard.ZstdDecompressor().decompressobj().decompress(p.read_bytes())
        for p in (pool.root / "objects").rglob("*.zst")
    )
    assert blob and b"sk-upstream-secret" not in text and b"agent-key" not in text


async def test_other_v1_paths_pass_through_unrecorded(proxy, pool):
    c = client(proxy)
    models = await c.models.list()
    assert [m.id for m in models.data] == ["fake-model"]
    r = await c.embeddings.with_raw_response.create(model="m", input="abc")
    echoed = r.http_response.json()
    assert echoed["path"] == "/v1/embeddings" and '"input":"abc"' in echoed["body"].replace(" ", "")
    await c.close()
    await proxy.stop()
    assert steps_of(pool) == []


async def test_upstream_connection_is_kept_alive_across_unary_and_streamed_calls(
    proxy, pool, monkeypatch
):
    from agentworld.proxy.upstream.client import UpstreamClient

    opened = []
    connect = UpstreamClient._connect

    async def counting(self, key, timeout_s):  # type: ignore[no-untyped-def]
        opened.append(key)
        return await connect(self, key, timeout_s)

    monkeypatch.setattr(UpstreamClient, "_connect", counting)
    c = client(proxy)
    for _ in range(3):
        await c.chat.completions.create(model="m", messages=USER)
        chunks = await streamed(c, model="m", messages=USER)
        assert "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    await c.close()
    await proxy.stop()
    assert len(opened) == 1  # six calls, one upstream connection
    assert len([r for r in pool.iter_records() if r["kind"] == "step"]) == 6


async def test_passed_through_bodies_keep_the_encoding_the_agent_asked_for(make_proxy):
    """A hosted API compresses what the agent accepts; the body travels as it came, with its
    Content-Encoding, and an agent that accepts none gets it plain."""
    import aiohttp
    import orjson
    from aiohttp import web
    from aiohttp.test_utils import TestServer

    async def models(request: web.Request) -> web.Response:
        data = [{"id": "m" * 40 + str(i), "object": "model", "owned_by": "x"} for i in range(50)]
        resp = web.json_response({"object": "list", "data": data})
        resp.enable_compression()  # as the client's Accept-Encoding allows
        return resp

    app = web.Application()
    app.router.add_get("/v1/models", models)
    hosted = TestServer(app, host="127.0.0.1")
    await hosted.start_server()
    try:
        proxy = await make_proxy(UpstreamConfig.single(str(hosted.make_url("")).rstrip("/")))
        c = openai.AsyncOpenAI(base_url=proxy.base_url, api_key="k", max_retries=0)
        raw = await c.models.with_raw_response.list()  # the SDK accepts gzip and others
        assert raw.headers.get("content-encoding") in ("gzip", "deflate", "br", "zstd")
        assert len(raw.parse().data) == 50
        await c.close()
        async with (
            aiohttp.ClientSession(
                auto_decompress=False, skip_auto_headers=["Accept-Encoding"]
            ) as s,
            s.get(proxy.base_url + "/models") as r,
        ):
            assert "Content-Encoding" not in r.headers
            assert len(orjson.loads(await r.read())["data"]) == 50
    finally:
        await hosted.close()


async def test_a_key_sent_in_the_body_reaches_the_upstream_but_not_the_pool(proxy, pool, fake):
    """Some clients send a credential as a body field: forwarded as sent, never recorded."""
    import anthropic

    c = client(proxy)
    secrets = {
        "api_key": "sk-body-secret",
        "Client-Secret": "cs-secret",
        "api_token": "at-secret",
        "hf_token": "hf-secret",
        "aws_secret_access_key": "aws-secret",
        "private_key": "pk-secret",
    }
    # The sampling parameters that name tokens, as vLLM takes them: all of them recorded.
    sampling = {
        "seed": 7,
        "max_tokens": 50,
        "max_completion_tokens": 50,
        "min_tokens": 1,
        "top_logprobs": 2,
        "logit_bias": {"65": 1.0},
        "skip_special_tokens": False,
        "spaces_between_special_tokens": False,
        "stop_token_ids": [2],
        "allowed_token_ids": [65, 66],
        "truncate_prompt_tokens": 100,
        "add_special_tokens": False,
        "return_tokens_as_token_ids": False,
        "metadata": {"run": "r1", "api_key": "sk-meta-secret"},
    }
    await c.chat.completions.create(
        model="m", messages=USER, logprobs=True, extra_body={**secrets, **sampling}
    )
    assert fake[0].requests[-1]["api_key"] == "sk-body-secret"  # the upstream may need it
    assert fake[0].requests[-1]["metadata"]["api_key"] == "sk-meta-secret"
    await c.close()
    claude = anthropic.AsyncAnthropic(base_url=proxy.url, api_key="k", max_retries=0)
    await claude.messages.create(
        model="m",
        max_tokens=16,
        messages=USER,
        metadata={"user_id": "u1"},
        extra_body={"password": "pw-secret", "metadata": {"user_id": "u1", "hf_token": "hf-m"}},
    )
    await claude.close()
    await proxy.stop()
    messages, chat = sorted(steps_of(pool), key=lambda s: s["protocol"])  # anthropic.*, openai.*
    assert chat["request"]["params"] == {**sampling, "logprobs": True, "metadata": {"run": "r1"}}
    assert "password" not in messages["raw"]["request"]
    assert "password" not in messages["request"]["params"]
    assert messages["request"]["params"]["metadata"] == {"user_id": "u1"}
    assert messages["raw"]["request"]["metadata"] == {"user_id": "u1"}
    text = orjson.dumps([chat, messages])
    assert b"secret" not in text and b"hf-m" not in text
