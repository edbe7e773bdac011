"""Prompt log-probs on /v1/completions: `echo`, `max_tokens: 0` and vLLM's `prompt_logprobs`,
each checked against a plain forward pass of the same tiny model."""

from __future__ import annotations

import queue
from pathlib import Path
from typing import Any

import pytest
import torch

from agentworld.serve.engine import Engine, Finished, PromptScored, Request
from agentworld.serve.sampling import SamplingParams
from agentworld.serve.server import make_app

from .helpers import load_model
from .test_server import read_sse

PROMPT = "the weather in paris is"


@pytest.fixture
async def client(aiohttp_client: Any, engine: Engine) -> Any:
    return await aiohttp_client(make_app(engine))


@pytest.fixture(scope="module")
def model(tiny_model_dir: Path) -> Any:
    return load_model(tiny_model_dir)


def raw_logprobs(model: Any, ids: list[int]) -> torch.Tensor:
    """(T, V): log-probs of the token after each position, of the raw model."""
    with torch.no_grad():
        return torch.log_softmax(model(torch.tensor([ids])).logits[0].float(), dim=-1)


async def post(client: Any, body: dict[str, Any]) -> dict[str, Any]:
    resp = await client.post("/v1/completions", json=body)
    assert resp.status == 200, await resp.text()
    return await resp.json()


async def test_echo_with_max_tokens_0_is_the_prompt_and_its_forward_logprobs(
    client: Any, engine: Engine, model: Any
):
    """What lm-eval's loglikelihood sends: the prompt alone back, scored token by token by
    the raw model (a sampling temperature does not change prompt scores, as in vLLM)."""
    ids = engine.tokenizer.encode(PROMPT)
    body = {"prompt": PROMPT, "echo": True, "logprobs": 1, "max_tokens": 0, "temperature": 0.5}
    out = await post(client, body)
    choice = out["choices"][0]
    assert choice["text"] == PROMPT
    lp = choice["logprobs"]
    assert lp["tokens"] == [engine.tokenizer.decode([t]) for t in ids]
    assert "".join(lp["tokens"]) == PROMPT
    assert lp["text_offset"] == [len("".join(lp["tokens"][:i])) for i in range(len(ids))]
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    ref = raw_logprobs(model, ids)
    for i in range(1, len(ids)):
        want = ref[i - 1, ids[i]].item()
        assert lp["token_logprobs"][i] == pytest.approx(want, abs=1e-4)
        top = lp["top_logprobs"][i]
        # vLLM's shape: the prompt token, then the best `logprobs` (one here).
        best = ref[i - 1].argmax().item()
        assert top[lp["tokens"][i]] == pytest.approx(want, abs=1e-4)
        assert top[engine.tokenizer.decode([best])] == pytest.approx(
            ref[i - 1, best].item(), abs=1e-4
        )
        assert len(top) == (1 if best == ids[i] else 2)
    # vLLM scores an echoed prompt at `logprobs`, and returns those scores here too.
    assert choice["prompt_logprobs"][0] is None and len(choice["prompt_logprobs"]) == len(ids)
    # One token is generated and dropped, as vLLM does (and counts it).
    assert out["usage"]["prompt_tokens"] == len(ids)
    assert out["usage"]["completion_tokens"] == 1


async def test_echo_prepends_the_prompt_to_the_same_answer(client: Any, engine: Engine, model: Any):
    ids = engine.tokenizer.encode(PROMPT)
    base = {"prompt": PROMPT, "max_tokens": 5, "temperature": 0, "ignore_eos": True}
    plain = (await post(client, base | {"logprobs": 0}))["choices"][0]
    echoed = (await post(client, base | {"logprobs": 0, "echo": True}))["choices"][0]
    assert echoed["text"] == PROMPT + plain["text"]
    lp, gen = echoed["logprobs"], plain["logprobs"]
    n = len(ids)
    assert lp["tokens"] == [engine.tokenizer.decode([t]) for t in ids] + gen["tokens"]
    # The scored prefill keeps every column's logits: equal up to float rounding.
    assert lp["token_logprobs"][n:] == pytest.approx(gen["token_logprobs"], abs=1e-5)
    ref = raw_logprobs(model, ids)
    assert lp["token_logprobs"][1:n] == pytest.approx(
        [ref[i - 1, ids[i]].item() for i in range(1, n)], abs=1e-4
    )
    assert lp["text_offset"] == [len("".join(lp["tokens"][:i])) for i in range(len(lp["tokens"]))]
    # logprobs 0: each prompt position's top holds only the prompt token.
    assert all(len(t) == 1 for t in lp["top_logprobs"][1:n])
    # Without `logprobs`, echo is the text alone and nothing is scored.
    bare = (await post(client, base | {"echo": True}))["choices"][0]
    assert bare["text"] == echoed["text"]
    assert bare["logprobs"] is None and bare["prompt_logprobs"] is None


async def test_echo_of_token_ids_and_of_several_prompts(client: Any, engine: Engine):
    out = await post(client, {"prompt": [5, 6, 7], "echo": True, "max_tokens": 0})
    assert out["choices"][0]["text"] == engine.tokenizer.decode([5, 6, 7])
    body = {"prompt": ["a cat", "two dogs"], "echo": True, "max_tokens": 0, "n": 2}
    texts = [c["text"] for c in (await post(client, body))["choices"]]
    assert texts == ["a cat", "a cat", "two dogs", "two dogs"]
    # vLLM echoes no text when the client asked for the ids.
    out = await post(client, body | {"return_token_ids": True})
    assert [c["text"] for c in out["choices"]] == ["", "", "", ""]


async def test_prompt_logprobs_give_the_token_its_rank_and_the_best_k(
    client: Any, engine: Engine, model: Any
):
    ids = engine.tokenizer.encode(PROMPT)
    base = {"prompt": PROMPT, "max_tokens": 4, "temperature": 0, "ignore_eos": True}
    plain = (await post(client, base))["choices"][0]
    assert plain["prompt_logprobs"] is None
    choice = (await post(client, base | {"prompt_logprobs": 2}))["choices"][0]
    assert choice["text"] == plain["text"] and choice["logprobs"] is None
    scored = choice["prompt_logprobs"]
    assert len(scored) == len(ids) and scored[0] is None
    ref = raw_logprobs(model, ids)
    for i in range(1, len(ids)):
        row = ref[i - 1]
        entry = scored[i]
        keys = list(entry)
        assert keys[0] == str(ids[i])  # the prompt token first, then the best two
        want = row[ids[i]]
        mine = entry[str(ids[i])]
        assert mine["logprob"] == pytest.approx(want.item(), abs=1e-4)
        assert mine["decoded_token"] == engine.tokenizer.decode([ids[i]])
        best = torch.topk(row, 2)
        for r, (v, t) in enumerate(zip(best.values, best.indices, strict=True), start=1):
            assert entry[str(t.item())]["logprob"] == pytest.approx(v.item(), abs=1e-4)
            assert entry[str(t.item())]["rank"] == r
        if ids[i] not in best.indices.tolist():
            assert mine["rank"] == int((row >= want).sum())
            assert len(entry) == 3
        else:
            assert len(entry) == 2


async def test_prompt_logprobs_and_echo_refusals_are_vllms(client: Any):
    cases = [
        ({"prompt": PROMPT, "max_tokens": 0}, "max_tokens"),
        ({"prompt": PROMPT, "prompt_logprobs": 1, "stream": True}, "prompt_logprobs"),
        ({"prompt": PROMPT, "prompt_logprobs": -2}, "prompt_logprobs"),
        ({"prompt": PROMPT, "prompt_logprobs": -1}, "prompt_logprobs"),
        ({"prompt": PROMPT, "prompt_logprobs": 21}, "prompt_logprobs"),
        ({"prompt": PROMPT, "prompt_logprobs": "2"}, "prompt_logprobs"),
    ]
    for body, param in cases:
        resp = await client.post("/v1/completions", json=body)
        assert resp.status == 400, body
        assert (await resp.json())["error"]["param"] == param
    msg = (await (await client.post("/v1/completions", json=cases[1][0])).json())["error"]
    assert msg["message"] == "`prompt_logprobs` are not available when `stream=True`."


async def test_a_request_without_these_fields_scores_no_prompt(
    client: Any, engine: Engine, monkeypatch: pytest.MonkeyPatch
):
    def refuse(*args: Any) -> None:
        raise AssertionError("scored a prompt nobody asked to score")

    monkeypatch.setattr(engine, "_prefill_scored", refuse)
    body = {"prompt": PROMPT, "max_tokens": 3, "logprobs": 2, "echo": False}
    choice = (await post(client, body))["choices"][0]
    assert choice["prompt_logprobs"] is None and len(choice["logprobs"]["tokens"]) == 3


async def test_streamed_echo_assembles_to_the_unary_answer(client: Any):
    base = {"prompt": PROMPT, "temperature": 0, "ignore_eos": True, "echo": True, "logprobs": 1}
    for max_tokens in (4, 0):
        body = base | {"max_tokens": max_tokens}
        whole = (await post(client, body))["choices"][0]
        resp = await client.post("/v1/completions", json=body | {"stream": True})
        assert resp.status == 200
        parts = [c["choices"][0] for c in (await read_sse(resp))[:-1]]
        assert parts[0]["text"].startswith(PROMPT)  # vLLM: the prompt in the first chunk
        assert "".join(p["text"] for p in parts) == whole["text"]
        for key in ("tokens", "token_logprobs", "text_offset", "top_logprobs"):
            assert [x for p in parts for x in p["logprobs"][key]] == whole["logprobs"][key]
        assert parts[-1]["finish_reason"] == whole["finish_reason"]


def test_chunked_scoring_of_a_padded_batch_matches_a_forward_pass(fresh_engine: Engine, model: Any):
    """One logit column at a time (the smallest chunk), prompts of different lengths
    sharing a left-padded batch: each prompt scores as it would alone, and its answer
    is the one an unscored prefill gives."""
    fresh_engine.prompt_logits_elements = 1
    fresh_engine.gather_window_s = 0.5  # both requests in one batch
    prompts = [[5, 9, 17, 3, 44, 2, 8], [7, 12, 30]]
    greedy = SamplingParams(max_tokens=3, temperature=0, ignore_eos=True, prompt_logprobs=3)
    sinks: list[queue.Queue[Any]] = [queue.Queue() for _ in prompts]
    reqs = [
        fresh_engine.submit(Request(p, greedy, q.put)) for p, q in zip(prompts, sinks, strict=True)
    ]
    for p, q, req in zip(prompts, sinks, reqs, strict=True):
        events = []
        while not events or not isinstance(events[-1], Finished):
            events.append(q.get(timeout=60))
        (scored,) = [e.positions for e in events if isinstance(e, PromptScored)]
        ref = raw_logprobs(model, p)
        assert scored[0] is None and len(scored) == len(p)
        for i in range(1, len(p)):
            assert scored[i].token_id == p[i]
            assert scored[i].logprob == pytest.approx(ref[i - 1, p[i]].item(), abs=1e-4)
            assert [t for t, _ in scored[i].top] == torch.topk(ref[i - 1], 3).indices.tolist()
        unscored, _ = fresh_engine.generate(p, SamplingParams(max_tokens=3, temperature=0))
        assert req.output_ids == unscored.output_ids


async def test_a_generated_tokens_top_logprobs_hold_the_sampled_token_first(client: Any):
    """OpenAI's legacy completions (and vLLM's): each position's ``top_logprobs`` holds the
    sampled token and then the best ``logprobs`` (up to logprobs + 1 entries); with
    `logprobs: 0` the sampled token's alone. Ours held the best alone (null for 0), so a
    token sampled outside them had no entry of its own. (Ids as tokens: two byte tokens
    both decode to "\ufffd".)"""
    body = {
        "prompt": PROMPT,
        "max_tokens": 8,
        "temperature": 1.5,
        "seed": 3,
        "ignore_eos": True,
        "return_tokens_as_token_ids": True,
    }
    for k in (0, 2):
        lp = (await post(client, body | {"logprobs": k}))["choices"][0]["logprobs"]
        rows = zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"], strict=True)
        outside = 0
        for tok, own, top in rows:
            assert next(iter(top.items())) == (tok, own)  # the sampled token, first
            assert k <= len(top) <= k + 1
            outside += len(top) == k + 1
            others = list(top.values())[1:]
            assert others == sorted(others, reverse=True)  # then the best, best first
        if k == 0:
            assert outside == len(lp["tokens"])  # {sampled: its log-prob} each
