"""`aw train` logs through Accelerate's trackers, draws curves.png, and keeps its checkpoints few."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentworld.errors import ConfigError
from agentworld.train.checkpoint import META, STATE, prune_checkpoints, state_source
from agentworld.train.config import TrainConfig
from agentworld.train.preflight import make_accelerator
from tests.train.test_loop import _fresh_accelerate_state, run  # noqa: F401 (fixture)


def test_report_to_tensorboard_logs_every_update(builder, tiny_model: Path, tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    for _ in range(3):
        builder.group([1.0, 0.0], turns=2)
    out = tmp_path / "run"
    summary, _ = run(builder, tiny_model, out, algo="grpo", report_to=("tensorboard",))
    assert summary["updates"] == 2
    (events,) = out.glob("agentworld/events.out.tfevents.*")
    acc = EventAccumulator(str(events.parent))
    acc.Reload()
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    loss = [(e.step, e.value) for e in acc.Scalars("loss")]
    assert loss == [(r["step"], pytest.approx(r["loss"], rel=1e-5)) for r in rows]
    assert "tokens_per_s" in acc.Tags()["scalars"] and "groups" not in acc.Tags()["scalars"]
    assert (out / "curves.png").read_bytes()[:4] == b"\x89PNG"


def test_a_tracker_that_is_not_installed_is_a_config_error(tmp_path: Path) -> None:
    from accelerate.utils import is_aim_available

    if is_aim_available():
        pytest.skip("aim is installed here")
    cfg = TrainConfig(model="m", output_dir=str(tmp_path), report_to=("aim",))
    with pytest.raises(ConfigError, match=r"train.report_to: 'aim' is not installed"):
        make_accelerator(cfg)


def ckpt(root: Path, step: int, *, state: bool, complete: bool = True) -> Path:
    p = root / f"ckpt-{step:06d}"
    p.mkdir(parents=True)
    (p / "model.safetensors").write_bytes(b"w" * 100)
    if state:
        (p / STATE).mkdir()
        (p / STATE / "optimizer.bin").write_bytes(b"o" * 200)
    if complete:
        (p / META).write_text(json.dumps({"train_state": state}))
    return p


def test_pruning_keeps_the_newest_k_and_the_newest_optimizer_state(tmp_path: Path) -> None:
    for step in range(1, 7):
        ckpt(tmp_path, step, state=step in (2, 4))
    ckpt(tmp_path, 7, state=False, complete=False)  # being written: past `upto`
    old = [f for i in (1, 2, 3) for f in (tmp_path / f"ckpt-00000{i}").rglob("*") if f.is_file()]
    size = sum(f.stat().st_size for f in old)
    r = prune_checkpoints(tmp_path, 2, upto=6)
    assert r.kept == ["ckpt-000004", "ckpt-000005", "ckpt-000006"] and r.state == "ckpt-000004"
    assert r.deleted == 3 and r.freed_bytes == size > 500
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == ["ckpt-000004", "ckpt-000005", "ckpt-000006", "ckpt-000007"]
    assert state_source(tmp_path / "ckpt-000006") == tmp_path / "ckpt-000004"
    assert state_source(tmp_path / "ckpt-000004") == tmp_path / "ckpt-000004"
    assert "deleted 3 older" in r.line() and "optimizer state in ckpt-000004" in r.line()


def test_pruning_drops_torn_saves_and_keeps_all_when_told(tmp_path: Path) -> None:
    ckpt(tmp_path, 1, state=True)
    ckpt(tmp_path, 2, state=False, complete=False)  # a crash mid-save
    ckpt(tmp_path, 3, state=False)
    assert prune_checkpoints(tmp_path, 0, upto=3).deleted == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt-000001", "ckpt-000003"]
    assert state_source(tmp_path / "ckpt-000003") == tmp_path / "ckpt-000001"
    assert state_source(tmp_path / "elsewhere") is None
