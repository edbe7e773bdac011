"""Log-probs of the sampled tokens without ever holding the full (tokens x vocabulary) logits.

A causal LM's logits are (B, T, V) fp32: at ``batch_tokens`` 16384 and
SmolLM2's 49,152-token vocabulary that is 3.2 GB for one copy, and the
log-softmax, its backward and autograd's saved tensors made several
(``aw train --algo sft`` on the 16-trajectory demo pool was killed at 15.2 GB
RSS). The losses need one number per *sampled* token, so, as Liger's and
torchtune's chunked cross-entropy do: run the model body once for its final
hidden states, pick the positions whose next token was sampled, and project +
log-softmax + gather them a chunk at a time, each chunk under activation
checkpointing, so only a (chunk, V) block ever exists (recomputed in backward).
Prompt, tool-result and template positions are never projected at all.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.checkpoint import checkpoint

# No positions at all: the model's own head projects nothing.
_NO_LOGITS = torch.empty(0, dtype=torch.long)


def _head_logits(
    head: torch.nn.Module,
    hidden: torch.Tensor,
    temperature: torch.Tensor,
    scale: float,
    softcap: float,
) -> torch.Tensor:
    """The distribution's logits as the model samples from them: (N, H) -> (N, V) fp32,
    scaled and soft-capped as the model's config says, divided by each row's temperature."""
    logits = head(hidden).float()
    if scale != 1.0:
        logits = logits * scale
    if softcap:
        logits = torch.tanh(logits / softcap) * softcap
    return logits / temperature[:, None]


def _head_logprobs(
    head: torch.nn.Module,
    hidden: torch.Tensor,
    targets: torch.Tensor,
    temperature: torch.Tensor,
    scale: float,
    softcap: float,
) -> torch.Tensor:
    """log softmax(head(hidden) * scale / temperature)[target]: (N, H), (N,), (N,) -> (N,) fp32."""
    logits = _head_logits(head, hidden, temperature, scale, softcap)  # (N, V)
    picked = logits.gather(-1, targets[:, None]).squeeze(-1)  # (N,)
    return picked - torch.logsumexp(logits, dim=-1)


def _head_logprobs_entropy(
    head: torch.nn.Module,
    hidden: torch.Tensor,
    targets: torch.Tensor,
    temperature: torch.Tensor,
    scale: float,
    softcap: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``_head_logprobs``, and the entropy of each position's (tempered) distribution, from
    the same (N, V) block: (N,) log-probs with their graph, (N,) entropies without one."""
    logits = _head_logits(head, hidden, temperature, scale, softcap)  # (N, V)
    lse = torch.logsumexp(logits, dim=-1)  # (N,)
    picked = logits.gather(-1, targets[:, None]).squeeze(-1)  # (N,)
    with torch.no_grad():  # H = logsumexp - E_p[logit]: a metric, not a loss term
        weighted = torch.softmax(logits, dim=-1).mul_(logits)  # one more (N, V) block, not two
        entropy = lse - weighted.sum(-1)
    return picked - lse, entropy


def _head_adjustments(config: Any) -> tuple[float, float]:
    """What a model does to its head's output before the softmax: (scale, softcap).

    Granite divides by ``logits_scaling``; Gemma 2/3 soft-cap with
    ``final_logit_softcapping``. Llama, Qwen, SmolLM and most others do neither.
    """
    scaling = getattr(config, "logits_scaling", None) or 1.0
    softcap = getattr(config, "final_logit_softcapping", None) or 0.0
    return 1.0 / float(scaling), float(softcap)


def sampled_logprobs(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    positions: torch.Tensor,
    temperature: torch.Tensor | None = None,
    *,
    chunk_tokens: int = 1024,
    entropy: bool = False,
) -> Any:
    """log p(token t+1 | tokens <= t) where ``positions`` is true; 0 elsewhere.

    ``entropy``: also the entropy of each of those positions' distributions (the one
    sampled from: logits / temperature), as a second (B, T-1) tensor without a graph,
    computed from the same projected chunks (TRL logs its mean as ``entropy``).

    input_ids, attention_mask: (B, T); positions, temperature: (B, T-1), aligned
    with the targets ``input_ids[:, 1:]``. ``model`` may be wrapped (DDP): its own
    forward runs, so the wrapper's gradient hooks see it, asked for no logits
    (``logits_to_keep`` empty) and for the hidden states; the last of those is the
    final-normed state the head projects.
    """
    core = model.module if hasattr(model, "module") else model
    head = core.get_output_embeddings()
    scale, softcap = _head_adjustments(core.config)
    out = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        output_hidden_states=True,
        logits_to_keep=_NO_LOGITS.to(input_ids.device),
        use_cache=False,
    )
    hidden = out.hidden_states[-1][:, :-1]  # (B, T-1, H)
    pick = positions.bool()
    h = hidden[pick]  # (N, H)
    targets = input_ids[:, 1:][pick]  # (N,)
    temp = (
        temperature[pick].float()
        if temperature is not None
        else torch.ones(targets.shape, device=h.device)
    )  # (N,)
    parts, entropies = [], []
    grad = torch.is_grad_enabled() and h.requires_grad
    fn = _head_logprobs_entropy if entropy else _head_logprobs
    for s in range(0, h.shape[0], chunk_tokens):
        args = (head, h[s : s + chunk_tokens], targets[s : s + chunk_tokens])
        rest = (temp[s : s + chunk_tokens], scale, softcap)
        # Under a graph the (chunk, V) logits are recomputed in backward instead of kept.
        got = checkpoint(fn, *args, *rest, use_reentrant=False) if grad else fn(*args, *rest)
        if entropy:
            parts.append(got[0])
            entropies.append(got[1])
        else:
            parts.append(got)
    logp = torch.zeros(pick.shape, dtype=torch.float32, device=h.device)  # (B, T-1)
    ent = torch.zeros_like(logp) if entropy else None
    if not parts:
        # Nothing sampled here (a process's zero-weight filler batch): still a graph through
        # every parameter, with zero gradient, so DDP's all-reduce sees the same parameters
        # on every process.
        one = _head_logprobs(head, hidden[:1, 0], input_ids[:1, 1], logp.new_ones(1), 1.0, 0.0)
        logp = logp + 0.0 * one.sum()
        return (logp, ent) if entropy else logp
    logp = logp.masked_scatter(pick, torch.cat(parts))
    if entropy:
        return logp, ent.masked_scatter(pick, torch.cat(entropies).detach())
    return logp
