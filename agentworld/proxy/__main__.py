"""``python -m agentworld.proxy``: the `aw proxy` command on its own (subprocess tests, benchmarks)."""

from __future__ import annotations

import typer

from agentworld.proxy.command import proxy


def main() -> None:
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    app.command()(proxy)
    app()


if __name__ == "__main__":
    main()
