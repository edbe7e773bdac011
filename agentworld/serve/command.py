"""`aw serve`: the CLI edge of the model server; imports only typer and stdlib until it runs."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import typer

from agentworld.errors import ConfigError, UpstreamError

ENGINES = ("embedded", "vllm")


def serve(
    model: str | None = typer.Option(
        None, "--model", help="Local HF model folder. Default: SmolLM2-135M-Instruct (offline)."
    ),
    engine: str = typer.Option("embedded", "--engine", help="embedded (transformers) or vllm."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind."),
    port: int = typer.Option(8000, "--port", help="Port to bind (embedded: 0 for any free one)."),
    device: str = typer.Option("auto", "--device", help="embedded: auto, cpu, cuda, cuda:N."),
    dtype: str | None = typer.Option(
        None, "--dtype", help="float32, bfloat16, float16. Default: fp32 on CPU, bf16 on GPU."
    ),
    max_batch_size: int = typer.Option(8, "--max-batch-size", help="embedded: rows per batch."),
    served_model_name: str | None = typer.Option(
        None, "--served-model-name", help="Model id clients send. Default: the folder name."
    ),
    max_model_len: int | None = typer.Option(
        None, "--max-model-len", help="Context length (prompt + answer). Default: the model's."
    ),
    gpu_memory_utilization: float | None = typer.Option(
        None, "--gpu-memory-utilization", help="vllm: fraction of GPU memory to use."
    ),
    aw_home: Path | None = typer.Option(
        None, "--aw-home", envvar="AW_HOME", help="Cache folder. Default: ~/.cache/agentworld."
    ),
) -> None:
    """Serve a model over an OpenAI-compatible API (vLLM response shapes, token ids)."""
    if engine not in ENGINES:
        raise ConfigError(f"--engine: {engine!r} is not one of {', '.join(ENGINES)}")
    if not 0 <= port < 65536:
        raise ConfigError(f"--port: {port} is not a TCP port")
    if port == 0 and engine == "vllm":
        raise ConfigError("--port 0 (any free port) is for the embedded engine; give vllm a port")
    if max_batch_size < 1:
        raise ConfigError("--max-batch-size: must be at least 1")
    if max_model_len is not None and max_model_len < 1:
        raise ConfigError(f"--max-model-len: {max_model_len} must be at least 1")
    from agentworld.model_folder import default_aw_home, resolve_model

    home = aw_home or default_aw_home()
    if engine == "vllm":
        _serve_vllm(
            model, host, port, dtype, served_model_name, max_model_len, gpu_memory_utilization, home
        )
        return
    _serve_embedded(
        resolve_model(model, home / "models"),
        host,
        port,
        device,
        dtype,
        max_batch_size,
        served_model_name,
        max_model_len,
    )


def _serve_embedded(
    model_dir: Path,
    host: str,
    port: int,
    device: str,
    dtype: str | None,
    max_batch_size: int,
    served_model_name: str | None,
    max_model_len: int | None,
) -> None:
    from agentworld import listen
    from agentworld.serve import running
    from agentworld.serve.engine import Engine
    from agentworld.serve.server import make_app

    socks = listen.bind(host, port, "aw serve")  # before the model loads: a port in use fails fast
    port = listen.port_of(socks)  # --port 0: the URL announced is the one bound
    try:
        eng = Engine(
            model_dir,
            device=device,
            dtype=dtype,
            max_batch_size=max_batch_size,
            model_name=served_model_name,
            max_model_len=max_model_len,
        )
    except BaseException:
        for sock in socks:  # a bad flag found while loading: the port is free again
            sock.close()
        raise
    announce = (
        f"aw serve: {eng.model_name} on {eng.device} ({eng.dtype}) at http://{host}:{port}/v1"
    )
    try:
        running.run(make_app(eng), socks, eng, announce)
    finally:
        eng.close()


def _serve_vllm(
    model: str | None,
    host: str,
    port: int,
    dtype: str | None,
    served_model_name: str | None,
    max_model_len: int | None,
    gpu_memory_utilization: float | None,
    home: Path,
) -> None:
    from agentworld.model_folder import resolve_model
    from agentworld.serve.vllm_engine import VllmOptions, VllmServer, vllm_executable

    vllm_executable()  # fail fast, before converting any model, when vllm is missing
    model_dir = resolve_model(model, home / "models")
    opts = VllmOptions(
        model=str(model_dir),
        host=host,
        port=port,
        served_model_name=served_model_name or model_dir.name,
        dtype=dtype or "auto",
        max_model_len=max_model_len,
        gpu_memory_utilization=gpu_memory_utilization,
    )
    server = VllmServer(opts, live_link=home / "vllm" / f"live-{port}")
    print(f"aw serve: starting vllm (log: {server.log_path})", file=sys.stderr, flush=True)
    # SIGTERM stops vllm as Ctrl-C does; by default it ended this process at once and left
    # vllm serving on its own (Ctrl-C in a terminal reaches vllm too, SIGTERM does not).
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        with server:
            print(f"aw serve: vllm at {server.base_url}/v1", file=sys.stderr, flush=True)
            code = server.proc.wait()
        raise UpstreamError(
            f"vllm exited with code {code} while serving; last log lines:\n{server.log_tail()}"
        )
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
