"""Which request-body fields count as credentials (left out of records), and which never do."""

from __future__ import annotations

import pytest

from agentworld.proxy.redact import (
    MAX_DEPTH,
    is_secret,
    recorded_params,
    redact_record,
    without_secrets,
)
from agentworld.proxy.translate import responses as rs

CREDENTIALS = [
    "api_key",
    "apiKey",
    "x-api-key",
    "API-KEY",
    "openai_api_key",
    "api_token",
    "hf_token",
    "HF_TOKEN",
    "access_token",
    "accessToken",
    "refresh_token",
    "x-auth-token",
    "token",
    "aws_secret_access_key",
    "aws_access_key_id",
    "client_secret",
    "Client-Secret",
    "secret_key",
    "private_key",
    "privateKey",
    "password",
    "db_passwd",
    "ssh_passphrase",
    "credentials",
    "google_application_credentials",
    "authorization",
    "Proxy-Authorization",
    "auth",
    "cookie",
    "session_key",
]

# Every OpenAI, vLLM, Anthropic and Responses generation parameter whose name holds "token"
# (and a few that look close): counts and lists of tokens, never credentials.
GENERATION_PARAMS = [
    "max_tokens",
    "max_completion_tokens",
    "max_output_tokens",  # Responses
    "max_tokens_to_sample",  # Anthropic's legacy completions
    "min_tokens",
    "budget_tokens",  # Anthropic's thinking
    "top_logprobs",
    "logprobs",
    "prompt_logprobs",
    "logit_bias",
    "return_token_ids",
    "return_tokens_as_token_ids",
    "skip_special_tokens",
    "spaces_between_special_tokens",
    "add_special_tokens",
    "stop_token_ids",
    "allowed_token_ids",
    "bad_words",
    "truncate_prompt_tokens",
    "prompt_token_ids",
    "tokens",
    "top_k",
    "prompt_cache_key",
    "cache_salt",
    "chat_template_kwargs",
    "bos_token",  # chat template variables: a tokenizer's special tokens
    "eos_token",
    "pad_token",
]


@pytest.mark.parametrize("name", CREDENTIALS)
def test_credential_names_are_secrets(name):
    assert is_secret(name)


@pytest.mark.parametrize("name", GENERATION_PARAMS)
def test_generation_parameters_are_never_secrets(name):
    assert not is_secret(name)


def test_every_generation_parameter_survives_in_the_record():
    body = {name: 1 for name in GENERATION_PARAMS}
    body["thinking"] = {"type": "enabled", "budget_tokens": 1024}
    body["chat_template_kwargs"] = {"enable_thinking": False, "bos_token": "<s>"}
    body["logit_bias"] = {"50256": -100}
    assert recorded_params(body, frozenset()) == body
    assert without_secrets(body) is body  # nothing to leave out: no copy


def test_nested_credentials_are_left_out_and_the_rest_kept():
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "my password is hunter2", "api_key": "in-msg"}],
        "metadata": {"api_key": "sk-nested", "run": 7, "client": {"hf_token": "hf-deep"}},
        "api_token": "tok",
        "max_tokens": 5,
    }
    got = without_secrets(body)
    assert got == {
        "model": "m",
        "messages": body["messages"],  # lists (the conversation) are not searched
        "metadata": {"run": 7, "client": {}},
        "max_tokens": 5,
    }
    assert body["metadata"]["api_key"] == "sk-nested"  # the agent's body is not changed


def test_a_json_schemas_field_names_are_not_credentials():
    schema = {
        "type": "object",
        "properties": {"password": {"type": "string"}, "token": {"type": "string"}},
        "required": ["password", "token"],
        "$defs": {"secret": {"type": "string"}},
    }
    body = {"response_format": {"type": "json_schema", "json_schema": {"schema": schema}}}
    assert without_secrets(body) is body


def test_objects_too_deep_to_search_are_left_out():
    deep: dict = {}
    inner = deep
    for _ in range(MAX_DEPTH + 5):
        inner["x"] = {}
        inner = inner["x"]
    inner["api_key"] = "sk-deep"
    got = without_secrets({"metadata": deep})
    assert "sk-deep" not in repr(got)


def test_credentials_of_tools_and_mcp_servers_are_left_out_their_schemas_kept():
    """A remote MCP tool (Responses) or server (Anthropic) carries the credential its host
    sends it: left out; a function tool's parameter called ``api_key`` is its schema."""
    function = {
        "type": "function",
        "name": "login",
        "parameters": {"type": "object", "properties": {"api_key": {"type": "string"}}},
    }
    mcp = {
        "type": "mcp",
        "server_label": "crm",
        "server_url": "https://crm.example/mcp",
        "authorization": "sk-mcp",
        "headers": {"Authorization": "Bearer sk-head", "X-Region": "eu"},
    }
    server = {"type": "url", "url": "https://x.example", "authorization_token": "sk-srv"}
    body = {"model": "m", "tools": [function, mcp], "mcp_servers": [server]}
    got = without_secrets(body)
    assert "sk-" not in repr(got)
    assert got["tools"][0] is function
    assert got["tools"][1] == {
        **{k: mcp[k] for k in ("type", "server_label", "server_url")},
        "headers": {"X-Region": "eu"},
    }
    assert got["mcp_servers"] == [{"type": "url", "url": "https://x.example"}]
    # Where records are written, the same rule: on the params and tools of a request record.
    rec = {
        "kind": "step",
        "request": {
            "params": recorded_params(body, frozenset({"model", "tools"})),
            "tools": rs.record_tools(body),
        },
    }
    redact_record(rec)
    assert rec["request"]["params"]["mcp_servers"] == got["mcp_servers"]
    assert rec["request"]["tools"][1] == got["tools"][1]
    assert body["tools"][1]["authorization"] == "sk-mcp"  # the agent's body is not changed
