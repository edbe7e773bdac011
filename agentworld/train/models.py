"""The models a run trains: the policy (fp32 master weights), its tokenizer, and the frozen
reference model of the KL term when there is one."""

from __future__ import annotations

from typing import Any

import torch

from agentworld.train.config import TrainConfig


def load_models(cfg: TrainConfig, model_path: str) -> tuple[Any, Any, Any | None]:
    """(tokenizer, policy, reference or None) from ``model_path`` (the base model, or the
    checkpoint a run resumes from) and ``cfg``'s reference model."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    # fp32 master weights (transformers 5 would load the checkpoint's dtype), so checkpoints
    # are fp32 too; bf16/fp16 is autocast compute only (train.mixed_precision or Accelerate's
    # own config, as `accelerate launch` sets it).
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    if cfg.gradient_checkpointing:
        # Keep each layer's input only and recompute its inside in backward: ~30% more
        # compute for activations that fit (see bench/train.py for the peak RSS).
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    ref = None
    if cfg.kl_coef > 0:
        ref = AutoModelForCausalLM.from_pretrained(cfg.ref_model or cfg.model, dtype=torch.float32)
        ref.requires_grad_(False)
    return tokenizer, model, ref
