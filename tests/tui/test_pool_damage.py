"""A shard damaged while `aw tui` runs: the refresh says so once, naming it, and the
screens stop counting its trajectories."""

from __future__ import annotations

from pathlib import Path

from agentworld.pool import Pool

from .conftest import app_for
from .test_screens import SIZE, loaded_list, spy_notices, until


async def test_a_shard_damaged_meanwhile_is_named_and_left_out(pool_path: Path) -> None:
    async with app_for(pool_path, refresh_s=0.05).run_test(size=SIZE) as pilot:
        listing = await loaded_list(pilot)
        total = listing.page.total
        shown = spy_notices(pilot.app)
        shard = Pool.open(pool_path).layout.shard_paths()[0]
        shard.write_bytes(shard.read_bytes()[:-7])
        await until(pilot, lambda: any("damaged since it was indexed" in m for _, m in shown))
        (severity, message), *_ = [x for x in shown if "damaged" in x[1]]
        assert severity == "warning" and shard.name in message
        await until(pilot, lambda: listing.page.total < total)
        await pilot.pause(0.3)  # more refreshes: not said again
        assert sum("damaged" in m for _, m in shown) == 1
