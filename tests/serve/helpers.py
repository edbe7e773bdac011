"""Recompute log-probs with a plain forward pass: the reference every engine output must match."""

from __future__ import annotations

from typing import Any

import torch


def forward_logprobs(model: Any, prompt_ids: list[int], output_ids: list[int]) -> list[float]:
    """Log-prob of each output token under the model, from one unbatched forward pass."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt_ids + output_ids])).logits[0].float()
    lp = torch.log_softmax(logits, dim=-1)
    start = len(prompt_ids) - 1
    return [lp[start + j, t].item() for j, t in enumerate(output_ids)]


def load_model(path: Any) -> Any:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
