"""metrics.jsonl -> curves: panels by key (today's and new ones), torn lines, the PNG, trackers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentworld.curves import charts, read_rows, run_folders
from agentworld.errors import ConfigError
from agentworld.train.config import TrainConfig, load_config
from agentworld.train.fidelity import report
from agentworld.train.plots import CurvePainter, draw_curves
from agentworld.train.tracking import keep_until, scalars, tracker_config


def write_rows(path: Path, rows: list[dict], tail: str = "") -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + tail)


def test_rows_are_one_per_update_and_torn_lines_are_skipped(tmp_path: Path) -> None:
    p = tmp_path / "metrics.jsonl"
    write_rows(p, [{"step": 1, "loss": 1.0}, {"step": 2, "loss": 2.0}, {"step": 2, "loss": 3.0}])
    with open(p, "a") as f:
        f.write('["not a row"]\n{"step": 3, "lo')
    assert [(r["step"], r["loss"]) for r in read_rows(p)] == [(1, 1.0), (2, 3.0)]
    assert read_rows(tmp_path / "missing.jsonl") == []


def test_panels_take_todays_keys_and_new_ones_by_name() -> None:
    rows = [
        {"step": 1, "loss": 0.5, "reward_mean": 0.2, "kl": None, "tokens_per_s": 10.0,
         "tis_weight_mean": 0.9, "kl_engine": 0.01, "clip_frac": 0.1, "groups": ["g"],
         "policy_version": 3, "ratio_mean": 1.0, "lr": 1e-5, "entropy": 2.5},
        {"step": 2, "loss": 0.4, "reward_mean": 0.6, "kl": 0.02, "tokens_per_s": float("nan"),
         "tis_weight_mean": 0.8, "kl_engine": 0.02, "clip_frac": 0.0, "policy_version": 3,
         "frac_tis_truncated": 0.25},
    ]  # fmt: skip
    got = {c.title: {s.key: (s.steps, s.values) for s in c.series} for c in charts(rows)}
    assert list(got) == [
        "reward", "loss", "KL / mismatch", "entropy", "clipping", "ratios / TIS", "tokens/s"
    ]  # fmt: skip
    assert got["entropy"] == {"entropy": ([1], [2.5])}
    assert got["KL / mismatch"] == {"kl": ([2], [0.02]), "kl_engine": ([1, 2], [0.01, 0.02])}
    assert got["clipping"] == {
        "clip_frac": ([1, 2], [0.1, 0.0]),
        "frac_tis_truncated": ([2], [0.25]),
    }
    assert set(got["ratios / TIS"]) == {"ratio_mean", "tis_weight_mean"}
    assert got["tokens/s"] == {"tokens_per_s": ([1], [10.0])}  # NaN is no point
    assert charts([]) == []


def test_run_folders_are_found_newest_first(tmp_path: Path) -> None:
    import os

    for i, name in enumerate(["a", "b/inner"]):
        (tmp_path / name).mkdir(parents=True)
        write_rows(tmp_path / name / "metrics.jsonl", [{"step": 1}])
        os.utime(tmp_path / name / "metrics.jsonl", (1000 + i, 1000 + i))
    (tmp_path / "c").mkdir()  # no metrics: not a run
    assert run_folders(tmp_path) == [tmp_path / "b" / "inner", tmp_path / "a"]
    assert run_folders(tmp_path / "a") == [tmp_path / "a"]
    assert run_folders(tmp_path / "nowhere") == []


def test_the_picture_is_a_png_of_the_runs_metrics(tmp_path: Path) -> None:
    assert draw_curves(tmp_path) is None  # nothing logged, nothing drawn
    write_rows(
        tmp_path / "metrics.jsonl",
        [{"step": s, "loss": 1 / s, "reward_mean": s / 10} for s in (1, 2, 3)],
    )
    painter = CurvePainter(tmp_path, min_interval_s=0.01)
    painter.request()
    out = painter.close()
    assert out == tmp_path / "curves.png" and out.read_bytes()[:4] == b"\x89PNG"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_redraws_during_a_run_happen_in_another_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A redraw on a thread of the trainer held the GIL against the training loop: the
    update after each checkpoint logged 30-50x fewer tokens/s than the others."""
    import time

    from agentworld.train import plots

    write_rows(tmp_path / "metrics.jsonl", [{"step": s, "loss": 1 / s} for s in (1, 2)])
    in_process = []
    real = plots.draw_curves

    def here(run_dir: Path) -> Path | None:
        in_process.append(run_dir)
        return real(run_dir)

    monkeypatch.setattr(plots, "draw_curves", here)
    painter = CurvePainter(tmp_path, min_interval_s=0.01)
    painter.request()
    deadline = time.monotonic() + 60  # a wait for the picture, not a speed limit
    while not (tmp_path / "curves.png").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (tmp_path / "curves.png").read_bytes()[:4] == b"\x89PNG"
    assert in_process == []
    assert painter.close() == tmp_path / "curves.png" and in_process == []  # nothing new


def test_a_resume_keeps_the_rows_its_checkpoint_holds(tmp_path: Path) -> None:
    p = tmp_path / "metrics.jsonl"
    write_rows(p, [{"step": 1}, {"step": 2}, {"step": 3}], tail='{"step": 4, "lo')
    assert keep_until(p, 2) == 2
    assert read_rows(p) == [{"step": 1}, {"step": 2}]
    assert p.read_text().endswith("}\n")
    assert keep_until(p, 2) == 0 and keep_until(tmp_path / "none.jsonl", 0) == 0


def test_trackers_get_scalars_and_a_flat_config() -> None:
    row = {"step": 3, "time": 1.0, "loss": 0.5, "ok": True, "groups": ["g"], "kl": None,
           "n": 4, "bad": float("inf")}  # fmt: skip
    assert scalars(row) == {"loss": 0.5, "n": 4.0}
    assert tracker_config({"status": ["done"], "resume": None, "lr": 1e-5}) == {
        "status": "done",
        "lr": 1e-5,
    }


def test_report_to_is_checked_at_the_edge() -> None:
    assert load_config(None, {"model": "m"}, ["report_to=none"]).report_to == ()
    assert load_config(None, {"model": "m"}, ["report_to=tensorboard"]).report_to == (
        "tensorboard",
    )
    with pytest.raises(ConfigError, match=r"train\.report_to: unknown tracker 'tensorbored'"):
        TrainConfig(model="m", report_to=("tensorbored",))
    with pytest.raises(ConfigError, match=r"train\.keep_checkpoints"):
        TrainConfig(model="m", keep_checkpoints=-1)
    with pytest.raises(ConfigError, match=r"train\.state_every"):
        TrainConfig(model="m", state_every=0)


def test_fidelity_says_policy_lag_when_the_versions_differ() -> None:
    lag = report(5.0, 0.9, 10, 1e-2, trainer_version=3, rollout_versions=(2, 2, 3))
    assert not lag.ok and lag.lagging == (2,) and lag.style == "yellow"
    assert "policy lag: sampled by version 2, the trainer is at version 3" in lag.line()
    assert "MISMATCH" not in lag.line()
    same = report(5.0, 0.9, 10, 1e-2, trainer_version=3, rollout_versions=(3,))
    assert "MISMATCH" in same.line() and "same policy version 3" in same.line()
    assert report(0.001, 0.001, 10, 1e-2, trainer_version=3, rollout_versions=(2,)).ok
