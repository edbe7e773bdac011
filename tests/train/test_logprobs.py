"""Chunked log-probs of sampled positions equal the full-logits ones, in value and gradient; a
micro-batch in parts gives the whole batch's loss and gradient."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

from agentworld.train.config import TrainConfig  # noqa: E402
from agentworld.train.forward import forward_loss, forward_parts  # noqa: E402
from agentworld.train.logprobs import sampled_logprobs  # noqa: E402
from agentworld.train.losses import token_logprobs  # noqa: E402


@pytest.fixture
def model(tiny: tuple[Any, Any]) -> Any:
    return tiny[0]


def batch(vocab: int, b: int = 4, t: int = 12, seed: int = 0) -> dict[str, Any]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (b, t), generator=g)
    am = torch.ones(b, t, dtype=torch.long)
    am[-1, t - 3 :] = 0  # a shorter row, padded
    sampled = (torch.rand(b, t, generator=g) > 0.4).float() * am
    sampled[:, 0] = 0
    has = sampled.bool() & (torch.rand(b, t, generator=g) > 0.3)
    return {
        "input_ids": ids,
        "attention_mask": am,
        "sampled": sampled,
        "rollout_logprobs": torch.where(has, -torch.rand(b, t, generator=g) * 5, 0.0),
        "has_logprob": has,
        "temperature": torch.full((b, t), 0.7),
        "advantages": torch.tensor([1.0, -0.5, 0.25, -1.0])[:b],
        "weight": 1.0,
    }


def test_chunked_logprobs_equal_full_logits_in_value_and_gradient(model: Any) -> None:
    b = batch(model.config.vocab_size)
    pos = b["sampled"][:, 1:] > 0
    temp = b["temperature"][:, 1:]
    logits = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits
    full = token_logprobs(logits[:, :-1], b["input_ids"][:, 1:], temp)  # (B, T-1)
    model.zero_grad()
    (full * pos).sum().backward()
    want = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    got = sampled_logprobs(model, b["input_ids"], b["attention_mask"], pos, temp, chunk_tokens=5)
    assert torch.allclose(got[pos], full[pos].detach(), atol=1e-5)
    assert (got[~pos] == 0).all()  # positions nobody asked for are never projected
    got.sum().backward()
    for n, p in model.named_parameters():
        assert torch.allclose(p.grad, want[n], rtol=1e-4, atol=1e-4), n
    model.zero_grad()


def test_entropy_comes_with_the_logprobs_and_leaves_their_gradient_alone(model: Any) -> None:
    """The entropy of each sampled position's tempered distribution, from the same chunks;
    log-probs and their gradient as without it."""
    b = batch(model.config.vocab_size, seed=1)
    pos = b["sampled"][:, 1:] > 0
    temp = b["temperature"][:, 1:]
    with torch.no_grad():
        logits = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits
    tempered = logits[:, :-1].float() / temp[..., None]
    p_full = torch.softmax(tempered, -1)
    want_h = -(p_full * torch.log_softmax(tempered, -1)).sum(-1)  # (B, T-1)
    model.zero_grad()
    plain = sampled_logprobs(model, b["input_ids"], b["attention_mask"], pos, temp, chunk_tokens=5)
    plain.sum().backward()
    want_grad = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    logp, h = sampled_logprobs(
        model, b["input_ids"], b["attention_mask"], pos, temp, chunk_tokens=5, entropy=True
    )
    assert torch.allclose(logp, plain.detach(), atol=1e-6)
    assert torch.allclose(h[pos], want_h[pos], atol=1e-4)
    assert (h[~pos] == 0).all() and not h.requires_grad
    assert float(h[pos].min()) > 0
    logp.sum().backward()
    for n, p in model.named_parameters():
        assert torch.allclose(p.grad, want_grad[n], rtol=1e-5, atol=1e-6), n
    model.zero_grad()


def test_temperature_is_applied_by_hand() -> None:
    logits = torch.tensor([[[0.0, math_log(3.0)]]])  # softmax at T=1: 1/4, 3/4
    got = token_logprobs(logits, torch.tensor([[1]]), torch.tensor([[0.5]]))
    # At T=0.5 the logits double: p = 9 / (1 + 9)
    assert float(got) == pytest.approx(math_log(0.9))


def math_log(x: float) -> float:
    import math

    return math.log(x)


@pytest.mark.parametrize("algo", ["sft", "grpo"])
def test_a_micro_batch_in_parts_has_the_whole_batchs_loss_and_gradient(
    model: Any, algo: str
) -> None:
    cfg = TrainConfig(model="m", algo=algo, forward_tokens=24, logits_chunk_tokens=4)
    b = batch(model.config.vocab_size)
    parts = forward_parts(b, cfg.forward_tokens)
    assert len(parts) == 2 and parts[1]["input_ids"].shape == (2, 12)
    model.zero_grad()
    whole, _ = forward_loss(model, None, b, cfg)
    whole.backward()
    want = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    mask = b["sampled"][:, 1:]
    n_tokens, n_seqs = float(mask.sum()), float((mask.sum(-1) > 0).sum())
    total = 0.0
    for part in parts:
        loss, _ = forward_loss(model, None, part, cfg, n_seqs=n_seqs, n_tokens=n_tokens)
        loss.backward()
        total += float(loss.detach())
    assert total == pytest.approx(float(whole.detach()), abs=1e-6)
    for n, p in model.named_parameters():
        assert torch.allclose(p.grad, want[n], rtol=1e-4, atol=1e-5), n
    model.zero_grad()
