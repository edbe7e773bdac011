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
