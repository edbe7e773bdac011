"""GET /v1/models for Anthropic clients (Claude Code discovers a gateway's models there): in
Anthropic's shape from a chat upstream, the upstream's own answer from an Anthropic one."""

from __future__ import annotations

from typing import Any

import aiohttp
import anthropic
import openai

from agentworld.proxy.config import UpstreamConfig
from agentworld.proxy.fake_upstream import MAX_MODEL_LEN, MODEL

ANTHROPIC = {"anthropic-version": "2023-06-01"}


async def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as s, s.get(url, headers=headers) as r:
        return r.status, await r.json(content_type=None)


async def test_a_chat_upstreams_models_in_anthropics_shape(translating):
    claude = anthropic.AsyncAnthropic(base_url=translating.url, api_key="k", max_retries=0)
    page = await claude.models.list()
    (info,) = page.data
    assert (info.id, info.type, info.display_name) == (MODEL, "model", MODEL)
    assert info.created_at.year == 2026 and info.max_input_tokens == MAX_MODEL_LEN
    assert (page.has_more, page.first_id, page.last_id) == (False, MODEL, MODEL)
    assert (await claude.models.retrieve(MODEL)).id == MODEL
    try:  # no model configured: the name goes upstream as it is, and it knows only its own
        await claude.models.retrieve("claude-sonnet-4-5")
        raise AssertionError("an unknown model was found")
    except anthropic.NotFoundError as exc:
        assert exc.body["error"]["type"] == "not_found_error"
    await claude.close()
    # the same route, for everyone else, is the upstream's own OpenAI-shaped answer
    oai = openai.AsyncOpenAI(base_url=translating.url + "/v1", api_key="k", max_retries=0)
    (card,) = (await oai.models.list()).data
    assert card.id == MODEL and card.object == "model" and card.owned_by == "vllm"
    await oai.close()


async def test_an_agent_with_a_configured_model_serves_whatever_model_the_client_names(
    make_proxy, chat_fake
):
    served = UpstreamConfig(urls=(chat_fake[1],), model="served")
    proxy = await make_proxy(chat_fake[1], agents={"claude-code": served})
    url = proxy.url + "/a/claude-code/v1/models/claude-sonnet-4-5"
    status, body = await get(url, ANTHROPIC)
    assert status == 200 and body["id"] == "claude-sonnet-4-5" and body["type"] == "model"
    status, _ = await get(proxy.url + "/v1/models/claude-sonnet-4-5", ANTHROPIC)
    assert status == 404  # the default agent has no model configured


async def test_the_agents_of_a_shared_proxy_page_as_anthropic_pages(make_proxy, chat_fake):
    up = UpstreamConfig(urls=(chat_fake[1],))
    proxy = await make_proxy(chat_fake[1], agents={n: up for n in ("a1", "a2", "a3")})
    url = proxy.url + "/v1/models"
    status, first = await get(url + "?limit=2", ANTHROPIC)
    assert status == 200 and [m["id"] for m in first["data"]] == ["a1", "a2"]
    assert first["has_more"] and first["last_id"] == "a2"
    _, rest = await get(url + "?limit=2&after_id=a2", ANTHROPIC)
    assert [m["id"] for m in rest["data"]] == ["a3"] and not rest["has_more"]
    _, back = await get(url + "?limit=1&before_id=a3", ANTHROPIC)
    assert [m["id"] for m in back["data"]] == ["a2"] and back["has_more"]
    for bad in ("limit=0", "limit=x", "after_id=nope"):
        status, body = await get(f"{url}?{bad}", ANTHROPIC)
        assert status == 400 and body["error"]["type"] == "invalid_request_error", bad


async def test_an_anthropic_upstream_answers_for_itself(passing, native_fake):
    status, body = await get(passing.url + "/v1/models", ANTHROPIC)
    assert status == 200 and body["data"][0]["display_name"] == "X"  # the fake's own entry


async def test_an_unreachable_upstream_is_an_anthropic_error(make_proxy):
    proxy = await make_proxy("http://127.0.0.1:9")
    status, body = await get(proxy.url + "/v1/models", ANTHROPIC)
    assert status == 502 and body["type"] == "error" and body["error"]["type"] == "api_error"


def test_an_engines_odd_creation_time_reads_as_unknown():
    from agentworld.proxy.translate.anthropic_models import model_info

    for created in (10**20, "2026", None):
        assert model_info({"id": "m", "created": created})["created_at"] == "1970-01-01T00:00:00Z"
