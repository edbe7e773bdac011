"""Shared fixtures: a tiny random model (two policies of one architecture) and an engine."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agentworld.serve.engine import Engine
from agentworld.serve.tiny import make_tiny_model


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "policy0", seed=0)


@pytest.fixture(scope="session")
def tiny_checkpoint_dir(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> Path:
    """A 'trainer checkpoint': same architecture and tokenizer, different weights."""
    path = tmp_path_factory.mktemp("ckpt") / "step1"
    path.mkdir()
    for f in tiny_model_dir.iterdir():
        if f.name.startswith("tokenizer") or f.name == "chat_template.jinja":
            (path / f.name).write_bytes(f.read_bytes())
    return make_tiny_model(path, seed=1)


@pytest.fixture(scope="session")
def engine(tiny_model_dir: Path) -> Iterator[Engine]:
    eng = Engine(tiny_model_dir, device="cpu", max_batch_size=8, model_name="tiny")
    yield eng
    eng.close()


@pytest.fixture
def fresh_engine(tiny_model_dir: Path) -> Iterator[Engine]:
    """An engine of its own, for tests that reload weights."""
    eng = Engine(tiny_model_dir, device="cpu", max_batch_size=8, model_name="tiny")
    yield eng
    eng.close()
