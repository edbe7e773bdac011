"""Secrets never reach the pool, whichever route a record is built on: credential fields of a
request, of what the upstream echoes back, of the /aw/ API's metadata; and the key values
the proxy saw in headers, wherever an upstream quotes them."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from multidict import CIMultiDict

from agentworld.proxy.config import UpstreamConfig
from agentworld.proxy.redact import MASK, KnownKeys, redact_record
from tests.proxy.conftest import records_of
from tests.proxy.test_proxy_trajectories import post

USER = [{"role": "user", "content": "hi"}]
SECRETS = ("sk-tool-auth", "sk-fn-auth", "sk-head-auth", "sk-pw", "sk-sess", "sk-nest", "sk-mcp")


def leaked(pool: Any, needles: Any) -> list[tuple[str, str]]:
    """(record kind, needle) for each needle found anywhere in a record of the pool."""
    out = []
    for rec in records_of(pool):
        blob = json.dumps(rec)
        out += [(rec["kind"], n) for n in needles if n in blob]
    return out


async def test_chat_tools_credentials_are_left_out_of_the_step(proxy, pool):
    tools = [
        {
            "type": "function",
            "authorization": "Bearer sk-tool-auth",
            "headers": {"Authorization": "Bearer sk-head-auth", "X-Region": "eu"},
            "function": {"name": "f", "parameters": {}, "authorization": "sk-fn-auth"},
        }
    ]
    status, _ = await post(
        proxy.url + "/v1/chat/completions", {"model": "m", "messages": USER, "tools": tools}
    )
    assert status == 200
    await proxy.stop()
    assert leaked(pool, SECRETS) == []
    (step,) = [r for r in records_of(pool) if r["kind"] == "step"]
    assert step["request"]["tools"][0]["headers"] == {"X-Region": "eu"}  # the rest is kept
    assert step["request"]["tools"][0]["function"]["name"] == "f"


async def test_responses_route_secrets_echoed_in_the_raw_answer_are_left_out(proxy, pool):
    body = {
        "model": "m",
        "input": "hi",
        "metadata": {"password": "sk-pw", "session_token": "sk-sess", "run": "7"},
        "tools": [
            {
                "type": "mcp",
                "server_label": "crm",
                "server_url": "https://crm.example/mcp",
                "authorization": "sk-mcp",
                "headers": {"Authorization": "Bearer sk-head-auth"},
            }
        ],
        "user": "u1",
        "store": False,
        "extra": {"nested": {"secret": "sk-nest"}},
    }
    status, got = await post(proxy.url + "/v1/responses", body)
    assert status in (200, 400), got
    await proxy.stop()
    assert leaked(pool, SECRETS) == []


async def test_lifecycle_metadata_and_white_box_params_are_redacted(proxy, pool):
    meta = {"api_key": "sk-meta-1", "hf_token": "hf_meta_2", "client_secret": "cs-meta-3", "ok": 1}
    status, made = await post(proxy.url + "/aw/trajectories", {"metadata": meta})
    assert status == 200
    tid = made["trajectory"]
    step = {
        "trajectory": tid,
        "messages": USER,
        "completion": "4",
        "metadata": {"api_key": "sk-meta-4"},
        "params": {"api_key": "sk-param-5", "temperature": 0.5},
    }
    status, got = await post(proxy.url + "/aw/steps", step)
    assert status == 200, got
    status, got = await post(
        f"{proxy.url}/aw/trajectories/{tid}/complete",
        {"reward": 1.0, "metadata": {"client_secret": "cs-end-6", "note": "n"}},
    )
    assert status == 200, got
    await proxy.stop()
    needles = ("sk-meta-1", "hf_meta_2", "cs-meta-3", "sk-meta-4", "sk-param-5", "cs-end-6")
    assert leaked(pool, needles) == []
    (wb,) = [r for r in records_of(pool) if r["kind"] == "step"]
    assert wb["request"]["params"] == {"temperature": 0.5}


@pytest.fixture
async def quoting_upstream() -> Any:
    """An upstream that refuses every call, quoting the key it was sent (as some do)."""

    async def refuse(request: web.Request) -> web.Response:
        key = request.headers.get("Authorization", "")
        message = f"Incorrect API key provided: {key[7:]}. You can find your key elsewhere."
        return web.json_response(
            {"error": {"message": message, "type": "invalid_request_error", "code": 401}},
            status=401,
        )

    app = web.Application()
    app.router.add_post("/v1/chat/completions", refuse)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    yield str(server.make_url("")).rstrip("/")
    await server.close()


async def test_an_upstream_error_quoting_the_agents_key_is_masked(
    make_proxy, pool, quoting_upstream
):
    proxy = await make_proxy(UpstreamConfig.single(quoting_upstream))
    key = "sk-agent-very-secret-1234"
    async with (
        aiohttp.ClientSession() as s,
        s.post(
            proxy.url + "/v1/chat/completions",
            json={"model": "m", "messages": USER},
            headers={"Authorization": f"Bearer {key}"},
        ) as r,
    ):
        assert r.status == 401
    await proxy.stop()
    (step,) = [r for r in records_of(pool) if r["kind"] == "step"]
    assert key not in json.dumps(step)
    assert f"provided: {MASK}." in step["error"]["message"]


def test_known_keys_are_masked_everywhere_and_shared_objects_are_not_changed():
    keys = KnownKeys(["configured-upstream-key"])
    keys.saw(CIMultiDict({"Authorization": "Bearer agent-key-abcdef", "X-Api-Key": "short"}))
    shared = {"note": "use agent-key-abcdef please"}
    rec = {
        "kind": "step",
        "metadata": shared,
        "request": {"messages": [{"role": "user", "content": "configured-upstream-key"}]},
        "tokens": {"source": "none"},
    }
    redact_record(rec, keys.listed())
    assert orjson.dumps(rec).count(MASK.encode()) == 2
    assert b"agent-key-abcdef" not in orjson.dumps(rec)
    assert shared == {"note": "use agent-key-abcdef please"}  # the proxy's own copy
    assert "short" not in keys.listed()  # too short to mask without blanking other text
