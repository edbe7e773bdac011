"""`aw tui`: the terminal UI (Textual is imported only when the command runs)."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import typer

from agentworld.cli_options import AUTHOR_OPTION, POOL_OPTION, resolve_author


def tui(
    pool: Path = POOL_OPTION,
    proxy: str | None = typer.Option(None, "--proxy", help="Proxy URL whose /aw/stats to show."),
    tokenizer: str | None = typer.Option(
        None, "--tokenizer", help="Tokenizer path: show token text instead of ids."
    ),
    author: str | None = AUTHOR_OPTION,
    start: str = typer.Option("monitor", "--start", help="First screen: monitor or trajectories."),
    web: bool = typer.Option(False, "--web", help="Serve the app in a browser (textual-serve)."),
    host: str = typer.Option("127.0.0.1", "--host", help="With --web: address to bind."),
    port: int = typer.Option(8566, "--port", help="With --web: port."),
) -> None:
    """Monitor, inspect and curate a pool in the terminal (keyboard first; ? for keys)."""
    from agentworld.errors import ConfigError

    if start not in ("monitor", "trajectories"):
        raise ConfigError(f"--start: expected monitor or trajectories, got {start!r}")
    resolved = resolve_author(author)
    if web:
        _serve_web(pool, proxy, tokenizer, resolved, start, host, port)
        return
    from agentworld.tui.app import make_app
    from agentworld.tui.data import TuiConfig

    config = TuiConfig(str(pool), resolved, proxy_url=proxy, tokenizer_path=tokenizer)
    make_app(config, start=start).run()


def _serve_web(
    pool: Path,
    proxy: str | None,
    tokenizer: str | None,
    author: str,
    start: str,
    host: str,
    port: int,
) -> None:
    from agentworld.errors import MissingExtraError
    from agentworld.tui.data import open_pool

    try:
        from textual_serve.server import Server
    except ImportError:
        raise MissingExtraError("textual-serve", "web") from None
    open_pool(pool).close()  # fail here, with a clear error, rather than in every browser tab
    args = [
        sys.executable,
        "-m",
        "agentworld.tui",
        "--pool",
        str(pool.resolve()),
        "--author",
        author,
        "--start",
        start,
    ]
    if proxy:
        args += ["--proxy", proxy]
    if tokenizer:
        args += ["--tokenizer", tokenizer]
    Server(shlex.join(args), host=host, port=port, title="AgentWorld").serve()
