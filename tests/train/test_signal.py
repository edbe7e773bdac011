"""The learning signal end to end on the tiny model: the behaviour policy in the ratio, the
sampling temperature, one pass by default, infrastructure failures kept out of advantages."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.train.test_loop import _fresh_accelerate_state, run  # noqa: F401 (autouse fixture)


def metrics(out: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]


def stale_group(builder, rewards: list[float], shift: float) -> None:
    """A group whose recorded log-probs are the model's shifted by +shift, -shift, +shift...
    per completion token: the trainer's ratio to them is e^-shift, e^+shift alternately."""
    recs = []
    group = f"g{len(builder.pool.layout.shard_paths())}"
    for reward in rewards:
        _, rs = builder.trajectory(reward=reward, group=group, turns=2)
        for r in rs[:-1]:
            lps = r["tokens"]["completion_logprobs"]
            r["tokens"]["completion_logprobs"] = [
                x + (shift if i % 2 == 0 else -shift) for i, x in enumerate(lps)
            ]
        recs += rs
    builder.write(recs)


def test_grpo_ratio_is_against_the_rollout_and_clipping_acts_on_stale_data(
    builder, tiny_model: Path, tmp_path: Path
) -> None:
    for _ in range(2):
        stale_group(builder, [1.0, 0.0], shift=0.5)
    run(builder, tiny_model, tmp_path / "run", algo="grpo", max_steps=1, lr=0.0)
    row = metrics(tmp_path / "run")[0]
    # Half the tokens have ratio e^-0.5, half e^0.5 (6 completion tokens per step).
    assert row["ratio_mean"] == pytest.approx(math.cosh(0.5), abs=1e-4)
    # A > 0 tokens with ratio e^0.5 > 1.2 and A < 0 tokens with e^-0.5 < 0.8 are clipped:
    # one token in two in every sequence.
    assert row["clip_frac"] == pytest.approx(0.5)
    assert row["logprob_diff_mean"] == pytest.approx(0.5, abs=1e-4)
    kl = ((math.exp(0.5) - 1.5) + (math.exp(-0.5) - 0.5)) / 2  # mean k3 of the two ratios
    assert row["mismatch_kl"] == pytest.approx(kl, abs=1e-4)
    assert row["tis_mean"] == pytest.approx(math.cosh(0.5), abs=1e-4)  # none above 2
    assert row["tis_truncated_frac"] == 0.0
    assert row["ess"] == pytest.approx(math.cosh(0.5) ** 2 / math.cosh(1.0), abs=1e-4)
    assert row["onpolicy_tokens"] == 0 and row["rollout_tokens"] > 0


def test_tokens_without_rollout_logprobs_fall_back_on_policy_and_are_counted(
    builder, tiny_model: Path, tmp_path: Path
) -> None:
    builder.group([1.0, 0.0], turns=2, logprobs=False)
    run(builder, tiny_model, tmp_path / "run", algo="grpo", max_steps=1)
    row = metrics(tmp_path / "run")[0]
    assert row["rollout_tokens"] == 0 and row["onpolicy_tokens"] > 0
    assert row["onpolicy_steps"] == 4  # 2 trajectories x 2 steps
    assert row["ratio_mean"] == pytest.approx(1.0) and row["clip_frac"] == 0.0


def test_offline_training_makes_one_pass_unless_replay_is_asked_for(
    builder, tiny_model: Path, tmp_path: Path
) -> None:
    for _ in range(2):
        builder.group([1.0, 0.0], turns=2)
    # One micro-batch holds the whole pool: one pass is one update, whatever max_steps says.
    once, _ = run(builder, tiny_model, tmp_path / "once", algo="grpo", max_steps=5, epochs=1)
    assert once["updates"] == 1
    from agentworld.train.config import TrainConfig

    assert TrainConfig().epochs == 1  # the default
    twice, _ = run(builder, tiny_model, tmp_path / "twice", algo="grpo", max_steps=5, epochs=2)
    assert twice["updates"] == 2
    # The replay is clipped against the rollout policy: after one update at this lr the
    # second pass's ratios have moved away from 1.
    rows = metrics(tmp_path / "twice")
    assert rows[0]["ratio_mean"] == pytest.approx(1.0, abs=1e-4)
    assert rows[1]["ratio_mean"] != pytest.approx(1.0, abs=1e-3)


def tempered_group(builder, temperature: float, **params: Any) -> None:
    """A group sampled at ``temperature``: log-probs recorded of logits / temperature."""
    model = builder.model
    recs = []
    for reward in (1.0, 0.0):
        _, rs = builder.trajectory(reward=reward, group="t", turns=2)
        for r in rs[:-1]:
            prompt, completion = r["tokens"]["prompt_ids"], r["tokens"]["completion_ids"]
            with torch.no_grad():
                logits = model(input_ids=torch.tensor([prompt + completion])).logits[0]
            logp = torch.log_softmax(logits.float() / temperature, dim=-1)
            n = len(prompt)
            r["tokens"]["completion_logprobs"] = [
                float(logp[n - 1 + i, t]) for i, t in enumerate(completion)
            ]
            r["request"]["params"] = {"temperature": temperature, **params}
        recs += rs
    builder.write(recs)


def test_fidelity_compares_at_the_sampling_temperature(
    builder, tiny_model: Path, tmp_path: Path
) -> None:
    tempered_group(builder, 0.5)
    summary, _ = run(builder, tiny_model, tmp_path / "run", algo="grpo", max_steps=1)
    fid = summary["fidelity"]
    assert fid.tokens > 0 and fid.ok and fid.mean_abs < 1e-4, fid.line()


def test_fidelity_names_a_sampling_parameter_the_trainer_does_not_apply(
    builder, tiny_model: Path, tmp_path: Path
) -> None:
    tempered_group(builder, 0.7, top_p=0.9)
    summary, log = run(builder, tiny_model, tmp_path / "run", algo="grpo", max_steps=1)
    fid = summary["fidelity"]
    assert not fid.ok and fid.unapplied == {"top_p": 0.9}
    assert "top_p=0.9" in fid.line() and "MISMATCH" in log


def test_infrastructure_failures_are_kept_out_of_advantages(
    builder, tiny_model: Path, tmp_path: Path
) -> None:
    from agentworld.train.config import TrainConfig
    from agentworld.train.data import make_plan, selection_for

    # One task, four rollouts: two scored by the model's answer, one whose call the
    # upstream failed (scored 0 by an agent that gave up), one the proxy's sweep timed out.
    recs, tids = [], []
    for reward in (1.0, 0.0, 0.0):
        tid, rs = builder.trajectory(reward=reward, group="g", turns=2)
        tids.append(tid)
        recs += rs
    bad = recs[-2]  # the last trajectory's second step: the upstream answered 502
    bad.update(status="error", response=None, error={"type": "upstream", "message": "502"})
    tid, rs = builder.trajectory(reward=0.0, group="g", turns=1, status="timeout")
    rs[-1]["error"] = {"type": "idle_timeout", "message": "no call for 300 s"}
    recs += rs
    builder.write(recs)
    labels = builder.pool.labels.effective()

    def plan(**kw: Any):
        cfg = TrainConfig(model="m", algo="grpo", status=("done", "timeout"), **kw)
        return make_plan(builder.pool.layout, labels, cfg, selection_for(cfg, 0))

    p = plan()
    assert p.infra_failures == 2 and p.matched == 4
    assert set(p.advantages) == set(tids[:2])  # the baseline is the two real answers
    assert p.advantages[tids[0]] > 0 > p.advantages[tids[1]]
    assert p.advantages[tids[0]] == pytest.approx(-p.advantages[tids[1]])
    every = plan(include_infra_failures=True)
    assert every.infra_failures == 0 and len(every.advantages) == 4
    summary, log = run(
        builder, tiny_model, tmp_path / "run", algo="grpo", max_steps=1, status=("done", "timeout")
    )
    assert summary["trajectories"] == 2
    assert "2 infrastructure failures" in log


@pytest.mark.slow
def test_fidelity_with_the_embedded_engine_sampling_at_temperature_half(
    builder, tiny_model: Path, tmp_path: Path
) -> None:
    """`aw serve`'s engine records log-probs of what it sampled from (logits / 0.5); the
    trainer, applying the step's temperature, recomputes them."""
    import queue

    from agentworld import records
    from agentworld.serve.engine import Engine, Finished, Request, TokenEvent
    from agentworld.serve.sampling import SamplingParams

    engine = Engine(tiny_model, device="cpu", max_batch_size=4, model_name="tiny")
    try:
        recs = []
        for k, reward in enumerate((1.0, 0.0, 1.0, 0.0)):
            prompt = builder.words(6)
            sink: queue.Queue[Any] = queue.Queue()
            params = SamplingParams(max_tokens=8, temperature=0.5, seed=k, ignore_eos=True)
            engine.submit(Request(prompt, params, sink.put))
            ids, lps = [], []
            while not isinstance(event := sink.get(timeout=30), Finished):
                if isinstance(event, TokenEvent):
                    ids.append(event.token_id)
                    lps.append(event.logprob)
            with torch.no_grad():
                logits = builder.model(input_ids=torch.tensor([prompt + ids])).logits[0].float()
            tempered = torch.log_softmax(logits / 0.5, dim=-1)  # (T, V)
            want = [float(tempered[len(prompt) - 1 + i, t]) for i, t in enumerate(ids)]
            assert lps == pytest.approx(want, abs=1e-4)  # the processed distribution, not raw
            tid = records.new_id("tr")
            common = {"trajectory": tid, "agent": "a", "group": "g", "policy_version": 0}
            tokens = {"source": "engine", "prompt_ids": prompt, "completion_ids": ids}
            recs.append(
                records.make_step(
                    index=0,
                    request={
                        "messages": [{"role": "user", "content": "q"}],
                        "params": {"temperature": 0.5},
                    },
                    response={"message": {"role": "assistant", "content": "x"}},
                    tokens={**tokens, "completion_logprobs": lps},
                    **common,
                )
            )
            recs.append(records.make_end(status="done", steps=1, reward=reward, **common))
        builder.write(recs)
    finally:
        engine.close()
    summary, _ = run(builder, tiny_model, tmp_path / "run", algo="grpo", max_steps=1)
    fid = summary["fidelity"]
    assert fid.tokens == 32 and fid.ok and fid.mean_abs < 1e-4, fid.line()


@pytest.mark.parametrize(
    ("params", "named"),
    [
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "a"}}}, "json_schema"),
        ({"logit_bias": {"42": -100, "7": 5}}, "2 tokens"),
        ({"structured_outputs": {"json": {"type": "object"}}}, "json"),
        ({"guided_regex": "[0-9]+"}, "[0-9]+"),
        ({"min_tokens": 8}, 8),
        ({"bad_words": ["no"]}, "1 entries"),
        ({"tool_choice": "required"}, "required"),
        ({"tool_choice": {"type": "function", "function": {"name": "calc"}}}, "calc"),
        ({"tool_choice": {"type": "any"}}, "required"),  # Anthropic
        ({"tool_choice": {"type": "tool", "name": "calc"}}, "calc"),  # Anthropic
        ({"tool_choice": {"type": "function", "name": "calc"}}, "calc"),  # Responses
        ({"tool_choice": {"type": "allowed_tools", "mode": "required", "tools": []}}, "required"),
    ],
)
def test_sampling_of_names_a_constraint_the_trainer_does_not_apply(params, named) -> None:
    from agentworld.train.sequences import sampling_of

    _, unapplied = sampling_of({"request": {"params": {"temperature": 0.7, **params}}})
    assert unapplied == {next(iter(params)): named}


def test_sampling_of_leaves_out_constraints_that_do_nothing() -> None:
    from agentworld.train.sequences import sampling_of

    neutral = {
        "response_format": {"type": "text"},
        "logit_bias": {},
        "min_tokens": 0,
        "guided_json": None,
        "bad_words": [],
        "top_p": 1.0,
        "tool_choice": "auto",
    }
    assert sampling_of({"request": {"params": neutral}}) == (1.0, {})
    for choice in (
        "none",
        {"type": "auto"},
        {"type": "none"},
        {"type": "allowed_tools", "mode": "auto"},
    ):
        assert sampling_of({"request": {"params": {"tool_choice": choice}}}) == (1.0, {})


def test_sampling_of_names_a_constraint_a_translation_made() -> None:
    """A Responses call's ``text.format`` reaches the engine as ``response_format``: the
    record has it in ``params.chat`` (the chat body sent), where the trainer finds it."""
    from agentworld.train.sequences import sampling_of

    params = {
        "temperature": 0.5,
        "text": {"format": {"type": "json_schema", "name": "a", "schema": {}}},
        "tool_choice": {"type": "auto"},
        "chat": {
            "temperature": 0.5,
            "response_format": {"type": "json_schema"},
            "tool_choice": "required",
        },
    }
    assert sampling_of({"request": {"params": params}}) == (
        0.5,
        {"response_format": "json_schema", "tool_choice": "required"},
    )
