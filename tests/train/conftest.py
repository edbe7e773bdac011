"""Fixtures for trainer tests: the tiny model, and pools of multi-turn trajectories written
with engine token ids and rollout log-probs computed by a forward pass of that model."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("accelerate")

from agentworld import records  # noqa: E402
from agentworld.pool import Pool  # noqa: E402
from agentworld.serve.tiny import make_tiny_model  # noqa: E402

# Tiny models on a shared 2-core machine: one thread is ~15x faster than oversubscribing.
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="session")
def tiny(tiny_model: Path) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(tiny_model))
    model.eval()
    return model, AutoTokenizer.from_pretrained(str(tiny_model))


def rollout_logprobs(model: Any, prompt: list[int], completion: list[int]) -> list[float]:
    """What the engine would have recorded: log p(completion token | everything before)."""
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].float()  # (T, V)
    logp = torch.log_softmax(logits, dim=-1)
    n = len(prompt)
    return [float(logp[n - 1 + i, t]) for i, t in enumerate(completion)]


class PoolBuilder:
    """Writes engine-token trajectories of several turns into a pool."""

    def __init__(self, root: Path, model: Any, tokenizer: Any, seed: int = 0) -> None:
        self.pool = Pool.create(root)
        self.model, self.tok = model, tokenizer
        self.rng = random.Random(seed)
        self.plain = [i for i in range(len(tokenizer)) if i not in tokenizer.all_special_ids]

    def words(self, n: int) -> list[int]:
        return [self.rng.choice(self.plain) for _ in range(n)]

    def trajectory(
        self,
        *,
        turns: int = 3,
        reward: float | None = 1.0,
        group: str | None = None,
        agent: str = "a",
        dataset: str = "d",
        policy_version: int = 0,
        break_at: int | None = None,
        logprobs: bool = True,
        status: str = "done",
        reply_tokens: int = 5,
    ) -> tuple[str, list[dict[str, Any]]]:
        """Steps whose prompts continue prompt + completion of the step before (except at
        ``break_at``, where the prompt is re-rendered differently), plus an end record."""
        tid = records.new_id("tr")
        eos = self.tok.eos_token_id
        prompt = self.words(6)
        recs = []
        common = {"group": group, "dataset": dataset, "task": "t1"}
        for i in range(turns):
            if break_at is not None and i == break_at:
                prompt = prompt[1:]  # e.g. the agent trimmed its history: not a continuation
            completion = [*self.words(reply_tokens), eos]
            lps = rollout_logprobs(self.model, prompt, completion) if logprobs else None
            tokens = {"source": "engine", "prompt_ids": prompt, "completion_ids": completion}
            if lps is not None:
                tokens["completion_logprobs"] = lps
            recs.append(
                records.make_step(
                    trajectory=tid,
                    index=i,
                    agent=agent,
                    request={"messages": [{"role": "user", "content": f"turn {i}"}]},
                    response={"message": {"role": "assistant", "content": "x"}},
                    tokens=tokens,
                    policy_version=policy_version,
                    **common,
                )
            )
            prompt = prompt + completion + self.words(3)  # tool result / template tokens
        recs.append(
            records.make_end(
                trajectory=tid,
                agent=agent,
                status=status,
                steps=turns,
                reward=reward,
                policy_version=policy_version,
                **common,
            )
        )
        return tid, recs

    def write(self, recs: list[dict[str, Any]]) -> None:
        """One writer per call: closing it seals one shard."""
        w = self.pool.writer(durability="strict")
        for r in recs:
            w.append(r)
        w.close()

    def group(
        self, rewards: list[float], *, group: str | None = None, **kw: Any
    ) -> tuple[str, list[str]]:
        group = group or records.new_id("gr")
        tids, recs = [], []
        for r in rewards:
            tid, rs = self.trajectory(reward=r, group=group, **kw)
            tids.append(tid)
            recs += rs
        self.write(recs)
        return group, tids


@pytest.fixture
def builder(tmp_path: Path, tiny: tuple[Any, Any]) -> PoolBuilder:
    model, tok = tiny
    b = PoolBuilder(tmp_path / "pool", model, tok)
    yield b
    b.pool.close()
