"""End to end on the tiny model: SFT and GRPO from a pool, fidelity, checkpoints, exact resume."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from rich.console import Console
from safetensors.torch import load_file

from agentworld.errors import ConfigError
from agentworld.train.config import TrainConfig
from agentworld.train.loop import train
from tests.terminal import Stderr


@pytest.fixture(autouse=True)
def _fresh_accelerate_state() -> Iterator[None]:
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    yield
    # Also after: a later Accelerator in this process must not inherit, say, bf16.
    AcceleratorState._reset_state(True)
    GradientState._reset_state()


def run(builder, tiny_model: Path, out: Path, **kw: Any) -> tuple[dict[str, Any], str]:
    cfg = TrainConfig(
        model=str(tiny_model),
        pool=str(builder.pool.root),
        output_dir=str(out),
        # epochs=None: these small pools are replayed until max_steps, explicitly.
        **{
            "progress": False,
            "max_steps": 2,
            "lr": 1e-3,
            "batch_tokens": 256,
            "max_seq_len": 128,
            "epochs": None,
            **kw,
        },
    )
    console = Console(record=True, width=200)
    summary = train(cfg, console=console)
    return summary, console.export_text()


def weights(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(str(folder / "model.safetensors"))


@pytest.mark.parametrize(("progress", "tty"), [(False, True), (True, True), (True, False)])
def test_transformers_bars_follow_the_runs_progress(
    builder,
    tiny_model: Path,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    progress: bool,
    tty: bool,
) -> None:
    """Loading the model and writing a checkpoint show transformers' bars only where the
    run shows progress (the demo's trainer asks for none) on a terminal (in a log file
    their redraws pile up); they are as before afterwards."""
    from transformers.utils import logging as hf_logging

    monkeypatch.setattr("agentworld.train.loop.sys.stderr", Stderr(sys.stderr, tty))
    hf_logging.enable_progress_bar()  # whatever the environment says
    builder.group([1.0, 0.0], turns=2)
    capfd.readouterr()
    summary, _ = run(builder, tiny_model, tmp_path / "run", algo="sft", progress=progress)
    err = capfd.readouterr().err
    assert summary["checkpoint"]
    assert ("Loading weights" in err) is (progress and tty)
    assert ("Writing model shards" in err) is (progress and tty)
    assert hf_logging.is_progress_bar_enabled()


def test_a_run_whose_data_runs_out_first_says_so(builder, tiny_model: Path, tmp_path: Path):
    """One epoch over a small pool ends before max_steps: a note says where, not a bar
    left at 1/100."""
    builder.group([1.0, 0.0], turns=2)
    summary, log = run(builder, tiny_model, tmp_path / "run", algo="sft", epochs=1, max_steps=100)
    assert 0 < summary["updates"] < 100
    assert f"the data ran out after {summary['updates']} updates (epochs=1)" in log
    assert "before max_steps=100" in log
    _, log = run(builder, tiny_model, tmp_path / "again", algo="sft")  # replayed to max_steps
    assert "ran out" not in log


def test_two_step_sft_end_to_end(builder, tiny_model: Path, tmp_path: Path) -> None:
    for _ in range(3):
        builder.group([1.0, 0.0], turns=3)
    summary, log = run(builder, tiny_model, tmp_path / "run", algo="sft")
    assert summary["updates"] == 2 and summary["merged"] > 0 and summary["breaks"] == 0
    # rewards 1.0 and 0.0, no filter on them: the run says it imitates both
    assert "SFT imitates every trajectory it selected, whatever its reward: 6 scored" in log
    ckpt = Path(summary["checkpoint"])
    assert ckpt.name == "ckpt-000002"
    for name in ("model.safetensors", "tokenizer.json", "meta.json", "config.json"):
        assert (ckpt / name).exists(), name
    meta = json.loads((ckpt / "meta.json").read_text())
    assert meta["policy_version"] == 1 and meta["base_policy_version"] == 0
    assert meta["config"]["algo"] == "sft"
    assert sorted(meta["shards"]) == sorted(p.name for p in builder.pool.layout.shard_paths())
    assert meta["counts"]["updates"] == 2 and meta["counts"]["sampled_tokens"] > 0
    assert meta["data_state"] and "label_files" in meta
    before, after = weights(tiny_model), weights(ckpt)
    assert any(not torch.equal(before[k], after[k]) for k in before)
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    for key in ("loss", "tokens_per_s", "merged", "breaks", "reward_mean", "lr"):
        assert rows[0][key] is not None, key
    # the policy's mean entropy over the imitated tokens: a tiny random model is near uniform
    assert 0 < rows[0]["entropy"] <= math.log(builder.model.config.vocab_size) + 1e-3
    # No advantages in SFT: null, as the importance stats (they read 1.0, a mere weight).
    for key in ("adv_mean", "adv_std", "adv_min", "adv_max", "adv_zero_fraction", "ess"):
        assert rows[0][key] is None, key
    assert "[train]" in log and 'algo = "sft"' in log  # the resolved config is printed
    assert (tmp_path / "run" / "config.toml").read_text().startswith("[train]")
    assert "aw train" in log  # the summary table


def test_two_step_grpo_end_to_end_with_fidelity(builder, tiny_model: Path, tmp_path: Path) -> None:
    for _ in range(3):
        builder.group([1.0, 0.0, 0.5], turns=2)
    summary, log = run(builder, tiny_model, tmp_path / "run", algo="grpo", kl_coef=0.1)
    fid = summary["fidelity"]
    # Rollout log-probs were computed by an unpadded forward pass of the same weights.
    assert fid.tokens > 0 and fid.ok and fid.mean_abs < 1e-4, fid
    assert "fidelity" in log and "ok" in log
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["adv_max"] > 0 > rows[0]["adv_min"]
    assert rows[0]["kl"] == pytest.approx(0.0, abs=1e-6)  # the first update starts at the reference
    assert rows[1]["kl"] > 0
    assert rows[0]["clip_frac"] == 0.0
    assert all(r["entropy"] > 0 for r in rows)


def test_fidelity_reports_wrong_logprobs_loudly(builder, tiny_model: Path, tmp_path: Path) -> None:
    for _ in range(2):
        recs = []
        for reward in (1.0, 0.0):
            _, rs = builder.trajectory(reward=reward, group="g" + str(len(recs)), turns=2)
            for r in rs[:-1]:
                r["tokens"]["completion_logprobs"] = [
                    x - 0.3 for x in r["tokens"]["completion_logprobs"]
                ]
            recs += rs
        builder.write(recs)
    summary, log = run(builder, tiny_model, tmp_path / "run", algo="sft", max_steps=1)
    fid = summary["fidelity"]
    assert not fid.ok and fid.mean_abs == pytest.approx(0.3, abs=1e-3)
    assert "MISMATCH" in log


def test_ppo_trains_against_rollout_logprobs(builder, tiny_model: Path, tmp_path: Path) -> None:
    for _ in range(2):
        builder.group([1.0, 0.0], turns=2)
    summary, _ = run(builder, tiny_model, tmp_path / "run", algo="ppo", max_steps=3, lr=5e-2)
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["ratio_mean"] == pytest.approx(1.0, abs=1e-3)  # same weights as the rollout
    assert rows[-1]["ratio_mean"] != pytest.approx(1.0, abs=1e-3)  # later updates are off-policy
    assert summary["updates"] == 3


def test_resume_continues_exactly(builder, tiny_model: Path, tmp_path: Path) -> None:
    for _ in range(4):
        builder.group([1.0, 0.0], turns=2)
    kw = {"algo": "grpo", "max_steps": 3, "batch_tokens": 64, "max_seq_len": 64, "save_every": 1}
    full, _ = run(builder, tiny_model, tmp_path / "full", **kw)
    builder.group([1.0, 0.0], turns=2)  # new data after the checkpoint must not change the replay
    resumed, _ = run(
        builder,
        tiny_model,
        tmp_path / "resumed",
        resume=str(tmp_path / "full" / "ckpt-000001"),
        **kw,
    )
    assert resumed["updates"] == 2 and resumed["step"] == 3
    a, b = weights(Path(full["checkpoint"])), weights(Path(resumed["checkpoint"]))
    for k in a:
        assert torch.allclose(a[k], b[k], atol=1e-6), k


def test_a_new_run_into_a_folder_holding_a_run_is_refused(
    builder, tiny_model: Path, tmp_path: Path
) -> None:
    """It cut the earlier run's metrics ("dropped 4 row(s) past update 0") and left its
    checkpoints beside the new ones; a recipe run without -o did it to its own run."""
    builder.group([1.0, 0.0], turns=2)
    out = tmp_path / "run"
    run(builder, tiny_model, out, algo="sft")
    metrics = (out / "metrics.jsonl").read_text()
    with pytest.raises(ConfigError, match=r"holds a run already \(checkpoints up to ckpt-000002"):
        run(builder, tiny_model, out, algo="sft")
    assert (out / "metrics.jsonl").read_text() == metrics  # nothing touched
    resumed, _ = run(builder, tiny_model, out, algo="sft", resume="latest", max_steps=3)
    assert resumed["step"] == 3  # --resume continues it
    with pytest.raises(ConfigError, match="max_steps: 3, but ckpt-000003 is at update 3"):
        run(builder, tiny_model, out, algo="sft", resume="latest", max_steps=3)  # did nothing


def test_ctrl_c_finishes_the_update_saves_it_and_a_resume_goes_on(
    builder, tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A SIGINT ended the run at once: every update since the last checkpoint (by default
    the whole run) was lost, without a word."""
    import os
    import signal

    from agentworld.train.advantages import advantage_stats

    for _ in range(3):
        builder.group([1.0, 0.0], turns=2)
    calls = []

    def ctrl_c_in_the_first_update(advs: list[float]) -> Any:
        calls.append(1)
        if len(calls) == 1:
            os.kill(os.getpid(), signal.SIGINT)  # as a terminal's Ctrl-C does
        return advantage_stats(advs)

    monkeypatch.setattr("agentworld.train.summary.advantage_stats", ctrl_c_in_the_first_update)
    out = tmp_path / "run"
    kw = {"algo": "grpo", "max_steps": 5}
    summary, log = run(builder, tiny_model, out, **kw)
    assert summary["interrupted"] and summary["step"] == 1  # the update under way finished
    assert Path(summary["checkpoint"]) == out / "ckpt-000001"
    assert json.loads((out / "ckpt-000001" / "meta.json").read_text())["counts"]["updates"] == 1
    assert "ran out" not in log
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # given back
    monkeypatch.setattr("agentworld.train.summary.advantage_stats", advantage_stats)
    resumed, _ = run(builder, tiny_model, out, resume="latest", **kw)
    assert resumed["step"] == 5 and resumed["updates"] == 4 and not resumed["interrupted"]


def test_a_slot_without_data_does_not_shrink_the_gradient(
    builder, tiny_model: Path, tmp_path: Path
) -> None:
    """One micro-batch of data in an update of two (grad_accum=2, or a second process with
    nothing left): the zero-weight filler halved the averaged gradient and its norm."""
    builder.group([1.0, 0.0], turns=2)
    kw = {"algo": "grpo", "max_steps": 1, "epochs": 1, "max_grad_norm": 1e9}
    one, _ = run(builder, tiny_model, tmp_path / "one", grad_accum=1, **kw)
    two, _ = run(builder, tiny_model, tmp_path / "two", grad_accum=2, **kw)
    norms = [metrics_rows(tmp_path / d)[0]["grad_norm"] for d in ("one", "two")]
    assert norms[0] > 0 and norms[1] == pytest.approx(norms[0], rel=1e-5)
    a, b = weights(Path(one["checkpoint"])), weights(Path(two["checkpoint"]))
    for k in a:
        assert torch.allclose(a[k], b[k], atol=1e-7), k


@pytest.mark.parametrize(
    ("algo", "normaliser"),
    [("grpo", "dapo"), ("grpo", "grpo"), ("grpo", "dr_grpo"), ("sft", "dapo")],
)
def test_an_update_cut_into_micro_batches_has_the_gradient_of_the_whole(
    builder, tiny_model: Path, tmp_path: Path, algo: str, normaliser: str
) -> None:
    """Two short answers and a long one: in one micro-batch, or in two (grad_accum=2, packed
    by length). Each micro-batch was normalised by its own tokens (sequences) and the
    micro-batches averaged, so a token of the short ones weighed 3.5x (dapo) one of the
    long one: the length bias token-mean exists to remove. The normaliser is the update's."""
    group = "g-lengths"
    recs = []
    for reward, reply in ((1.0, 2), (1.0, 2), (0.0, 20)):
        recs += builder.trajectory(reward=reward, group=group, turns=1, reply_tokens=reply)[1]
    builder.write(recs)
    kw = {"algo": algo, "normaliser": normaliser, "max_steps": 1, "epochs": 1,
          "max_grad_norm": 1e9, "max_completion_len": 16}  # fmt: skip
    one, _ = run(builder, tiny_model, tmp_path / "one", grad_accum=1, **kw)
    two, _ = run(
        builder, tiny_model, tmp_path / "two", grad_accum=2, batch_tokens=32, max_seq_len=32, **kw
    )
    rows = [metrics_rows(tmp_path / d)[0] for d in ("one", "two")]
    assert [r["rows"] for r in rows] == [3, 3] and one["updates"] == two["updates"] == 1
    assert rows[0]["grad_norm"] > 0
    assert rows[1]["grad_norm"] == pytest.approx(rows[0]["grad_norm"], rel=1e-4)
    assert rows[1]["loss"] == pytest.approx(rows[0]["loss"], rel=1e-4, abs=1e-6)
    assert rows[1]["entropy"] == pytest.approx(rows[0]["entropy"], rel=1e-4)  # the update's mean


def test_reward_mean_counts_each_trajectory_once(builder, tiny_model: Path, tmp_path: Path):
    """A trajectory whose prompts broke (the agent trimmed its history) trains as two rows:
    its reward was counted once per row, so reward_mean said 0.67 for rewards 1 and 0."""
    group = "g-break"
    recs = builder.trajectory(reward=1.0, group=group, turns=2, break_at=1)[1]
    recs += builder.trajectory(reward=0.0, group=group, turns=1)[1]
    builder.write(recs)
    run(builder, tiny_model, tmp_path / "run", algo="grpo", max_steps=1, epochs=1)
    (row,) = metrics_rows(tmp_path / "run")
    assert row["rows"] == 3 and row["breaks"] == 1
    assert row["reward_mean"] == pytest.approx(0.5)


def metrics_rows(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_bf16_mixed_precision_trains_and_saves_fp32(
    builder, tiny_model: Path, tmp_path: Path
) -> None:
    for _ in range(3):
        builder.group([1.0, 0.0], turns=2)
    summary, log = run(builder, tiny_model, tmp_path / "bf16", algo="grpo", mixed_precision="bf16")
    assert summary["updates"] == 2 and summary["mixed_precision"] == "bf16"
    assert "bf16" in log
    ckpt = Path(summary["checkpoint"])
    assert {t.dtype for t in weights(ckpt).values()} == {torch.float32}
    assert json.loads((ckpt / "meta.json").read_text())["mixed_precision"] == "bf16"
    fid = summary["fidelity"]
    # The trainer's own (bf16 autocast) log-probs against fp32 rollouts: measured, and not
    # the fp32 run's near-zero gap, which shows the autocast really ran.
    assert fid.tokens > 0 and 1e-5 < fid.mean_abs < 0.5, fid
    assert "fidelity" in log


def test_mixed_precision_default_leaves_accelerate_alone(
    builder, tiny_model: Path, tmp_path: Path
) -> None:
    builder.group([1.0, 0.0], turns=2)
    summary, _ = run(builder, tiny_model, tmp_path / "fp32", algo="sft", max_steps=1)
    assert summary["mixed_precision"] == "no"
    assert summary["device"].startswith("cuda" if torch.cuda.is_available() else "cpu")


def test_schedule_waits_for_optimizer_steps_the_loss_scaler_skipped(
    builder, tiny_model: Path, tmp_path: Path, monkeypatch
) -> None:
    """fp16's scaler skips steps whose gradients overflowed; the warm-up must not run ahead."""
    import accelerate

    builder.group([1.0, 0.0], turns=2)
    monkeypatch.setattr(
        accelerate.Accelerator, "optimizer_step_was_skipped", property(lambda self: True)
    )
    out = tmp_path / "skipped"
    run(builder, tiny_model, out, algo="sft", max_steps=3, warmup_steps=4)
    lrs = [json.loads(line)["lr"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert lrs == pytest.approx([1e-3 / 4] * 3)  # still at the first warm-up value


def test_fp16_on_cpu_is_refused_naming_the_key(builder, tiny_model: Path, tmp_path: Path) -> None:
    if torch.cuda.is_available():
        pytest.skip("fp16 is available on this machine")
    from agentworld.errors import ConfigError

    with pytest.raises(ConfigError, match=r"train\.mixed_precision: 'fp16' needs a GPU"):
        run(builder, tiny_model, tmp_path / "fp16", mixed_precision="fp16")


def test_accelerate_refusing_a_precision_is_a_config_error(monkeypatch) -> None:
    import accelerate

    from agentworld.errors import ConfigError
    from agentworld.train.preflight import make_accelerator

    def no_bf16(**kw: Any) -> None:
        assert kw["mixed_precision"] == "bf16"
        raise ValueError("bf16 mixed precision requires PyTorch >= 1.10 and a supported device.")

    monkeypatch.setattr(accelerate, "Accelerator", no_bf16)
    with pytest.raises(ConfigError, match=r"train\.mixed_precision: 'bf16' is not available here"):
        make_accelerator(TrainConfig(model="m", mixed_precision="bf16"))


def test_fp16_trains_on_a_gpu_and_saves_fp32(builder, tiny_model: Path, tmp_path: Path) -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    builder.group([1.0, 0.0], turns=2)
    summary, _ = run(builder, tiny_model, tmp_path / "fp16", algo="grpo", mixed_precision="fp16")
    assert summary["mixed_precision"] == "fp16" and summary["device"].startswith("cuda")
    assert {t.dtype for t in weights(Path(summary["checkpoint"])).values()} == {torch.float32}


def test_dr_grpo_divides_by_the_completion_budget_not_the_context(tiny) -> None:
    """Dr. GRPO's constant is the generation budget (TRL's max_completion_length); the
    whole context, max_seq_len (4096 by default), made its updates ~100x smaller."""
    from agentworld.train.data import collate
    from agentworld.train.forward import forward_loss
    from agentworld.train.sequences import Row

    model, _ = tiny
    rows = [
        Row(ids=[5, 6, 7, 8, 9], sampled=[0, 0, 1, 1, 1], logprobs=[float("nan")] * 5,
            trajectory="t1", group="g", advantage=1.0),
        Row(ids=[5, 6, 7, 10], sampled=[0, 0, 1, 1], logprobs=[float("nan")] * 4,
            trajectory="t2", group="g", advantage=-1.0),
    ]  # fmt: skip
    batch = collate(rows, pad_id=0)

    def loss(**kw: Any) -> float:
        cfg = TrainConfig(model="m", algo="grpo", normaliser="dr_grpo", **kw)
        return float(forward_loss(model, None, batch, cfg)[0].detach())

    # On-policy (no rollout log-probs): each token's loss is -A; sums 3 x -1 and 2 x +1.
    assert loss(max_seq_len=64, max_completion_len=8) == pytest.approx(-1 / (2 * 8))
    assert loss(max_seq_len=4096, max_completion_len=8) == pytest.approx(-1 / (2 * 8))
    assert loss(max_completion_len=4) == pytest.approx(-1 / (2 * 4))
    assert TrainConfig(model="m").max_completion_len == 512  # TRL's default
    with pytest.raises(ConfigError, match=r"train\.max_completion_len: must be at least 1"):
        TrainConfig(model="m", max_completion_len=0)


def test_a_run_that_cannot_start_leaves_no_folder_behind(
    builder, tiny_model: Path, tmp_path: Path
) -> None:
    """The folder and its config.toml were written before the data and the resume were
    checked: a run with nothing to train on, or a bad --resume, left them behind."""
    from agentworld.errors import PoolError

    builder.group([1.0, 0.0], turns=2)
    live = builder.pool.writer(durability="strict")  # a proxy still running: a live journal
    for r in builder.trajectory(agent="nobody")[1]:
        live.append(r)
    out = tmp_path / "run"
    with pytest.raises(PoolError) as err:
        run(builder, tiny_model, out, algo="sft", agent="nobody")
    live.close()
    message = str(err.value)
    assert "nothing to train on for agent nobody, status done (0 matched" in message
    assert "None" not in message  # no "dataset=None" for a filter not given
    assert "`aw run --agent nobody --dataset DATASET` rolls out trajectories" in message
    # what was read, and what was not: the live journal holding nobody's trajectory
    assert "; read 2 of agent a, dataset d;" in message
    assert "1 live journal not read (a running `aw proxy` writes there)" in message
    assert "--set include_journals=true" in message
    assert not out.exists()
    with pytest.raises(ConfigError, match="no checkpoint in"):
        run(builder, tiny_model, out, algo="sft", resume="latest")
    assert not out.exists()
    run(builder, tiny_model, out, algo="sft", max_steps=1)
    assert (out / "config.toml").exists()


def test_a_run_folder_given_as_the_model_is_named_with_its_checkpoint(
    builder, tiny_model: Path, tmp_path: Path
) -> None:
    """`--model runs/x` got the generic "not a local model folder"; it is a run's folder,
    and the way out is the checkpoint in it (``latest`` is a text file, no link)."""
    from agentworld.train.preflight import require_models

    builder.group([1.0, 0.0], turns=2)
    out = tmp_path / "run"
    run(builder, tiny_model, out, algo="sft", save_every=1)
    for given in (out, out / "latest"):
        with pytest.raises(ConfigError) as err:
            require_models(TrainConfig(model=str(given)))
        assert f"train.model: '{given}' is " in str(err.value)
        assert f"its latest checkpoint is {out / 'ckpt-000002'} (pass that)" in str(err.value)
        assert f"--resume latest -o {out} continues the run" in str(err.value)
    with pytest.raises(ConfigError, match=r"train\.ref_model: .* a training run's folder"):
        require_models(TrainConfig(model=str(out / "ckpt-000002"), ref_model=str(out)))
    require_models(TrainConfig(model=str(out / "ckpt-000001")))  # a checkpoint is a model
