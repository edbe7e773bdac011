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


TOOL_MESSAGES = [{"role": "user", "content": "what is the weather in paris?"}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "weather of a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
TOOL_ANSWER = (
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "paris"}}\n</tool_call><|im_end|>'
)


@pytest.fixture(scope="session")
def toolcall_model_dir(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> Path:
    """The tiny model overfitted to answer TOOL_MESSAGES with a Hermes tool call, so the whole
    path (template with tools -> real decoding -> parser) runs on real model output."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agentworld.serve.chat import render_prompt

    tok = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float32)
    prompt = render_prompt(tok, TOOL_MESSAGES, TOOLS)
    answer = tok.encode(TOOL_ANSWER, add_special_tokens=False)
    ids = torch.tensor([prompt + answer])
    labels = ids.clone()
    labels[0, : len(prompt)] = -100
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(200):
        loss = model(input_ids=ids, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        if loss.item() < 0.05:
            break
    model.eval()
    path = tmp_path_factory.mktemp("toolcall") / "model"
    model.save_pretrained(str(path))
    tok.save_pretrained(str(path))
    return path
