"""`aw demo`: the whole loop on embedded defaults, offline, in a few minutes."""

from __future__ import annotations

from pathlib import Path

import typer


def demo(
    folder: Path = typer.Option(Path("aw-demo"), "--dir", help="Folder for the demo's pool."),
) -> None:
    """Run the factory end to end on embedded defaults and show what was collected."""
    from rich.console import Console

    from agentworld.pool import Pool
    from agentworld.pool.synth import fill_pool

    console = Console(stderr=True)
    pool = Pool.create(folder / "pool")
    ids = fill_pool(pool, trajectories=8, steps=4)
    pool.labels.set([f"trajectory:{ids[0]}"], {"quality": "good"}, author="demo")
    stats = pool.index().stats()
    console.print(
        f"wrote {stats['steps']} steps in {stats['trajectories']} trajectories to {pool.root}"
    )
    console.print(f"next: aw pool ls --pool {pool.root}   ·   aw tui --pool {pool.root}")
