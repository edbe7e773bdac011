"""`aw train --pool s3://…`: training reads an object-store pool through its local mirror."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console

from agentworld.pool.remote_sync import push
from agentworld.train.config import TrainConfig
from agentworld.train.loop import train
from tests import s3_fixture

s3_endpoint, s3_url = s3_fixture.s3_endpoint, s3_fixture.s3_url  # the fixtures, used here


@pytest.fixture(autouse=True)
def _fresh_accelerate_state() -> Iterator[None]:
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    yield
    AcceleratorState._reset_state(True)
    GradientState._reset_state()


@pytest.mark.slow  # trains the tiny model
def test_sft_from_an_object_store_pool(builder, tiny_model: Path, tmp_path: Path, s3_url) -> None:
    pytest.importorskip(
        "obstore", reason="obstore is not installed: pip install 'agentworld[remote]'"
    )
    for _ in range(3):
        builder.group([1.0, 0.0], turns=2)
    builder.pool.recover()
    push(builder.pool.layout, s3_url)
    cfg = TrainConfig(
        model=str(tiny_model), pool=s3_url, output_dir=str(tmp_path / "run"), progress=False,
        algo="sft", max_steps=2, epochs=None, lr=1e-3, batch_tokens=256, max_seq_len=128,
    )  # fmt: skip
    summary = train(cfg, console=Console(record=True, width=200))
    assert summary["updates"] == 2
    meta = json.loads((Path(summary["checkpoint"]) / "meta.json").read_text())
    assert sorted(meta["shards"]) == sorted(p.name for p in builder.pool.layout.shard_paths())


def test_nothing_to_train_on_names_the_store_not_its_cache(
    builder, tiny_model: Path, tmp_path: Path, s3_url
) -> None:
    pytest.importorskip(
        "obstore", reason="obstore is not installed: pip install 'agentworld[remote]'"
    )
    from agentworld.errors import PoolError

    builder.group([1.0, 0.0], turns=2)
    builder.pool.recover()
    push(builder.pool.layout, s3_url)
    cfg = TrainConfig(
        model=str(tiny_model), pool=s3_url, output_dir=str(tmp_path / "run"), progress=False,
        algo="sft", agent="nobody", max_steps=1,
    )  # fmt: skip
    with pytest.raises(PoolError) as err:
        train(cfg, console=Console(record=True, width=200))
    assert str(err.value).startswith(f"{s3_url}: nothing to train on for agent nobody")
