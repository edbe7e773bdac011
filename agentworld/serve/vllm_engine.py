"""`aw serve --engine vllm`: start, watch, reload and stop a `vllm serve` subprocess."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentworld.errors import ConfigError, MissingExtraError, UpstreamError


@dataclass(frozen=True)
class VllmOptions:
    """What `vllm serve` is started with; see `vllm_command`."""

    model: str
    host: str = "127.0.0.1"
    port: int = 8000
    served_model_name: str | None = None
    dtype: str = "auto"
    max_model_len: int | None = None
    gpu_memory_utilization: float | None = None
    max_num_seqs: int | None = None
    extra_args: tuple[str, ...] = field(default_factory=tuple)


def vllm_available() -> bool:
    return importlib.util.find_spec("vllm") is not None


def vllm_executable() -> list[str]:
    """How to run the vllm CLI, or MissingExtraError when vllm is not installed."""
    if not vllm_available():
        raise MissingExtraError("vllm", "vllm")
    exe = shutil.which("vllm")
    # The console script may be off PATH in a venv that was not activated.
    return [exe] if exe else [sys.executable, "-m", "vllm.entrypoints.cli.main"]


def vllm_command(opts: VllmOptions, executable: Sequence[str]) -> list[str]:
    """The `vllm serve` command line the proxy and trainer rely on."""
    cmd = [*executable, "serve", opts.model, "--host", opts.host, "--port", str(opts.port)]
    # The model's path (or chosen name) plus "default", as the embedded server answers,
    # so `model = "default"` in agents.toml works with either engine.
    cmd += ["--served-model-name", opts.served_model_name or opts.model, "default"]
    # Hermes tool calls parsed into OpenAI `tool_calls`, like the embedded engine does.
    cmd += ["--enable-auto-tool-choice", "--tool-call-parser", "hermes"]
    # Log-probs of the distribution that sampled (after temperature, top-k, top-p), the
    # behaviour policy the trainer's ratios are taken against; vLLM's default is the raw
    # model's, which ignores the temperature.
    cmd += ["--logprobs-mode", "processed_logprobs"]
    # A call that leaves out temperature, top-p, top-k or repetition_penalty samples with
    # the OpenAI defaults (1, none), as the trainer assumes of a step whose request sets
    # none and as the embedded engine does; vLLM's default ("auto") applies the model's
    # generation_config.json instead (Qwen2.5-Instruct: 0.7, top-p 0.8, top-k 20, penalty
    # 1.05), a policy the trainer cannot tell from the record. ``extra_args`` come later
    # on the line and win.
    cmd += ["--generation-config", "vllm"]
    cmd += ["--dtype", opts.dtype]
    if opts.max_model_len:
        cmd += ["--max-model-len", str(opts.max_model_len)]
    if opts.gpu_memory_utilization:
        cmd += ["--gpu-memory-utilization", str(opts.gpu_memory_utilization)]
    if opts.max_num_seqs:
        cmd += ["--max-num-seqs", str(opts.max_num_seqs)]
    return cmd + list(opts.extra_args)


def vllm_env(base: dict[str, str]) -> dict[str, str]:
    # Dev mode exposes POST /collective_rpc, through which `reload` calls the workers'
    # `reload_weights` (re-reads the weights from the served model path).
    return base | {"VLLM_SERVER_DEV_MODE": "1"}


class VllmServer:
    """A supervised `vllm serve`. The served path is a symlink (`live_link`) so a reload can
    point it at a new checkpoint and ask vLLM to re-read its weights in place."""

    def __init__(
        self,
        opts: VllmOptions,
        *,
        live_link: Path,
        executable: Sequence[str] | None = None,
        env: dict[str, str] | None = None,
        startup_timeout_s: float = 900.0,
        log_path: Path | None = None,
        popen: Callable[..., Any] = subprocess.Popen,
    ) -> None:
        self.source = Path(opts.model)
        self.live_link = live_link
        self.opts = VllmOptions(**{**opts.__dict__, "model": str(live_link)})
        self._executable = list(executable) if executable else None
        self._env = env if env is not None else dict(os.environ)
        self.startup_timeout_s = startup_timeout_s
        self.log_path = log_path or live_link.parent / "vllm.log"
        self._popen = popen
        self.proc: Any = None
        self.policy_version = 0

    @property
    def base_url(self) -> str:
        return f"http://{self.opts.host}:{self.opts.port}"

    def command(self) -> list[str]:
        return vllm_command(self.opts, self._executable or vllm_executable())

    def start(self) -> None:
        """Start vllm and wait until /health answers 200; UpstreamError if it does not."""
        cmd = self.command()
        _point_link(self.live_link, self.source)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.proc = self._popen(cmd, env=vllm_env(self._env), stdout=log, stderr=log)
        try:
            self.wait_healthy()
        except BaseException:
            # Ctrl-C or SIGTERM while vllm loads: `with server` never entered, so nothing
            # else would stop it, and it would hold the port and the GPU on its own.
            self.stop()
            raise

    def wait_healthy(self) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            code = self.proc.poll()
            if code is not None:
                raise UpstreamError(
                    f"vllm exited with code {code} while starting; last log lines:\n"
                    + self.log_tail()
                )
            try:
                with urllib.request.urlopen(self.base_url + "/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.5)
        self.stop()
        raise UpstreamError(
            f"vllm did not become healthy at {self.base_url}/health within "
            f"{self.startup_timeout_s:.0f}s; log: {self.log_path}"
        )

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM, then SIGKILL after `timeout_s`."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=timeout_s)

    def restart(self) -> None:
        self.stop()
        self.start()

    def reload(self, checkpoint_dir: str | Path, policy_version: int | None = None) -> int:
        """Serve `checkpoint_dir` (same architecture) from now on; returns the new version."""
        path = Path(checkpoint_dir)
        if not (path / "config.json").exists():
            raise ConfigError(f"{path}: not a model folder (no config.json)")
        if policy_version is None:
            meta = path / "meta.json"
            if meta.exists():
                policy_version = json.loads(meta.read_text()).get("policy_version")
        _point_link(self.live_link, path)
        body = json.dumps({"method": "reload_weights"}).encode()
        req = urllib.request.Request(
            self.base_url + "/collective_rpc",
            data=body,
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=600) as r:
                r.read()
        except (urllib.error.URLError, OSError) as e:
            raise UpstreamError(f"vllm weight reload failed: {e}") from e
        self.policy_version = (
            int(policy_version) if policy_version is not None else self.policy_version + 1
        )
        return self.policy_version

    def log_tail(self, n: int = 20) -> str:
        """The last ``n`` lines of vllm's log, for error messages."""
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"

    def __enter__(self) -> VllmServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _point_link(link: Path, target: Path) -> None:
    """Atomically (re)point `link` at `target`: vLLM never sees a missing path."""
    link.parent.mkdir(parents=True, exist_ok=True)
    tmp = link.with_name(link.name + ".tmp")
    if tmp.is_symlink() or tmp.exists():
        tmp.unlink()
    tmp.symlink_to(target.resolve(), target_is_directory=True)
    os.replace(tmp, link)
