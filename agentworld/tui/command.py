"""`aw tui`: the terminal UI (Textual is imported only when the command runs)."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Any

import typer

from agentworld.cli_options import AUTHOR_OPTION, POOL_OPTION, resolve_author

WEB_TEMPLATES = Path(__file__).parent / "web"


def tui(
    pool: Path = POOL_OPTION,
    proxy: str | None = typer.Option(None, "--proxy", help="Proxy URL whose /aw/stats to show."),
    tokenizer: str | None = typer.Option(
        None, "--tokenizer", help="Tokenizer path: show token text instead of ids."
    ),
    author: str | None = AUTHOR_OPTION,
    start: str = typer.Option(
        "monitor", "--start", help="First screen: monitor, trajectories or runs."
    ),
    runs: Path = typer.Option(
        Path("runs"), "--runs", help="Folder of training runs (`aw train` output) to plot."
    ),
    open_id: str | None = typer.Option(
        None, "--open", help="Open this trajectory in the inspector (a link to it: tr_…)."
    ),
    filter_name: str | None = typer.Option(
        None,
        "--filter",
        help="Open the trajectory list with this saved filter (the pool's filters.toml).",
    ),
    web: bool = typer.Option(False, "--web", help="Serve the app in a browser (textual-serve)."),
    host: str = typer.Option("127.0.0.1", "--host", help="With --web: address to bind."),
    port: int = typer.Option(8566, "--port", help="With --web: port."),
) -> None:
    """Monitor, inspect and curate a pool in the terminal (keyboard first; ? for keys)."""
    from agentworld.errors import ConfigError

    if start not in ("monitor", "trajectories", "runs"):
        raise ConfigError(f"--start: expected monitor, trajectories or runs, got {start!r}")
    if proxy is not None:
        from agentworld.server_url import server_base

        proxy = server_base(proxy, "--proxy")  # …/v1 as an agent's base URL says it, too
    resolved = resolve_author(author)
    if open_id is not None:
        open_id = trajectory_to_open(pool, open_id)
    if web:
        web_server(
            pool, proxy, tokenizer, resolved, start, host, port, runs, open_id, filter_name
        ).serve()
        return
    from agentworld.model_folder import default_aw_home
    from agentworld.tui.app import make_app
    from agentworld.tui.data import TuiConfig

    config = TuiConfig(
        str(pool),
        resolved,
        proxy_url=proxy,
        tokenizer_path=tokenizer,
        runs_path=str(runs),
        models_dir=str(default_aw_home() / "models"),
    )
    make_app(
        config,
        start="trajectories" if open_id or filter_name else start,
        open_trajectory=open_id,
        saved_filter=filter_name,
    ).run()


def trajectory_to_open(pool: Path, ident: str) -> str:
    """The full id of the trajectory ``--open`` names: its id, a unique prefix, the end the
    list shows, or one of its steps. Unknown or ambiguous, the command stops with the one
    line `aw pool show` gives, rather than starting on an inspector that never loads."""
    from agentworld.errors import ConfigError
    from agentworld.tui.data import open_pool

    if not ident.strip():  # as a prefix it would match every record
        raise ConfigError("--open: give a trajectory id, a unique prefix, or its end (6+ chars)")
    p = open_pool(pool)
    try:
        idx = p.index()
        kind, full = idx.resolve(ident.strip(), pool)
        if kind == "step":
            full = idx.step(full)["trajectory"]
        return full
    finally:
        p.close()


def web_server(
    pool: Path,
    proxy: str | None,
    tokenizer: str | None,
    author: str,
    start: str,
    host: str,
    port: int,
    runs: Path = Path("runs"),
    open_id: str | None = None,
    filter_name: str | None = None,
) -> Any:
    """The textual-serve server `aw tui --web` runs: one `aw tui` process per browser tab."""
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
        "--runs",
        str(runs.resolve()),
    ]
    if proxy:
        args += ["--proxy", proxy]
    if tokenizer:
        args += ["--tokenizer", tokenizer]
    if open_id:
        args += ["--open", open_id]
    if filter_name:
        args += ["--filter", filter_name]
    return Server(
        shlex.join(args),
        host=host,
        port=port,
        title="AgentWorld",
        # Our page: no Google Fonts (nothing leaves the machine), a terminal that fills
        # the window, a start-up line instead of a bare splash.
        templates_path=WEB_TEMPLATES,
    )
