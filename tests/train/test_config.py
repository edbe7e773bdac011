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
    with pytest.raises(ConfigError, match=r"--set: unknown key 'nope'$"):
        load_config(None, {"model": "m"}, ["nope=1"])
    with pytest.raises(ConfigError, match=r"--set: unknown key 'lrr'; did you mean 'lr'\?$"):
        load_config(None, {"model": "m"}, ["lrr=1"])


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


@pytest.mark.parametrize(
    "setting, says",
    [
        ("log_every=0", "train.log_every: must be at least 1, got 0"),  # a ZeroDivisionError
        ("max_steps=0", "train.max_steps: must be at least 1, got 0"),
        ("lr=-1", "train.lr: must be 0 or more, got -1"),  # torch's traceback
        ("lr=nan", "train.lr: must be 0 or more, got nan"),
        ("warmup_steps=-5", "train.warmup_steps: must be 0 or more, got -5"),  # lr < 0
        ("max_grad_norm=0", "train.max_grad_norm: must be above 0, got 0"),  # no update
        ("save_every=-1", r"train.save_every: must be 0 \(only at the end\) or more, got -1"),
        ("clip_low=2", r"train.clip_low: must be in \[0, 1\), got 2"),
        ("clip_high=-1", "train.clip_high: must be 0 or more, got -1"),  # every ratio clamped
        ("ratio_cap=0.5", "train.ratio_cap: must be 0 \\(off\\) or above 1, got 0.5"),
        ("kl_coef=-0.1", "train.kl_coef: must be 0 or more, got -0.1"),
    ],
)
def test_values_that_would_train_wrongly_are_refused(setting: str, says: str) -> None:
    """Each of these trained silently wrong (ascent, frozen weights) or died in a traceback."""
    with pytest.raises(ConfigError, match=says):
        load_config(None, {"model": "m"}, [setting])


def test_a_recipe_does_not_carry_resume(tmp_path: Path) -> None:
    """A resumed run's config.toml said resume = "latest": as a recipe for a new run it
    failed with "no checkpoint in ... to resume"."""
    cfg = load_config(None, {"model": "m", "resume": "latest"})
    assert cfg.resume == "latest" and "resume" not in cfg.to_toml()
    assert load_config(recipe(tmp_path, cfg.to_toml())).resume is None


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


def test_a_resume_without_a_model_continues_the_runs_base_model(tmp_path: Path) -> None:
    """`aw train --resume latest` without --model took the embedded default as the base:
    another vocabulary as the KL reference, and the wrong base_model in meta.json."""
    from agentworld.train.command import resumed_base_model

    out = tmp_path / "run"
    (out / "ckpt-000002").mkdir(parents=True)
    (out / "ckpt-000002" / "meta.json").write_text('{"base_model": "/models/tiny"}')
    (out / "latest").write_text("ckpt-000002")
    embedded = lambda cfg: resumed_base_model(cfg) or "/models/embedded"  # noqa: E731
    flags = {"resume": "latest", "output_dir": str(out)}
    assert load_config(None, flags, default_model=embedded).model == "/models/tiny"
    assert load_config(None, {**flags, "model": "/m"}, default_model=embedded).model == "/m"
    assert load_config(None, {"output_dir": str(out)}, default_model=embedded).model == (
        "/models/embedded"  # a fresh run: the default
    )
    with pytest.raises(ConfigError, match="no checkpoint in"):
        load_config(None, {"resume": "latest", "output_dir": str(tmp_path / "none")},
                    default_model=embedded)  # fmt: skip


def test_server_urls_take_a_client_base_url_and_refuse_one_without_scheme() -> None:
    """--serve-url http://h:8000/v1 (an OpenAI client's base URL) posted its reload to
    /v1/aw/reload, a 404 after the first update; a URL without a scheme failed there too."""
    cfg = TrainConfig(model="m", serve_url="http://h:8000/v1", proxy_url="http://h:4000/v1/")
    assert (cfg.serve_url, cfg.proxy_url) == ("http://h:8000", "http://h:4000")
    with pytest.raises(ConfigError, match=r"^train\.serve_url: 'localhost:8000' is not an"):
        TrainConfig(model="m", serve_url="localhost:8000")
