"""One decoding step's sampling for a whole batch on the device, with one copy to the host."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

# Below this temperature sampling is greedy, as in vLLM (`_SAMPLING_EPS`).
SAMPLING_EPS = 1e-5
# A filtered-out token's log-prob (-inf) as JSON can carry it: vLLM's OpenAI server's value.
MIN_LOGPROB = -9999.0


@dataclass(frozen=True)
class SamplingParams:
    """Per-request sampling; defaults follow vLLM's chat defaults."""

    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 or -1: off
    seed: int | None = None
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    top_logprobs: int = 0
    # vLLM's ``prompt_logprobs``: each prompt token's log-prob and this many best at its
    # position, scored at prefill; None (the default) scores nothing and costs nothing.
    prompt_logprobs: int | None = None


@dataclass
class Sampled:
    """A step's tokens: `ids` stays on the device (the next input), the rest is on the host."""

    ids: torch.Tensor  # (B,) long, on the logits' device
    token_ids: list[int]
    logprobs: list[float]  # under the distribution sampled from (temperature, top-k, top-p)
    top: list[list[tuple[int, float]]]  # each row's `top_logprobs` best (id, log-prob)


def sample(
    logits: torch.Tensor,
    params: Sequence[SamplingParams],
    generators: Sequence[torch.Generator | None],
) -> Sampled:
    """Sample one token per row of ``logits`` (B, V) under each row's params and generator.

    Rows sharing (temperature, top_k, top_p) are filtered together with the very ops the
    per-row sampler used, so a seeded request draws the same tokens batched or alone.
    Nothing here reads a device value back except the single copy at the end: on a GPU a
    step costs one host sync, not one per row (and more for top log-probs).
    """
    logits = logits.float()
    vocab = logits.shape[-1]
    # Log-probs of the distribution each token was drawn from, after temperature, top-k
    # and top-p: vLLM's ``--logprobs-mode processed_logprobs``. The policy a trainer
    # optimises and takes ratios against is this one, not the raw model's (TRL and verl
    # divide their logits by the sampling temperature for the same reason). Greedy rows
    # keep the raw distribution (temperature 1), as vLLM does.
    processed = torch.log_softmax(logits, dim=-1)  # (B, V)
    chosen = torch.argmax(logits, dim=-1)  # (B,): greedy rows keep these
    groups: dict[tuple[float, int, float], list[int]] = {}
    for i, p in enumerate(params):
        if p.temperature >= SAMPLING_EPS:
            top_k = p.top_k if p.top_k and 0 < p.top_k < vocab else 0
            groups.setdefault((p.temperature, top_k, p.top_p), []).append(i)
    if groups:
        parts = list(chosen.split(1))  # (1,) each
        for (temperature, top_k, top_p), rows in groups.items():
            x = processed_logits(logits, rows, temperature, top_k, top_p)  # (G, V)
            probs = torch.softmax(x, dim=-1)  # (G, V)
            processed[rows] = torch.log_softmax(x, dim=-1)
            for j, i in enumerate(rows):
                # One draw per row from the request's own generator: seeds stay per request.
                # multinomial checks its input with an async assert, so no sync here.
                parts[i] = torch.multinomial(probs[j], 1, generator=generators[i])
        chosen = torch.cat(parts)  # (B,)
    picked = processed.gather(-1, chosen[:, None])  # (B, 1)
    k_max = max((p.top_logprobs for p in params), default=0)
    columns = [chosen[:, None].double(), picked.double()]
    if k_max:
        top_vals, top_ids = torch.topk(processed, k_max, dim=-1)  # (B, k_max) each
        columns += [top_ids.double(), top_vals.clamp(min=MIN_LOGPROB).double()]
    # float64 holds every token id and float32 log-prob exactly: one copy for everything.
    host = torch.cat(columns, dim=-1).tolist()  # (B, 2 + 2 * k_max)
    token_ids = [int(row[0]) for row in host]
    logprobs = [row[1] for row in host]
    top = []
    for p, row in zip(params, host, strict=True):
        k = p.top_logprobs
        ids, vals = row[2 : 2 + k], row[2 + k_max : 2 + k_max + k]
        top.append([(int(t), v) for t, v in zip(ids, vals, strict=True)])
    return Sampled(chosen, token_ids, logprobs, top)


def processed_logits(
    logits: torch.Tensor, rows: list[int], temperature: float, top_k: int, top_p: float
) -> torch.Tensor:
    """Temperature, then top-k, then top-p (-inf outside) on the given rows: (G, V)."""
    x = logits if len(rows) == logits.shape[0] else torch.stack([logits[i] for i in rows])
    # A Python scalar, not a per-row tensor: the same kernel as one row at a time.
    x = x / temperature
    if top_k:
        kth = torch.topk(x, top_k, dim=-1).values[:, -1:]  # (G, 1)
        x = x.masked_fill(x < kth, float("-inf"))
    if top_p < 1.0:
        srt, order = torch.sort(x, dim=-1, descending=True)
        mass = torch.softmax(srt, dim=-1)
        # Keep the smallest prefix whose mass reaches top_p (always >= 1 token).
        cut = (mass.cumsum(-1) - mass) >= top_p
        x = x.scatter(-1, order, srt.masked_fill(cut, float("-inf")))
    return x
