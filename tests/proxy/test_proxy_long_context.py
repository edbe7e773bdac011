"""Long conversations: the engine's prompt ids travel as bytes (RawIds), never as Python ints,
and still reach the pool exactly, stay hidden from agents that did not ask, and reach those that did."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import anthropic
import openai
import pytest

from agentworld.proxy.fake_upstream import ids, render
from tests.proxy.conftest import steps_of

# About 40 KB of conversation: the fake's prompt ids (one a character) come to ~160 KB of JSON.
CONVERSATION = [{"role": "system", "content": "You are a coding agent. " * 200}]
for turn in range(8):
    CONVERSATION += [
        {"role": "user", "content": f"turn {turn}: run the tests " + "log line\n" * 400},
        {"role": "assistant", "content": f"ran them ({turn}) " + "ok " * 300},
    ]
CONVERSATION.append({"role": "user", "content": "and now?"})


def client(proxy: Any) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=proxy.base_url, api_key="k", max_retries=0)


@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
@pytest.mark.parametrize("asked", [False, True], ids=["hidden", "asked"])
async def test_chat_prompt_ids_reach_the_pool_exactly(proxy, pool, raw_made, stream, asked):
    c = client(proxy)
    extra = {"return_token_ids": True} if asked else {}
    expected = ids(render(CONVERSATION))
    kw = {"model": "m", "messages": CONVERSATION, "extra_body": extra}
    if stream:
        chunks = [ch async for ch in await c.chat.completions.create(stream=True, **kw)]
        text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
        seen = [ch.model_extra.get("prompt_token_ids") for ch in chunks]
        seen = [s for s in seen if s is not None]
    else:
        r = await c.chat.completions.create(**kw)
        text = r.choices[0].message.content
        seen = [r.model_extra["prompt_token_ids"]] if "prompt_token_ids" in r.model_extra else []
    assert text == "ok 9: and now?"
    assert seen == ([expected] if asked else [])
    await c.close()
    await proxy.stop()
    assert raw_made == [len(expected)]
    (step,) = steps_of(pool)
    assert step["tokens"]["prompt_ids"] == expected
    assert step["response"]["usage"]["prompt_tokens"] == len(expected)
    assert "".join(map(chr, step["tokens"]["completion_ids"])) == text
    assert len(step["tokens"]["completion_logprobs"]) == len(step["tokens"]["completion_ids"])


@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
async def test_completions_prompt_ids_on_the_choice(proxy, pool, raw_made, stream):
    c = client(proxy)
    prompt = "Once upon a time " * 1000
    if stream:
        s = await c.completions.create(model="m", prompt=prompt, stream=True)
        text = "".join([ch.choices[0].text async for ch in s if ch.choices])
    else:
        r = await c.completions.create(model="m", prompt=prompt)
        text = r.choices[0].text
        assert "prompt_token_ids" not in (r.choices[0].model_extra or {})
    assert text.startswith("ok 0: Once upon")
    await c.close()
    await proxy.stop()
    assert raw_made == [len(prompt)]
    (step,) = steps_of(pool)
    assert step["tokens"]["prompt_ids"] == ids(prompt)


@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
async def test_anthropic_bridge_counts_input_tokens_from_raw_ids(
    make_proxy, pool, raw_made, stream
):
    proxy = await make_proxy()
    system, *rest = CONVERSATION
    client = anthropic.AsyncAnthropic(base_url=proxy.url, api_key="k", max_retries=0)
    kw = {"model": "claude-test", "max_tokens": 100, "system": system["content"], "messages": rest}
    if stream:
        async with client.messages.stream(**kw) as s:
            async for _ in s:
                pass
            msg = await s.get_final_message()
    else:
        msg = await client.messages.create(**kw)
    expected = ids(render(CONVERSATION))
    assert msg.usage.input_tokens == len(expected)
    await client.close()
    await proxy.stop()
    assert raw_made == [len(expected)]
    (step,) = steps_of(pool)
    assert step["protocol"] == "anthropic.messages"
    assert step["tokens"]["prompt_ids"] == expected


async def test_stream_broken_after_the_first_event_keeps_the_prompt_ids(proxy, pool, raw_made):
    c = client(proxy)
    got = []
    with pytest.raises(openai.APIError):
        stream = await c.chat.completions.create(model="break", messages=CONVERSATION, stream=True)
        async for chunk in stream:
            got.append(chunk)
    assert got and all("prompt_token_ids" not in (ch.model_extra or {}) for ch in got)
    await c.close()
    await proxy.stop()
    assert raw_made == [len(ids(render(CONVERSATION)))]
    (step,) = steps_of(pool)
    assert step["status"] == "error" and step["error"]["type"] == "upstream_disconnected"
    assert step["tokens"]["prompt_ids"] == ids(render(CONVERSATION))


async def test_agent_leaving_mid_stream_is_cancelled_with_the_prompt_ids(proxy, pool, raw_made):
    body = {"model": "slow", "messages": CONVERSATION, "stream": True}
    async with aiohttp.ClientSession() as s:
        resp = await s.post(proxy.base_url + "/chat/completions", json=body)
        assert resp.status == 200
        seen = b""
        while b'"content":"ok' not in seen:  # the first token is in: the step has ids
            seen += await resp.content.readany()
        assert b"prompt_token_ids" not in seen
        resp.close()  # the agent goes away
    for _ in range(300):
        if proxy.state.stats.steps["cancelled"]:
            break
        await asyncio.sleep(0.02)
    await proxy.stop()
    (step,) = steps_of(pool)
    assert step["status"] == "cancelled"
    assert step["tokens"]["prompt_ids"] == ids(render(CONVERSATION))
