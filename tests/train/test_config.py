"""Config resolution: defaults < recipe [train] < flags < --set; bad keys and values named."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentworld.errors import ConfigError
from agentworld.train.config import TrainConfig, load_config, parse_set


def recipe(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "recipe.toml"
    p.write_text(text)
    return p


def test_layers_override_in_order(tmp_path: Path) -> None:
    r = recipe(tmp_path, '[train]\nmodel = "m"\nalgo = "grpo"\nlr = 1e-4\nmax_steps = 5\n')
    cfg = load_config(r, {"algo": "ppo", "lr": None}, ["max_steps=7", "quality=good,unsure"])
    assert (cfg.model, cfg.algo, cfg.lr, cfg.max_steps) == ("m", "ppo", 1e-4, 7)
    assert cfg.quality == ("good", "unsure")
    assert load_config(None, {"model": "m"}, ["quality=['bad']", "max_staleness=2"]).quality == (
        "bad",
    )


def test_unknown_keys_name_the_file_and_key(tmp_path: Path) -> None:
    r = recipe(tmp_path, '[train]\nmodel = "m"\nlearning_rate = 1e-4\n')
    with pytest.raises(ConfigError, match=r"recipe.toml \[train\]: unknown key 'learning_rate'"):
        load_config(r)
    with pytest.raises(ConfigError, match="--set: unknown key 'nope'"):
        load_config(None, {"model": "m"}, ["nope=1"])


def test_keys_outside_train_are_refused_not_ignored(tmp_path: Path) -> None:
    r = recipe(tmp_path, 'model = "m"\nlr = 1e-6\nmax_steps = 1\n')
    with pytest.raises(ConfigError) as info:
        load_config(r)
    assert str(info.value) == (
        f"{r}: top-level keys 'lr', 'max_steps', 'model' belong in [train]"
        " (a recipe's keys go below a [train] line)"
    )
    r = recipe(tmp_path, 'lr = 1e-6\n[train]\nmodel = "m"\n')
    with pytest.raises(ConfigError, match=r"top-level key 'lr' belongs in \[train\]"):
        load_config(r)
    r = recipe(tmp_path, '[trian]\nmodel = "m"\n[train]\nlr = 1e-6\n')
    with pytest.raises(ConfigError, match=r"unknown top-level key 'trian' \(a recipe holds one"):
        load_config(r)
    with pytest.raises(ConfigError, match="is a folder, not a TOML file"):
        load_config(tmp_path)


def test_bad_values_are_refused_with_their_source(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--set: lr expects float, got 'fast'"):
        load_config(None, {"model": "m"}, ["lr=fast"])
    with pytest.raises(ConfigError, match="max_steps expects int"):
        load_config(recipe(tmp_path, '[train]\nmodel = "m"\nmax_steps = 1.5\n'))
    with pytest.raises(ConfigError, match=r"train\.algo"):
        load_config(None, {"model": "m", "algo": "dpo"})
    with pytest.raises(ConfigError, match=r"train\.model: required"):
        load_config(None, {})
    with pytest.raises(ConfigError, match="group_size"):
        load_config(None, {"model": "m", "online": True})
    with pytest.raises(ConfigError, match=r"train\.mixed_precision: must be one of .*got 'fp8'"):
        load_config(None, {"model": "m"}, ["mixed_precision=fp8"])
    with pytest.raises(ConfigError, match=r"train\.quality: unknown quality 'god'"):
        load_config(None, {"model": "m"}, ["quality=good,god"])
    with pytest.raises(ConfigError, match=r"train\.status: unknown status 'dnoe'"):
        load_config(None, {"model": "m"}, ["status=dnoe"])
    with pytest.raises(ConfigError, match="mixed_precision expects str, got True"):
        load_config(recipe(tmp_path, '[train]\nmodel = "m"\nmixed_precision = true\n'))
    with pytest.raises(ConfigError, match="expected key=value"):
        parse_set(["lr"])
    with pytest.raises(ConfigError, match="no such file"):
        load_config(tmp_path / "missing.toml")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(recipe(tmp_path, "[train\n"))


def test_resolved_config_round_trips_through_toml(tmp_path: Path) -> None:
    cfg = load_config(
        None, {"model": "m", "agent": "a", "algo": "grpo"}, ["quality=good", "kl_coef=0.05"]
    )
    again = load_config(recipe(tmp_path, cfg.to_toml()))
    assert again == cfg
    assert TrainConfig(model="m").to_dict()["status"] == ["done"]


def test_mixed_precision_from_set_or_recipe(tmp_path: Path) -> None:
    assert TrainConfig(model="m").mixed_precision is None  # Accelerate's own default/env
    assert load_config(None, {"model": "m"}, ["mixed_precision=bf16"]).mixed_precision == "bf16"
    assert load_config(None, {"model": "m"}, ["mixed_precision=no"]).mixed_precision == "no"
    r = recipe(tmp_path, '[train]\nmodel = "m"\nmixed_precision = "fp16"\n')
    cfg = load_config(r)
    assert cfg.mixed_precision == "fp16"
    assert load_config(recipe(tmp_path, cfg.to_toml())) == cfg
