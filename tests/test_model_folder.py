"""A local model folder: what `aw serve` and `aw train` accept for a model, never downloading."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentworld.errors import ConfigError
from agentworld.model_folder import is_model_folder, require_model_folder


def test_a_folder_with_config_and_safetensors_is_a_model(tmp_path: Path) -> None:
    assert not is_model_folder(tmp_path)
    (tmp_path / "config.json").write_text("{}")
    assert not is_model_folder(tmp_path)  # weights missing (or only pytorch_model.bin)
    (tmp_path / "model-00001-of-00002.safetensors").write_bytes(b"")
    assert is_model_folder(tmp_path)
    assert require_model_folder(str(tmp_path), "--model") == tmp_path


@pytest.mark.parametrize("value", ["./no_such_model", "Qwen/Qwen3-8B"])
def test_anything_else_names_the_key_and_the_way_out(value: str) -> None:
    with pytest.raises(ConfigError) as info:
        require_model_folder(value, "train.model", "pass a folder")
    assert str(info.value) == (
        f"train.model: {value!r} is not a local model folder (config.json + *.safetensors);"
        " nothing is downloaded, pass a folder"
    )


def test_a_folder_of_model_folders_names_the_last_one(tmp_path: Path) -> None:
    """`aw serve --model runs/x`: a training run's folder points at its checkpoints."""
    for step in ("ckpt-000002", "ckpt-000004"):
        (tmp_path / step).mkdir()
        (tmp_path / step / "config.json").write_text("{}")
        (tmp_path / step / "model.safetensors").write_bytes(b"")
    (tmp_path / "train_state").mkdir()
    with pytest.raises(ConfigError) as info:
        require_model_folder(str(tmp_path), "--model")
    assert str(info.value).endswith(
        f"it holds 2 model folder(s), the last {tmp_path / 'ckpt-000004'}: pass one"
    )


def test_hf_progress_bars_turns_them_off_for_a_block_and_never_on() -> None:
    from transformers.utils import logging as hf_logging

    from agentworld.model_folder import hf_progress_bars

    hf_logging.enable_progress_bar()  # whatever the environment says
    with pytest.raises(RuntimeError), hf_progress_bars(False):
        assert not hf_logging.is_progress_bar_enabled()
        raise RuntimeError("a failed load")
    assert hf_logging.is_progress_bar_enabled()  # back, even after an error
    hf_logging.disable_progress_bar()  # as HF_HUB_DISABLE_PROGRESS_BARS=1 leaves them
    try:
        with hf_progress_bars(True):
            assert not hf_logging.is_progress_bar_enabled()  # the user's choice stands
        assert not hf_logging.is_progress_bar_enabled()
    finally:
        hf_logging.enable_progress_bar()
