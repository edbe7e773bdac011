"""Recompute log-probs with a plain forward pass: the reference every engine output must match."""

from __future__ import annotations

from typing import Any

import torch


def forward_logprobs(
    model: Any, prompt_ids: list[int], output_ids: list[int], params: Any = None
) -> list[float]:
    """Log-prob of each output token under the model, from one unbatched forward pass.

    With sampling ``params``, under the distribution sampled from (temperature, top-k,
    top-p applied), which is what the engine records; greedy keeps the raw model's.
    """
    from agentworld.serve.sampling import SAMPLING_EPS, processed_logits

    with torch.no_grad():
        logits = model(torch.tensor([prompt_ids + output_ids])).logits[0].float()
    if params is not None and params.temperature >= SAMPLING_EPS:
        top_k = params.top_k if 0 < params.top_k < logits.shape[-1] else 0
        rows = list(range(logits.shape[0]))
        logits = processed_logits(logits, rows, params.temperature, top_k, params.top_p)
    lp = torch.log_softmax(logits, dim=-1)
    start = len(prompt_ids) - 1
    return [lp[start + j, t].item() for j, t in enumerate(output_ids)]


def load_model(path: Any) -> Any:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
