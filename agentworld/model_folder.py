"""What a local model folder is, for the commands that load one (`aw serve`, `aw train`).

Neither downloads: transformers reads a path that is not a folder as a Hub repo id and
fetches it, so a typo would start a download or end in its traceback. Both check here first.
"""

from __future__ import annotations

from pathlib import Path

from agentworld.errors import ConfigError


def is_model_folder(path: Path) -> bool:
    """Whether ``path`` holds a Hugging Face model in safetensors (config.json + weights)."""
    return (path / "config.json").exists() and any(path.glob("*.safetensors"))


def require_model_folder(value: str, key: str, hint: str = "pass a model folder") -> Path:
    """``value`` as a local model folder, else a ConfigError naming it.

    ``key`` is the flag or config key the user set; ``hint`` ends the error with the way out.
    """
    path = Path(value).expanduser()
    if not is_model_folder(path):
        raise ConfigError(
            f"{key}: {value!r} is not a local model folder (config.json + *.safetensors); "
            f"nothing is downloaded, {hint}"
        )
    return path
