"""Translated calls and vLLM's context window: a max_tokens that does not fit is cut to the room
left (once), and a prompt that does not fit is told in the agent's own API's words."""

from __future__ import annotations

import anthropic
import openai
import pytest

from agentworld.proxy.fake_upstream import ids, render
from agentworld.proxy.recorder import Call
from agentworld.proxy.translate.context_window import retry_within_window
from tests.proxy_protocols.conftest import steps_of
from tests.proxy_protocols.test_anthropic_sdk import ask as ask_anthropic
from tests.proxy_protocols.test_anthropic_sdk import client_for as anthropic_client
from tests.proxy_protocols.test_responses_sdk import ask as ask_responses
from tests.proxy_protocols.test_responses_sdk import client_for as openai_client

WINDOW = 300
ASKED = 20_000  # (the SDK wants a stream above ~21,000 tokens; Claude Code streams 32,000)


def prompt_len(sent: dict) -> int:
    return len(ids(render(sent["messages"])))


@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
async def test_claude_codes_max_tokens_is_cut_to_the_window(translating, pool, chat_fake, stream):
    fake, _ = chat_fake
    fake.max_model_len, fake.reply = WINDOW, "x" * 400
    client = anthropic_client(translating.url)
    msg = await ask_anthropic(
        client, stream, max_tokens=ASKED, tools=[], messages=[{"role": "user", "content": "hi"}]
    )
    await client.close()
    await translating.stop()

    refused, asked = fake.requests
    room = WINDOW - prompt_len(asked)
    assert refused["max_tokens"] == ASKED and asked["max_tokens"] == room
    # The window, not max_tokens, ended the answer: Anthropic's own stop reason says so.
    assert msg.stop_reason == "model_context_window_exceeded"
    assert msg.content[0].text == "x" * room and msg.usage.output_tokens == room
    (step,) = steps_of(pool)  # the refused ask is not a step
    assert step["status"] == "ok"
    assert step["metadata"]["max_tokens_clamped"] == {"asked": ASKED, "sent": room}
    assert step["request"]["params"]["chat"]["max_tokens"] == room
    assert step["request"]["params"]["max_tokens"] == ASKED  # what the agent asked
    assert step["raw"]["response"]["stop_reason"] == "model_context_window_exceeded"
    assert len(step["tokens"]["completion_ids"]) == room


async def test_an_answer_that_fits_keeps_its_stop_reason(translating, chat_fake):
    fake, _ = chat_fake
    fake.max_model_len = WINDOW
    client = anthropic_client(translating.url)
    msg = await ask_anthropic(
        client, False, max_tokens=ASKED, tools=[], messages=[{"role": "user", "content": "hi"}]
    )
    await client.close()
    assert msg.stop_reason == "end_turn" and len(fake.requests) == 2


@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
async def test_a_prompt_over_the_window_reads_as_anthropics(translating, pool, chat_fake, stream):
    fake, _ = chat_fake
    fake.max_model_len = 10
    client = anthropic_client(translating.url)
    with pytest.raises(anthropic.BadRequestError) as refused:
        await ask_anthropic(
            client, stream, tools=[], messages=[{"role": "user", "content": "a long question"}]
        )
    await client.close()
    await translating.stop()
    prompt = prompt_len(fake.requests[0])
    assert len(fake.requests) == 1  # nothing to cut: asked once
    error = refused.value.body["error"]
    assert error == {
        "type": "invalid_request_error",
        "message": f"prompt is too long: {prompt} tokens > 10 maximum",  # Claude Code compacts
    }
    (step,) = steps_of(pool)
    assert step["status"] == "error" and step["error"]["type"] == "upstream_status"
    assert "maximum context length is 10 tokens" in step["error"]["message"]  # vLLM's words


@pytest.mark.parametrize("mode", ["unary", "events"])  # (the SDK's helper wants "completed")
async def test_responses_max_output_tokens_is_cut_and_overflow_has_openais_code(
    translating, pool, chat_fake, mode
):
    fake, _ = chat_fake
    fake.max_model_len, fake.reply = WINDOW, "x" * 400
    client = openai_client(translating.base_url)
    kw = {"model": "m", "input": "hi", "max_output_tokens": ASKED}
    if mode == "events":  # the stream ends with response.incomplete
        events = [ev async for ev in await client.responses.create(stream=True, **kw)]
        assert events[-1].type == "response.incomplete"
        resp = events[-1].response
    else:
        resp = await ask_responses(client, mode, tools=[], **kw)
    assert resp.status == "incomplete"
    assert resp.incomplete_details.reason == "max_output_tokens"
    room = WINDOW - prompt_len(fake.requests[1])
    assert resp.output_text == "x" * room
    fake.max_model_len = 10
    with pytest.raises(openai.BadRequestError) as refused:
        await ask_responses(client, mode, input="a long question", tools=[])
    assert refused.value.body["code"] == "context_length_exceeded"  # Codex compacts on it
    assert refused.value.body["message"].startswith("Your input exceeds the context window")
    await client.close()
    await translating.stop()
    by_status = {s["status"]: s for s in steps_of(pool)}
    assert sorted(by_status) == ["error", "ok"]
    assert by_status["ok"]["metadata"]["max_tokens_clamped"] == {"asked": ASKED, "sent": room}
    assert by_status["error"]["error"]["status"] == 400


async def test_chat_calls_get_vllms_refusal_as_it_is(translating, chat_fake):
    """A chat call is the agent's own request: the proxy relays the engine's answer."""
    fake, _ = chat_fake
    fake.max_model_len = WINDOW
    client = openai.AsyncOpenAI(base_url=translating.base_url, api_key="k", max_retries=0)
    with pytest.raises(openai.BadRequestError) as refused:
        await client.chat.completions.create(
            model="m", max_tokens=ASKED, messages=[{"role": "user", "content": "hi"}]
        )
    await client.close()
    assert "'max_tokens' or 'max_completion_tokens' is too large" in refused.value.message
    assert len(fake.requests) == 1


def _call(max_tokens: int) -> Call:
    return Call(
        trajectory=None,
        index=0,
        adapter=None,
        sent={"max_tokens": max_tokens},
        injected=None,
        policy_version=0,
    )  # type: ignore[arg-type]


def test_the_cut_happens_once_and_only_for_the_figure_sent():
    vllm = (
        "'max_tokens' or 'max_completion_tokens' is too large: {}. This model's maximum "
        "context length is 8192 tokens and your request has {} input tokens ({} > 8192 - {})."
    )
    record = {"params": {"chat": {"max_tokens": 32000}}}
    call = _call(32000)
    assert retry_within_window(call, record, vllm.format(32000, 5000, 32000, 5000))
    assert call.sent["max_tokens"] == 3192 == record["params"]["chat"]["max_tokens"]
    assert not retry_within_window(call, record, vllm.format(3192, 5100, 3192, 5100))  # once
    assert not retry_within_window(_call(100), {}, vllm.format(32000, 5000, 32000, 5000))
    assert not retry_within_window(_call(32000), {}, vllm.format(32000, 8192, 32000, 8192))
    assert not retry_within_window(_call(32000), {}, "max_tokens is too large")
