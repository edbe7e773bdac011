"""Batched sampling draws exactly what the per-row sampler drew: same seeds, same tokens."""

from __future__ import annotations

import queue
import time
from pathlib import Path

import pytest
import torch

from agentworld.serve.engine import Engine, Finished, Request, TokenEvent
from agentworld.serve.sampling import SamplingParams, sample

from .helpers import forward_logprobs, load_model

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def reference_sample(
    logits: torch.Tensor, params: list[SamplingParams], generators: list[torch.Generator]
) -> tuple[list[int], list[float], list[list[tuple[int, float]]]]:
    """The engine's sampler before it was batched (one row at a time), kept as the oracle."""
    logits = logits.float()
    ids, lps, tops = [], [], []
    for i, p in enumerate(params):
        # Log-probs of the distribution sampled from (processed); greedy: the raw model's.
        dist = torch.log_softmax(logits[i], dim=-1)
        if p.temperature < 1e-5:
            tok = int(torch.argmax(logits[i]))
        else:
            row = logits[i] / p.temperature
            if p.top_k and p.top_k > 0 and p.top_k < row.numel():
                kth = torch.topk(row, p.top_k).values[-1]
                row = row.masked_fill(row < kth, float("-inf"))
            if p.top_p < 1.0:
                srt, order = torch.sort(row, descending=True)
                cum = torch.softmax(srt, dim=-1).cumsum(-1)
                cut = (cum - torch.softmax(srt, dim=-1)) >= p.top_p
                row = row.scatter(0, order, srt.masked_fill(cut, float("-inf")))
            probs = torch.softmax(row, dim=-1)
            tok = int(torch.multinomial(probs, 1, generator=generators[i]))
            dist = torch.log_softmax(row, dim=-1)
        top = []
        if p.top_logprobs:
            vals, idx = torch.topk(dist, p.top_logprobs)
            top = list(zip(idx.tolist(), vals.clamp(min=-9999.0).tolist(), strict=True))
        ids.append(tok)
        lps.append(float(dist[tok]))
        tops.append(top)
    return ids, lps, tops


MIXED = [
    SamplingParams(temperature=0.0, top_logprobs=3),
    SamplingParams(temperature=1.0, seed=1),
    SamplingParams(temperature=1.0, seed=2, top_logprobs=1),  # groups with the row above
    SamplingParams(temperature=0.7, top_k=20, seed=3),
    SamplingParams(temperature=1.3, top_p=0.8, seed=4, top_logprobs=5),
    SamplingParams(temperature=0.9, top_k=50, top_p=0.9, seed=5),
    SamplingParams(temperature=0.9, top_k=50, top_p=0.9, seed=6),
    SamplingParams(temperature=0.5, top_k=10_000, seed=7),  # top_k >= vocab: off
    SamplingParams(temperature=1e-6, seed=8),  # below the epsilon: greedy
]


def _generators(params: list[SamplingParams], device: str) -> list[torch.Generator]:
    gens = []
    for p in params:
        g = torch.Generator(device=device)
        g.manual_seed(p.seed if p.seed is not None else 0)
        gens.append(g)
    return gens


@pytest.mark.parametrize("device", DEVICES)
def test_batched_sampler_equals_the_per_row_sampler(device: str):
    torch.manual_seed(0)
    for step in range(20):
        # Peaked rows (scale 6) make top-p cut at different depths per row and step.
        logits = (torch.randn(len(MIXED), 300) * (1 + step % 6)).to(device)
        gens_new, gens_ref = _generators(MIXED, device), _generators(MIXED, device)
        for _ in range(3):  # the generators advance the same way over several steps
            got = sample(logits, MIXED, gens_new)
            ids, lps, tops = reference_sample(logits, MIXED, gens_ref)
            assert got.token_ids == ids
            assert got.ids.tolist() == ids and got.ids.device.type == device
            assert got.logprobs == lps  # exact: the same float32 values
            assert [[t for t, _ in row] for row in got.top] == [[t for t, _ in r] for r in tops]
            assert [[v for _, v in row] for row in got.top] == [[v for _, v in r] for r in tops]


def test_logprobs_are_of_the_tempered_distribution_that_sampled():
    torch.manual_seed(0)
    logits = torch.randn(2, 40) * 3
    params = [SamplingParams(temperature=0.5, seed=1), SamplingParams(temperature=0.5, seed=2)]
    got = sample(logits, params, _generators(params, "cpu"))
    want = torch.log_softmax(logits / 0.5, dim=-1)  # not log_softmax(logits): the raw model
    for i, tok in enumerate(got.token_ids):
        assert got.logprobs[i] == pytest.approx(float(want[i, tok]), abs=1e-6)
        assert got.logprobs[i] != pytest.approx(float(torch.log_softmax(logits[i], -1)[tok]))


def test_sampler_with_one_row_and_no_top_logprobs():
    logits = torch.randn(1, 50)
    got = sample(logits, [SamplingParams(temperature=0.0)], [None])
    assert got.token_ids == [int(torch.argmax(logits))]
    assert got.top == [[]]
    assert got.logprobs[0] == pytest.approx(float(torch.log_softmax(logits, -1).max()))


def test_top_k_one_and_tiny_top_p_are_greedy_whatever_the_seed():
    logits = torch.randn(4, 100)
    params = [
        SamplingParams(temperature=1.0, top_k=1, seed=s) if s % 2 else
        SamplingParams(temperature=1.0, top_p=1e-6, seed=s)
        for s in range(4)
    ]  # fmt: skip
    got = sample(logits, params, _generators(params, "cpu"))
    assert got.token_ids == torch.argmax(logits, dim=-1).tolist()


# Recorded from the per-row sampler (before batching) on the tiny test model, torch 2.13 CPU:
# a seeded mixed batch must keep drawing exactly these tokens.
PIN_PROMPTS = [[5, 6, 7, 8, 9, 10, 11], [20, 21], [30, 31, 32, 33], [100], [7, 7, 7, 7]]
PIN_PARAMS = [
    SamplingParams(max_tokens=10, temperature=1.0, seed=1, ignore_eos=True),
    SamplingParams(max_tokens=10, temperature=0.7, top_k=20, seed=2, ignore_eos=True),
    SamplingParams(
        max_tokens=10, temperature=1.3, top_p=0.8, seed=3, ignore_eos=True, top_logprobs=2
    ),
    SamplingParams(max_tokens=10, temperature=0.9, top_k=50, top_p=0.9, seed=4, ignore_eos=True),
    SamplingParams(max_tokens=10, temperature=0.0, ignore_eos=True, top_logprobs=3),
]
PIN_IDS = [
    [273, 236, 12, 303, 162, 390, 441, 344, 340, 368],
    [419, 0, 0, 232, 156, 191, 64, 427, 211, 181],
    [32, 348, 409, 480, 460, 94, 447, 233, 436, 134],
    [386, 255, 259, 64, 182, 139, 199, 395, 12, 41],
    [221, 147, 147, 147, 458, 312, 458, 358, 221, 393],
]


def test_seeded_requests_draw_the_pinned_tokens_batched_and_alone(engine: Engine):
    sinks = [queue.Queue() for _ in PIN_PROMPTS]
    reqs = [
        engine.submit(Request(p, sp, q.put))
        for p, sp, q in zip(PIN_PROMPTS, PIN_PARAMS, sinks, strict=True)
    ]
    for q in sinks:
        while not isinstance(q.get(timeout=30), Finished):
            pass
    assert [r.output_ids for r in reqs] == PIN_IDS
    alone = [
        engine.generate(p, sp)[0].output_ids for p, sp in zip(PIN_PROMPTS, PIN_PARAMS, strict=True)
    ]
    assert alone == PIN_IDS


def test_engine_on_cuda_reports_the_log_probs_of_a_cpu_forward_pass(tiny_model_dir: Path):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    eng = Engine(tiny_model_dir, device="cuda", dtype="float32", max_batch_size=8)
    try:
        results = []
        for prompt, sp in zip(PIN_PROMPTS, PIN_PARAMS, strict=True):
            events: list[TokenEvent] = []
            req = eng.submit(Request(prompt, sp, events.append))
            results.append((req, events))
        while not all(req.done for req, _ in results):
            time.sleep(0.01)
        again = eng.generate(PIN_PROMPTS[0], PIN_PARAMS[0])[0].output_ids
    finally:
        eng.close()
    assert again == results[0][0].output_ids  # seeded: reproducible on the GPU too
    model = load_model(tiny_model_dir)
    for (req, events), sp in zip(results, PIN_PARAMS, strict=True):
        tokens = [e for e in events if isinstance(e, TokenEvent)]
        assert [t.token_id for t in tokens] == req.output_ids and len(tokens) == sp.max_tokens
        assert all(len(t.top) == sp.top_logprobs for t in tokens)
        ref = forward_logprobs(model, req.prompt_ids, req.output_ids, sp)
        assert [t.logprob for t in tokens] == pytest.approx(ref, abs=1e-3)
